"""Pathological GRPO runs produced by the real trainer on the tiny CPU model, and how the doctor sees them live.

One source for the training tests (``tests/test_health_real.py``) and for the results table in ``docs/health.md``:

    HF_HUB_OFFLINE=1 python -m tests.health_scenarios        # runs every scenario (~2-4 min on 2 cores), prints it

Each scenario is the smoke task (``examples/smoke.yaml``) with one thing broken, the rule meant to catch it, and the
step at which the problem begins, measured on the run's own metrics. ``live_timeline`` replays the log one record
at a time through ``diagnose``, exactly as the dashboard's findings panel and the in-job guard see it.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grpo_dashboard.health import diagnose
from grpo_dashboard.launch.runs import launch, wait
from grpo_dashboard.store.db import Run, Store
from grpo_dashboard.views.overview import run_config

from .conftest import SMOKE_DATA, smoke_dict

RANK = {"info": 0, "warning": 1, "error": 2}


@dataclass
class Scenario:
    """A broken smoke run: what to change, the rule that must catch it, and where the problem starts."""

    name: str
    description: str
    rule: str
    spec: Callable[[Path, Path], dict[str, Any]]  # (tiny model dir, scratch dir) -> spec dict
    onset: Callable[[list[dict[str, Any]]], int]  # records -> first step of the problem


def _collapse(model: Path, tmp: Path) -> dict[str, Any]:
    return smoke_dict(model, learning_rate=5e-2, max_steps=20)


def _constant(model: Path, tmp: Path) -> dict[str, Any]:
    spec = smoke_dict(model, max_steps=12)
    spec["rewards"] = [{"name": "constant_reward", "builtin": "constant", "params": {"value": 0.5}}]
    return spec


def _short_cap(model: Path, tmp: Path) -> dict[str, Any]:
    return smoke_dict(model, max_completion_length=2, max_steps=12)


def format_dataset(path: Path) -> Path:
    """The smoke prompts (`say apple 3:`) with the answer they ask for (`apple apple apple`) in an `answer` column."""
    rows = [json.loads(line) for line in SMOKE_DATA.read_text().splitlines() if line.strip()]
    with path.open("w") as fh:
        for row in rows:
            _, word, count = row["prompt"].rstrip(":").split()
            fh.write(json.dumps({"prompt": row["prompt"], "answer": " ".join([word] * int(count))}) + "\n")
    return path


def _format_hacking(model: Path, tmp: Path) -> dict[str, Any]:
    spec = smoke_dict(model, learning_rate=3e-3, max_steps=32)
    spec["dataset"]["data_files"] = str(format_dataset(tmp / "say_words.jsonl"))
    # A format-like reward the tiny model learns in ~20 steps ("mention an a") and the real task it cannot learn
    # (say the word N times, exact match): the policy games the first while the second stays at 0.
    spec["rewards"] = [
        {"name": "format", "builtin": "regex", "params": {"pattern": "a"}},
        {"name": "exact_answer", "builtin": "exact_match", "params": {"answer_column": "answer"}},
    ]
    return spec


def _off_policy(model: Path, tmp: Path) -> dict[str, Any]:
    # Each generation is reused for 4 updates (num_iterations) with large steps in a narrow trust region: the
    # updates after the first leave most tokens outside the clip range (TRL logs 0 on the on-policy first one).
    return smoke_dict(model, learning_rate=1e-2, num_iterations=4, epsilon=0.05, max_steps=16)


def _overfitting(model: Path, tmp: Path) -> dict[str, Any]:
    # The training prompts pay for writing "a", the held-out ones for avoiding it: what the policy learns on the
    # first is exactly what costs it on the second (the eval reward falls while the train reward rises).
    rows = [json.loads(line) for line in SMOKE_DATA.read_text().splitlines() if line.strip()]
    (tmp / "train.jsonl").write_text("".join(json.dumps({**r, "target": "a"}) + "\n" for r in rows))
    (tmp / "eval.jsonl").write_text("".join(json.dumps({**r, "target": "!a"}) + "\n" for r in rows[:8]))
    spec = smoke_dict(
        model, learning_rate=3e-3, max_steps=24, eval_strategy="steps", eval_steps=4, per_device_eval_batch_size=8
    )
    spec["dataset"]["data_files"] = str(tmp / "train.jsonl")
    spec["dataset"]["eval_data_files"] = str(tmp / "eval.jsonl")
    spec["rewards"] = [
        {"name": "target_letter", "function": f"{Path(__file__).parent / 'scenario_rewards.py'}:target_letter"}
    ]
    return spec


def _first_fall(evals: list[tuple[int, float]]) -> int:
    return next(step for (_, before), (step, value) in zip(evals, evals[1:], strict=False) if value < before)


def _first(records: list[dict[str, Any]], test: Callable[[dict[str, Any]], bool]) -> int:
    return next(r["step"] for r in records if test(r))


SCENARIOS = {
    s.name: s
    for s in (
        Scenario(
            "entropy collapse",
            "learning_rate 5e-2 (smoke: 1e-3), 20 steps",
            "entropy_collapse",
            _collapse,
            # the step where entropy first falls below half of its first logged value
            lambda rs: _first(rs, lambda r: (r.get("entropy") or 9e9) < 0.5 * rs[0]["entropy"]),
        ),
        Scenario(
            "constant reward",
            "one reward, builtin constant 0.5, 12 steps",
            "flat_reward",
            _constant,
            lambda rs: rs[0]["step"],
        ),
        Scenario(
            "every completion truncated",
            "max_completion_length 2 (smoke: 12), 12 steps",
            "truncation",
            _short_cap,
            lambda rs: rs[0]["step"],
        ),
        Scenario(
            "off-policy clipping",
            "num_iterations 4, learning_rate 1e-2, epsilon 0.05, 16 steps",
            "clip_high",
            _off_policy,
            # the first step where more than a quarter of the tokens were clipped
            lambda rs: _first(rs, lambda r: (r.get("clip_ratio/region_mean") or 0) > 0.25),
        ),
        Scenario(
            "overfitting",
            "train prompts pay for 'a', 8 held-out prompts for avoiding it; lr 3e-3, eval every 4 of 24 steps",
            "overfitting",
            _overfitting,
            # the first evaluation below the one before it
            lambda rs: _first_fall([(r["step"], r["eval_reward"]) for r in rs if "eval_reward" in r]),
        ),
        Scenario(
            "format hacking",
            "rewards: regex 'a' (format) + exact_match of 'apple apple apple' (accuracy), lr 3e-3, 32 steps",
            "format_hacking",
            _format_hacking,
            # the step where the format reward first reaches 95% of its maximum
            lambda rs: _first(rs, lambda r: (r.get("rewards/format/mean") or 0) >= 0.95),
        ),
    )
}


def run_spec(spec: dict[str, Any], store: Store | None = None) -> tuple[Store, Run]:
    """Launch a spec through the dashboard's own launcher and follow it to its end."""
    store = store or Store()
    run = wait(store, launch(spec, store))
    return store, run


