"""Benchmark: the doctor (and rldoctor where its detectors map) on every labelled real GRPO log found.

Corpora: ``tests/fixtures/real_logs/`` (ours) and ``../shared/realdata/grpo_logs/`` when present (read in place).
Each has an ``expect.json``: per log, ``items`` (lists of rule ids of which at least one must be reported, at any
severity), ``forbid`` (rules that are false alarms at warning or error level) and ``healthy`` (no error expected).

Prints, per log and in total: expected items caught, forbidden alarms, errors and warnings on healthy runs, and the
same for rldoctor 0.2 (``pip install --no-deps rldoctor==0.2.0``) through the detector -> rule map below; an item
no rldoctor detector maps to is left out of rldoctor's denominator. Under each log it lists every warning or error
the findings history raised during the run (rule, metric, severity, first step, and the step it resolved at),
marked FORBIDDEN when the log's labels forbid that rule, so the totals can be checked by hand.

The record-by-record replay (``health.replay.replay_log``: the findings after every 5 records, as a live panel that
refreshes) counts per log: the most severity changes of one finding, findings that disappear and come back with a new
first-seen step, (prefix, finding) pairs where what was shown differs from what the end report's record (its events)
says held then, and provisional findings shown (seen on the latest records, not part of the record yet).

    python benchmarks/doctor_real_logs.py [--verbose] [--no-replay]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from grpo_dashboard.health import (  # noqa: E402
    MetricFrame,
    diagnose,
    finding_history,
    load_log_frame,
    load_log_records,
)
from grpo_dashboard.health.history import HistoryReplay  # noqa: E402
from grpo_dashboard.health.replay import replay_log  # noqa: E402

CORPORA = (ROOT / "tests" / "fixtures" / "real_logs", ROOT.parent / "shared" / "realdata" / "grpo_logs")
SHARED_FALLBACK = Path("/work/shared/realdata/grpo_logs")

# rldoctor detector -> the rules of ours that say the same thing.
RLDOCTOR_MAP: dict[str, tuple[str, ...]] = {
    "advantage_collapse": ("zero_variance",),
    "clip_saturation": ("clip_high",),
    "entropy_collapse": ("entropy_collapse",),
    "gradient_pathology": ("grad_spike", "zero_gradient", "nan"),
    "kl_drift": ("kl_high", "kl_spike", "kl_outpaces_reward"),
    "length_pathology": ("truncation", "length_collapse", "length_drift"),
    "plateau": ("plateau", "flat_reward"),
    "reward_composition": ("flat_reward", "format_hacking"),
    "reward_hacking": ("format_hacking", "reward_length_corr", "kl_outpaces_reward"),
}
_RLD_SEVERITY = {2: "info", 3: "warning", 4: "error"}


def corpora() -> list[Path]:
    """Corpus folders that exist here (ours first)."""
    found = [c for c in CORPORA if (c / "expect.json").is_file()]
    if not any("shared" in str(c) for c in found) and (SHARED_FALLBACK / "expect.json").is_file():
        found.append(SHARED_FALLBACK)
    return found


def labelled_logs() -> list[tuple[Path, dict[str, Any]]]:
    """(log path, its labels) for every labelled log in every corpus found."""
    out = []
    for corpus in corpora():
        expect = json.loads((corpus / "expect.json").read_text())
        for name, label in expect.items():
            if not name.startswith("_") and (corpus / name).is_file():
                out.append((corpus / name, label))
    return out


def ours(
    path: Path, history: bool = True
) -> tuple[list[tuple[str, str]], list[tuple[str, str]], list[tuple[str, str]]]:
    """What ``doctor PATH`` reports on ``path``: (active findings, findings resolved before the end), each as
    (rule, severity) pairs, and for every finding that was a warning or an error at some point of the run (active
    or resolved) its rule and a line "rule (metric) severity, first at step N[, resolved at step M]".
    With ``history=False`` only ``diagnose`` on the whole log (nothing resolved)."""
    frame, hints = load_log_frame(path)
    found = finding_history(frame, hints) if history else diagnose(frame, hints)
    active = [(f.rule, f.severity) for f in found if f.status == "active"]
    resolved = [(f.rule, f.severity) for f in found if f.status == "resolved"]
    raised = []
    for f in found:
        # An active finding carries the severity of the last evaluation; a worse one it had is its peak_severity.
        worst = f.evidence.get("peak_severity", f.severity) if f.severity != "error" else "error"
        if worst in ("warning", "error"):
            end = f", resolved at step {f.resolved_step}" if f.status == "resolved" else ""
            now = f" (now {f.severity})" if worst != f.severity else ""
            raised.append((f.rule, f"{f.rule} ({f.metric}) {worst}{now}, first at step {f.step}{end}"))
    return active, resolved, raised


def live_alarms(path: Path, forbid: set[str]) -> dict[str, int]:
    """Forbidden rules the live panel would have shown at warning or error after some record: ``finding_history``
    (the record plus what is provisional) on the log cut after every logged record, fed to one ``HistoryReplay``
    (what ``finding_history`` gives on each prefix), each with the first step it was shown at."""
    records, hints = load_log_records(path)
    replay = HistoryReplay(hints)
    first: dict[str, int] = {}
    for k in range(1, len(records) + 1):
        frame = MetricFrame.from_records(records[:k])
        for f in replay.update(frame):
            if f.rule in forbid and f.severity in ("warning", "error"):
                first.setdefault(f.rule, int(frame.last_step() or 0))
    return first


def rldoctor(path: Path) -> list[tuple[str, str]] | None:
    """(detector, severity) pairs of rldoctor's findings, or None when rldoctor is not installed."""
    if importlib.util.find_spec("rl_doctor") is None:
        return None
    from rl_doctor.diagnosis import diagnose as rld_diagnose
    from rl_doctor.ingest import load_run

    out = []
    for finding in rld_diagnose(load_run(str(path))).findings:
        severity = _RLD_SEVERITY.get(int(finding.severity))
        if severity is not None:
            out.append((finding.detector, severity))
    return out


