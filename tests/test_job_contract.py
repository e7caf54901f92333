"""One contract between the dashboard and the job: run.yaml carries every value the job reads, and what both sides
need (the stdout marker, the local file types, the prompt mapping, the health-in-job rule) is defined once."""

from __future__ import annotations

import ast
import dataclasses
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from grpo_dashboard.checks import dataset_files
from grpo_dashboard.checks.dataset_inspect import render_prompt
from grpo_dashboard.launch.hf_jobs.payload import script_dependencies
from grpo_dashboard.launch.local import runner as local_runner
from grpo_dashboard.launch.logs import last_error_line
from grpo_dashboard.launch.runs import launch
from grpo_dashboard.spec.jobfiles import JOB_SCRIPT, job_module
from grpo_dashboard.spec.run_spec import DatasetSpec, HealthSpec, RunSpec
from grpo_dashboard.store import ingest
from grpo_dashboard.store.db import Store

from .conftest import REPO, SMOKE_SPEC
from .fake_hub import Plan
from .hf_jobs_helpers import TOKEN, follow_until_done, hf_spec, protocol_lines

JOB = job_module()
SOURCES = sorted([*(REPO / "grpo_dashboard").rglob("*.py"), *(REPO / "jobs").glob("*.py")])


# ---- the prompt the preview shows is the prompt the job trains on -------------------------------------------------

QUESTIONS = [{"question": "What is 2 + 2?", "level": 1}, {"question": "Name a colour.", "level": 3}]
MESSAGES = [
    {"messages": [{"role": "system", "content": "Own system."}, {"role": "user", "content": "a?"}]},
    {"messages": [{"role": "user", "content": "b?"}]},
]
PROMPTS = [{"prompt": "Say hi."}, {"prompt": "Say bye."}]

