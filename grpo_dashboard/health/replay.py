"""Replaying a log record by record, as a live user saw it: how often each finding changed, and whether the end
report's record says what was shown (``benchmarks/doctor_real_logs.py`` and the corpus tests use it)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .findings import Finding
from .history import HistoryReplay, finding_key, state_at
from .series import MetricFrame, record_step

Shown = tuple[str, str, int]  # (status, severity, first-seen step) of one finding at one prefix


@dataclass
class ReplayReport:
    """What the record-by-record replay of one log showed."""

    prefixes: int = 0
    # finding key -> what each prefix showed (None: not shown), one entry per prefix
    shown: dict[tuple[Any, ...], list[Shown | None]] = field(default_factory=dict)
    severity_changes: dict[tuple[Any, ...], int] = field(default_factory=dict)
    status_changes: dict[tuple[Any, ...], int] = field(default_factory=dict)
    returns_new_onset: dict[tuple[Any, ...], int] = field(default_factory=dict)
    # (prefix length, finding key, shown, what the end record says for that prefix) where they differ
    mismatches: list[tuple[int, tuple[Any, ...], Shown | None, tuple[str, str] | None]] = field(default_factory=list)
    provisional: int = 0  # (prefix, finding) pairs shown as provisional (not part of the record)

    @property
    def max_severity_changes(self) -> int:
        return max(self.severity_changes.values(), default=0)


def _prefix_position(records: Sequence[Mapping[str, Any]]) -> tuple[int, int]:
    """(run segment, 0-based; last step of that run) of a prefix, with the loader's restart rule."""
    segment, first, last = 0, None, None
    for i, record in enumerate(records):
        step = record_step(record, i)
        if last is not None and step < last and first is not None and step <= first:
            segment, first = segment + 1, None
        if first is None:
            first = step
        last = step
    return segment, int(last or 0)


def replay_log(
    records: Sequence[Mapping[str, Any]],
    config: Mapping[str, Any] | None = None,
    every: int = 5,
    end: Sequence[Finding] | None = None,
) -> ReplayReport:
    """Show the findings after every ``every`` records (and the last), as the live panel would, and compare each
    prefix with the end report (``end``: ``finding_history`` on the whole log, computed here when not given).

    One ``HistoryReplay`` is fed the growing log (what ``finding_history`` gives on each prefix; the job's monitor
    and the panel use the same replay). Counted per finding: severity changes between prefixes it was shown at,
    status changes (active <-> resolved), and returns after a gap with a different first-seen step. A mismatch is a
    prefix whose shown (status, severity) differs from what the end record's events say held at that prefix."""
    report = ReplayReport()
    replay = HistoryReplay(config)
    cuts = sorted({*range(every, len(records) + 1, every), len(records)} - {0})
    if end is None:
        end = HistoryReplay(config).update(MetricFrame.from_records(records))
    end_by_key = {finding_key(f): f for f in end if not f.evidence.get("provisional")}
    for k in cuts:
        prefix = records[:k]
        found = replay.update(MetricFrame.from_records(prefix))
        report.prefixes += 1
        now: dict[tuple[Any, ...], Shown] = {}
        for f in found:
            if f.evidence.get("provisional"):
                report.provisional += 1
                continue
            now[finding_key(f)] = (f.status, f.severity, int(f.step))
        segment, last = _prefix_position(prefix)
        for key in set(now) | set(report.shown):
            history = report.shown.setdefault(key, [None] * (report.prefixes - 1))
            shown = now.get(key)
            seen = [h for h in history if h is not None]
            if shown is not None and seen:
                prev = seen[-1]
                report.severity_changes[key] = report.severity_changes.get(key, 0) + (shown[1] != prev[1])
                report.status_changes[key] = report.status_changes.get(key, 0) + (shown[0] != prev[0])
                if history[-1] is None and shown[2] != prev[2]:
                    report.returns_new_onset[key] = report.returns_new_onset.get(key, 0) + 1
            history.append(shown)
            expected = _expected(end_by_key.get(key), segment, last)
            if (shown[:2] if shown else None) != expected:
                report.mismatches.append((k, key, shown, expected))
    return report


def _expected(finding: Finding | None, segment: int, last: int) -> tuple[str, str] | None:
    """What the end record says the finding showed once the prefix ending at ``last`` of run ``segment`` was in."""
    if finding is None or "events" not in finding.evidence:
        return None
    own = int(finding.evidence.get("segment", 1)) - 1
    if own > segment:
        return None
    return state_at(finding, last if own == segment else 2**62)
