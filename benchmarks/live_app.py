"""The real dashboard as a separate process, synthetic live runs feeding it, and a reader for its poll endpoint.

A synthetic writer is a small process that behaves like the job towards the dashboard: it appends line-protocol
records to its run's metrics.jsonl (flushed per line, `time` set just before the write) at a fixed pace. Its run row
carries the writer's pid and kernel start time, so the app's monitor treats it exactly like a local job.
"""

from __future__ import annotations

import base64
import json
import os
import re
import socket
import subprocess
import sys
import textwrap
import time
import urllib.request
from pathlib import Path
from typing import Any

import numpy as np
from common import ROOT, write_metrics_jsonl

WRITER = textwrap.dedent("""
    import json, math, sys, time
    path, interval, n_steps, first = sys.argv[1], float(sys.argv[2]), int(sys.argv[3]), int(sys.argv[5])
    sys.path.insert(0, sys.argv[4])
    from common import grpo_metrics
    with open(path, "a", encoding="utf-8") as f:
        if first == 1:
            f.write(json.dumps({"v": 1, "type": "event", "event": "started", "time": time.time(),
                                "max_steps": n_steps}) + "\\n")
            f.flush()
        next_t = time.monotonic()
        for step in range(first, n_steps + 1):
            next_t += interval
            time.sleep(max(0.0, next_t - time.monotonic()))
            rec = {"v": 1, "type": "log", "split": "train", "step": step, "time": time.time(),
                   "max_steps": n_steps, "metrics": grpo_metrics(step, n_steps)}
            f.write(json.dumps(rec) + "\\n")
            f.flush()
        f.write(json.dumps({"v": 1, "type": "event", "event": "finished", "time": time.time(),
                            "step": n_steps}) + "\\n")
""")


def free_port() -> int:
    """A free TCP port on localhost."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_app(data: Path, log: Path, cwd: Path | None = None) -> tuple[subprocess.Popen[bytes], str]:
    """`python app.py` on a free port with its store in `data`; returns (process, url) once it answers.

    Args:
        cwd: the checkout whose app.py to serve (default: this one; e.g. an older commit as a peer).
    """
    port = free_port()
    env = {
        **os.environ,
        "GRPO_DASHBOARD_DATA_DIR": str(data),
        "GRADIO_SERVER_PORT": str(port),
        "GRADIO_SERVER_NAME": "127.0.0.1",
        "GRADIO_ANALYTICS_ENABLED": "False",
        "HF_HUB_OFFLINE": "1",
    }
    with log.open("wb") as out:
        # BENCH_APP: another entry point serving the same app (e.g. one that profiles it)
        entry = os.environ.get("BENCH_APP", "app.py")
        proc = subprocess.Popen(
            [sys.executable, entry],
            cwd=cwd or ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    url = f"http://127.0.0.1:{port}/"
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the app exited with {proc.returncode}; see {log}")
        try:
            with urllib.request.urlopen(url, timeout=2) as r:  # localhost
                if r.status == 200:
                    return proc, url
        except OSError:
            time.sleep(0.5)
    proc.kill()
    raise RuntimeError(f"the app did not answer within 180 s; see {log}")


def add_live_run(data: Path, run_id: str, interval: float, n_steps: int, history: int = 0) -> subprocess.Popen[bytes]:
    """Register a running local run in the store under `data` and start its synthetic writer.

    Args:
        history: steps already in metrics.jsonl when the writer starts (a run that has been going for a while).
    """
    from grpo_dashboard.launch.local.process import process_start_time
    from grpo_dashboard.store.db import Run, Store

    run_dir = data / "runs" / run_id
    run_dir.mkdir(parents=True)
    (run_dir / "job.log").write_text("")
    if history:
        write_metrics_jsonl(run_dir / "metrics.jsonl", history)
    spec = (ROOT / "examples" / "smoke.yaml").read_text().replace("name: smoke", f"name: {run_id}", 1)
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            WRITER,
            str(run_dir / "metrics.jsonl"),
            str(interval),
            str(n_steps),
            str(Path(__file__).resolve().parent),
            str(history + 1),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    store = Store(data / "dashboard.db")
    store.insert_run(
        Run(
            id=run_id,
            name=run_id,
            spec_yaml=spec,
            backend="local",
            status="running",
            created_at=time.time(),
            started_at=time.time(),
            run_dir=str(run_dir),
            pid=proc.pid,
            pid_start=process_start_time(proc.pid),
        )
    )
    store.close()
    return proc


def wait_for_history(data: Path, run_ids: list[str], history: int, timeout_s: float = 300.0) -> None:
    """Wait until the app's monitor has ingested `history` steps of every run (or `timeout_s` passed)."""
    from grpo_dashboard.store.db import Store

    store = Store(data / "dashboard.db")
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and any((store.get_run(r).last_step or 0) < history for r in run_ids):
        time.sleep(0.5)
    store.close()