def train_records(store: Store, run: Run) -> list[dict[str, Any]]:
    """The run's records as the dashboard feeds them to the doctor (TRL's final summary shares the last step)."""
    return store.records(run.id)


def live_timeline(
    records: list[dict[str, Any]], config: dict[str, Any] | None = None, thresholds: dict[str, Any] | None = None
) -> dict[str, dict[str, int]]:
    """``{rule: {severity: first step}}``: replaying the log record by record, when each rule first reached each
    severity (what the live findings panel showed, and when)."""
    first: dict[str, dict[str, int]] = {}
    for k in range(1, len(records) + 1):
        for f in diagnose(records[:k], config, thresholds):
            first.setdefault(f.rule, {}).setdefault(f.severity, records[k - 1]["step"])
    return first


def first_flag(timeline: dict[str, dict[str, int]], rule: str, severity: str = "warning") -> int | None:
    """The first step at which ``rule`` was at ``severity`` or worse."""
    steps = [s for sev, s in timeline.get(rule, {}).items() if RANK[sev] >= RANK[severity]]
    return min(steps) if steps else None


def alarms(timeline: dict[str, dict[str, int]]) -> dict[str, str]:
    """Every rule that reached warning or error at some point, with its worst severity."""
    out = {}
    for rule, by_sev in timeline.items():
        worst = max(by_sev, key=RANK.__getitem__)
        if RANK[worst] >= RANK["warning"]:
            out[rule] = worst
    return out


