"""A custom `rollout_func`: validation runs it on one real batch in the sandbox and names what breaks TRL's contract;
the job checks its first output too; the rollout preset (examples/agent_rollout.yaml) trains on CPU, its reward rises
where a near-zero learning rate's does not, and its turns (tool call, tool result, final answer) reach the samples."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from grpo_dashboard.launch.runs import validate
from grpo_dashboard.spec.run_spec import RunSpec
from grpo_dashboard.views import completions

from .health_scenarios import run_spec, train_records

REPO = Path(__file__).resolve().parent.parent
ROLLOUTS = Path(__file__).resolve().parent / "agent_code" / "rollouts.py"
sys.path.insert(0, str(REPO / "jobs"))


def rollout_spec(model: Path | None = None, **agent: object) -> dict:
    spec = RunSpec.from_file(REPO / "examples" / "agent_rollout.yaml").to_dict()
    spec["dataset"]["data_files"] = str(REPO / spec["dataset"]["data_files"])
    for r in spec["rewards"]:
        r["function"] = str(REPO / r["function"])
    spec["agent"]["rollout_func"] = str(REPO / spec["agent"]["rollout_func"])
    spec["agent"].update(agent)
    if model is not None:
        spec["model"]["name_or_path"] = str(model)
    return spec


def rollout_error(spec: dict) -> str:
    report = validate(RunSpec.from_dict(spec), REPO)
    return " | ".join(e.message for e in report.errors if e.field == "agent.rollout_func")


def test_validation_runs_the_rollout_on_a_real_batch_and_names_what_trl_would_refuse() -> None:
    assert rollout_error(rollout_spec()) == ""  # the preset's own rollout passes
    missing = rollout_error(rollout_spec(rollout_func=f"{ROLLOUTS}:missing_logprobs"))
    assert "must return keys ['logprobs']" in missing and "16 prompts" in missing
    per_row = rollout_error(rollout_spec(rollout_func=f"{ROLLOUTS}:one_per_row"))
    assert "`prompt_ids` has 2 entries for 16 prompts" in per_row and "num_generations" in per_row
    short = rollout_error(rollout_spec(rollout_func=f"{ROLLOUTS}:short_logprobs"))
    assert "`logprobs[0]` must have one value per token of `completion_ids[0]` (3), got 1" in short
    raised = rollout_error(rollout_spec(rollout_func=f"{ROLLOUTS}:raises"))
    assert "failed on one real batch" in raised and "the rollout server is down" in raised


def test_the_job_checks_the_first_rollout_output() -> None:
    import grpo_rollout

    def bad(prompts: list, trainer: object) -> dict:
        return {"prompt_ids": [[1]] * len(prompts), "completion_ids": [[2]] * len(prompts)}

    checked = grpo_rollout.CheckedRollout(bad, "x.py:bad")
    with pytest.raises(ValueError, match=r"agent.rollout_func 'x.py:bad': must return keys \['logprobs'\]"):
        checked([[{"role": "user", "content": "1+1"}]] * 2, object())
    good = grpo_rollout.CheckedRollout(lambda p, t: {**bad(p, t), "logprobs": None, "turns": [["a"], ["b"]]}, "g")
    assert good([["p"], ["q"]], object())["logprobs"] is None and good.last_turns == [["a"], ["b"]]
    problems = grpo_rollout.contract_problems(
        {"prompt_ids": [[1]], "completion_ids": [[2, 3]], "logprobs": [[0.0, 0.0]], "env_mask": [[1, 2]]}, 1, 10
    )
    assert problems == ["`env_mask[0]` must hold 0 (environment token) or 1 (model token)"]
    assert grpo_rollout.contract_problems([], 1) == ["must return a dict, got list"]
    too_big = grpo_rollout.contract_problems({"prompt_ids": [[1]], "completion_ids": [[99]], "logprobs": None}, 1, 10)
    assert too_big == ["`completion_ids[0]` holds token id 99 outside the tokenizer's vocabulary (0..10)"]


def _gain(values: list[float]) -> float:
    return sum(values[-4:]) / 4 - sum(values[:4]) / 4


@pytest.mark.training
def test_custom_rollout_preset_trains_and_its_turns_reach_the_samples(agent_model: Path) -> None:
    store, run = run_spec(rollout_spec(agent_model))
    assert run.status == "completed", run.error
    records = [r for r in train_records(store, run) if "reward" in r]
    assert len(records) == 12
    rows = [row for s in completions.sample_steps(run.run_dir) for row in completions.read_step(run.run_dir, s)]
    with_tool = [r["completion"] for r in rows if any(m["role"] == "tool" for m in r["completion"])]
    assert len(with_tool) >= len(rows) // 4, len(with_tool)
    sys.path.insert(0, str(REPO / "examples"))
    from agent_rollout import calculator

    for turns in with_tool[:20]:
        call, result = turns[0], turns[1]
        expression = call["tool_calls"][0]["function"]["arguments"]["expression"]
        if "error" not in result["content"]:
            assert result["content"] == calculator(expression)
    learned = _gain([r["reward"] for r in records])
    control_spec = rollout_spec(agent_model)
    control_spec["training"]["learning_rate"] = 1e-8
    store, control = run_spec(control_spec, store)
    flat = _gain([r["reward"] for r in train_records(store, control) if "reward" in r])
    print(f"rollout_func reward gain: learning {learned:+.3f}, control {flat:+.3f}")
    assert learned >= 0.3 > flat, (learned, flat)
