"""vLLM server mode, orchestrated: start `trl vllm-serve`, wait for its health endpoint, then train against it, and
stop both together when either ends or the job is asked to stop. Both logs are kept (the server's in `vllm.log`).

The backends build a plan (`generation.json` in the run directory: the server's and the training's argument lists,
their environments, the port) and run this file as the job's leader process:
`python vllm_server.py --plan generation.json --host ADDR [--server-nodes N1 --train-nodes N2,N3]`. It needs only
the standard library (plus PyYAML, which every job environment has), so it runs by its path on any node, with or
without the dashboard installed. `@HOST@`, `@SERVER_NODES@` and `@TRAIN_NODES@` in the argument lists are replaced by
the values given on the command line (on Slurm the batch script knows them only once the job runs).

The training reads `run.served.yaml`: the run's own run.yaml with `use_vllm: true`, `vllm_mode: server` and the
server's host and port. When the server dies first, or never answers its health endpoint in time, the training is
stopped and a `failed` record saying so is appended to the metrics stream, so the run ends failed with that reason.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from grpo_dashboard.spec.run_spec import RunSpec

PLAN = "generation.json"
SERVED_CONFIG = "run.served.yaml"
SERVER_LOG = "vllm.log"
HEALTH_PATH = "/health/"
STOP_GRACE_S = 15.0
EXIT_SERVER_FAILED = 3


@dataclass
class Plan:
    """What the supervisor starts: argument lists, environments, where to log and what to tell the training."""

    server: list[str]
    train: list[str]
    port: int
    health_timeout_s: float
    server_log: str
    config: str
    served_config: str
    metrics: str = ""
    server_env: dict[str, str] = field(default_factory=dict)
    train_env: dict[str, str] = field(default_factory=dict)

    @classmethod
    def read(cls, path: Path) -> Plan:
        """Read a plan file."""
        data = json.loads(path.read_text(encoding="utf-8"))
        return cls(**{f.name: data[f.name] for f in dataclasses.fields(cls) if f.name in data})

    def write(self, path: Path) -> None:
        """Write the plan file (atomically)."""
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(dataclasses.asdict(self), indent=2), encoding="utf-8")
        tmp.replace(path)


def local_plan(spec: RunSpec, run_dir: Path, train: list[str], metrics: Path, visible: int | None) -> Plan:
    """The plan of a local server-mode run: the server on generation.server_gpus, training on the other GPUs."""
    from grpo_dashboard.spec.vllm_serve import serve_command, training_gpus

    g = spec.generation
    assert g is not None and g.server_gpus
    gpus = training_gpus(spec, visible) or []
    return Plan(
        serve_command(spec),
        train,
        g.port,
        g.health_timeout_s,
        str(run_dir / SERVER_LOG),
        str(run_dir / "run.yaml"),
        str(run_dir / SERVED_CONFIG),
        str(metrics),
        {"CUDA_VISIBLE_DEVICES": ",".join(str(i) for i in g.server_gpus)},
        {"CUDA_VISIBLE_DEVICES": ",".join(str(i) for i in gpus)},
    )


def supervisor_command(
    plan_path: Path, host: str = "127.0.0.1", server_nodes: str | None = None, train_nodes: str | None = None
) -> list[str]:
    """The job's leader command line: this file, run by path with the dashboard's Python."""
    cmd = [sys.executable, str(Path(__file__).resolve()), "--plan", str(plan_path), "--host", host]
    if server_nodes is not None:
        cmd += ["--server-nodes", server_nodes]
    if train_nodes is not None:
        cmd += ["--train-nodes", train_nodes]
    return cmd


def write_served_config(config: Path, served: Path, host: str, port: int) -> None:
    """The training's run spec: the run's own, pointed at the server."""
    import yaml

    spec = yaml.safe_load(config.read_text(encoding="utf-8"))
    training = dict(spec.get("training") or {})
    training.update(use_vllm=True, vllm_mode="server", vllm_server_host=host, vllm_server_port=port)
    training.pop("vllm_server_base_url", None)
    spec["training"] = training
    tmp = served.with_suffix(".tmp")
    tmp.write_text(yaml.safe_dump(spec, sort_keys=False, allow_unicode=True), encoding="utf-8")
    tmp.replace(served)


def healthy(host: str, port: int, timeout_s: float = 2.0) -> bool:
    """True when the server answers its health endpoint with 200."""
    try:
        with urllib.request.urlopen(f"http://{host}:{port}{HEALTH_PATH}", timeout=timeout_s) as response:
            return response.status == 200
    except (urllib.error.URLError, OSError, ValueError):
        return False


def wait_healthy(
    host: str,
    port: int,
    timeout_s: float,
    server: subprocess.Popen,
    interval_s: float = 0.5,
    stopped: Callable[[], bool] = lambda: False,
) -> str | None:
    """Wait until the server is healthy; the reason it never became so (exited, timed out, or the job was asked to
    stop: `stopped()`), or None."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if stopped():
            return "the job was asked to stop while the vLLM server was starting"
        if healthy(host, port):
            return None
        code = server.poll()
        if code is not None:
            return f"the vLLM server exited with code {code} before answering {HEALTH_PATH}"
        time.sleep(interval_s)
    return (
        f"the vLLM server did not answer http://{host}:{port}{HEALTH_PATH} within {timeout_s:g} s "
        f"(generation.health_timeout_s)"
    )


