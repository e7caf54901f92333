"""OpenEnv environments (jobs/grpo_openenv.py) through the real openenv-core client and server: validation names
bad targets, unreachable servers and untyped actions; a running server's URL validates and steps; the OpenEnv
preset trains against the project's own OpenEnv server, which starts and stops with the run; the mixed preset
routes rows to the calculator and the OpenEnv game, with the game's own reward."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from grpo_dashboard.launch.local import process as local_process
from grpo_dashboard.launch.runs import validate
from grpo_dashboard.spec.run_spec import RunSpec
from grpo_dashboard.store.db import Store

from .conftest import write_spec

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "jobs"))


def openenv_spec(model: Path | None = None, target: str | None = None, name: str = "agent_openenv.yaml") -> dict:
    spec = RunSpec.from_file(REPO / "examples" / name).to_dict()
    if model is not None:
        spec["model"]["name_or_path"] = str(model)
    if spec.get("dataset", {}).get("data_files"):
        spec["dataset"]["data_files"] = str(REPO / spec["dataset"]["data_files"])
    if target is not None:
        spec["agent"]["environment_factory"] = target
    return spec


def env_errors(spec: dict) -> str:
    report = validate(RunSpec.from_dict(spec), REPO)
    return " | ".join(f"{e.field}: {e.message}" for e in report.errors if e.field.startswith("agent.environment"))


def test_validation_names_bad_openenv_targets(monkeypatch: pytest.MonkeyPatch) -> None:
    assert env_errors(openenv_spec()) == ""
    form = env_errors(openenv_spec(target="openenv:not a module"))
    assert "agent.environment_factory: after 'openenv:' give a server URL" in form
    closed = env_errors(openenv_spec(target="openenv:http://127.0.0.1:9"))
    assert "the server http://127.0.0.1:9 failed the OpenEnv check" in closed and "/health" in closed
    monkeypatch.setenv("PYTHONPATH", str(REPO / "tests" / "agent_code"))
    untyped = env_errors(openenv_spec(target="openenv:openenv_bad:app"))
    assert "the server the run would start failed the OpenEnv check" in untyped
    assert "action field 'items' has JSON type 'array'" in untyped


def test_a_running_servers_url_validates_and_steps_through_the_real_client() -> None:
    import grpo_openenv

    url = grpo_openenv.start_server("grpo_openenv_guess:app")
    try:
        assert env_errors(openenv_spec(target=f"openenv:{url}")) == ""
        env = grpo_openenv.factory(f"openenv:{url}")()
        assert type(env).__name__ == "OpenEnvGuess"
        assert env.reset(secret=3) == "guess1-8"
        assert [env.guess(5), env.guess(2), env.guess(3)] == ["lower", "higher", "correct"]
        assert env.get_reward() == pytest.approx(0.8)
        from transformers.utils import get_json_schema

        fn = get_json_schema(env.guess)["function"]
        assert fn["name"] == "guess" and fn["parameters"]["properties"]["number"]["type"] == "integer"
    finally:
        grpo_openenv.stop_servers()
    with pytest.raises(OSError):
        grpo_openenv._get(f"{url}/health", timeout=2.0)


@pytest.mark.training
def test_openenv_preset_trains_against_a_server_that_starts_and_stops_with_the_run(
    agent_model: Path, tmp_path: Path
) -> None:
    spec = openenv_spec(agent_model)
    spec["training"]["max_steps"] = 3
    proc = subprocess.run(
        [sys.executable, "-m", "grpo_dashboard", "launch", str(write_spec(tmp_path / "oe.yaml", spec)), "--wait"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=900,
        env=os.environ.copy(),
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    store = Store()
    (run,) = store.list_runs()
    log = (Path(run.run_dir) / "job.log").read_text(encoding="utf-8")
    served = re.search(r"openenv: serving grpo_openenv_guess:app at (\S+) \(pid (\d+)\)", log)
    stopped = re.search(r"openenv: stopped grpo_openenv_guess:app at (\S+) \(pid (\d+)\)", log)
    assert served and stopped and served.groups() == stopped.groups(), log[-2000:]
    assert not local_process.is_alive(int(served.group(2)), None)
    records = [r for r in store.records(run.id) if "tools/call_frequency" in r]
    assert len(records) == 3 and all(r["tools/call_frequency"] > 0 for r in records)
    assert all("rewards/OpenEnvGuess/mean" in r for r in records)


@pytest.mark.training
def test_mixed_preset_routes_rows_to_the_calculator_and_the_openenv_game(agent_model: Path) -> None:
    from grpo_dashboard.launch.runs import launch, wait

    spec = openenv_spec(agent_model, name="agent_openenv_mixed.yaml")
    spec["training"]["max_steps"] = 2
    store = Store()
    run = wait(store, launch(spec, store))
    assert run.status == "completed", run.error
    records = [r for r in store.records(run.id) if "reward" in r]
    keys = set().union(*records)
    assert "rewards/OpenEnvGame/mean" in keys and "rewards/answer/mean" in keys
    assert {"tasks/environment/calc/reward_mean", "tasks/environment/game/reward_mean"} <= keys


@pytest.mark.training
def test_a_run_trains_against_a_server_it_did_not_start_and_leaves_it_running(agent_model: Path) -> None:
    import grpo_openenv

    from grpo_dashboard.launch.runs import launch, wait

    url = grpo_openenv.start_server("grpo_openenv_guess:app")
    try:
        spec = openenv_spec(agent_model, target=f"openenv:{url}")
        spec["training"]["max_steps"] = 2
        store = Store()
        run = wait(store, launch(spec, store))
        assert run.status == "completed", run.error
        log = (Path(run.run_dir) / "job.log").read_text(encoding="utf-8")
        assert "openenv: serving" not in log  # the run connects; the server is not its own
        records = [r for r in store.records(run.id) if "tools/call_frequency" in r]
        assert len(records) == 2 and all("rewards/OpenEnvGuess/mean" in r for r in records)
        assert grpo_openenv._get(f"{url}/health", timeout=5.0)  # still serving after the run
    finally:
        grpo_openenv.stop_servers()
