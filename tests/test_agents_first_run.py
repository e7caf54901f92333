"""A first agent run as a new user starts it: `launch --wait` of an agent preset with nothing cached reports the
agent model's preparation, caches it, trains with tool calls; the warm-up's builder reports its steps; SIGTERM to
`launch --wait` cancels the run as Ctrl-C does."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from grpo_dashboard.launch.local import process as local_process
from grpo_dashboard.spec.run_spec import RunSpec
from grpo_dashboard.store.db import Store

from .conftest import REPO, smoke_dict, write_spec

pytestmark = pytest.mark.training
sys.path.insert(0, str(REPO / "jobs"))


def _cli(*args: str, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "grpo_dashboard", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=os.environ.copy(),
    )


def test_first_agent_launch_with_an_empty_cache_reports_the_model_and_calls_tools(tmp_path: Path) -> None:
    import grpo_agent_model

    spec = RunSpec.from_file(REPO / "examples" / "agent_calculator.yaml").to_dict()
    cache = tmp_path / "cache" / f"tiny-agent-warm-v{grpo_agent_model.AGENT_VERSION}"
    spec["model"]["name_or_path"] = str(cache)
    spec["dataset"]["data_files"] = str(REPO / spec["dataset"]["data_files"])
    spec["training"]["max_steps"] = 4
    proc = _cli("launch", str(write_spec(tmp_path / "agent.yaml", spec)), "--wait")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "running: building the agent model" in proc.stdout, proc.stdout
    assert (cache / "config.json").is_file()  # cached for every later run
    store = Store()
    (run,) = store.list_runs()
    preparing = [e for e in store.events(run.id) if e["event"] == "preparing"]
    assert preparing and preparing[-1]["message"].startswith("building the agent model: done")
    assert "building the agent model" in (Path(run.run_dir) / "job.log").read_text(encoding="utf-8")
    calls = [r["tools/call_frequency"] for r in store.records(run.id) if "tools/call_frequency" in r]
    assert len(calls) == 4 and sum(c > 0 for c in calls) >= 2, calls
    # A later run finds it cached: no preparation at all
    proc = _cli("launch", str(write_spec(tmp_path / "again.yaml", {**spec, "name": "again"})), "--wait")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "building the agent model" not in proc.stdout


def test_the_warm_up_builder_reports_its_steps(tmp_path: Path) -> None:
    """Without the prebuilt copy (or with other settings) the model is trained, and says how far it got."""
    import grpo_agent_model
    import grpo_job

    seen: list[tuple[str, int | None, int | None]] = []
    path = grpo_agent_model.build_warm_model(
        tmp_path / "warm",
        grpo_job.build_tiny_model,
        grpo_job.save_atomically,
        steps=100,
        batch=4,
        progress=lambda m, d, t: seen.append((m, d, t)),
    )
    assert (path / "config.json").is_file()
    steps = [d for m, d, t in seen if m.startswith("building the agent model: step")]
    assert steps == list(range(2, 101, 2)) and all(t == 100 for _, _, t in seen)
    assert "building the agent model: step 40/100" in seen[20][0]


def test_the_prebuilt_model_has_the_builders_templates_and_calls_tools() -> None:
    """The shipped copy (built by `build_warm_model` with its defaults) carries the builder's chat and response
    templates, and it emits a well-formed calculator call for a calculator problem."""
    import grpo_agent_model
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    packaged = grpo_agent_model.PACKAGED
    tok = AutoTokenizer.from_pretrained(packaged)
    assert tok.chat_template == grpo_agent_model.AGENT_CHAT_TEMPLATE
    assert tok.response_template == grpo_agent_model.AGENT_RESPONSE_TEMPLATE
    model = AutoModelForCausalLM.from_pretrained(packaged, dtype=torch.float32)
    from grpo_agents import calculator

    prompt = tok.apply_chat_template(
        [{"role": "user", "content": "12+7"}], tools=[calculator], add_generation_prompt=True, return_tensors="pt"
    )
    ids = prompt["input_ids"] if hasattr(prompt, "keys") else prompt
    out = model.generate(ids, max_new_tokens=40, do_sample=False)
    assert "<call>calculator(expression=12+7)</call>" in tok.decode(out[0][ids.shape[1] :])


def test_sigterm_to_launch_wait_cancels_the_run(tiny_model: Path, tmp_path: Path) -> None:
    spec_file = write_spec(tmp_path / "long.yaml", smoke_dict(tiny_model, max_steps=100000))
    proc = subprocess.Popen(
        [sys.executable, "-m", "grpo_dashboard", "launch", str(spec_file), "--wait"],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=os.environ.copy(),
    )
    store = Store()
    deadline = time.time() + 300
    while time.time() < deadline:
        runs = store.list_runs()
        if runs and (runs[0].last_step or 0) >= 2:
            break
        time.sleep(0.5)
    (run,) = store.list_runs()
    assert (run.last_step or 0) >= 2
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 4, out + err  # EXIT_CANCELED, as after Ctrl-C
    assert "canceling the run" in err
    run = store.get_run(run.id)
    assert run.status == "canceled"
    assert run.pid is not None and not local_process.is_alive(run.pid, run.pid_start)
    assert yaml.safe_load(run.spec_yaml)["training"]["max_steps"] == 100000
