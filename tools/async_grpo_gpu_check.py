"""The GPU check of async GRPO (not run on CPU machines): a vLLM server on GPU 0, then a few AsyncGRPOTrainer steps of
the calculator agent launched through the dashboard (`launch --wait`), then the async metrics the staleness rule
and the async chart panel read. Prints each figure; exits 1 when a step, the server or a metric is missing.

    python tools/async_grpo_gpu_check.py [--model PATH_OR_ID] [--steps 4] [--port 8011] [--timeout 540]

Needs a CUDA GPU, vllm and trl[vllm]. `--model` defaults to the warmed tiny agent model shipped in
jobs/agent_model_v1 (offline); a machine with Hub access can pass e.g. Qwen/Qwen2.5-0.5B-Instruct (vLLM may refuse
the tiny model's 16-wide attention heads: the script then says so and exits 2).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
ASYNC_METRICS = (
    "sample/staleness_mean",
    "sample/dropped_stale_total",
    "sample/rollout_queue_size",
    "perf/rollout_wait_s",
)


def wait_health(url: str, proc: subprocess.Popen[bytes], timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            with urllib.request.urlopen(f"{url}/health/", timeout=2):
                return True
        except OSError:
            time.sleep(2)
    return False


def main() -> int:
    """Serve, train a few async steps, check the metrics; the exit status says how far it got."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default=str(REPO / "jobs" / "agent_model_v1"))
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--port", type=int, default=8011)
    p.add_argument("--timeout", type=float, default=540)
    a = p.parse_args()
    t0 = time.monotonic()
    work = Path(tempfile.mkdtemp(prefix="async-gpu-"))
    env = {**os.environ, "GRPO_DASHBOARD_DATA_DIR": str(work / "data"), "CUDA_VISIBLE_DEVICES": "0"}
    log = open(work / "vllm.log", "wb")
    server = subprocess.Popen(
        [sys.executable, "-m", "trl.scripts.vllm_serve", "--model", a.model, "--port", str(a.port)],
        stdout=log,
        stderr=subprocess.STDOUT,
        env=env,
    )
    url = f"http://127.0.0.1:{a.port}"
    try:
        if not wait_health(url, server, a.timeout / 2):
            print(f"vLLM server did not come up; last lines of {work / 'vllm.log'}:")
            print((work / "vllm.log").read_text(errors="replace")[-3000:])
            return 2
        print(f"vllm server up in {time.monotonic() - t0:.0f} s")
        sys.path.insert(0, str(REPO))
        from grpo_dashboard.spec.run_spec import RunSpec

        spec = RunSpec.from_file(REPO / "examples" / "agent_calculator.yaml").to_dict()
        spec["name"] = "async-gpu-check"
        spec["model"] = {"name_or_path": a.model, "dtype": "bfloat16"}
        spec["dataset"]["data_files"] = str(REPO / spec["dataset"]["data_files"])
        spec["rewards"] = [{"name": "answer", "builtin": "numeric_match", "params": {"answer_column": "answer"}}]
        spec["agent"] = {"tools": ["calculator"], "trainer": "async_grpo", "async_config": {"max_staleness": 2}}
        training = {k: v for k, v in spec["training"].items() if k not in ("use_cpu", "beta", "bf16")}
        spec["training"] = {**training, "max_steps": a.steps, "vllm_server_base_url": url, "bf16": True}
        (work / "spec.yaml").write_text(json.dumps(spec))
        proc = subprocess.run(
            [sys.executable, "-m", "grpo_dashboard", "launch", str(work / "spec.yaml"), "--wait"],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=max(60.0, a.timeout - (time.monotonic() - t0)),
        )
        print(proc.stdout[-3000:], proc.stderr[-3000:])
        os.environ["GRPO_DASHBOARD_DATA_DIR"] = env["GRPO_DASHBOARD_DATA_DIR"]
        from grpo_dashboard.store.db import Store

        store = Store()
        (run,) = store.list_runs()
        records = store.records(run.id)
        print(f"run {run.status}: {run.last_step}/{run.max_steps} steps in {time.monotonic() - t0:.0f} s")
        missing = [k for k in ASYNC_METRICS if not any(k in r for r in records)]
        for key in ASYNC_METRICS:
            print(key, [r[key] for r in records if key in r])
        ok = run.status == "completed" and (run.last_step or 0) >= a.steps and not missing
        print("async GPU check:", "OK" if ok else f"FAILED (missing {missing})")
        return 0 if ok else 1
    finally:
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()


if __name__ == "__main__":
    sys.exit(main())