def score(found: list[tuple[str, str]], label: dict[str, Any], mappable: set[str] | None = None) -> dict[str, Any]:
    """Caught items, forbidden alarms and severity counts of one tool on one log (rldoctor: ``mappable`` given and
    ``found`` holds detector names, scored through ``RLDOCTOR_MAP``)."""
    per_sev = {s: len({r for r, sev in found if sev == s}) for s in ("error", "warning", "info")}
    if mappable is not None:
        found = [(rule, s) for d, s in found for rule in RLDOCTOR_MAP.get(d, ())]
    rules = {r for r, _ in found}
    items = [item for item in label.get("items", []) if mappable is None or set(item) & mappable]
    caught = [item for item in items if set(item) & rules]
    alarms = sorted({r for r, s in found if s in ("warning", "error") and r in set(label.get("forbid", []))})
    if mappable is not None:
        # A detector maps to several rules: its alarm is false only when every rule it stands for is forbidden.
        forbidden = set(label.get("forbid", []))
        alarms = sorted(
            {
                d
                for d, mapped in RLDOCTOR_MAP.items()
                if set(mapped) <= forbidden and any(r in mapped and s in ("warning", "error") for r, s in found)
            }
        )
    return {
        "items": len(items),
        "caught": len(caught),
        "missed": [item for item in items if item not in caught],
        "alarms": alarms,
        **per_sev,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--verbose", action="store_true", help="print the findings of every log")
    parser.add_argument("--snapshot", action="store_true", help="score diagnose on the whole log, not the history")
    parser.add_argument(
        "--cuts-only", action="store_true", help="skip diagnose after every record (the live panel's view; slower)"
    )
    parser.add_argument("--no-replay", action="store_true", help="skip the record-by-record replay")
    parser.add_argument("--every", type=int, default=5, help="records between two replayed prefixes (default 5)")
    args = parser.parse_args(argv)
    replays: list[tuple[str, Any]] = []
    logs = labelled_logs()
    if not logs:
        print("no labelled logs found")
        return 1
    mappable = {r for rules in RLDOCTOR_MAP.values() for r in rules}
    print(f"{len(logs)} labelled logs from: {', '.join(str(c) for c in corpora())}")
    header = ("log", "n", "ours caught", "ours false", "ours E/W", "rld caught", "rld false", "rld E/W")
    print("{:<58} {:>5} {:>11} {:>10} {:>8} {:>10} {:>9} {:>8}".format(*header))
    totals: dict[str, dict[str, Any]] = {"ours": {}, "rld": {}}
    healthy_runs = 0
    rld_available = True
    for path, label in logs:
        frame, _ = load_log_frame(path)
        found, resolved, raised = ours(path, history=not args.snapshot)
        peer = rldoctor(path)
        rld_available = rld_available and peer is not None
        a = score(found, label)
        past = score(found + resolved, label)
        a["caught"], a["missed"] = past["caught"], past["missed"]  # a finding that fired and resolved was reported
        forbid = set(label.get("forbid", []))
        # Forbidden warnings/errors shown at any point of the run but not at its end (resolved, or since demoted).
        a["past_alarms"] = sorted(({r for r, _ in raised} & forbid) - set(a["alarms"]))
        live = {} if args.cuts_only else live_alarms(path, forbid)
        a["live_alarms"] = sorted(live)
        b = score(peer or [], label, mappable) if peer is not None else None
        healthy = bool(label.get("healthy"))
        healthy_runs += healthy
        for key, s in (("ours", a), ("rld", b)):
            if s is None:
                continue
            t = totals[key]
            t["items"] = t.get("items", 0) + s["items"]
            t["caught"] = t.get("caught", 0) + s["caught"]
            t["alarms"] = t.get("alarms", 0) + len(s["alarms"])
            t["past_alarms"] = t.get("past_alarms", 0) + len(s.get("past_alarms", []))
            t["live_alarms"] = t.get("live_alarms", 0) + len(s.get("live_alarms", []))
            if healthy:
                t["healthy_errors"] = t.get("healthy_errors", 0) + s["error"]
                t["healthy_warnings"] = t.get("healthy_warnings", 0) + s["warning"]
                t["healthy_max_warnings"] = max(t.get("healthy_max_warnings", 0), s["warning"])
        name = path.name[:55] + ("*" if healthy else "")
        rld_cols = (
            (f"{b['caught']}/{b['items']}", len(b["alarms"]), f"{b['error']}/{b['warning']}") if b else ("-", "-", "-")
        )
        print(
            f"{name:<58} {frame.n_records:>5} {a['caught']:>5}/{a['items']:<5} {len(a['alarms']):>10} "
            f"{a['error']:>3}/{a['warning']:<4} {rld_cols[0]:>10} {rld_cols[1]:>9} {rld_cols[2]:>8}"
        )
        if args.verbose or a["missed"] or a["alarms"]:
            if a["missed"]:
                print(f"    ours missed: {a['missed']}")
            if a["alarms"]:
                print(f"    ours false alarms: {a['alarms']}")
            if args.verbose:
                print(f"    ours: {found}; resolved: {resolved}")
        if a["past_alarms"]:
            print(f"    ours false alarms raised earlier and resolved (or demoted) since: {a['past_alarms']}")
        for rule, line in raised:
            print(f"    raised during the run: {line}{' FORBIDDEN' if rule in forbid else ''}")
        for rule, step in sorted(live.items(), key=lambda kv: kv[1]):
            print(f"    shown live after a record (record + provisional): {rule} first at step {step} FORBIDDEN")
        if segments := len(frame.segments) - 1:
            print(f"    steps restart {segments} time(s): {len(frame.segments)} runs in this log, each diagnosed")
        if not args.no_replay:
            records, hints = load_log_records(path)
            rep = replay_log(records, hints, every=args.every)
            replays.append((path.name, rep))
            flips = {k[0]: v for k, v in rep.severity_changes.items() if v > 2}
            returns = sum(rep.returns_new_onset.values())
            print(
                f"    replay every {args.every} records ({rep.prefixes} prefixes): most severity changes of one "
                f"finding {rep.max_severity_changes}, returns with a new first-seen step {returns}, "
                f"shown != end record {len(rep.mismatches)}, provisional shown {rep.provisional}"
                + (f"; more than 2 changes: {flips}" if flips else "")
            )
    print("(* = labelled healthy; E/W = error/warning findings active at the end; caught counts resolved ones too)")
    print("| figure | ours | peer (rldoctor 0.2) | ratio | target | met |\n|---|---|---|---|---|---|")
    o, r = totals["ours"], totals["rld"]

    def frac(t: dict[str, Any]) -> str:
        return f"{t['caught']}/{t['items']} ({t['caught'] / max(t['items'], 1):.0%})" if t else "-"

    peer_note = "" if rld_available else " (rldoctor not installed)"
    print(
        f"| expected findings caught, {len(logs)} real logs | {frac(o)} | {frac(r)}{peer_note} | - | all | "
        f"{'yes' if o['caught'] == o['items'] else 'NO'} |"
    )
    print(
        f"| forbidden alarms (warning/error) at the end of the log | {o['alarms']} | {r.get('alarms', '-')} | - | 0 | "
        f"{'yes' if o['alarms'] == 0 else 'NO'} |"
    )
    print(
        "| forbidden alarms raised during the run and resolved or demoted since (findings history) | "
        f"{o['past_alarms']} | - | - | 0 | {'yes' if o['past_alarms'] == 0 else 'NO'} |"
    )
    if not args.cuts_only:
        print(
            "| forbidden alarms shown live after some record (the record and provisional findings, every record) | "
            f"{o['live_alarms']} | - | - | 0 | {'yes' if o['live_alarms'] == 0 else 'NO'} |"
        )
    if replays:
        over = sum(sum(v > 2 for v in rep.severity_changes.values()) for _, rep in replays)
        most = max(rep.max_severity_changes for _, rep in replays)
        status = max((max(rep.status_changes.values(), default=0) for _, rep in replays), default=0)
        returns = sum(sum(rep.returns_new_onset.values()) for _, rep in replays)
        mismatch = sum(len(rep.mismatches) for _, rep in replays)
        prefixes = sum(rep.prefixes for _, rep in replays)
        print(
            f"| replay every {args.every} records ({prefixes} prefixes): findings changing severity more than twice "
            f"(most changes of one) | {over} ({most}) | - | - | 0 | {'yes' if over == 0 else 'NO'} |"
        )
        print(f"| replay: most active/resolved changes of one finding | {status} | - | - | - | - |")
        print(
            f"| replay: findings that disappear and return with a new first-seen step | {returns} | - | - | 0 | "
            f"{'yes' if returns == 0 else 'NO'} |"
        )
        print(
            f"| replay: (prefix, finding) shown differently from the end report's record | {mismatch} | - | - | 0 | "
            f"{'yes' if mismatch == 0 else 'NO'} |"
        )
    if healthy_runs:
        ok = o.get("healthy_errors", 0) == 0 and o.get("healthy_max_warnings", 0) <= 1
        print(
            f"| healthy runs ({healthy_runs}): errors / warnings per run (max) | {o.get('healthy_errors', 0)} / "
            f"{o.get('healthy_warnings', 0) / healthy_runs:.2f} ({o.get('healthy_max_warnings', 0)}) | "
            f"{r.get('healthy_errors', '-')} / "
            + (f"{r['healthy_warnings'] / healthy_runs:.2f} ({r['healthy_max_warnings']})" if r else "-")
            + f" | - | 0 / <= 1 | {'yes' if ok else 'NO'} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
