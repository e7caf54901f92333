"""An export runs where the dashboard is not: its rewards module and prepare script import the job's modules from a
copy written beside the recipe, and a vLLM server-mode spec exports with the `trl vllm-serve` command and the GPU
split the backends would use, so `trl grpo` has a server to talk to."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

from grpo_dashboard.spec.run_spec import RunSpec
from grpo_dashboard.spec.trl_export import export_trl
from grpo_dashboard.spec.trl_import import import_trl
from grpo_dashboard.spec.trl_parse import read_config

from .conftest import REPO


def test_an_export_imports_the_job_modules_copied_beside_it(tiny_model: Path, tmp_path: Path) -> None:
    proj = tmp_path / "proj"
    (proj / "data").mkdir(parents=True)
    shutil.copy(REPO / "examples" / "data" / "math_tiny.jsonl", proj / "data" / "math_tiny.jsonl")
    spec = yaml.safe_load((REPO / "examples" / "math_tiny.yaml").read_text())
    spec["dataset"]["data_files"] = "data/math_tiny.jsonl"
    spec["model"] = {"name_or_path": str(tiny_model), "dtype": "float32"}
    (proj / "spec.yaml").write_text(yaml.safe_dump(spec))
    export = tmp_path / "export" / "recipe.yaml"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    cli = [sys.executable, "-m", "grpo_dashboard", "export-trl", "spec.yaml", "-o", str(export)]
    proc = subprocess.run(cli, cwd=proj, capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr
    copy = export.parent / "recipe_job"
    assert sorted(p.name for p in copy.glob("*.py")) == sorted(p.name for p in (REPO / "jobs").glob("*.py"))
    assert "and ran it" in proc.stderr  # the prepare script ran from the copy too
    flat, _ = read_config(export)
    rows = [json.loads(x) for x in Path(flat["datasets"][0]["data_files"]).read_text().splitlines()]
    assert rows and rows[0]["prompt"][0]["role"] == "system"

    # In a process that knows nothing of this checkout (no PYTHONPATH, another directory), as TRL's script would.
    probe = (
        "import json, sys; sys.path.insert(0, sys.argv[1]); import recipe_rewards, grpo_rewards; "
        "c = [[{'role': 'assistant', 'content': '<think>x</think><answer>7</answer>'}]]; "
        "print(json.dumps([grpo_rewards.__file__, recipe_rewards.accuracy(prompts=[''], completions=c, "
        "solution=['7']), recipe_rewards.format(prompts=[''], completions=c)]))"
    )
    clean = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    out = subprocess.run(
        [sys.executable, "-c", probe, str(export.parent)], cwd=elsewhere, capture_output=True, text=True, env=clean
    )
    assert out.returncode == 0, out.stderr
    module, accuracy, fmt = json.loads(out.stdout)
    assert Path(module).parent == copy
    assert accuracy == [1.0] and fmt[0] > 0


def _served(generation: dict, backend: dict) -> RunSpec:
    return RunSpec.from_dict(
        {
            "name": "srv",
            "model": {"name_or_path": "Qwen/Qwen2.5-0.5B-Instruct", "dtype": "bfloat16"},
            "dataset": {"path": "trl-lib/gsm8k"},
            "rewards": [{"name": "format", "builtin": "think_format"}],
            "training": {"num_generations": 4, "per_device_train_batch_size": 4},
            "generation": generation,
            "backend": backend,
        }
    )


def test_a_server_mode_export_starts_the_server_on_its_gpus_and_trains_on_the_others(tmp_path: Path) -> None:
    spec = _served({"server_gpus": [2], "port": 8001}, {"kind": "local", "num_processes": 2})
    out = tmp_path / "recipe.yaml"
    export = export_trl(spec, out)
    out.write_text(export.yaml_text)
    (tmp_path / f"{export.rewards_module_name}.py").write_text(export.rewards_module or "")
    flat, _ = read_config(out)
    assert (flat["use_vllm"], flat["vllm_mode"], flat["vllm_server_port"]) == (True, "server", 8001)
    commands = export.commands
    assert list(commands) == ["vllm", "trl", "accelerate"]  # printed in the order they are run
    assert commands["vllm"].startswith("CUDA_VISIBLE_DEVICES=2 trl vllm-serve --model Qwen/Qwen2.5-0.5B-Instruct ")
    assert "--port 8001" in commands["vllm"] and "--dtype bfloat16" in commands["vllm"]
    assert commands["vllm"].endswith(" &")
    assert commands["trl"].startswith("CUDA_VISIBLE_DEVICES=0,1 trl grpo --config ")
    assert (
        commands["accelerate"].startswith("CUDA_VISIBLE_DEVICES=0,1 ")
        and "--num_processes 2" in commands["accelerate"]
    )
    # What the export added for the server does not come back into the spec's own training settings.
    assert import_trl(out).spec == spec


def test_a_slurm_server_mode_export_says_where_the_server_runs() -> None:
    spec = _served({"server_nodes": 1}, {"kind": "slurm", "nodes": 2, "gpus_per_node": 8, "num_processes": 8})
    export = export_trl(spec, Path("recipe.yaml"))
    assert "trl vllm-serve" in export.commands["vllm"] and "on the server node" in export.commands["vllm"]
    assert "--data_parallel_size 8" in export.commands["vllm"]
    assert not export.commands["trl"].startswith("CUDA_VISIBLE_DEVICES")
    flat = yaml.safe_load(export.yaml_text)
    assert "vllm_server_port" not in flat and flat["vllm_mode"] == "server"  # the default port
