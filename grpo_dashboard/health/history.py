"""Findings that hold still: one record of what the doctor showed on a growing log, the same live and post hoc.

``diagnose`` judges the log as it is *now*; a state near a threshold can flip with every record. ``finding_history``
replays the doctor on the log as it was at a fixed, deterministic series of cut points (every logged step of a run's
first ``DENSE_CUTS``, then ``PER_OCTAVE`` cuts per doubling of the log up to ``LONG_LOG`` logs, one per ``GROWTH``-fold
more logs beyond) and what it shows is the state *committed* at
those cuts, with hysteresis:

* a finding is raised at the first cut it fires at in a run's first ``QUICK_CUTS`` logged steps or when the rule's
  own episode already spans earlier records (its onset is before the cut), else only once it fired at
  ``RAISE_DWELL`` consecutive cuts (one noisy record raises nothing);
* once raised, its severity moves up only after ``ESCALATE_DWELL`` consecutive cuts at the higher level, down only
  after ``DEMOTE_DWELL`` at the lower one, and it is resolved only after ``RESOLVE_DWELL`` consecutive cuts without
  it (a sustained return; one good record resolves nothing); a resolved finding that fires again for
  ``RAISE_DWELL`` cuts is reopened with its first onset; every reversal (a reopening, a severity change against the one
  before) doubles the dwell it and later ones need (flap damping: a statistic hovering at its threshold settles
  instead of flipping at each crossing);
* every change is an event in the finding's ``evidence["events"]`` (raised / escalated / demoted / resolved /
  reopened, each with the cut step and severity), so the end report keeps what a live user was shown.

The cuts depend only on the log and only committed states are recorded, so the record after any prefix of a log is
exactly the end record's state at that prefix's step: the live panel, the job's monitor and ``doctor`` agree. The one
exception is marked: what the latest records show that the record does not hold yet (a finding still in its raise
dwell, or one seen after the last cut, e.g. a NaN at the last record) is added as ``provisional`` (evidence key) and
is not part of the record. A log whose
steps restart (runs appended to one file) is replayed run by run; each run's findings carry their ``segment``.
Findings are ordered causes first: by severity, then by onset.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from .findings import SEVERITY_RANK, Finding, is_rule_failure, order_key
from .rules import EARLIER_RUN, RULES, Rule, diagnose, in_segment
from .series import MetricFrame
from .thresholds import HELD_RULES, RULE_IDS, held_thresholds, resolve_thresholds

DENSE_CUTS = 32
PER_OCTAVE = 32
LONG_LOG = 2048
GROWTH = 1.5
QUICK_CUTS = 3
RAISE_DWELL = 2
ESCALATE_DWELL = 2
DEMOTE_DWELL = 3
RESOLVE_DWELL = 3
# Rules that read the samples (not the metrics): judged on the latest samples only, never replayed.
SAMPLE_RULES = ("duplicate_completions",)


def _stride(j: int) -> int:
    return 1 if j < DENSE_CUTS else 1 << int(np.log2(j / DENSE_CUTS * (PER_OCTAVE / DENSE_CUTS)) + 1e-9)


def is_fixed_index(j: int) -> bool:
    """Whether a run's ``j``-th logged step (0-based) is one of the fixed cut points (see ``cut_steps``)."""
    if j < LONG_LOG:
        return j < DENSE_CUTS or (j + 1) % _stride(j) == 0
    # Past LONG_LOG logs every cut costs a diagnose of a long log: one per GROWTH-fold more logs, so a
    # 100,000-step log still replays in about three evaluations' time (the record lags more there).
    i = float(LONG_LOG)
    while int(i) - 1 < j:
        i *= GROWTH
    return int(i) - 1 == j


def _fixed_indices(n: int) -> list[int]:
    out = [j for j in range(min(n, LONG_LOG)) if is_fixed_index(j)]
    i = float(LONG_LOG)
    while int(i) - 1 < n:
        out.append(int(i) - 1)
        i *= GROWTH
    return sorted({j for j in out if j < n})


