"""The agent spec section and its pre-launch checks (custom code imported only in the sandbox): every bad input is
a clear error naming the field before anything starts; presets, YAML round trip, HF Jobs shipping of agent code."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from grpo_dashboard.errors import SpecError
from grpo_dashboard.launch import runs
from grpo_dashboard.launch.hf_jobs.payload import container_spec
from grpo_dashboard.launch.runs import validate
from grpo_dashboard.spec import presets
from grpo_dashboard.spec.jobfiles import agents_module
from grpo_dashboard.spec.run_spec import RunSpec
from grpo_dashboard.store.db import Store

REPO = Path(__file__).resolve().parent.parent
CODE = Path(__file__).resolve().parent / "agent_code" / "failing_tools.py"


def calc_spec(**agent: object) -> dict:
    spec = RunSpec.from_file(REPO / "examples" / "agent_calculator.yaml").to_dict()
    spec["dataset"]["data_files"] = str(REPO / "examples" / "data" / "agent_calc.jsonl")
    spec["agent"].update(agent)
    return spec


def errors_of(spec: dict) -> dict[str, str]:
    report = validate(RunSpec.from_dict(spec), REPO)
    out: dict[str, str] = {}
    for e in report.errors:  # a field may have several problems (e.g. a preset that is missing and not FSDP2)
        out[e.field] = f"{out[e.field]} | {e.message}" if e.field in out else e.message
    return out


def test_agent_presets_are_valid_listed_and_round_trip() -> None:
    for name in presets.PRESETS:
        if "agent" in name:
            spec = presets.preset_spec(name)
            assert spec.agent is not None and RunSpec.from_yaml(spec.to_yaml()) == spec
            assert RunSpec.from_yaml(spec.to_job_yaml()) == spec
            assert validate(spec, REPO).ok, validate(spec, REPO).errors
    guess = presets.preset_spec("agent: guessing-game environment (offline CPU, no dataset)")
    assert guess.dataset.data_files is None and guess.agent.environment_factory == "guess_number"


def test_bad_tools_environment_names_and_template_are_errors_naming_the_field(
    tmp_path: Path, tiny_model: Path
) -> None:
    data = tmp_path / "rows.jsonl"
    data.write_text(
        "".join(json.dumps({"prompt": "1+2", "answer": "3", "environment": e}) + "\n" for e in ("game", "game", "zzz"))
    )
    spec = calc_spec(
        tools=[f"{CODE}:undocumented"], environment_factory={"game": f"{CODE}:NoReset"}, tiny_warmup=False
    )
    spec["model"] = {"name_or_path": str(tiny_model)}  # the plain tiny template: cannot render tools
    spec["dataset"]["data_files"] = str(data)
    errors = errors_of(spec)
    assert "docstring" in errors["agent.tools[0]"].lower() or "description" in errors["agent.tools[0]"].lower()
    assert "reset" in errors["agent.environment_factory.game"]
    assert "['zzz']" in errors["agent.environment_factory"]
    assert "cannot render a tool-calling conversation" in errors["model.name_or_path"]


def test_datasetless_needs_max_steps_and_a_reward_source() -> None:
    spec = RunSpec.from_file(REPO / "examples" / "agent_guess.yaml").to_dict()
    del spec["training"]["max_steps"]
    spec["rewards"] = []
    spec["agent"]["environment_factory"] = f"{CODE}:NoReset"
    errors = errors_of(spec)
    assert "max_steps" in errors["training.max_steps"]
    assert "get_reward" in errors["rewards"]


def test_tools_need_conversational_prompts_and_the_tiny_model_needs_warmup() -> None:
    spec = calc_spec(tiny_warmup=False)
    spec["dataset"]["conversational"] = False
    errors = errors_of(spec)
    assert "conversational" in errors["dataset.conversational"]
    assert "tiny_warmup" in errors["agent.tiny_warmup"]


def test_async_run_refuses_lambdas_closures_bad_url_and_deepspeed() -> None:
    spec = calc_spec(
        tools=[f"{CODE}:lambda_tool"],
        trainer="async_grpo",
        tiny_warmup=True,
        async_config={"max_staleness": 2, "vllm_server_base_url": "localhost"},
    )
    spec["backend"] = {"kind": "local", "accelerate_config": "zero3"}
    spec["rewards"] = [{"name": "mine", "function": f"{CODE}:closure_tool"}]
    errors = errors_of(spec)
    assert "not picklable" in errors["agent.tools[0]"]
    assert "not picklable" in errors["rewards[0]"]
    assert "training.vllm_server_base_url" in errors["agent.async_config.vllm_server_base_url"]
    assert "http" in errors["training.vllm_server_base_url"]
    assert "fsdp2" in errors["backend.accelerate_config"]
    assert "GPU" in errors["training.use_cpu"]


def test_invalid_agent_spec_launches_nothing(tmp_path: Path) -> None:
    store = Store()
    spec = calc_spec(tools=[f"{CODE}:undocumented"])
    with pytest.raises(SpecError) as exc:
        runs.launch(spec, store, base_dir=REPO)
    assert "agent.tools[0]" in str(exc.value)
    assert store.list_runs() == []


def test_agent_code_travels_to_hf_jobs_like_reward_code() -> None:
    spec = RunSpec.from_dict(
        calc_spec(
            tools=["calculator", f"{CODE}:calculator"],
            environment_factory={"game": "guess_number", "mine": f"{CODE}:NoReset"},
        )
    )
    inner, files = container_spec(spec)
    assert inner.agent.tools[0] == "calculator"
    shipped = inner.agent.tools[1].rsplit(":", 1)[0]
    assert shipped.startswith("/data/agent/") and files[shipped[len("/data/") :]] == CODE
    assert inner.agent.environment_factory["mine"].startswith("/data/agent/")
    assert "grpo_agents.py" in files


def test_process_rewards_and_trajectory_reading() -> None:
    agents = agents_module()
    call = {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"type": "function", "function": {"name": "calculator", "arguments": {"expression": "1/0"}}}],
    }
    fail = {"role": "tool", "name": "calculator", "content": str({"error": "division by zero"})}
    ok_call = {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"type": "function", "function": {"name": "calculator", "arguments": {"expression": "1+1"}}}],
    }
    traj = [
        call,
        fail,
        call,
        fail,
        ok_call,
        {"role": "tool", "name": "calculator", "content": "2"},
        {"role": "assistant", "content": "2"},
    ]
    turns = agents.tool_turns(traj)
    assert [t["failed"] for t in turns] == [True, True, False]
    assert [t["repeated_failure"] for t in turns] == [False, True, False]
    assert agents.failure_text(turns[0]["result"]) == "division by zero"
    rewards = agents_module()
    success = rewards.process_rewards(lambda name, factory, *a, **k: (name, factory))
    fns = {n: f() for n, f in success}
    assert fns["tool_success"](completions=[traj, [{"role": "assistant", "content": "x"}]]) == [1 / 3, None]
    assert fns["repeated_failure_penalty"](completions=[traj]) == [-0.5]
    assert agents.calculator("(3*4)-5") == "7"


def test_agent_group_in_the_form_round_trips_and_toggles() -> None:
    from grpo_dashboard.spec import forms

    spec = presets.preset_spec("agent: calculator tool (offline CPU, warmed tiny model)")
    values = forms.values_from_spec(spec)
    assert values["agent"] is True and values["agent.tools"] == "calculator"
    assert {f.group for f in forms.form_fields() if f.key.startswith("agent")} == {"Agent"}
    assert forms.spec_from_values(values, spec).agent == spec.agent
    values["agent.environment_factory"] = "{game: guess_number, calc: tests/agent_code/failing_tools.py:NoReset}"
    mapped = forms.spec_from_values(values, spec)
    assert mapped.agent.environment_factory == {
        "game": "guess_number",
        "calc": "tests/agent_code/failing_tools.py:NoReset",
    }
    assert forms.values_from_spec(mapped)["agent.environment_factory"].startswith("{game: guess_number")
    assert forms.spec_from_values({**values, "agent": False}, spec).agent is None
    smoke = presets.preset_spec("smoke (offline CPU test)")
    on = forms.spec_from_values({**forms.values_from_spec(smoke), "agent": True, "agent.tools": "calculator"}, smoke)
    assert on.agent is not None and on.agent.tools == ["calculator"]


def test_space_refuses_agent_code_outside_examples_and_custom_code_when_disabled() -> None:
    import dataclasses

    from grpo_dashboard.settings import Settings
    from grpo_dashboard.space import access

    space = dataclasses.replace(Settings.from_env(), on_space=True, allow_custom_code=False)
    spec = RunSpec.from_file(REPO / "examples" / "agent_calculator.yaml")
    assert access.spec_policy_errors(spec, settings=space) == []  # built-in tools only
    spec.agent.tools.append(f"{CODE}:calculator")
    messages = [e.message for e in access.spec_policy_errors(spec, settings=space) if e.field == "agent.tools[1]"]
    assert any("disabled on this Space" in m for m in messages)
    assert any(
        "Space's disk" in e.message
        for e in access.spec_policy_errors(spec, settings=dataclasses.replace(space, allow_custom_code=True))
    )


def test_old_transformers_is_refused_for_tools_and_environments(monkeypatch: pytest.MonkeyPatch) -> None:
    from grpo_dashboard.checks import agents

    monkeypatch.setattr(agents, "_version", lambda name: "5.1.0" if name == "transformers" else None)
    spec = RunSpec.from_dict(calc_spec(environment_factory="guess_number"))
    errors: list = []
    agents.check_agent(spec, REPO, None, errors.append, errors.append, run_code=False)
    messages = {e.field: e.message for e in errors}
    assert "agent.tools" not in messages  # 5.1 >= 5.0
    assert "transformers ≥ 5.2.0 (installed 5.1.0)" in messages["agent.environment_factory"]
    monkeypatch.setattr(agents, "_version", lambda name: "4.57.1" if name == "transformers" else None)
    errors.clear()
    agents.check_agent(spec, REPO, None, errors.append, errors.append, run_code=False)
    assert "transformers ≥ 5.0.0" in {e.field: e.message for e in errors}["agent.tools"]
