"""Local-backend hardening: jobs get an allow-listed environment (no dashboard secrets), a reused pid is never
signalled, and with GRPO_DASHBOARD_WEBHOOK_BLOCK_PRIVATE=1 a job's webhook never reaches a non-public address."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from grpo_dashboard.health import alerts
from grpo_dashboard.health.alerts import AlertSender, post_json, webhook_url_problem
from grpo_dashboard.health.job import JobHealth
from grpo_dashboard.launch import backends, runs
from grpo_dashboard.launch.local import job as local_job
from grpo_dashboard.launch.local import process as local_process
from grpo_dashboard.spec.run_spec import RunSpec
from grpo_dashboard.store.db import Run, Store

from .conftest import WebhookReceiver, smoke_dict, wait_for

SECRETS = {
    "OAUTH_CLIENT_SECRET": "oauth-secret-value",
    "OAUTH_CLIENT_ID": "oauth-client-id",
    "HF_TOKEN": "hf_ownersSecretToken0123456789",
    "AWS_SECRET_ACCESS_KEY": "aws-secret-value",
    "SOME_RANDOM_SECRET": "random-secret-value",
    "WANDB_API_KEY": "wandb-secret-value",
    "TRACKIO_WRITE_TOKEN": "trackio-secret-value",
}
PASSED = {
    "LC_ALL": "C.UTF-8",
    "HF_HOME": "/tmp/hf-home-for-test",
    "CUDA_VISIBLE_DEVICES": "",
    "OMP_NUM_THREADS": "2",
    "ACCELERATE_LOG_LEVEL": "info",
    "GRPO_DASHBOARD_WEBHOOK_BLOCK_PRIVATE": "1",
}

# A stand-in for jobs/grpo_job.py: records its environment beside run.yaml and speaks the job protocol.
ENV_DUMPER = textwrap.dedent("""
    import json, os, sys, time
    from pathlib import Path
    config, metrics = Path(sys.argv[sys.argv.index("--config") + 1]), sys.argv[sys.argv.index("--metrics") + 1]
    (config.parent / "env.json").write_text(json.dumps(dict(os.environ)))
    with open(metrics, "a") as f:
        for event in ({"event": "starting", "pid": os.getpid()}, {"event": "started", "max_steps": 0},
                      {"event": "finished", "step": 0}):
            f.write(json.dumps({"v": 1, "type": "event", "time": time.time(), **event}) + "\\n")
""")


@pytest.fixture
def dashboard_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in {**SECRETS, **PASSED}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv(local_job.JOB_ENV_EXTRA, raising=False)


@pytest.fixture
def env_dumper(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    script = tmp_path / "env_dumper.py"
    script.write_text(ENV_DUMPER)
    monkeypatch.setattr(local_job, "JOB_SCRIPT", script)


def launched_env(spec: dict[str, Any], **launch: Any) -> dict[str, str]:
    """Launch `spec` for real (runs.launch -> local.job.start), wait for it, and return the job's environment."""
    store = Store()
    run = runs.wait(store, runs.launch(spec, store, **launch), poll_s=0.1)
    assert run.status == "completed", run.error
    return json.loads((Path(run.run_dir) / "env.json").read_text())


# ---- the job's environment ----------------------------------------------------------------------------------------


def test_the_job_environment_is_allow_listed() -> None:
    for name in (
        "PATH",
        "HOME",
        "LANG",
        "LC_CTYPE",
        "PYTHONPATH",
        "CUDA_HOME",
        "NCCL_DEBUG",
        "HF_HUB_OFFLINE",
        "HF_DATASETS_CACHE",
        "TRANSFORMERS_CACHE",
        "HF_ENDPOINT",
        "ACCELERATE_MIXED_PRECISION",
        "TOKENIZERS_PARALLELISM",
        "VIRTUAL_ENV",
        "SSL_CERT_FILE",
        "https_proxy",
        "TRACKIO_DIR",
        "GRPO_JOB_NO_CALLBACK",
        "GRPO_DASHBOARD_WEBHOOK_BLOCK_PRIVATE",
        "GRPO_JOB_SYSTEM_INTERVAL_S",
        "GRPO_JOB_SYSTEM_GPUS",
    ):
        assert local_job.allowed_job_variable(name), name
    for name in (
        *SECRETS,
        "HF_API_TOKEN",
        "HUGGING_FACE_HUB_TOKEN",
        "OPENAI_API_KEY",
        "GITHUB_TOKEN",
        "SPACE_ID",
        "GRPO_DASHBOARD_DATA_DIR",
        "GRPO_DASHBOARD_ALLOW_LOCAL_BACKEND",
        "DATABASE_URL",
        "TRACKIO_WEBHOOK_URL",
        "VLLM_API_KEY",
    ):
        assert not local_job.allowed_job_variable(name), name