def cut_steps(steps: np.ndarray, finished: bool = False) -> list[int]:
    """Steps of one run at which the log is replayed: each of the first ``DENSE_CUTS`` logged steps, then every
    ``stride``-th with the stride doubling every doubling of the log (``PER_OCTAVE`` cuts per doubling); a finished
    run (one the log restarted after) also at its last step. A longer log only adds cuts."""
    n = int(steps.size)
    idx = _fixed_indices(n)
    if finished and n and (not idx or idx[-1] != n - 1):
        idx.append(n - 1)
    return [int(steps[j]) for j in idx]


Key = tuple[str, str | None, bool, int]


def finding_key(f: Finding) -> Key:
    """(rule, metric, rule failed, run segment): what identifies a finding in a run's record."""
    # A rule's "rule failed" finding is its own entry: it neither takes over nor resolves what the rule found before.
    return f.rule, f.metric, is_rule_failure(f), int(f.evidence.get("segment", 1))


def order(findings: Sequence[Finding]) -> list[Finding]:
    """Causes before symptoms: worst severity first (active before resolved), then earliest onset, then rule order."""
    rank = {rule: i for i, rule in enumerate(RULE_IDS)}
    return sorted(findings, key=lambda f: (f.status != "active", *order_key(f, rank)))


def _logged_steps(frame: MetricFrame) -> np.ndarray:
    return np.unique(np.concatenate([s.steps for s in frame.columns.values()])) if frame.columns else np.empty(0)


def cut_points(frame: MetricFrame) -> list[tuple[int, int]]:
    """(segment, step) of every cut of ``frame``'s log, in log order."""
    cuts: list[tuple[int, int]] = []
    for i, seg in enumerate(frame.segments):
        cuts.extend((i, step) for step in cut_steps(_logged_steps(seg), finished=i < len(frame.earlier)))
    return cuts


@dataclass
class _Track:
    """What the record shows for one finding, and the evidence pending for a change."""

    shown: Finding
    events: list[dict[str, Any]]
    peak: str
    pending: str | None = None  # "resolved" or the severity a change would move to
    count: int = 0
    flaps: int = 0  # reversals so far (a reopening; a severity change against the one before): damping
    direction: int = 0  # +1 / -1: the last severity change went up / down
    rated: str | None = None  # the severity the latest cut's evaluation gave it (None: it did not fire there)


@dataclass
class _State:
    tracks: dict[Key, _Track] = field(default_factory=dict)
    new: dict[Key, tuple[int, Finding]] = field(default_factory=dict)  # not raised yet: consecutive cuts, onset


