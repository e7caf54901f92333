"""Findings that hold still: a finding that has fired stays in the run's history with its first onset.

``diagnose`` judges the log as it is *now*, so a state that fired early (an entropy collapse at step 5) can drop out
once smoothing windows and baselines move, and onsets drift as the window slides. ``finding_history`` replays the
doctor on the log as it was at a fixed, deterministic series of cut points (every one of the first logged steps,
then geometrically spaced, and the last step) and merges what it saw: each (rule, metric) keeps the onset it first
fired with and its worst severity; one that no longer fires at the end is ``resolved`` at the first cut it stopped
firing at. The cuts depend only on the log, so the live panel and ``doctor`` on the same log agree.
Findings are ordered causes first: by severity, then by onset.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from .findings import SEVERITY_RANK, Finding, is_rule_failure, order_key
from .rules import Rule, diagnose
from .series import MetricFrame
from .thresholds import RULE_IDS

DENSE_CUTS = 12
GROWTH = 1.5


def is_fixed_index(j: int) -> bool:
    """Whether the ``j``-th logged step (0-based) is one of the fixed cut points (see ``_fixed_indices``)."""
    if j < DENSE_CUTS:
        return True
    i = float(DENSE_CUTS)
    while int(i) - 1 < j:
        i *= GROWTH
    return int(i) - 1 == j


def _fixed_indices(n: int) -> list[int]:
    """Indices (into the logged steps) replayed whatever the log's length: the first ``DENSE_CUTS``, then every
    ``GROWTH``-fold more logs."""
    idx = list(range(min(n, DENSE_CUTS)))
    i = float(DENSE_CUTS)
    while i < n:
        idx.append(int(i) - 1)
        i *= GROWTH
    return idx


def cut_steps(steps: np.ndarray) -> list[int]:
    """Steps at which the log is replayed: the first ``DENSE_CUTS`` logged steps, then every ``GROWTH``-fold more
    logs, and always the last step."""
    n = int(steps.size)
    if n == 0:
        return []
    return sorted({int(steps[j]) for j in [*_fixed_indices(n), n - 1]})


Key = tuple[str, str | None, bool]


def finding_key(f: Finding) -> Key:
    """(rule, metric, rule failed): what identifies a finding in a run's record."""
    # A rule's "rule failed" finding is its own entry: it neither takes over nor resolves what the rule found before.
    return f.rule, f.metric, is_rule_failure(f)


def order(findings: Sequence[Finding]) -> list[Finding]:
    """Causes before symptoms: worst severity first (active before resolved), then earliest onset, then rule order."""
    rank = {rule: i for i, rule in enumerate(RULE_IDS)}
    return sorted(findings, key=lambda f: (f.status != "active", *order_key(f, rank)))


def _logged_steps(frame: MetricFrame) -> np.ndarray:
    return np.unique(np.concatenate([s.steps for s in frame.columns.values()])) if frame.columns else np.empty(0)


