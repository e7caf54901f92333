"""An export trains the same run: the smoke and math specs trained two steps by the dashboard's job and by TRL's own
`trl grpo --config <export>` (started from another directory, the spec's paths relative) see the same prompts on the
first step, give the same rewards and log the same metric keys.

Each reward call of both runs is recorded through GRPO_REWARD_TRACE (jobs/grpo_rewards.py), which both runs read
from their environment: the job from the spec's backend.env, TRL from the exported recipe's `env`.
"""

from __future__ import annotations

import ast
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from grpo_dashboard.store.db import Store

from .conftest import REPO, store_records

pytestmark = pytest.mark.training

TRL = Path(sys.executable).parent / "trl"
ONE_STEP = {
    "max_steps": 2,
    "per_device_train_batch_size": 8,
    "num_generations": 4,
    "max_completion_length": 8,
    "logging_steps": 1,
    "seed": 0,
    "save_strategy": "no",
}


def _project(tmp_path: Path, example: str, tiny_model: Path) -> Path:
    """The example spec in a project folder of its own, its data beside it under a relative path."""
    spec = yaml.safe_load((REPO / "examples" / f"{example}.yaml").read_text())
    proj = tmp_path / "proj"
    (proj / "data").mkdir(parents=True)
    data = Path(spec["dataset"]["data_files"]).name
    shutil.copy(REPO / "examples" / "data" / data, proj / "data" / data)
    spec["dataset"]["data_files"] = f"data/{data}"
    spec["model"] = {"name_or_path": str(tiny_model), "dtype": "float32"}
    spec["training"].update(ONE_STEP)
    spec["backend"]["env"] = {"GRPO_REWARD_TRACE": str(tmp_path / "job_trace.jsonl")}
    (proj / "spec.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    return proj


def _run(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=900, env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc


def _trace(path: Path) -> dict[str, dict[str, Any]]:
    """The first call of each reward: {name: {"prompts": ..., "scores": ...}}."""
    out: dict[str, dict[str, Any]] = {}
    for line in path.read_text().splitlines():
        rec = json.loads(line)
        out.setdefault(rec["reward"], rec)
    return out


def _logged_keys(stdout: str) -> set[str]:
    """The metric keys of the first step TRL printed (`{'loss': ..., ...}`)."""
    first = re.search(r"\{'loss'.*?\}", stdout)
    assert first, stdout[-2000:]
    return set(ast.literal_eval(first.group(0)))


@pytest.mark.parametrize("example", ["smoke", "math_tiny"])
def test_the_export_trains_the_same_first_step_with_trls_own_script(
    example: str, tiny_model: Path, tmp_path: Path
) -> None:
    proj = _project(tmp_path, example, tiny_model)
    _run([sys.executable, "-m", "grpo_dashboard", "launch", "spec.yaml", "--wait"], cwd=proj)
    (run,) = Store().list_runs()
    job_keys = set(store_records(Store(), run.id)[("train", 1)])
    job = _trace(tmp_path / "job_trace.jsonl")

    export = tmp_path / "export" / "recipe.yaml"
    _run([sys.executable, "-m", "grpo_dashboard", "export-trl", "spec.yaml", "-o", str(export)], cwd=proj)
    text = export.read_text().replace(str(tmp_path / "job_trace.jsonl"), str(tmp_path / "trl_trace.jsonl"))
    export.write_text(text)
    flat = yaml.safe_load(text)
    assert "prompt_column" not in text or example == "math_tiny"  # only in the header comment, for import-trl
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    out = tmp_path / "trl_out"
    proc = _run([str(TRL), "grpo", "--config", str(export), "--output_dir", str(out)], cwd=elsewhere)
    trl = _trace(tmp_path / "trl_trace.jsonl")

    assert (
        sorted(trl)
        == sorted(job)
        == sorted(r["name"] for r in yaml.safe_load((proj / "spec.yaml").read_text())["rewards"])
    )
    for name in job:
        assert trl[name]["prompts"] == job[name]["prompts"], name  # the same rows, mapped the same way
        assert trl[name]["scores"] == job[name]["scores"], name  # the same completions, scored the same
    if example == "math_tiny":  # the system prompt reached TRL's prompts as a system message
        first = job["accuracy"]["prompts"][0]
        assert first[0]["role"] == "system" and first[0]["content"].startswith("Think inside")
        assert flat["datasets"][0]["data_files"].startswith(str(tmp_path / "export"))
    trl_keys = _logged_keys(proc.stdout + proc.stderr)
    assert {k for k in trl_keys if k.startswith("rewards/")} == {k for k in job_keys if k.startswith("rewards/")}
    assert trl_keys - {"epoch", "step_time"} <= job_keys, trl_keys - job_keys


def test_a_spec_chat_template_is_applied_in_the_prepared_prompts(tiny_model: Path, tmp_path: Path) -> None:
    """TRL's grpo script loads the model's own tokenizer: the spec's template reaches it as templated prompt text,
    and TRL's own rewards (which read conversational completions) go through the rewards module then."""
    proj = _project(tmp_path, "math_tiny", tiny_model)
    spec = yaml.safe_load((proj / "spec.yaml").read_text())
    spec["model"]["chat_template"] = "{% for m in messages %}[{{ m['role'] }}] {{ m['content'] }}\n{% endfor %}>>"
    spec["rewards"].append({"name": "accuracy_reward", "builtin": "trl_accuracy"})
    (proj / "spec.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    export = tmp_path / "export" / "recipe.yaml"
    _run([sys.executable, "-m", "grpo_dashboard", "export-trl", "spec.yaml", "-o", str(export)], cwd=proj)
    flat = yaml.safe_load(export.read_text())
    rows = [json.loads(x) for x in Path(flat["datasets"][0]["data_files"]).read_text().splitlines()]
    assert rows[0]["prompt"] == f"[system] {spec['dataset']['system_prompt']}\n[user] {rows[0]['question']}\n>>"
    assert flat["reward_funcs"] == [
        "recipe_rewards.format",
        "recipe_rewards.accuracy",
        "recipe_rewards.accuracy_reward",
    ]
