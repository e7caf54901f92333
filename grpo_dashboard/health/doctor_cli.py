"""``python -m grpo_dashboard doctor PATH``: diagnose any GRPO training log from the command line."""

from __future__ import annotations

import argparse
import json
import sys
import textwrap
from pathlib import Path
from typing import Any, TextIO

from .findings import Finding, is_rule_failure
from .history import finding_history
from .loaders import load_completions, load_log_frame
from .rules import worst_severity
from .series import MetricFrame
from .thresholds import RULE_IDS

EXIT_OK, EXIT_ERROR_FINDING, EXIT_UNREADABLE = 0, 1, 2
_WIDTH = 100
_CONFIG_SHOWN = ("beta", "num_iterations", "use_vllm", "max_completion_length", "learning_rate", "num_generations")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m grpo_dashboard doctor",
        description=(
            "Diagnose a TRL GRPO training log: entropy collapse, zero-variance groups, truncation, reward hacking, "
            "KL spikes, overfitting, plateaus and more. Exit status: 0 no error-level finding, 1 at least one, "
            "2 the input cannot be read."
        ),
    )
    parser.add_argument(
        "path",
        help="trainer_state.json, a checkpoint dir, an output dir with checkpoint-*/, our metrics.jsonl, "
        "or a JSONL file with one TRL log dict per line",
    )
    parser.add_argument("--json", action="store_true", help="print the findings as a JSON list")
    parser.add_argument(
        "--threshold",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a default threshold, e.g. entropy_collapse.warn_ratio=0.2 or kl_high.enabled=false "
        "(repeatable; see docs/health.md)",
    )
    parser.add_argument(
        "--config",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a GRPOConfig field the log does not record, e.g. beta=0.04 or num_iterations=2 (repeatable)",
    )
    parser.add_argument(
        "--no-samples",
        action="store_true",
        help="ignore samples.jsonl / completions/*.parquet found beside the log (duplicate_completions)",
    )
    return parser


def _pairs(items: list[str], what: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"--{what} expects KEY=VALUE, got {item!r}")
        try:
            out[key.strip()] = json.loads(value)
        except ValueError:
            out[key.strip()] = value
    return out


def doctor_main(argv: list[str] | None = None) -> int:
    """Run the doctor CLI; returns the exit status (0 healthy, 1 an error-level finding, 2 unreadable input)."""
    try:
        args = _parser().parse_args(argv)
    except SystemExit as exc:  # argparse exits on --help and on usage errors; return its status instead
        return exc.code if isinstance(exc.code, int) else EXIT_UNREADABLE
    try:
        thresholds = _pairs(args.threshold, "threshold")
        overrides = _pairs(args.config, "config")
    except ValueError as exc:
        print(f"doctor: {exc}", file=sys.stderr)
        return EXIT_UNREADABLE
    try:
        frame, hints = load_log_frame(args.path)
    except ValueError as exc:
        print(f"doctor: {exc}", file=sys.stderr)
        return EXIT_UNREADABLE
    config = {**hints, **overrides}
    try:
        completions = None if args.no_samples else load_completions(args.path)
        findings = finding_history(frame, config=config, thresholds=thresholds, completions=completions)
    except ValueError as exc:
        print(f"doctor: {exc}", file=sys.stderr)
        return EXIT_UNREADABLE
    if args.json:
        print(json.dumps([f.to_dict() for f in findings], indent=2))
    else:
        render_report(args.path, frame, config, findings, sys.stdout)
    return EXIT_ERROR_FINDING if worst_severity([f for f in findings if f.status == "active"]) == "error" else EXIT_OK


