"""Shared fixtures: an isolated data directory per test, offline Hub, and the tiny model built once per session."""

from __future__ import annotations

import copy
import os
import subprocess
import sys
import time
from collections.abc import Generator, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NoReturn

import pytest
import yaml

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["HF_HUB_DISABLE_TELEMETRY"] = "1"
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# A health rule that raises fails the test (and the apps and jobs tests start) instead of becoming a "rule failed"
# finding; the tests of that fallback turn it off for themselves.
os.environ["GRPO_DASHBOARD_STRICT_HEALTH"] = "1"

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


@pytest.fixture(scope="session")
def agent_model() -> Path:
    """The warmed tiny tool-calling model (jobs/grpo_agent_model.py), copied once from its prebuilt copy in
    jobs/agent_model_v1 into .cache/, where the agent presets find it."""
    sys.path.insert(0, str(REPO / "jobs"))
    import grpo_agent_model
    import grpo_job

    path = REPO / ".cache" / f"tiny-agent-warm-v{grpo_agent_model.AGENT_VERSION}"
    return grpo_agent_model.build_warm_model(path, grpo_job.build_tiny_model, grpo_job.save_atomically)


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


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def free_port_app(demo: Any) -> str:
    """Serve a built app on a free 127.0.0.1 port (in this process, not blocking); returns its URL."""
    _, url, _ = demo.launch(prevent_thread_lock=True, server_name="127.0.0.1", server_port=free_port(), quiet=True)
    return str(url)


def processes_with(marker: str) -> list[int]:
    """Host pids whose command line contains `marker`."""
    pids = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and marker.encode() in (entry / "cmdline").read_bytes():
                pids.append(int(entry.name))
        except OSError:
            continue
    return pids


class WebhookReceiver:
    """A local HTTP server recording every POST as {"path", "json", "content_type"}; answers `status`, or with
    `redirect` a 302 from /hook to /elsewhere."""

    def __init__(self, status: int = 200, redirect: bool = False) -> None:
        import json
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        self.posts: list[dict[str, Any]] = []
        received = self.posts

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # http.server's naming
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                try:
                    parsed = json.loads(body) if body else None
                except ValueError:
                    parsed = None
                received.append({"path": self.path, "json": parsed, "content_type": self.headers.get("Content-Type")})
                if redirect and self.path == "/hook":
                    self.send_response(302)
                    self.send_header("Location", "/elsewhere")
                else:
                    self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            do_GET = do_POST  # urllib follows a 302 to a POST with a GET

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def paths(self) -> list[str]:
        """The paths posted to, in order."""
        return [p["path"] for p in self.posts]

    def close(self) -> None:
        """Stop the server."""
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver() -> Any:
    """A running WebhookReceiver, closed after the test."""
    r = WebhookReceiver()
    yield r
    r.close()


@pytest.fixture
def hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """A running fake Hub (fake_hub.py) for the HF Jobs tests; the client points at it and only at it, with no saved
    login, and the backend polls and retries quickly."""
    from huggingface_hub import constants
    from huggingface_hub.utils import disable_progress_bars

    from grpo_dashboard.launch import backends
    from grpo_dashboard.launch.hf_jobs import hub_calls

    from .fake_hub import FakeHub
    from .hf_jobs_helpers import TOKEN

    fake = FakeHub(tmp_path / "hub", TOKEN).start()
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "ENDPOINT", fake.url)
    monkeypatch.setattr(constants, "HF_TOKEN_PATH", str(tmp_path / "no-token"))
    monkeypatch.setenv("HF_ENDPOINT", fake.url)
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.setenv("GRPO_DASHBOARD_HF_POLL_S", "0.2")
    monkeypatch.setattr(hub_calls, "RETRY_BASE_S", 0.05)
    disable_progress_bars()
    yield fake
    backends.restart()  # the followers stop, their in-memory tokens go
    fake.stop()


@contextmanager
def served_client(data: Path) -> Iterator[Any]:
    """The app built in this process over a store in `data`, served on 127.0.0.1; yields a gradio Client of it."""
    from gradio_client import Client

    from grpo_dashboard.store.db import Store
    from grpo_dashboard.ui import build_app

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("GRPO_DASHBOARD_DATA_DIR", str(data))
        demo = build_app(Store(), monitor=False)
        try:
            yield Client(free_port_app(demo), verbose=False)
        finally:
            demo.close()


@pytest.fixture(scope="session")
def slurm_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A real Slurm cluster on this host (tests/slurm_cluster.py: munged, slurmctld, two slurmd), started once per
    session and stopped by pid; the test is skipped, with the reason, where Slurm is missing or cannot start."""
    from .slurm_cluster import SlurmCluster, missing_commands

    missing = missing_commands()
    if missing:
        pytest.skip(f"Slurm is not installed here (missing {', '.join(missing)}): apt-get install slurm-wlm munge")
    if os.geteuid() != 0:
        pytest.skip("the test cluster's slurmd must run as root (it starts jobs as their users)")
    cluster = SlurmCluster(tmp_path_factory.mktemp("slurm"))
    try:
        cluster.start()
    except (RuntimeError, OSError, subprocess.SubprocessError) as exc:
        cluster.stop()
        pytest.skip(f"Slurm could not start here: {exc}")
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def slurm(slurm_cluster: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    """The session's Slurm cluster, with this test's Slurm commands (and the backend's) pointed at it."""
    for key, value in slurm_cluster.env.items():
        monkeypatch.setenv(key, value)
    return slurm_cluster


# Where the sandbox is expected to work (GRPO_DASHBOARD_EXPECT_SANDBOX=1, set by .ci/run), a security test that skips
# is a failure: a skip there means the boundary was not tested. The one exception is a case raised through
# `not_applicable` (a weak fallback mode, or the boundary this machine does not use while the other one runs the test).
EXPECT_SANDBOX = "GRPO_DASHBOARD_EXPECT_SANDBOX"
SECURITY_TESTS = frozenset(
    {
        "test_sandbox.py",
        "test_sandbox_escapes.py",
        "test_sandbox_limits.py",
        "test_security.py",
        "test_reward_check.py",
        "test_space_exploits.py",
    }
)


def not_applicable(reason: str) -> NoReturn:
    """Skip a case that does not apply on this machine while the test runs in another mode here: the only skip a
    security test may take under GRPO_DASHBOARD_EXPECT_SANDBOX=1."""
    exc = pytest.skip.Exception(reason, _use_item_location=True)
    exc.not_applicable = True  # type: ignore[attr-defined]
    raise exc


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, Any]:
    """Turn a security test's skip into a failure where the sandbox is expected to work (see SECURITY_TESTS)."""
    report = yield
    allowed = call.excinfo is not None and getattr(call.excinfo.value, "not_applicable", False)
    if (
        report.skipped
        and not hasattr(report, "wasxfail")
        and not allowed
        and os.environ.get(EXPECT_SANDBOX) == "1"
        and item.path.name in SECURITY_TESTS
    ):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        reason = reason.removeprefix("Skipped: ")
        report.outcome = "failed"
        report.longrepr = (
            f"{EXPECT_SANDBOX}=1 (the sandbox is expected to work here), but this security test was skipped: {reason}"
        )
    return report
