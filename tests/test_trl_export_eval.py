"""An export carries the spec's eval set: `trl grpo --config <export>` evaluates on the prompts the dashboard's job
evaluates on (issue #26).

The job's eval prompts come from the job's own loading functions (jobs/grpo_job.py load_split, map_prompts); TRL's
from TRL's own parser and the dataset branch of its grpo script, and in the last test from a real `trl grpo` run
whose reward calls are recorded through GRPO_REWARD_TRACE (jobs/grpo_rewards.py).
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from grpo_dashboard.spec.run_spec import RunSpec
from grpo_dashboard.spec.trl_export import export_trl
from grpo_dashboard.spec.trl_prepare import absolute_paths

from .conftest import REPO
from .test_trl_export_equivalence import _run

TRL = Path(sys.executable).parent / "trl"

# What TRL's grpo script does with the parsed config before it builds the trainer (trl/scripts/grpo.py, main: "Load
# the dataset" to GRPOTrainer(train_dataset=..., eval_dataset=...)), printed as JSON.
TRL_DATASETS = r"""
import json, sys
from datasets import load_dataset
from trl import get_dataset
from trl.scripts.grpo import make_parser

script_args, training_args, _, dataset_args = make_parser().parse_args_and_config(
    ["--config", sys.argv[1], "--output_dir", sys.argv[2]], fail_with_unknown_args=False
)
if dataset_args.datasets:
    dataset = get_dataset(dataset_args)
else:
    dataset = load_dataset(
        script_args.dataset_name, name=script_args.dataset_config, streaming=script_args.dataset_streaming
    )
train = dataset[script_args.dataset_train_split]
test = dataset[script_args.dataset_test_split] if training_args.eval_strategy != "no" else None
print(json.dumps({"train": list(train["prompt"]), "test": None if test is None else list(test["prompt"])}))
"""


def _project(tmp_path: Path, example: str, tiny_model: Path, training: dict[str, Any]) -> Path:
    """The example spec in a folder of its own: its data split into a train and an eval file, relative paths."""
    spec = yaml.safe_load((REPO / "examples" / f"{example}.yaml").read_text())
    proj = tmp_path / "proj"
    (proj / "data").mkdir(parents=True)
    rows = (REPO / "examples" / "data" / f"{example}.jsonl").read_text().splitlines()
    (proj / "data" / "train.jsonl").write_text("\n".join(rows[:-4]) + "\n")
    (proj / "data" / "eval.jsonl").write_text("\n".join(rows[-4:]) + "\n")
    spec["dataset"]["data_files"] = "data/train.jsonl"
    spec["dataset"]["eval_data_files"] = "data/eval.jsonl"
    spec["model"] = {"name_or_path": str(tiny_model), "dtype": "float32"}
    spec["training"].update(training)
    (proj / "spec.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    return proj


def _export(proj: Path, tmp_path: Path) -> tuple[Path, subprocess.CompletedProcess[str]]:
    """export-trl of the project's spec (it runs the prepare script: the data is local)."""
    recipe = tmp_path / "export" / "recipe.yaml"
    proc = _run([sys.executable, "-m", "grpo_dashboard", "export-trl", "spec.yaml", "-o", str(recipe)], cwd=proj)
    return recipe, proc


def _job_split(proj: Path, which: str) -> list[str]:
    """The prompts of one split as the dashboard's job loads and maps them, each as JSON (chat prompts are lists)."""
    sys.path.insert(0, str(REPO / "jobs"))
    import grpo_job

    d = dataclasses.asdict(absolute_paths(RunSpec.from_file(proj / "spec.yaml"), proj).dataset)
    split, files = (d["split"], d["data_files"]) if which == "train" else (d["eval_split"], d["eval_data_files"])
    data = grpo_job.map_prompts(grpo_job.load_split(d, split, files), d)
    return [json.dumps(p) for p in data["prompt"]]


@pytest.mark.parametrize("example", ["math_tiny", "smoke"])
def test_trls_script_gets_the_jobs_eval_prompts_as_its_eval_split(
    example: str, tiny_model: Path, tmp_path: Path
) -> None:
    """math_tiny's prompts are mapped (prompt column, system prompt); smoke's are not, but a local eval file has no
    TRL key of its own: both reach TRL as the prepared folder's test split."""
    proj = _project(tmp_path, example, tiny_model, {"eval_strategy": "steps", "eval_steps": 1})
    recipe, proc = _export(proj, tmp_path)
    assert "trains without evaluation" not in proc.stderr
    flat = yaml.safe_load(recipe.read_text())
    assert "datasets" not in flat and Path(flat["dataset_name"]) == tmp_path / "export" / "recipe_data"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    out = _run([sys.executable, "-c", TRL_DATASETS, str(recipe), str(tmp_path / "out")], cwd=elsewhere)
    trl = json.loads(out.stdout.strip().splitlines()[-1])

    assert [json.dumps(p) for p in trl["train"]] == _job_split(proj, "train")
    assert trl["test"] is not None, "TRL's script passes no eval_dataset"
    assert [json.dumps(p) for p in trl["test"]] == _job_split(proj, "eval")
    assert len(trl["test"]) == 4
    if example == "math_tiny":
        assert trl["test"][0][0]["role"] == "system"  # mapped as the job maps it, not the raw question column

    # import-trl gives the spec's own dataset back, not the prepared folder
    back = tmp_path / "back.yaml"
    _run([sys.executable, "-m", "grpo_dashboard", "import-trl", str(recipe), "-o", str(back)], cwd=proj)
    dataset = yaml.safe_load(back.read_text())["dataset"]
    assert Path(dataset["eval_data_files"]) == proj / "data" / "eval.jsonl"
    assert Path(dataset["data_files"]) == proj / "data" / "train.jsonl"