class HistoryReplay:
    """The replay behind ``finding_history``, kept between calls for a log that grows (the job's monitor).

    ``update(frame)`` replays every fixed cut point the log has passed since the last call (each once, in order),
    then evaluates the log as it is now without committing that last evaluation, so calling it after every record
    gives, at any length, exactly what ``finding_history`` gives on the log of that length.
    """

    def __init__(
        self,
        config: Mapping[str, Any] | None = None,
        thresholds: Mapping[str, Any] | None = None,
        previous: Sequence[Finding] = (),
        rules: Mapping[str, Rule] | None = None,
    ) -> None:
        self.config, self.thresholds, self.rules = config, thresholds, rules
        self.seen: dict[Key, Finding] = {finding_key(f): f for f in previous}
        self.fired: dict[Key, int] = {finding_key(f): 2 for f in previous}  # consecutive cuts fired at
        self.recorded = set(self.fired)
        self.replayed: set[Key] = set()
        self.committed: int | None = None  # the last fixed cut step replayed

    def update(self, frame: MetricFrame, completions: list[dict[str, Any]] | None = None) -> list[Finding]:
        """Every finding that fired on ``frame`` so far (the log as it is now), causes first."""
        steps = self.advance(frame)
        if steps.size == 0:
            return []
        last = int(steps[-1])
        final = self._copy()
        final._merge(diagnose(frame, self.config, self.thresholds, completions, self.rules), last, last=True)
        out = []
        for f in final.seen.values():
            if f.status == "resolved":
                f = replace(f, message=f"Resolved at step {f.resolved_step}. " + f.message)
            out.append(f)
        return order(out)

    def advance(self, frame: MetricFrame) -> np.ndarray:
        """Replay the fixed cut points before the log's last step not replayed yet; returns the logged steps."""
        steps = _logged_steps(frame)
        if steps.size:
            last = int(steps[-1])
            for cut in sorted({int(steps[j]) for j in _fixed_indices(int(steps.size))}):
                if cut < last and (self.committed is None or cut > self.committed):
                    found = diagnose(frame.upto(cut), self.config, self.thresholds, rules=self.rules)
                    self._merge(found, cut, last=False)
                    self.committed = cut
        return steps

    def _copy(self) -> HistoryReplay:
        other = HistoryReplay(self.config, self.thresholds, rules=self.rules)
        other.seen, other.fired = dict(self.seen), dict(self.fired)
        other.recorded, other.replayed, other.committed = set(self.recorded), set(self.replayed), self.committed
        return other

    def _merge(self, now: list[Finding], cut: int, last: bool) -> None:
        seen, fired = self.seen, self.fired
        current = {finding_key(f): f for f in now}
        failed = {f.rule for f in now if is_rule_failure(f)}  # unchecked at this cut: their record stands
        for key in list(fired):
            if key not in current and fired[key] < 2 and key[0] not in failed:
                # Fired at one cut only and gone at the next: a flicker of the first noisy logs, not a record.
                del fired[key]
                seen.pop(key, None)
        for key, f in current.items():
            fired[key] = fired.get(key, 0) + 1
            before = seen.get(key)
            if before is None:
                seen[key] = replace(f, status="active", resolved_step=None)
                continue
            worst = max(before.severity, f.severity, key=SEVERITY_RANK.__getitem__)
            onset = min(before.step, f.step)
            # The latest evaluation's wording and evidence, with the first onset and the worst severity seen.
            seen[key] = replace(
                f, step=onset, severity=worst if not last else f.severity, status="active", resolved_step=None
            )
            if last and SEVERITY_RANK[worst] > SEVERITY_RANK[f.severity]:
                seen[key].evidence = {**f.evidence, "peak_severity": worst}
        for key, f in list(seen.items()):
            if key in current or f.status != "active" or key[0] in failed:
                continue
            if key in self.recorded and not last and key not in self.replayed:
                continue  # known from the saved record but not reached yet by the replay of the early log
            seen[key] = replace(f, status="resolved", resolved_step=cut)
        self.replayed.update(current)


def finding_history(
    records: Sequence[Mapping[str, Any]] | MetricFrame,
    config: Mapping[str, Any] | None = None,
    thresholds: Mapping[str, Any] | None = None,
    completions: list[dict[str, Any]] | None = None,
    previous: Sequence[Finding] = (),
    rules: Mapping[str, Rule] | None = None,
) -> list[Finding]:
    """Every finding that fired on the log so far, with its first onset; active ones carry their latest message.

    Args:
        records / config / thresholds / completions / rules: as for ``diagnose``.
        previous: a history saved earlier for the same run (e.g. from the store): its onsets and resolutions are
            kept when they are earlier than what the replay sees (a log that was cut or resumed since).
    """
    frame = records if isinstance(records, MetricFrame) else MetricFrame.from_records(records)
    return HistoryReplay(config, thresholds, previous, rules).update(frame, completions)
