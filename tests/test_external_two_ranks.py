"""A user's own TRL script with `DashboardCallback`, run as a real 2-rank job: two torchrun "nodes" on this host
(`--nnodes 2 --nproc_per_node 1`, gloo on CPU; `accelerate launch --cpu --num_processes 2` starts one process here),
sharing the dashboard's data directory as two nodes share a filesystem. Only rank 0 records: one run directory,
complete, that the dashboard follows to the end; rank 1 writes nothing, yet takes the guard's decision from rank 0.
Over HTTP, the same: rank 0 alone spools and sends, and the dashboard holds one complete run."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from grpo_dashboard.store import external
from grpo_dashboard.store.db import Store
from grpo_dashboard.ui import build_app

from .conftest import REPO, free_port, free_port_app, jsonl_records, same_values, store_records

pytestmark = pytest.mark.training

SCRIPT = REPO / "tests" / "plain_trl_script.py"
RANKS = 2
TIMEOUT_S = 540
GRACE_S = 60


def start_rank(rank: int, port: int, model: Path, tmp: Path, data: Path | str, *args: str) -> subprocess.Popen:
    """One torchrun node of the plain TRL script (its own working directory, the shared output dir, the dashboard's
    data dir or URL); its output goes to `tmp/rank<R>.log`."""
    work = tmp / f"rank{rank}"
    work.mkdir(parents=True, exist_ok=True)
    command = [
        sys.executable, "-m", "torch.distributed.run",
        "--nnodes", str(RANKS), "--node_rank", str(rank), "--nproc_per_node", "1",
        "--master_addr", "127.0.0.1", "--master_port", str(port),
        str(SCRIPT), str(model), str(tmp / "out"), "--dashboard", str(data),
        "--log-history", str(tmp / f"history{rank}.json"), *args,
    ]  # fmt: skip
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "HF_HUB_DISABLE_TELEMETRY": "1",
        "PYTHONPATH": str(REPO),
        "GRPO_DASHBOARD_SPOOL": str(tmp / "spool"),  # where an HTTP transport would spool: it must stay absent
        "OMP_NUM_THREADS": "1",  # two ranks share this machine's cores
    }
    with open(tmp / f"rank{rank}.log", "w", encoding="utf-8") as log:
        return subprocess.Popen(
            command, cwd=work, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )


def run_two_ranks(model: Path, tmp: Path, data: Path | str, *args: str) -> None:
    """Both ranks to their end. Fails, after stopping both, when one fails (the other gets `GRACE_S` to end on its
    own) or they are not done within `TIMEOUT_S`."""
    port = free_port()
    procs = [start_rank(r, port, model, tmp, data, *args) for r in range(RANKS)]
    deadline = time.monotonic() + TIMEOUT_S
    try:
        while any(p.poll() is None for p in procs) and time.monotonic() < deadline:
            if any(p.returncode not in (None, 0) for p in procs):
                deadline = min(deadline, time.monotonic() + GRACE_S)
            time.sleep(0.5)
    finally:
        for proc in procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)  # the rank's torchrun agent and its worker (own session)
                proc.wait(timeout=30)
    for rank, proc in enumerate(procs):
        tail = (tmp / f"rank{rank}.log").read_text(encoding="utf-8", errors="replace")[-4000:]
        why = " (stopped by the test)" if proc.returncode == -signal.SIGKILL else ""
        assert proc.returncode == 0, f"rank {rank} exited {proc.returncode}{why}: {tail}"


def files_under(path: Path) -> set[str]:
    """Every file under `path`, relative to it."""
    return {str(p.relative_to(path)) for p in path.rglob("*") if p.is_file()} if path.exists() else set()


def the_one_run_dir(tmp: Path, data: Path) -> Path:
    """The only run directory under the data directory; everything the callback wrote is in it, rank 1 wrote
    nothing (not in its working directory, not in a spool)."""
    run_dirs = list((data / "runs").iterdir())
    assert len(run_dirs) == 1, [p.name for p in run_dirs]
    (run_dir,) = run_dirs
    assert files_under(data) == {f"runs/{run_dir.name}/{f}" for f in files_under(run_dir)}
    assert {"run.yaml", "metrics.jsonl", "samples.jsonl", external.MARKER_FILE} <= files_under(run_dir)
    assert files_under(tmp / "rank1") == set() and not (tmp / "spool").exists()
    return run_dir


def records(run_dir: Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The run's train logs with a reward (one per optimizer step) and its events, in order."""
    lines = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    logs = [r for r in lines if r["type"] == "log" and r["split"] == "train" and "reward" in r["metrics"]]
    return logs, [r for r in lines if r["type"] == "event"]