def test_job_environment_drops_secrets_and_hands_the_token_explicitly(
    dashboard_env: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = RunSpec.from_dict({"name": "x", "backend": {"gpus": [1]}})
    env = local_job.job_environment(spec)
    assert not set(SECRETS) & set(env)
    assert env["PATH"] == os.environ["PATH"] and env["LC_ALL"] == "C.UTF-8" and env["HF_HOME"] == PASSED["HF_HOME"]
    assert env["CUDA_VISIBLE_DEVICES"] == "1" and env["PYTHONUNBUFFERED"] == "1"
    assert env["GRPO_DASHBOARD_WEBHOOK_BLOCK_PRIVATE"] == "1"
    assert local_job.job_environment(spec, token="hf_theUsersOwnToken")["HF_TOKEN"] == "hf_theUsersOwnToken"
    monkeypatch.setenv(local_job.JOB_ENV_EXTRA, "WANDB_API_KEY, NOT_SET_ANYWHERE")  # the owner's explicit choice
    env = local_job.job_environment(spec)
    assert env["WANDB_API_KEY"] == SECRETS["WANDB_API_KEY"] and "NOT_SET_ANYWHERE" not in env
    assert "OAUTH_CLIENT_SECRET" not in env


def test_a_webhook_variable_passes_locally_but_never_on_a_space(
    dashboard_env: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MY_HOOK", "https://hooks.slack.com/services/x")
    monkeypatch.delenv("SPACE_ID", raising=False)
    monkeypatch.delenv("SYSTEM", raising=False)
    for ref in ("$MY_HOOK", "${MY_HOOK}"):
        spec = RunSpec.from_dict({"name": "x", "health": {"webhook_url": ref}})
        assert local_job.job_environment(spec)["MY_HOOK"] == "https://hooks.slack.com/services/x"
    sneaky = RunSpec.from_dict({"name": "x", "health": {"webhook_url": "$OAUTH_CLIENT_SECRET"}})
    monkeypatch.setenv("SPACE_ID", "owner/dash")
    assert "MY_HOOK" not in local_job.job_environment(spec)
    assert "OAUTH_CLIENT_SECRET" not in local_job.job_environment(sneaky)


def test_a_real_local_job_gets_no_dashboard_secret(
    dashboard_env: None, env_dumper: None, tiny_model: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a Space (SPACE_ID set) the owner's HF_TOKEN is not the user's: the job gets only the token it is handed."""
    monkeypatch.setenv("SPACE_ID", "owner/dash")
    env = launched_env(smoke_dict(tiny_model))
    assert not set(SECRETS) & set(env), sorted(set(SECRETS) & set(env))
    assert not any(value in env.values() for value in SECRETS.values())
    assert env["PATH"] == os.environ["PATH"] and env["HOME"] == os.environ["HOME"]
    assert {k: env[k] for k in PASSED} == PASSED
    assert "SPACE_ID" not in env and "GRPO_DASHBOARD_DATA_DIR" not in env
    env = launched_env(smoke_dict(tiny_model), owner="alice", token="hf_alicesOwnToken")
    assert env["HF_TOKEN"] == "hf_alicesOwnToken" and "OAUTH_CLIENT_SECRET" not in env


def test_locally_the_job_gets_the_local_users_saved_login(
    env_dumper: None, tiny_model: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("SPACE_ID", raising=False)
    monkeypatch.delenv("SYSTEM", raising=False)
    monkeypatch.setenv("HF_TOKEN", "hf_theLocalUsersLogin")
    monkeypatch.setenv("OAUTH_CLIENT_SECRET", "oauth-secret-value")
    env = launched_env(smoke_dict(tiny_model))
    assert env["HF_TOKEN"] == "hf_theLocalUsersLogin" and "OAUTH_CLIENT_SECRET" not in env


@pytest.mark.training
def test_a_real_training_job_sees_no_secret_and_still_trains(
    dashboard_env: None, tiny_model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SPACE_ID", "owner/dash")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    dump = tmp_path / "job_env.json"
    reward = tmp_path / "env_reward.py"
    reward.write_text(
        f"import json, os\n\ndef reward(completions, **kwargs):\n"
        f"    open({str(dump)!r}, 'w').write(json.dumps(dict(os.environ)))\n"
        f"    return [0.0] * len(completions)\n"
    )
    spec = smoke_dict(tiny_model, max_steps=2)
    spec["rewards"] = [{"name": "env", "function": f"{reward}:reward"}]
    store = Store()
    run = runs.wait(store, runs.launch(spec, store), poll_s=0.2)
    assert run.status == "completed", run.error
    env = json.loads(dump.read_text())
    assert not set(SECRETS) & set(env) and env["PATH"] == os.environ["PATH"]


# ---- pid reuse ----------------------------------------------------------------------------------------------------


@pytest.fixture
def stranger() -> Iterator[subprocess.Popen]:
    """An unrelated live process, leader of its own session and process group (what a reused pid may now be)."""
    proc = subprocess.Popen(["sleep", "60"], start_new_session=True)
    yield proc
    if proc.poll() is None:
        proc.kill()
    proc.wait()


def store_run(store: Store, tmp_path: Path, pid: int, pid_start: str | None, **spec: Any) -> Run:
    run_dir = tmp_path / f"run-{pid}-{pid_start}"
    run_dir.mkdir()
    (run_dir / "job.log").write_text("step 3\n")
    run = Run(
        id=run_dir.name,
        name="r",
        spec_yaml=RunSpec.from_dict({"name": "r", **spec}).to_yaml(),
        backend="local",
        status="running",
        created_at=time.time() - 3600,
        run_dir=str(run_dir),
        pid=pid,
        pid_start=pid_start,
    )
    store.insert_run(run)
    return store.get_run(run.id)


def alive(proc: subprocess.Popen) -> bool:
    return proc.poll() is None and local_process.is_alive(proc.pid, local_process.process_start_time(proc.pid))


def wrong_start(proc: subprocess.Popen) -> str:
    return str(int(local_process.process_start_time(proc.pid) or 0) - 1)


def test_refresh_never_signals_a_reused_pid(stranger: subprocess.Popen, tmp_path: Path) -> None:
    store = Store()
    run = store_run(store, tmp_path, stranger.pid, wrong_start(stranger))
    with backends.shared().local._children_lock:
        # even right after the job was seen alive, the group is not the run's now
        backends.shared().local._seen_alive.add(run.id)
    run = runs.refresh(store, run)
    assert run.status == "failed"
    assert f"job process {stranger.pid} vanished" in run.error
    assert "now belongs to another process, which was not signalled" in run.error
    time.sleep(0.2)
    assert alive(stranger)


def test_cancel_never_signals_a_reused_pid(stranger: subprocess.Popen, tmp_path: Path) -> None:
    store = Store()
    run = runs.cancel(store, store_run(store, tmp_path, stranger.pid, wrong_start(stranger)), wait=True, grace_s=1)
    assert run.status == "canceled" and "now belongs to another process, not signalled" in run.error
    unverified = runs.cancel(store, store_run(store, tmp_path, stranger.pid, None), wait=True, grace_s=1)
    assert unverified.status == "canceled" and "could not be verified" in unverified.error
    time.sleep(0.2)
    assert alive(stranger)


def test_the_stall_kill_never_signals_a_reused_pid(stranger: subprocess.Popen, tmp_path: Path) -> None:
    store = Store()
    run = store_run(store, tmp_path, stranger.pid, wrong_start(stranger), backend={"stall_timeout_s": 1})
    os.utime(Path(run.run_dir) / "job.log", (time.time() - 3600, time.time() - 3600))
    backends.shared().local._kill_if_stalled(store, run)  # silent for an hour, but not the job any more
    assert store.get_run(run.id).error is None and store.get_run(run.id).cancel_requested_at is None
    run = runs.refresh(store, run)
    assert run.status == "failed" and "not signalled" in run.error
    time.sleep(0.2)
    assert alive(stranger)


def test_signal_helpers_check_identity_first(stranger: subprocess.Popen) -> None:
    wrong = wrong_start(stranger)
    assert local_process.pid_reused(stranger.pid, wrong) and not local_process.is_ours(stranger.pid, wrong)
    assert not local_process.group_alive(stranger.pid, wrong) and local_process.group_alive(stranger.pid)
    for start in (wrong, None):
        assert not local_process.signal_group(stranger.pid, start, signal.SIGKILL, leftovers=True)
    assert not local_process.signal_group(0, "1", signal.SIGKILL)
    assert not local_process.signal_group(1, "1", signal.SIGKILL)
    time.sleep(0.2)
    assert alive(stranger)


def test_cancel_signals_the_process_with_the_right_start_time(stranger: subprocess.Popen, tmp_path: Path) -> None:
    """The positive control: with the recorded start time matching, cancel does stop the process."""
    store = Store()
    run = runs.cancel(
        store,
        store_run(store, tmp_path, stranger.pid, local_process.process_start_time(stranger.pid)),
        wait=True,
        grace_s=5,
    )
    assert run.status == "canceled"
    assert stranger.wait(timeout=10) == -signal.SIGTERM


def group_with_a_straggler() -> tuple[subprocess.Popen, int, str]:
    """A leader that exits on request, leaving a worker behind in its process group."""
    leader = subprocess.Popen(
        ["sh", "-c", "sleep 60 & echo $!; read line"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    assert leader.stdout is not None
    worker = int(leader.stdout.readline())
    start = local_process.process_start_time(worker)
    assert start is not None and os.getpgid(worker) == leader.pid
    return leader, worker, start


def test_leftover_workers_are_killed_only_when_the_group_is_provably_the_runs(tmp_path: Path) -> None:
    store = Store()
    for seen in (True, False):
        leader, worker, worker_start = group_with_a_straggler()
        try:
            run = store_run(store, tmp_path, leader.pid, local_process.process_start_time(leader.pid))
            if seen:
                assert runs.refresh(store, run).status == "running"  # this dashboard sees the job alive
            assert leader.stdin is not None
            leader.stdin.close()
            leader.wait(timeout=10)  # the leader is gone (and reaped); its worker is left in the group
            run = runs.refresh(store, store.get_run(run.id))
            assert run.status == "failed"
            if seen:
                wait_for(lambda w=worker, s=worker_start: not local_process.is_alive(w, s), timeout=10)
            else:  # a dashboard that never saw the job alive cannot tell the group is still the run's
                time.sleep(0.2)
                assert local_process.is_alive(worker, worker_start)
        finally:
            if local_process.is_alive(worker, worker_start):
                os.kill(worker, signal.SIGKILL)


# ---- webhooks to private addresses --------------------------------------------------------------------------------

REFUSED = [
    "http://127.0.0.1",
    "http://169.254.169.254/latest",
    "http://[::1]/",
    "http://localhost:8080",
    "file:///etc/passwd",
    "gopher://x",
    "ftp://example.com/",
    "http://2130706433/",
    "http://0x7f.1/",
    "http://127.1/",
    "http://[::ffff:127.0.0.1]/",
    "http://[64:ff9b::a9fe:a9fe]/",
    "http://10.1.2.3/",
    "http://192.168.0.1/",
    "http://172.16.0.1/",
    "http://100.100.100.200/",
    "http://0.0.0.0/",
    "http://[fd00:ec2::254]/",
    "http://[fe80::1%25eth0]/",
    "http://224.0.0.1/",
    "http://metadata/",
    "http://metadata.google.internal/computeMetadata/v1/",
    "http://printer.local/",
    "http://LOCALHOST./",
    "http://a.localhost/",
    "http://hooks.slack.com@127.0.0.1/",
    "http://127.0.0.1\\@hooks.slack.com/",
    "http:///nohost",
    "http://example.com:99999/",
    "$SLACK_WEBHOOK",
    "",
]
ALLOWED = [
    "https://hooks.slack.com/services/x",
    "https://discord.com/api/webhooks/1/abc",
    "http://example.com:8080/h",
    "https://8.8.8.8/hook",
    "HTTPS://EXAMPLE.COM/x",
    "http://[2001:4860:4860::8888]/",
]


@pytest.mark.parametrize("url", REFUSED)
def test_webhook_url_problem_refuses_local_and_non_http_urls(url: str) -> None:
    problem = webhook_url_problem(url)
    assert problem
    assert "/latest" not in problem and "computeMetadata" not in problem  # the host, never the URL's path


@pytest.mark.parametrize("url", ALLOWED)
def test_webhook_url_problem_allows_public_http_urls(url: str) -> None:
    assert webhook_url_problem(url) is None


def test_post_json_refuses_private_addresses_only_when_blocking(
    receiver: WebhookReceiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(alerts.BLOCK_PRIVATE_ENV, raising=False)
    assert post_json(receiver.url, {"x": 1}) is None and receiver.paths == ["/hook"]
    reason = post_json(receiver.url, {"x": 1}, block=True)
    assert reason and reason.startswith("refused:") and "loopback" in reason
    monkeypatch.setenv(alerts.BLOCK_PRIVATE_ENV, "1")
    assert "loopback" in (post_json(receiver.url, {"x": 1}) or "")
    assert receiver.paths == ["/hook"]


def test_a_public_name_resolving_to_a_private_address_is_refused_at_connect(
    receiver: WebhookReceiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = socket.getaddrinfo

    def resolve(host: str, *args: Any, **kwargs: Any) -> Any:
        return real("127.0.0.1" if host == "hooks.example.com" else host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", resolve)
    url = f"http://hooks.example.com:{receiver.port}/hook"
    assert webhook_url_problem(url) is None  # the URL as written looks public
    reason = post_json(url, {"x": 1}, block=True)
    assert reason and "refused to connect to hooks.example.com" in reason and "loopback" in reason
    assert receiver.paths == []
    assert post_json(url, {"x": 1}, block=False) is None and receiver.paths == ["/hook"]


def test_redirects_are_not_followed_when_blocking(monkeypatch: pytest.MonkeyPatch) -> None:
    hop = WebhookReceiver(redirect=True)
    try:
        monkeypatch.setattr(alerts, "address_problem", lambda ip: None)  # let the test reach its loopback server
        reason = post_json(hop.url, {"x": 1}, block=True)
        assert reason and "302" in reason and "redirects are refused" in reason and hop.paths == ["/hook"]
        assert post_json(hop.url, {"x": 1}, block=False) is None and hop.paths == ["/hook", "/hook", "/elsewhere"]
    finally:
        hop.close()


def test_the_job_side_refuses_a_private_webhook_under_the_block_variable(
    receiver: WebhookReceiver, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv(alerts.BLOCK_PRIVATE_ENV, "1")
    sender = AlertSender("http://169.254.169.254/latest/meta-data/")
    assert sender.webhook_url is None and sender._thread is None
    assert sender.failures and "link-local" in sender.failures[0] and "meta-data" not in sender.failures[0]
    assert "webhook refused" in capsys.readouterr().err
    job = JobHealth({"webhook_url": receiver.url}, budget=None)
    assert job.sender is not None and job.sender.webhook_url is None
    monkeypatch.delenv(alerts.BLOCK_PRIVATE_ENV)
    sender = AlertSender(receiver.url)
    assert sender.webhook_url == receiver.url and not sender.failures
    sender.close()


def test_the_shipped_copy_carries_the_rule() -> None:
    """Jobs import the health package as shipped beside run.yaml: the check must be in that copy, not only here."""
    code = (
        "import sys; sys.path.insert(0, sys.argv[1]); import grpo_health.alerts as a; "
        "print(a.webhook_url_problem('http://127.0.0.1/') is not None, a.BLOCK_PRIVATE_ENV)"
    )
    from grpo_dashboard.health.ship import ship

    dest = ship(Path(os.environ["GRPO_DASHBOARD_DATA_DIR"]).parent / "shipped")
    out = subprocess.run(
        [sys.executable, "-c", code, str(dest.parent)],
        capture_output=True,
        text=True,
        check=True,
        env={"PATH": os.environ["PATH"]},
    )
    assert out.stdout.split() == ["True", "GRPO_DASHBOARD_WEBHOOK_BLOCK_PRIVATE"]


def test_local_jobs_on_a_space_refuse_private_webhook_addresses(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GRPO_DASHBOARD_WEBHOOK_BLOCK_PRIVATE", raising=False)
    monkeypatch.delenv("SYSTEM", raising=False)
    monkeypatch.delenv("SPACE_ID", raising=False)
    spec = RunSpec.from_dict({"name": "x"})
    assert "GRPO_DASHBOARD_WEBHOOK_BLOCK_PRIVATE" not in local_job.job_environment(spec)
    monkeypatch.setenv("SPACE_ID", "owner/space")
    assert local_job.job_environment(spec)["GRPO_DASHBOARD_WEBHOOK_BLOCK_PRIVATE"] == "1"
