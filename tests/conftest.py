"""Shared fixtures: an isolated data directory per test, offline Hub, and the tiny model built once per session."""

from __future__ import annotations

import copy
import os
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["HF_HUB_DISABLE_TELEMETRY"] = "1"
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

REPO = Path(__file__).resolve().parent.parent
SMOKE_SPEC = REPO / "examples" / "smoke.yaml"
SMOKE_DATA = REPO / "examples" / "data" / "smoke.jsonl"


@pytest.fixture(autouse=True)
def data_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every test gets its own GRPO_DASHBOARD_DATA_DIR."""
    d = tmp_path / "data"
    monkeypatch.setenv("GRPO_DASHBOARD_DATA_DIR", str(d))
    return d


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny random Qwen2 + char tokenizer, built once by the job script's own builder."""
    sys.path.insert(0, str(REPO / "jobs"))
    import grpo_job

    return grpo_job.build_tiny_model(tmp_path_factory.mktemp("models") / "tiny-qwen2-char")


def smoke_dict(model: Path, **training: Any) -> dict[str, Any]:
    """The smoke spec as a dict, pointed at a built tiny model and absolute data paths, with training overrides."""
    spec = yaml.safe_load(SMOKE_SPEC.read_text())
    spec = copy.deepcopy(spec)
    spec["model"]["name_or_path"] = str(model)
    spec["dataset"]["data_files"] = str(SMOKE_DATA)
    spec["training"].update(training)
    return spec


def write_spec(path: Path, spec: dict[str, Any]) -> Path:
    """Write a spec dict as YAML."""
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def wait_for(predicate: Any, timeout: float = 120.0, interval: float = 0.2) -> Any:
    """Poll until predicate() is truthy; fail with a clear message on timeout."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"condition not met within {timeout} s")


def jsonl_records(path: Path) -> dict[tuple[str, int], dict[str, Any]]:
    """What metrics.jsonl holds, as {(split, step): {key: value}} (first value wins for a repeated key)."""
    import json

    out: dict[tuple[str, int], dict[str, Any]] = {}
    for line in path.read_text().splitlines():
        rec = json.loads(line)
        if rec["type"] != "log":
            continue
        slot = out.setdefault((rec["split"], rec["step"]), {})
        for k, v in rec["metrics"].items():
            slot.setdefault(k, v)
    return out


def store_records(store: Any, run_id: str) -> dict[tuple[str, int], dict[str, Any]]:
    """The same view of what the store holds for a run."""
    out: dict[tuple[str, int], dict[str, Any]] = {}
    for split, key in store.metric_keys(run_id):
        for step, value, _ in store.series(run_id, key, split=split):
            out.setdefault((split, step), {})[key] = value
    return out


def same_values(a: dict[tuple[str, int], dict[str, Any]], b: dict[tuple[str, int], dict[str, Any]]) -> bool:
    """Equality that treats NaN as equal to NaN."""
    import math

    if a.keys() != b.keys():
        return False
    for k in a:
        if a[k].keys() != b[k].keys():
            return False
        for m, x in a[k].items():
            y = b[k][m]
            if isinstance(x, float) and isinstance(y, float) and math.isnan(x) and math.isnan(y):
                continue
            if x != y:
                return False
    return True


def reward_quarters(store: Any, run_id: str) -> tuple[float, float]:
    """Mean reward over the first and the last quarter of logged train steps."""
    rewards = [v for _, v, _ in store.series(run_id, "reward") if v is not None]
    q = max(1, len(rewards) // 4)
    return sum(rewards[:q]) / q, sum(rewards[-q:]) / q