def rank_histories(tmp: Path) -> list[list[dict[str, Any]]]:
    """Each rank's own trainer log history (reward records only)."""
    return [[r for r in json.loads((tmp / f"history{k}.json").read_text()) if "reward" in r] for k in range(RANKS)]


def followed_to_the_end(run_dir: Path) -> Any:
    """The run as the dashboard sees it once it has discovered and ingested the directory."""
    store = Store()
    (run,) = external.discover(store)
    assert run.id == run_dir.name and run.backend == external.EXTERNAL
    return store, external.refresh(store, run)


# An error at once on the tiny model's first step (its 8-token completions are mostly cut): clipped_ratio at or above
# 0.2 counts as every completion cut, and one log of it is enough.
STOP_AT_ONCE = {"guard": True, "guard_persist": 1, "thresholds": {"truncation.extreme": 0.2, "truncation.persist": 1}}


def test_guard_stop_decided_on_rank_0_stops_both_ranks_at_the_same_step(
    tiny_model: Path, tmp_path: Path, data_dir: Path
) -> None:
    run_two_ranks(tiny_model, tmp_path, data_dir, "--steps", "4", "--health", json.dumps(STOP_AT_ONCE))
    run_dir = the_one_run_dir(tmp_path, data_dir)
    logs, events = records(run_dir)
    by_name = {e["event"]: e for e in events}
    assert [e["event"] for e in events][:2] == ["starting", "started"] and by_name["started"]["world_size"] == RANKS
    marker = external.read_marker(run_dir)
    assert marker is not None and marker["transport"] == "directory" and marker["pid"] == events[0]["pid"]
    stop = by_name["guard_stop"]
    assert stop["rule"] == "truncation" and stop["severity"] == "error"
    assert stop["step"] < 4 and [r["step"] for r in logs] == list(range(1, stop["step"] + 1))
    assert by_name["finished"]["step"] == stop["step"] == by_name["checkpoint"]["step"]
    assert stop["checkpoint"] and (Path(stop["checkpoint"]) / "model.safetensors").is_file()
    # Rank 1 has no health monitor of its own: it stopped at rank 0's step only because the decision reached it.
    r0, r1 = rank_histories(tmp_path)
    assert [h["step"] for h in r0] == [h["step"] for h in r1] == list(range(1, stop["step"] + 1))
    # Both ranks trained the same steps of one job: TRL gathers the batch, so each logs the same rewards.
    assert [h["reward"] for h in r0] == [h["reward"] for h in r1] == [r["metrics"]["reward"] for r in logs]
    store, run = followed_to_the_end(run_dir)
    assert run.status == "completed" and run.last_step == stop["step"]
    assert run.error and run.error.startswith("stopped by the health guard at step")
    train = store_records(store, run.id)
    assert sorted(s for split, s in train if split == "train") == list(range(1, stop["step"] + 1))
    assert same_values(train, jsonl_records(run_dir / "metrics.jsonl"))
    assert [e["event"] for e in store.events(run.id)] == [e["event"] for e in events]


def test_http_transport_on_two_ranks_sends_one_run_from_rank_0(
    tiny_model: Path, tmp_path: Path, data_dir: Path
) -> None:
    """The HTTP transport under torchrun: rank 0 alone spools and sends; the dashboard holds one complete run with
    the health summary of a run that ended on its own, and rank 1 spooled and sent nothing."""
    store = Store()
    demo = build_app(store, monitor=False)
    try:
        url = free_port_app(demo)
        run_two_ranks(tiny_model, tmp_path, url, "--steps", "2", "--health", json.dumps({"alerts": True}))
        (spooled,) = (tmp_path / "spool").iterdir()  # rank 0's spool of its one run; rank 1 has none
        assert files_under(tmp_path / "rank1") == set()
        (run,) = store.list_runs()
        assert run.id == spooled.name and run.backend == external.EXTERNAL
        assert run.status == "completed" and run.last_step == 2
        events = {e["event"]: e for e in store.events(run.id)}
        assert events["started"]["world_size"] == RANKS and events["health_summary"]["evaluations"] >= 1
        assert same_values(store_records(store, run.id), jsonl_records(spooled / "metrics.jsonl"))
        r0, r1 = rank_histories(tmp_path)
        assert [h["reward"] for h in r0] == [h["reward"] for h in r1] and len(r0) == 2
    finally:
        demo.close()
