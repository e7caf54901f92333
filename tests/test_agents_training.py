"""Real agent runs on CPU (TRL's GRPOTrainer with tools, the warmed tiny tool-calling model): tool calls happen,
their results come back into the trajectory, reward rises by a margin a near-zero learning rate does not reach,
the multi-turn environment keeps its state, and the agent health rules fire on a run whose tool fails on purpose
and on one that stops calling tools (and on neither the healthy run nor a run without tools)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from grpo_dashboard.health import diagnose
from grpo_dashboard.spec.run_spec import RunSpec
from grpo_dashboard.views import completions

from .health_scenarios import run_spec, train_records

pytestmark = pytest.mark.training

REPO = Path(__file__).resolve().parent.parent
CODE = Path(__file__).resolve().parent / "agent_code" / "failing_tools.py"
AGENT_RULES = {"tool_failures", "tool_use_collapse", "turn_limit", "malformed_tool_calls", "task_regression"}
MARGIN = 0.2  # reward gain (mean of the last 6 logs minus the first 6) the learning run must reach


def preset(name: str, model: Path, **training: object) -> dict:
    spec = RunSpec.from_file(REPO / "examples" / name).to_dict()
    spec["model"]["name_or_path"] = str(model)
    if spec.get("dataset", {}).get("data_files"):
        spec["dataset"]["data_files"] = str(REPO / spec["dataset"]["data_files"])
    spec["training"].update(training)
    return spec


def gain(values: list[float]) -> float:
    return sum(values[-6:]) / 6 - sum(values[:6]) / 6


def test_calculator_agent_calls_tools_gets_results_and_learns(agent_model: Path) -> None:
    store, run = run_spec(preset("agent_calculator.yaml", agent_model))
    assert run.status == "completed", run.error
    records = [r for r in train_records(store, run) if "reward" in r]
    calls = [r["tools/call_frequency"] for r in records]
    assert sum(c > 0 for c in calls) >= 0.8 * len(calls), calls
    rows = [row for s in completions.sample_steps(run.run_dir) for row in completions.read_step(run.run_dir, s)]
    results = [(m, row) for row in rows for m in row["completion"] if m["role"] == "tool"]
    assert results, "no tool result came back into any trajectory"
    sys.path.insert(0, str(REPO / "jobs"))
    import grpo_agents

    for message, row in results[:20]:
        call = next(m for m in row["completion"] if m.get("tool_calls"))
        expr = call["tool_calls"][0]["function"]["arguments"].get("expression")
        if expr is not None and not grpo_agents.is_failure(message["content"]):
            assert message["content"] == grpo_agents.calculator(expr)
    learned = gain([r["reward"] for r in records])
    store, control = run_spec(preset("agent_calculator.yaml", agent_model, learning_rate=1e-8), store)
    control_records = [r for r in train_records(store, control) if "reward" in r]
    flat = gain([r["reward"] for r in control_records])
    print(f"reward gain: learning {learned:+.3f}, control {flat:+.3f}")
    assert learned >= MARGIN > flat, (learned, flat)
    assert not AGENT_RULES & {f.rule for f in diagnose(records) if f.severity != "info"}


def test_guessing_game_keeps_state_across_turns(agent_model: Path) -> None:
    store, run = run_spec(preset("agent_guess.yaml", agent_model, max_steps=3))
    assert run.status == "completed", run.error
    rows = completions.read_step(run.run_dir, completions.sample_steps(run.run_dir)[-1])
    answers = [[m["content"] for m in row["completion"] if m["role"] == "tool"] for row in rows]
    assert any(len(a) >= 2 for a in answers)
    for row, a in zip(rows, answers, strict=True):
        if "correct" in a:  # the game ended where the env's secret is
            assert row["rewards"]["GuessNumberEnv"] > 0
        assert all(x in ("higher", "lower", "correct") or x.startswith("{'error'") for x in a)
    records = train_records(store, run)
    assert any("agent/tool_calls/guess" in r for r in records)


def test_environment_calls_trl_never_ran_are_told_from_those_it_ran(agent_model: Path) -> None:
    """One tool-calling round: the guess the model makes after the first answer is never run. The environment's
    calls are noted, so the trajectories mark it `not_run` and count the calls TRL counted, step by step."""
    from grpo_dashboard.views import trajectories

    spec = preset("agent_guess.yaml", agent_model, max_steps=2)
    spec["agent"]["max_tool_calling_iterations"] = 1
    store, run = run_spec(spec)
    assert run.status == "completed", run.error
    by_step = {r["step"]: r for r in train_records(store, run) if "tools/call_frequency" in r}
    not_run = 0
    for step in completions.sample_steps(run.run_dir):
        trajs = trajectories.trajectories(completions.read_step(run.run_dir, step))
        assert sum(t["n_tool_calls"] for t in trajs) == round(by_step[step]["tools/call_frequency"] * len(trajs))
        outcomes = [c["outcome"] for t in trajs for turn in t["turns"] for c in turn["calls"]]
        assert "no_result" not in outcomes
        not_run += outcomes.count("not_run")
    assert not_run > 0, "no call was left unrun: the run did not exercise the case"


def test_failing_tool_is_a_counted_failure_and_flagged(agent_model: Path) -> None:
    spec = preset("agent_calculator.yaml", agent_model, max_steps=6, learning_rate=1e-8, max_completion_length=96)
    spec["agent"]["tools"] = [f"{CODE}:calculator"]
    store, run = run_spec(spec)
    assert run.status == "completed", run.error
    records = [r for r in train_records(store, run) if "reward" in r]
    assert all(r["tools/failure_frequency"] == 1.0 for r in records if r["tools/call_frequency"] > 0)
    findings = {f.rule: f for f in diagnose(records)}
    assert findings["tool_failures"].severity == "error"
    rows = [row for s in completions.sample_steps(run.run_dir) for row in completions.read_step(run.run_dir, s)]
    assert any(
        "calculator service is down" in m["content"] for row in rows for m in row["completion"] if m["role"] == "tool"
    )


def test_agent_that_stops_calling_tools_is_flagged(agent_model: Path) -> None:
    spec = preset("agent_calculator.yaml", agent_model, max_steps=14, learning_rate=0.003)
    code = (
        "def reward(completions, **kw):\n"
        "    return [-float(sum(m['role'] == 'tool' for m in c)) for c in completions]\n"
    )
    spec["rewards"] = [{"name": "no_tools", "builtin": "python", "params": {"code": code}}]
    store, run = run_spec(spec)
    assert run.status == "completed", run.error
    records = [r for r in train_records(store, run) if "reward" in r]
    calls = [r["tools/call_frequency"] for r in records]
    assert max(calls[:4]) > 0.2 and sum(calls[-4:]) / 4 <= 0.1, calls
    assert "tool_use_collapse" in {f.rule for f in diagnose(records)}


def test_async_grpo_is_wired_up_to_the_trainer_construction(agent_model: Path, tmp_path: Path) -> None:
    """No vLLM server and no GPU here: validation, AsyncGRPOConfig from the spec and the job's wiring are real;
    AsyncGRPOTrainer.__init__ then stops at its first CUDA call (peak-FLOPs probe), before any vLLM contact,
    weight transfer or rollout worker, none of which ran."""
    from grpo_dashboard.launch.runs import resolve_paths, validate

    spec = RunSpec.from_dict(preset("agent_calculator.yaml", agent_model))
    spec.agent.trainer, spec.agent.async_config = "async_grpo", {"max_staleness": 2}
    # An importable module (a spawned rollout process re-imports it); file.py targets would be refused.
    spec.rewards = [type(spec.rewards[0])(name="answer", function="tests.agent_code.failing_tools:answer_reward")]
    del spec.training["beta"]  # not an AsyncGRPOConfig field
    errors = {e.field: e.message for e in validate(spec, REPO).errors}
    assert set(errors) == {"training.use_cpu"}, errors  # picklable code, URL, FSDP: all fine; CPU is refused
    job = resolve_paths(spec, REPO, tmp_path)
    (tmp_path / "run.yaml").write_text(job.to_job_yaml())
    subprocess.run(
        [sys.executable, str(REPO / "jobs" / "grpo_job.py"), "--config", str(tmp_path / "run.yaml")],
        capture_output=True,
        timeout=300,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    events = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    failed = next(e for e in events if e.get("event") == "failed")
    assert "async_grpo_trainer.py" in failed["traceback"] and "get_peak_flops_per_device" in failed["traceback"]
    assert "CUDA" in failed["message"]


def test_environment_column_routes_rows_and_drives_per_task_metrics_and_filters(agent_model: Path) -> None:
    from grpo_dashboard.views import trajectories

    store, run = run_spec(preset("agent_mixed.yaml", agent_model, max_steps=3))
    assert run.status == "completed", run.error
    records = [r for r in train_records(store, run) if "reward" in r]
    keys = set().union(*records)
    assert {"tasks/environment/calc/reward_mean", "tasks/environment/game/reward_mean"} <= keys, sorted(keys)
    assert any(k.startswith("tasks/task/") for k in keys)
    rows = completions.read_step(run.run_dir, completions.sample_steps(run.run_dir)[-1])
    assert {r["extra"]["environment"] for r in rows} == {"calc", "game"}
    game = trajectories.trajectories(rows, filters={"environment": "game"})
    assert game and all(c["name"] == "guess" for t in game for turn in t["turns"] for c in turn["calls"])
    calc = trajectories.trajectories(rows, filters={"environment": "calc"}, sort_by="tool calls")
    assert calc and all(c["name"] == "calculator" for t in calc for turn in t["turns"] for c in turn["calls"])


def test_tool_results_trl_drops_for_length_count_alike_in_charts_and_trajectories(agent_model: Path) -> None:
    """TRL counts a call and its failure as it runs the tool, then drops results that would pass
    max_completion_length; the trajectories show those calls (dropped, failed or not) so that, step by step, their
    calls and failures equal TRL's tools/call_frequency and tools/failure_frequency."""
    from grpo_dashboard.views import trajectories

    spec = preset("agent_calculator.yaml", agent_model, max_steps=4, learning_rate=1e-8)
    spec["agent"]["tools"] = [f"{CODE.parent / 'overlong_tools.py'}:calculator"]
    store, run = run_spec(spec)
    assert run.status == "completed", run.error
    records = {r["step"]: r for r in train_records(store, run) if "reward" in r}
    batch = spec["training"]["per_device_train_batch_size"]
    dropped_failures = 0
    for step in completions.sample_steps(run.run_dir):
        rows = completions.read_step(run.run_dir, step)
        assert len(rows) == batch
        trajs = trajectories.trajectories(rows)
        calls = sum(t["n_tool_calls"] for t in trajs)
        failed = sum(t["n_failed"] for t in trajs)
        record = records[step]
        assert calls == round(record["tools/call_frequency"] * batch), (step, calls, record)
        assert failed == round(record["tools/failure_frequency"] * calls), (step, failed, record)
        dropped = [c for t in trajs for turn in t["turns"] for c in turn["calls"] if c["outcome"] == "dropped"]
        dropped_failures += sum(c["failed"] for c in dropped)
        assert all("calculator overloaded" in c["error"] for c in dropped if c["failed"])
        if dropped:
            assert record["agent/dropped_result_ratio"] == len(dropped) / calls
            shown = next(
                t for t in trajs if any(c["outcome"] == "dropped" for turn in t["turns"] for c in turn["calls"])
            )
            assert "TRL dropped its result" in trajectories.markdown(shown)
    assert dropped_failures > 0, "no failing call had its result dropped: the run did not exercise the case"