def written_times(path: Path) -> dict[int, float]:
    """Step -> the wall time the writer stamped its record with, from a run's metrics.jsonl."""
    out = {}
    with path.open() as f:
        for line in f:
            rec = json.loads(line)
            if rec.get("type") == "log":
                out[rec["step"]] = rec["time"]
    return out


def stop(proc: subprocess.Popen[bytes] | None) -> None:
    """Terminate a process this script started (its own session), then kill it if it lingers."""
    if proc is None or proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=15)


def _coords(x: Any) -> np.ndarray:
    if isinstance(x, dict) and "bdata" in x:
        return np.frombuffer(base64.b64decode(x["bdata"]), dtype=np.dtype(x["dtype"]))
    return np.asarray(x, dtype=float)


def visible_step(out: list[Any]) -> int | None:
    """The newest step a detail_poll answer shows: the last x of the reward chart when it was redrawn, else the step
    in the status line (same change token); None when neither is there."""
    for item in out:
        if isinstance(item, dict) and item.get("type") == "plotly" and '"reward' in item.get("plot", ""):
            fig = json.loads(item["plot"])
            xs = [_coords(t["x"]) for t in fig.get("data", []) if t.get("x") is not None]
            xs = [x for x in xs if x.size]
            if xs:
                return int(max(float(x.max()) for x in xs))
    if out and isinstance(out[0], str):
        m = re.search(r"(\d+)/\d+|step (\d+)", out[0])
        if m:
            return int(m.group(1) or m.group(2))
    return None


def poll_args(run_id: str) -> tuple[Any, ...]:
    """The detail_poll inputs of a page showing `run_id` with default controls."""
    return (run_id, 0.6, False, "step", True, None, "advantage", True)


class HttpSession:
    """One browser-like session of the app over plain HTTP (Gradio's sse_v3 queue protocol), for many-client
    benchmarks: far lighter on the client side than gradio_client, so the numbers describe the server.

    State inputs are sent empty and kept by the server per session, as for a page in a browser.
    """

    def __init__(self, url: str, api_name: str) -> None:
        import secrets

        import httpx

        self.url = url
        self.http = httpx.Client(timeout=120)
        config = self.http.get(url + "config").json()
        self.prefix = url + config.get("api_prefix", "/gradio_api").lstrip("/")
        types = {c["id"]: c["type"] for c in config["components"]}
        dep = next(d for d in config["dependencies"] if d.get("api_name") == api_name)
        self.fn_index = dep["id"]
        self.n_inputs = len(dep["inputs"])
        self.state_slots = [i for i, cid in enumerate(dep["inputs"]) if types.get(cid) == "state"]
        self.session_hash = secrets.token_hex(8)

    def call(self, *args: Any) -> list[Any]:
        """Run the endpoint with these (non-state) inputs; returns its output data."""
        import orjson

        values = list(args)
        for slot in self.state_slots:
            values.insert(slot, None)
        joined = self.http.post(
            self.prefix + "/queue/join",
            json={
                "data": values,
                "event_data": None,
                "fn_index": self.fn_index,
                "trigger_id": None,
                "session_hash": self.session_hash,
            },
        )
        joined.raise_for_status()
        event_id = joined.json()["event_id"]
        with self.http.stream("GET", self.prefix + "/queue/data", params={"session_hash": self.session_hash}) as r:
            r.raise_for_status()
            for line in r.iter_lines():
                if not line.startswith("data:"):
                    continue
                msg = orjson.loads(line[5:])
                if msg.get("event_id") not in (None, event_id):
                    continue
                if msg.get("msg") == "process_completed":
                    if not msg.get("success"):
                        raise RuntimeError(f"the app answered with an error: {str(msg.get('output'))[:300]}")
                    return list(msg["output"]["data"])
                if msg.get("msg") == "close_stream":
                    break
        raise RuntimeError("the event stream closed without an answer")

    def close(self) -> None:
        """Close the HTTP connection pool."""
        self.http.close()