def analyse(scenario: Scenario, store: Store, run: Run) -> dict[str, Any]:
    """What the doctor made of one scenario run: onset, first warning/error of the intended rule, other alarms."""
    records = train_records(store, run)
    config, thresholds = run_config(run)
    timeline = live_timeline(records, config, thresholds or None)
    return {
        "scenario": scenario.name,
        "description": scenario.description,
        "rule": scenario.rule,
        "steps": len(records),
        "onset": scenario.onset(records),
        "warning_at": first_flag(timeline, scenario.rule, "warning"),
        "error_at": first_flag(timeline, scenario.rule, "error"),
        "others": {r: s for r, s in alarms(timeline).items() if r != scenario.rule},
        "timeline": timeline,
    }


def markdown_table(results: list[dict[str, Any]], healthy: dict[str, Any] | None) -> str:
    """The rule x scenario table for docs/health.md and the README."""
    lines = [
        "| scenario (smoke task with ...) | rule | onset step | first warning / error (step) | other warnings and "
        "errors (consequences) | false alarms |",
        "|---|---|---|---|---|---|",
    ]
    for r in results:
        others = ", ".join(f"`{k}` {v}" for k, v in sorted(r["others"].items())) or "none"
        lines.append(
            f"| {r['scenario']}: {r['description']} | `{r['rule']}` | {r['onset']} | "
            f"{r['warning_at'] or '-'} / {r['error_at'] or '-'} | {others} | none |"
        )
    if healthy is not None:
        lines.append(
            f"| healthy: examples/smoke.yaml, {healthy['steps']} steps, replayed after every record | - | - | - | "
            f"{', '.join(healthy['alarms']) or 'none'} | {len(healthy['alarms'])} |"
        )
    return "\n".join(lines)


def main() -> int:
    """Run every scenario and the healthy smoke run in a scratch data dir; print the table and the timelines."""
    import os
    import tempfile

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "jobs"))
    import grpo_job

    with tempfile.TemporaryDirectory() as tmp:
        os.environ["GRPO_DASHBOARD_DATA_DIR"] = str(Path(tmp) / "data")
        model = grpo_job.build_tiny_model(Path(tmp) / "tiny")
        results = []
        for scenario in SCENARIOS.values():
            store, run = run_spec(scenario.spec(model, Path(tmp)))
            results.append(analyse(scenario, store, run))
            print(scenario.name, json.dumps(results[-1]["timeline"]), file=sys.stderr)
        healthy = smoke_dict(model)
        healthy["health"] = {"alerts": True}  # the job's monitor runs (and measures its cost), nothing is sent
        store, run = run_spec(healthy)
        records = train_records(store, run)
        config, thresholds = run_config(run)
        timeline = live_timeline(records, config, thresholds or None)
        summary = next(e for e in store.events(run.id) if e["event"] == "health_summary")
        print("healthy", json.dumps(timeline), "\nhealth_summary", json.dumps(summary), file=sys.stderr)
        print(markdown_table(results, {"steps": len(records), "alarms": sorted(alarms(timeline))}))
        print(
            f"\nhealthy smoke, in-job monitor: {summary['evaluations']} evaluations, {summary['spent_s']} s of "
            f"{summary['train_s']} s training = {100 * summary['overhead']:.2f}%"
        )
        print(guard_demo(model))
    return 0


def guard_demo(model: Path) -> str:
    """The collapsing run with the guard and a local webhook: where it stopped, on what, and what was POSTed."""
    from .conftest import WebhookReceiver

    receiver = WebhookReceiver()
    try:
        spec = smoke_dict(model, learning_rate=5e-2, max_steps=40)
        spec["health"] = {"guard": True, "guard_persist": 3, "webhook_url": receiver.url}
        store, run = run_spec(spec)
    finally:
        receiver.close()
    stop = next(e for e in store.events(run.id) if e["event"] == "guard_stop")
    posts = [
        (p["json"]["event"], p["json"]["finding"]["rule"], p["json"]["finding"]["severity"]) for p in receiver.posts
    ]
    return (
        f"guard: stopped at step {stop['step']} of 40 on {stop['rule']} ({stop['severity']}, onset step "
        f"{stop['onset']}), checkpoint {Path(stop['checkpoint']).name}; run error: {run.error[:80]}...; "
        f"webhook posts: {posts}"
    )


if __name__ == "__main__":
    sys.exit(main())