CASES = {
    "prompt column as is": (PROMPTS, DatasetSpec()),
    "plain column": (QUESTIONS, DatasetSpec(prompt_column="question")),
    "template": (QUESTIONS, DatasetSpec(prompt_template="Solve: {question} (level {level})")),
    "system prompt": (QUESTIONS, DatasetSpec(prompt_column="question", system_prompt="Think step by step.")),
    "conversational": (QUESTIONS, DatasetSpec(prompt_column="question", conversational=True)),
    "template, system and conversational": (
        QUESTIONS,
        DatasetSpec(prompt_template="Q: {question}", system_prompt="Be brief.", conversational=True),
    ),
    "message lists": (MESSAGES[1:], DatasetSpec(prompt_column="messages")),
    "message lists, one with its own system message": (
        MESSAGES,
        DatasetSpec(prompt_column="messages", system_prompt="Be brief."),
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_the_dataset_preview_renders_what_the_job_maps(case: str) -> None:
    from datasets import Dataset

    rows, mapping = CASES[case]
    preview = [render_prompt(row, mapping) for row in rows]
    section = RunSpec(dataset=mapping).to_job_dict()["dataset"]  # the dataset section run.yaml gives the job
    mapped = JOB.map_prompts(Dataset.from_list(rows), section)
    assert list(mapped["prompt"]) == preview
    assert all(isinstance(p, list) for p in preview) == (
        case not in ("prompt column as is", "plain column", "template")
    )


# ---- one definition of each shared constant --------------------------------------------------------------------


def _parsed(path: Path) -> ast.AST:
    return ast.parse(path.read_text(encoding="utf-8"))


def _rel(path: Path) -> str:
    return path.relative_to(REPO).as_posix()


def test_the_marker_file_types_and_health_rule_have_one_definition(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    marker = JOB.MARKER.strip()
    holders = [
        _rel(p)
        for p in SOURCES
        for node in ast.walk(_parsed(p))
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.strip() == marker
    ]
    assert holders == ["jobs/grpo_job.py"]
    assert ingest.MARKER is JOB.MARKER
    log = tmp_path / "job.log"
    log.write_text(f"ValueError: boom\n{JOB.MARKER}{json.dumps({'type': 'event', 'event': 'failed'})}\n")
    assert last_error_line(log) == "ValueError: boom"

    maps = [
        _rel(p)
        for p in SOURCES
        for node in ast.walk(_parsed(p))
        if isinstance(node, ast.Dict)
        and any(isinstance(k, ast.Constant) and k.value in ("parquet", ".parquet") for k in node.keys)
    ]
    assert maps == ["jobs/grpo_job.py"]
    assert dataset_files.SUPPORTED is JOB.DATA_FILE_TYPES

    # The job applies the rule before it can load the shipped health package, so the rule is the job's; the health
    # package (which may import nothing outside itself) keeps the one other spelling, and the two must agree.
    def names(node: ast.AST) -> set[str]:
        return {n.value for n in ast.walk(node) if isinstance(n, ast.Constant) and isinstance(n.value, str)} | {
            n.attr for n in ast.walk(node) if isinstance(n, ast.Attribute)
        }

    rules = [
        _rel(p)
        for p in SOURCES
        for node in ast.walk(_parsed(p))
        if isinstance(node, ast.BoolOp)
        and isinstance(node.op, ast.Or)
        and {"guard", "alerts", "webhook_url"} <= names(node)
    ]
    assert sorted(rules) == ["jobs/grpo_job.py"]  # the one definition: HealthSpec.in_job asks it
    for guard in (False, True):
        for alerts in (False, True):
            for url in (None, "$HOOK"):
                settings = {"thresholds": {"x": 1}, "guard": guard, "alerts": alerts, "webhook_url": url}
                expected = guard or alerts or url is not None
                assert JOB.wants_job_health(settings) is expected
                assert HealthSpec(**settings).in_job is expected
    assert not JOB.wants_job_health(None)
    asked: list[Any] = []
    monkeypatch.setattr(JOB, "wants_job_health", lambda h: asked.append(h) or False)
    assert HealthSpec(guard=True).in_job is False and asked[-1]["guard"] is True
    assert JOB.load_health_package({"health": {"guard": True}}, tmp_path) is None and len(asked) == 2


# ---- run.yaml carries every value the job reads ------------------------------------------------------------------


def _keys_the_job_reads() -> set[tuple[str, str]]:
    """(section, key) of every `need(section, "key", "where")` in the job script; rewards[i] counts as "rewards"."""
    tree = _parsed(JOB_SCRIPT)
    named = {
        t.id: n.value
        for n in ast.walk(tree)
        if isinstance(n, ast.Assign)
        for t in n.targets
        if isinstance(t, ast.Name)
    }  # e.g. where = f"rewards[{i}]."
    out: set[tuple[str, str]] = set()
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "need"):
            continue
        key = node.args[1]
        assert isinstance(key, ast.Constant), f"the job reads a computed key: {ast.unparse(node)}"
        where = node.args[2] if len(node.args) > 2 else ast.Constant("")
        where = named.get(where.id, where) if isinstance(where, ast.Name) else where
        text = where.value if isinstance(where, ast.Constant) else where.values[0].value  # f"rewards[{i}]."
        out.add((re.sub(r"[.\[].*$", "", str(text)), key.value))
    return out


def _assert_complete(run_yaml: dict[str, Any], reads: set[tuple[str, str]]) -> None:
    for section, key in sorted(reads):
        holders = {"": [run_yaml], "rewards": run_yaml["rewards"]}.get(section, [run_yaml.get(section)])
        assert holders, section
        for holder in holders:
            assert isinstance(holder, dict) and key in holder, f"run.yaml lacks {section}.{key}"
    assert set(run_yaml["health"]) == {f.name for f in dataclasses.fields(HealthSpec)}  # what JobHealth reads


def test_run_yaml_written_at_launch_carries_every_key_the_job_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    def not_started(*args: Any, **kwargs: Any) -> Any:
        raise OSError("this test launches nothing")

    monkeypatch.setattr(local_runner, "start", not_started)
    run = launch(SMOKE_SPEC, Store(), base_dir=REPO)
    assert run.status == "failed" and "launches nothing" in (run.error or "")
    path = Path(run.run_dir) / "run.yaml"
    run_yaml = yaml.safe_load(path.read_text(encoding="utf-8"))

    sections = {"spec", "model_spec", "ds_spec", "r", "health_settings", "lora", "training"}
    defaults = [
        ast.unparse(n)
        for n in ast.walk(_parsed(JOB_SCRIPT))
        if isinstance(n, ast.Call)
        and isinstance(n.func, ast.Attribute)
        and n.func.attr in ("get", "setdefault")
        and isinstance(n.func.value, ast.Name)
        and n.func.value.id in sections
    ]
    assert defaults == ["training.setdefault('report_to', 'none')"], defaults  # the job's one choice of its own
    reads = _keys_the_job_reads()
    assert {
        ("", "save_model"),
        ("", "health"),
        ("dataset", "split"),
        ("dataset", "prompt_column"),
        ("rewards", "weight"),
        ("model", "lora"),
        ("health", "guard"),
    } <= reads
    _assert_complete(run_yaml, reads)
    smoke = yaml.safe_load(SMOKE_SPEC.read_text(encoding="utf-8"))
    assert run_yaml["training"] == smoke["training"]  # TRL's own defaults are not written
    assert run_yaml["output_dir"] == str(Path(run.run_dir) / "output")
    assert RunSpec.from_file(path).to_job_dict() == run_yaml  # a run is reproducible from its run.yaml
    assert JOB.load_health_package(run_yaml, path.parent) is None
    assert JOB.prompt_renderer(run_yaml["dataset"])({"prompt": "x"}) == "x"


def test_the_hf_jobs_run_yaml_carries_every_key_the_job_reads(hub: Any, tmp_path: Path) -> None:
    hub.plans.append(Plan(lines=protocol_lines(2)))
    store = Store()
    run = launch(hf_spec(tmp_path), store, base_dir=REPO, token=TOKEN)
    run_yaml = yaml.safe_load(hub.bucket_file("alice/jobs-artifacts", f"{run.id}/run.yaml"))
    _assert_complete(run_yaml, _keys_the_job_reads())
    assert run_yaml["output_dir"] == "/data/output" and run_yaml["dataset"]["data_files"] == "/data/data/smoke.jsonl"
    assert follow_until_done(store, run.id).status == "completed"


def test_a_run_yaml_without_the_resolved_values_is_refused_naming_the_key(tmp_path: Path) -> None:
    old = tmp_path / "run.yaml"
    old.write_text(RunSpec.from_file(SMOKE_SPEC).to_yaml(), encoding="utf-8")  # defaults left out, as before
    proc = subprocess.run(
        [sys.executable, str(JOB_SCRIPT), "--config", str(old)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert proc.returncode == 1, proc.stderr[-2000:]
    failed = json.loads((tmp_path / "metrics.jsonl").read_text().splitlines()[-1])
    assert failed["event"] == "failed" and failed["error_type"] == "RunYamlError"
    assert failed["message"].startswith("run.yaml has no health: it was written by an older dashboard")
    assert "relaunch" in failed["message"].lower()
    with pytest.raises(JOB.RunYamlError, match=r"run.yaml has no rewards\[2\]\.weight"):
        JOB.need({"name": "r"}, "weight", "rewards[2].")


def test_the_job_header_pins_python_and_ships_jsonschema() -> None:
    header = JOB_SCRIPT.read_text(encoding="utf-8").split("# ///", 2)[1]
    assert '# requires-python = ">=3.11"' in header
    assert "jsonschema>=4,<5" in script_dependencies()