def test_a_spec_without_an_eval_set_keeps_the_one_split_export(tiny_model: Path, tmp_path: Path) -> None:
    proj = _project(tmp_path, "math_tiny", tiny_model, {})
    spec = yaml.safe_load((proj / "spec.yaml").read_text())
    del spec["dataset"]["eval_data_files"]
    (proj / "spec.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    recipe, _ = _export(proj, tmp_path)
    flat = yaml.safe_load(recipe.read_text())
    assert "dataset_name" not in flat and "dataset_test_split" not in flat
    train = tmp_path / "export" / "recipe_data" / "train.jsonl"
    assert flat["datasets"] == [{"path": "json", "data_files": str(train)}]
    assert not (tmp_path / "export" / "recipe_data" / "test.jsonl").exists()


@pytest.mark.parametrize(
    ("dataset", "keys"),
    [
        # the job maps a Hub dataset's prompts: the prepare script writes both splits
        (
            {"path": "org/data", "eval_split": "test", "prompt_column": "q"},
            {"dataset_train_split": "train", "dataset_test_split": "test"},
        ),
        # a mixture's test_split_size split, mapped: prepared as the job's get_dataset splits it
        (
            {"mixture": [{"path": "org/a"}, {"path": "org/b"}], "test_split_size": 0.25, "system_prompt": "Be brief."},
            {"dataset_train_split": "train", "dataset_test_split": "test"},
        ),
        # a Hub train split with a local eval file: no TRL key names the file, so it is prepared
        ({"path": "org/data", "eval_data_files": "/abs/eval.jsonl"}, {"dataset_test_split": "test"}),
        # what TRL's keys carry as they are: no prepared data
        (
            {"path": "org/data", "eval_split": "validation"},
            {"dataset_name": "org/data", "dataset_test_split": "validation"},
        ),
        (
            {"mixture": [{"path": "org/a"}, {"path": "org/b"}], "test_split_size": 0.25},
            {"datasets": [{"path": "org/a"}, {"path": "org/b"}], "test_split_size": 0.25},
        ),
    ],
)
def test_every_eval_set_reaches_a_trl_key(dataset: dict[str, Any], keys: dict[str, Any], tmp_path: Path) -> None:
    spec = RunSpec.from_dict({"name": "e", "model": {"name_or_path": "org/model"}, "dataset": dataset})
    export = export_trl(spec, tmp_path / "recipe.yaml")
    flat = yaml.safe_load(export.yaml_text)
    assert {k: flat.get(k) for k in keys} == keys
    prepared = "datasets" not in keys and "dataset_name" not in keys
    assert (flat.get("dataset_name") == str(tmp_path / "recipe_data")) == prepared
    assert (export.prepare_script is not None) == prepared
    assert not export.notes


@pytest.mark.training
def test_trl_grpo_on_the_export_evaluates_on_the_jobs_eval_prompts(tiny_model: Path, tmp_path: Path) -> None:
    """One training step and one evaluation by `trl grpo --config <export>`: the eval reward calls score exactly
    the job's eval prompts, each num_generations times."""
    one_step = {
        "max_steps": 1,
        "per_device_train_batch_size": 8,
        "per_device_eval_batch_size": 8,
        "num_generations": 4,
        "max_completion_length": 8,
        "logging_steps": 1,
        "seed": 0,
        "save_strategy": "no",
        "eval_strategy": "steps",
        "eval_steps": 1,
    }
    proj = _project(tmp_path, "math_tiny", tiny_model, one_step)
    trace = tmp_path / "trl_trace.jsonl"
    spec = yaml.safe_load((proj / "spec.yaml").read_text())
    spec["backend"]["env"] = {"GRPO_REWARD_TRACE": str(trace)}
    (proj / "spec.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    recipe, _ = _export(proj, tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    proc = _run([str(TRL), "grpo", "--config", str(recipe), "--output_dir", str(tmp_path / "out")], cwd=elsewhere)
    assert "'eval_loss'" in proc.stdout + proc.stderr

    calls = [json.loads(line) for line in trace.read_text().splitlines() if json.loads(line)["reward"] == "accuracy"]
    train, evals = calls[0], calls[1:]  # the one training step scores first, then the evaluation
    assert {json.dumps(p) for p in train["prompts"]} <= set(_job_split(proj, "train"))
    evaluated = [json.dumps(p) for call in evals for p in call["prompts"]]
    job_eval = _job_split(proj, "eval")
    assert sorted(evaluated) == sorted(job_eval * 4)