def render_report(
    path: str | Path, frame: MetricFrame, config: dict[str, Any], findings: list[Finding], out: TextIO
) -> None:
    """Write the human-readable doctor report."""
    first, last = frame.segments[0].first_step(), frame.last_step()
    records = sum(seg.n_records for seg in frame.segments)
    out.write(f"GRPO doctor: {config.get('source', path)}\n")
    out.write(f"  {records} log records, steps {first}-{last}" + (" of the latest run" if frame.earlier else ""))
    known = [f"{k}={config[k]}" for k in _CONFIG_SHOWN if config.get(k) is not None]
    out.write(f"; config: {', '.join(known)}\n" if known else "; no config in the log (rules infer it)\n")
    if frame.earlier:
        runs = ", ".join(f"steps {seg.first_step()}-{seg.last_step()}" for seg in frame.segments)
        out.write(
            f"  the steps restart {len(frame.earlier)} time(s): {len(frame.segments)} runs in this log ({runs}), "
            "each diagnosed on its own\n"
        )
    for back, last in frame.resumes:
        out.write(f"  resumed: the log goes back to step {back} after step {last} (the later records are kept)\n")
    for note in coverage_notes(frame, config):
        out.write(textwrap.fill(note, _WIDTH, initial_indent="  note: ", subsequent_indent="        ") + "\n")
    out.write("\n")
    for f in findings:
        metric = f"  [{f.metric}]" if f.metric else ""
        state = f"  resolved at step {f.resolved_step}" if f.status == "resolved" else ""
        # The onset is the first step the rule saw this (history); the message is the latest evaluation's, whose
        # "since step N" may name a later step once the window has moved.
        label = "RULE FAILED" if is_rule_failure(f) else f.severity.upper()
        out.write(f"{label:<8} {f.rule:<22} first seen at step {f.step}{metric}{state}\n")
        out.write(textwrap.fill(f.message, _WIDTH, initial_indent="  ", subsequent_indent="  ") + "\n")
        out.write(textwrap.fill(f.remedy, _WIDTH, initial_indent="  fix: ", subsequent_indent="       ") + "\n\n")
    active = [f for f in findings if f.status == "active"]
    failed = sum(map(is_rule_failure, active))
    counts = {s: sum(f.severity == s and not is_rule_failure(f) for f in active) for s in ("error", "warning", "info")}
    resolved = len(findings) - len(active)
    if findings:
        summary = ", ".join(f"{n} {s}{'s' if n != 1 else ''}" for s, n in counts.items() if n)
        failures = f"{failed} rule{'s' if failed != 1 else ''} failed" if failed else ""
        summary = ", ".join(filter(None, [summary, failures, f"{resolved} resolved" if resolved else ""]))
        out.write(f"{len(findings)} finding{'s' if len(findings) != 1 else ''}: {summary}.\n")
    else:
        out.write(f"No problems found ({len(RULE_IDS)} rules checked).\n")


def coverage_notes(frame: MetricFrame, config: dict[str, Any]) -> list[str]:
    """Why some rules had nothing to look at: metrics absent from this log, or switched off by the config."""
    notes = []
    missing = [k for k in ("reward", "entropy", "grad_norm") if frame.get(k) is None]
    if frame.get("completions/clipped_ratio") is None and frame.get("completion_length") is not None:
        notes.append(
            "old TRL key names (completion_length, no completions/clipped_ratio): truncation is inferred "
            "from lengths pinned at the cap"
        )
    if frame.get("frac_reward_zero_std") is None and frame.get("reward_std") is not None:
        notes.append("no frac_reward_zero_std (TRL < 0.18): zero_variance uses reward_std == 0 instead")
    if missing:
        notes.append(f"not logged: {', '.join(missing)}; the rules that need them were skipped")
    entropy = frame.get("entropy")
    if entropy is not None and entropy.finite().values.size >= 2 and not entropy.finite().values.any():
        notes.append("entropy is exactly 0 on every log (logged, not computed): the entropy rules were skipped")
    beta = config.get("beta")
    if beta == 0 or (beta is None and frame.get("kl") is None):
        notes.append(
            "no KL term (beta=0 or kl not logged): KL rules skipped"
            if beta == 0
            else "kl not logged (beta=0 is TRL's default): KL rules skipped"
        )
    region = frame.get("clip_ratio/region_mean", "clip_ratio")
    if region is not None and not (region.finite().values > 0).any():
        notes.append("clip ratios are all 0 (on-policy training): clip_high skipped")
    return notes


def main() -> None:
    """Console entry point."""
    sys.exit(doctor_main(sys.argv[1:]))


if __name__ == "__main__":
    main()