def stop(proc: subprocess.Popen | None, grace_s: float = STOP_GRACE_S) -> int | None:
    """SIGTERM a child, SIGKILL after `grace_s` (0: at once); its exit code.

    The children stay in the job's process group, so whatever stops the whole job (the local backend's group
    signal, Slurm's step signals) reaches them even when this process is killed first.
    """
    if proc is None:
        return None
    if proc.poll() is None:
        _signal(proc, signal.SIGTERM if grace_s > 0 else signal.SIGKILL)
        try:
            proc.wait(timeout=grace_s if grace_s > 0 else 30)
        except subprocess.TimeoutExpired:
            _signal(proc, signal.SIGKILL)
            proc.wait()
    return proc.returncode


def _signal(proc: subprocess.Popen, sig: int) -> None:
    try:
        proc.send_signal(sig)
    except (ProcessLookupError, PermissionError):
        pass


def _last_line(path: Path) -> str:
    try:
        lines = [
            ln.strip() for ln in path.read_text(encoding="utf-8", errors="replace")[-8192:].splitlines() if ln.strip()
        ]
    except OSError:
        return ""
    return lines[-1][:300] if lines else ""


def _report_failure(plan: Plan, message: str) -> None:
    """Append a `failed` record to the metrics stream (after the training has stopped writing) and say it."""
    print(f"grpo-dashboard: {message}", flush=True)
    if not plan.metrics:
        return
    path = Path(plan.metrics)
    record = {
        "v": 1,
        "type": "event",
        "event": "failed",
        "time": time.time(),
        "error_type": "VLLMServerError",
        "message": message,
    }
    with open(path, "ab") as f:
        if f.tell() > 0:
            with open(path, "rb") as r:
                r.seek(-1, 2)
                if r.read(1) != b"\n":
                    f.write(b"\n")  # a line the killed training left half-written stays a skipped line
        f.write((json.dumps(record) + "\n").encode())


def supervise(plan: Plan, host: str, values: dict[str, str]) -> int:
    """Start the server, wait for its health, train, and stop both together; the job's exit code."""

    def fill(args: list[str]) -> list[str]:
        out = []
        for a in args:
            for key, value in values.items():
                a = a.replace(f"@{key}@", value)
            out.append(a)
        return out

    stopping: dict[str, bool] = {"asked": False}
    server: subprocess.Popen | None = None
    train: subprocess.Popen | None = None

    def on_term(signum: int, frame: Any) -> None:
        stopping["asked"] = True
        if train is not None and train.poll() is None:
            _signal(train, signal.SIGTERM)  # the training stops cleanly and reports `canceled`

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    log = open(plan.server_log, "ab")  # handed to the server, closed when it is stopped
    try:
        print(
            f"grpo-dashboard: starting the vLLM server: {' '.join(fill(plan.server))} (log {plan.server_log})",
            flush=True,
        )
        server = subprocess.Popen(
            fill(plan.server),
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env={**os.environ, **plan.server_env},
        )
        problem = wait_healthy(host, plan.port, plan.health_timeout_s, server, stopped=lambda: stopping["asked"])
        if stopping["asked"]:
            stop(server)
            return 143
        if problem:
            stop(server)
            tail = _last_line(Path(plan.server_log))
            _report_failure(plan, problem + (f"; last line of {SERVER_LOG}: {tail}" if tail else ""))
            return EXIT_SERVER_FAILED
        print(f"grpo-dashboard: vLLM server healthy at {host}:{plan.port}; starting training", flush=True)
        write_served_config(Path(plan.config), Path(plan.served_config), host, plan.port)
        train = subprocess.Popen(fill(plan.train), env={**os.environ, **plan.train_env}, stdin=subprocess.DEVNULL)
        while True:
            code = train.poll()
            if code is not None:
                stop(server)
                print(f"grpo-dashboard: training exited with code {code}; vLLM server stopped", flush=True)
                return code
            server_code = server.poll()
            if server_code is not None:
                stop(train, grace_s=0.0)  # killed, not asked: a training asked to stop would report `canceled`
                tail = _last_line(Path(plan.server_log))
                _report_failure(
                    plan,
                    f"the vLLM server exited with code {server_code} during training; training "
                    f"was stopped" + (f"; last line of {SERVER_LOG}: {tail}" if tail else ""),
                )
                return EXIT_SERVER_FAILED
            time.sleep(0.2)
    finally:
        stop(train)
        stop(server)
        log.close()


def main(argv: list[str] | None = None) -> int:
    """Entry point of the job's leader process."""
    parser = argparse.ArgumentParser(description="Start a vLLM server, wait for its health, train against it.")
    parser.add_argument("--plan", required=True, help="generation.json written by the dashboard.")
    parser.add_argument("--host", default="127.0.0.1", help="Address the training reaches the server at.")
    parser.add_argument("--server-nodes", default="", help="Slurm nodes of the server step.")
    parser.add_argument("--train-nodes", default="", help="Slurm nodes of the training step.")
    args = parser.parse_args(argv)
    plan = Plan.read(Path(args.plan))
    values = {"HOST": args.host, "SERVER_NODES": args.server_nodes, "TRAIN_NODES": args.train_nodes}
    return supervise(plan, args.host, values)


if __name__ == "__main__":
    sys.exit(main())