class HistoryReplay:
    """The replay behind ``finding_history``, kept between calls for a log that grows (the job's monitor).

    ``update(frame)`` replays every cut point the log has passed since the last call (each once, in order) and
    returns the committed record; calling it after every record gives, at any length, exactly what
    ``finding_history`` gives on the log of that length.
    """

    def __init__(
        self,
        config: Mapping[str, Any] | None = None,
        thresholds: Mapping[str, Any] | None = None,
        previous: Sequence[Finding] = (),
        rules: Mapping[str, Rule] | None = None,
    ) -> None:
        self.config, self.thresholds = config, thresholds
        # what the margin around each threshold judges a shown finding's return by (None: no margin)
        resolved = resolve_thresholds(thresholds)
        self.margin = float(resolved["hysteresis.margin"])
        self.held = held_thresholds(resolved) if self.margin else None
        self.rules = {k: v for k, v in (RULES if rules is None else rules).items() if k not in SAMPLE_RULES}
        self.sample_rules = {k: v for k, v in (RULES if rules is None else rules).items() if k in SAMPLE_RULES}
        self.previous = {finding_key(f): f for f in previous}
        self.state = _State()
        self.committed: tuple[int, int] | None = None  # the last (segment, step) cut replayed
        self.cuts = 0

    @property
    def seen(self) -> dict[Key, Finding]:
        """The committed record by key (what ``findings`` returns, unordered)."""
        return {k: self._out(t) for k, t in self.state.tracks.items()}

    def update(
        self,
        frame: MetricFrame,
        completions: list[dict[str, Any]] | None = None,
        budget_ok: Callable[[], bool] | None = None,
    ) -> list[Finding]:
        """Every finding the record holds for ``frame`` (the log as it is now), causes first; with ``completions``
        the sample rules' findings on them are added (they judge the latest samples, not the log's history).
        ``budget_ok``: as for ``advance``; a record left behind the log gets no provisional findings."""
        cuts = self.advance(frame, budget_ok)
        out = self.findings()
        steps = _logged_steps(frame)
        if cuts and steps.size and self.committed == cuts[-1]:
            at_cut = cuts[-1] == (len(frame.earlier), int(steps[-1]))
            out.extend(self._provisional(None if at_cut else frame))
        if completions and self.sample_rules:
            out.extend(diagnose(frame, self.config, self.thresholds, completions, self.sample_rules))
        return order(out)

    def findings(self) -> list[Finding]:
        """The committed record, with the saved record's findings the replay has not seen (``previous``)."""
        out = []
        for key, track in self.state.tracks.items():
            f = self._out(track)
            before = self.previous.get(key)
            if before is not None and before.step < f.step:
                f = replace(f, step=before.step)
            out.append(f)
        out.extend(f for k, f in self.previous.items() if k not in self.state.tracks)
        return order(out)

    def advance(self, frame: MetricFrame, budget_ok: Callable[[], bool] | None = None) -> list[tuple[int, int]]:
        """Replay the cut points of ``frame`` not replayed yet, in order; returns all its cut points.

        ``budget_ok`` (the job's monitor): asked before each cut past a run's first ``DENSE_CUTS``; when it says no,
        the replay stops there and the record lags the log until a later call catches up (the same cuts, so the
        same record)."""
        cuts = cut_points(frame)
        position: dict[int, int] = {}
        for seg, step in cuts:
            position[seg] = position.get(seg, -1) + 1
            if self.committed is None or (seg, step) > self.committed:
                if budget_ok is not None and position[seg] >= DENSE_CUTS and not budget_ok():
                    break
                if self.committed is not None and seg > self.committed[0]:
                    self._finish_runs(frame, seg)
                upto = frame.segment_upto(seg, step)
                now = diagnose(upto, self.config, self.thresholds, rules=self.rules)
                self._merge(self._held(upto, now, seg), step, quick=position[seg] < QUICK_CUTS, segment=seg)
                self.committed = (seg, step)
                self.cuts += 1
        return cuts

    def _held(self, frame: MetricFrame, now: list[Finding], segment: int) -> list[Finding]:
        """``now`` with the margin around each threshold applied to this run's shown findings: one that ``now`` lacks,
        or holds at a lower severity than shown, is judged again with the held thresholds (each moved
        ``hysteresis.margin`` toward healthy); what that still finds counts as seen, at no more than the shown
        severity, so a return just past a threshold starts neither a resolution nor a demotion."""
        current = {finding_key(f): f for f in now}
        failed = {f.rule for f in now if is_rule_failure(f)}
        weaker = {
            key: track
            for key, track in self.state.tracks.items()
            if track.shown.status == "active"
            and key[3] - 1 >= segment
            and not key[2]
            and key[0] in HELD_RULES
            and key[0] in self.rules
            and key[0] not in failed
            and (key not in current or SEVERITY_RANK[current[key].severity] < SEVERITY_RANK[track.shown.severity])
        }
        if not weaker or self.held is None:
            return now
        rules = {key[0]: self.rules[key[0]] for key in weaker}
        held: dict[Key, Finding] = {}
        for f in diagnose(frame, self.config, self.held, rules=rules):
            key = finding_key(f)
            track = weaker.get(key)
            if track is None:
                continue
            shown = track.shown.severity
            below = current.get(key)
            if SEVERITY_RANK[f.severity] <= (SEVERITY_RANK[below.severity] if below is not None else -1):
                continue  # the margin holds nothing more than the plain thresholds already do
            severity = f.severity if SEVERITY_RANK[f.severity] <= SEVERITY_RANK[shown] else shown
            margin = (
                f"with its thresholds moved {self.margin:.0%} toward healthy, the margin a return must clear before "
                "the finding resolves or is demoted"
            )
            # Held below the shown severity, the demotion is pending: _out says what the record still shows.
            note = (
                f" (Still shown at {severity}: its rule finds this {margin}.)"
                if severity == shown
                else f" (Its rule finds this at {severity} {margin}.)"
            )
            held[key] = replace(f, severity=severity, message=f.message + note, evidence={**f.evidence, "held": True})
        return [held.pop(finding_key(f), f) for f in now] + list(held.values())

    def _provisional(self, frame: MetricFrame | None) -> list[Finding]:
        """What the log as it is now shows that the record does not hold yet (pending its dwell, or seen after the
        last cut: ``frame`` given): marked ``provisional``, not part of the record; later cuts confirm it or not."""
        if frame is None:
            found = [f for _, f in self.state.new.values()]
        else:
            found = diagnose(frame, self.config, self.thresholds, rules=self.rules)
        out = []
        for f in found:
            if not is_rule_failure(f) and finding_key(f) not in self.state.tracks:
                out.append(
                    replace(
                        f,
                        evidence={**f.evidence, "provisional": True},
                        message=f"Provisional (seen on the latest records, not confirmed yet): {f.message}",
                    )
                )
        return out

    @staticmethod
    def _out(track: _Track) -> Finding:
        f = track.shown
        evidence = {**f.evidence, "events": [dict(e) for e in track.events]}
        if SEVERITY_RANK[track.peak] > SEVERITY_RANK[f.severity]:
            evidence["peak_severity"] = track.peak
        message = f"Resolved at step {f.resolved_step}. {f.message}" if f.status == "resolved" else f.message
        if f.status == "active" and track.rated is not None and track.rated != f.severity:
            # The wording is the latest evaluation's, whose reasons may be those of another severity ("while reward
            # improves" for an info): say which severity the record still shows, and why.
            message += (
                f" (Still shown at {f.severity}: its rule rates this {track.rated} on the latest records, and the "
                "record changes severity only once that holds.)"
            )
        return replace(f, evidence=evidence, message=message)

    def _finish_runs(self, frame: MetricFrame, segment: int) -> None:
        """The log restarted: the findings of the runs before ``segment`` are named as such, with the run count as it
        is now (their record stands)."""
        for key, track in self.state.tracks.items():
            if key[3] - 1 < segment:
                f = replace(track.shown, evidence={**track.shown.evidence, "segment": key[3]})
                track.shown = in_segment(f, frame, key[3] - 1, EARLIER_RUN)

    def _merge(self, now: list[Finding], cut: int, quick: bool, segment: int = 0) -> None:
        state = self.state
        current = {finding_key(f): f for f in now}
        failed = {f.rule for f in now if is_rule_failure(f)}  # unchecked at this cut: their record stands
        for key in list(state.new):
            if key not in current:
                del state.new[key]
        for key in state.tracks.keys() - current.keys():
            state.tracks[key].rated = None
        for key, f in current.items():
            track = state.tracks.get(key)
            if track is None:
                count, first = state.new.get(key, (0, f))
                count += 1
                onset = replace(f, step=min(first.step, f.step))
                if quick or count >= RAISE_DWELL:
                    state.new.pop(key, None)
                    event = {"event": "raised", "step": cut, "severity": f.severity}
                    shown = replace(onset, status="active", resolved_step=None)
                    state.tracks[key] = _Track(shown, [event], f.severity)
                else:
                    state.new[key] = (count, onset)
                continue
            self._observe(track, f, cut)
        for key, track in state.tracks.items():
            # A finished run's findings are not resolved by the time the next run takes: its record stands.
            if key[3] - 1 < segment:
                continue
            if key not in current and track.shown.status == "active" and key[0] not in failed:
                self._pend(track, "resolved", RESOLVE_DWELL, cut)

    def _observe(self, track: _Track, f: Finding, cut: int) -> None:
        shown = track.shown
        # The latest evaluation's wording and evidence, with the onset shown when it was raised (what the live user
        # saw first; the message's "since step N" may move) and the severity the record holds.
        fresh = replace(f, step=shown.step, severity=shown.severity, status=shown.status)
        fresh.resolved_step = shown.resolved_step
        track.rated = f.severity
        if shown.status == "resolved":
            track.shown = replace(shown)  # keeps the resolved wording until it is reopened
            self._pend(track, f.severity, RAISE_DWELL, cut, fresh)
            return
        track.shown = fresh
        if f.severity == shown.severity:
            track.pending, track.count = None, 0
            return
        up = SEVERITY_RANK[f.severity] > SEVERITY_RANK[shown.severity]
        self._pend(track, f.severity, ESCALATE_DWELL if up else DEMOTE_DWELL, cut, fresh)

    @staticmethod
    def _pend(track: _Track, target: str, dwell: int, cut: int, fresh: Finding | None = None) -> None:
        if track.pending != target:
            track.pending, track.count = target, 0
        track.count += 1
        shown = track.shown
        if target == "resolved":
            flap = False
        elif shown.status == "resolved":
            flap = True
        else:
            direction = 1 if SEVERITY_RANK[target] > SEVERITY_RANK[shown.severity] else -1
            flap = track.direction == -direction
        # Flap damping: each reversal doubles the evidence the next one needs, so a statistic hovering at its
        # threshold settles instead of flipping at every crossing.
        if track.count < dwell << (track.flaps + flap):
            return
        track.flaps += flap
        if target == "resolved":
            track.shown = replace(shown, status="resolved", resolved_step=cut)
            track.events.append({"event": "resolved", "step": cut, "severity": shown.severity})
        elif shown.status == "resolved":
            assert fresh is not None
            track.shown = replace(fresh, severity=target, status="active", resolved_step=None)
            track.events.append({"event": "reopened", "step": cut, "severity": target})
        else:
            up = SEVERITY_RANK[target] > SEVERITY_RANK[shown.severity]
            track.shown = replace(fresh or shown, severity=target)
            track.events.append({"event": "escalated" if up else "demoted", "step": cut, "severity": target})
            track.direction = 1 if up else -1
        if SEVERITY_RANK[track.shown.severity] > SEVERITY_RANK[track.peak]:
            track.peak = track.shown.severity
        track.pending, track.count = None, 0


def state_at(finding: Finding | Mapping[str, Any], step: int) -> tuple[str, str] | None:
    """(status, severity) the record of ``finding`` held once the cut at ``step`` was replayed (from its
    ``evidence["events"]``), or None when it was not raised yet."""
    evidence = finding.get("evidence", {}) if isinstance(finding, Mapping) else finding.evidence
    state = None
    for e in evidence.get("events", []):
        if int(e["step"]) > step:
            break
        state = ("resolved" if e["event"] == "resolved" else "active", str(e["severity"]))
    return state


def finding_history(
    records: Sequence[Mapping[str, Any]] | MetricFrame,
    config: Mapping[str, Any] | None = None,
    thresholds: Mapping[str, Any] | None = None,
    completions: list[dict[str, Any]] | None = None,
    previous: Sequence[Finding] = (),
    rules: Mapping[str, Rule] | None = None,
) -> list[Finding]:
    """Every finding the record holds for the log so far (see the module docstring), causes first.

    Args:
        records / config / thresholds / completions / rules: as for ``diagnose``.
        previous: a history saved earlier for the same run (e.g. from the store): its earlier onsets are kept, and
            its findings the replay does not see (a log that was cut or resumed since) stay as they were.
    """
    frame = records if isinstance(records, MetricFrame) else MetricFrame.from_records(records)
    return HistoryReplay(config, thresholds, previous, rules).update(frame, completions)
