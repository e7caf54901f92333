"""The Hugging Face Jobs backend end to end: the real `huggingface_hub` client against the fake Hub of fake_hub.py.

Nothing here reaches the real Hub: HF_ENDPOINT and huggingface_hub's default endpoint both point at the fake, and
only these tests lift HF_HUB_OFFLINE.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from grpo_dashboard.checks import hardware
from grpo_dashboard.errors import BackendError
from grpo_dashboard.launch import backends
from grpo_dashboard.launch.hf_jobs import payload as hf_jobs_payload
from grpo_dashboard.launch.hf_jobs import text as hf_jobs_text
from grpo_dashboard.launch.runs import cancel, launch, reattach, refresh
from grpo_dashboard.spec.jobfiles import job_files
from grpo_dashboard.store.db import Store, data_dir
from grpo_dashboard.views import charts
from grpo_dashboard.views.live import Feed
from grpo_dashboard.views.remote_status import remote_markdown

from .conftest import (
    REPO,
    SMOKE_DATA,
    jsonl_records,
    same_values,
    wait_for,
)
from .fake_hub import FakeHub, Plan
from .hf_jobs_helpers import TOKEN, follow_until_done, hf_spec, logged_records, printed_records, protocol_lines


def job_log(run: Any) -> list[str]:
    return (Path(run.run_dir) / "job.log").read_text().splitlines()


def assert_token_confined(hub: FakeHub, capsys: pytest.CaptureFixture[str], caplog: Any = None) -> None:
    """The token is only ever in the Authorization header and in the job's HF_TOKEN secret."""
    for path in data_dir().rglob("*"):
        if path.is_file():
            assert TOKEN.encode() not in path.read_bytes(), path
    for r in hub.requests:
        assert TOKEN not in r.path and TOKEN not in json.dumps(r.query), r.path
        assert all(TOKEN not in v for k, v in r.headers.items() if k.lower() != "authorization"), r.path
        body = r.body
        if r.method == "POST" and r.path == "/api/jobs/alice":
            spec = json.loads(body)
            assert spec["secrets"] == {"HF_TOKEN": TOKEN}
            spec.pop("secrets")
            body = json.dumps(spec).encode()
        assert TOKEN.encode() not in body, r.path
    out, err = capsys.readouterr()
    assert TOKEN not in out and TOKEN not in err
    if caplog is not None:
        assert TOKEN not in caplog.text


def test_submission_to_completion_stores_exactly_what_the_job_printed(
    hub: FakeHub, tmp_path: Path, capsys: Any, caplog: Any
) -> None:
    hub.plans.append(Plan(lines=protocol_lines(8)))
    store = Store()
    run = launch(hf_spec(tmp_path), store, base_dir=REPO, token=TOKEN)
    job = hub.only_job()
    assert run.backend == "hf_jobs" and run.external_id == f"alice/{job.id}" and run.status in ("queued", "running")
    run = follow_until_done(store, run.id)
    assert run.status == "completed", run.error
    assert same_values(printed_records(job.printed), logged_records(store, run.id))
    assert run.n_records == 8 and run.last_step == 8 and run.max_steps == 8 and run.n_skipped == 1
    assert [e["event"] for e in store.events(run.id)] == ["starting", "started", "finished"]
    assert job_log(run) == job.printed and run.ingest_offset == len(job.printed)
    assert run.output_dir == f"hf://buckets/alice/jobs-artifacts/{run.id}/output"

    (create,) = hub.requests_to("POST", "/api/jobs/alice")
    body = json.loads(create.body)
    assert body["command"] == [
        "uv",
        "run",
        "/data/grpo_job.py",
        "--config",
        "/data/run.yaml",
        "--metrics",
        "/tmp/grpo_dashboard_metrics.jsonl",
    ]
    assert body["dockerImage"] == hf_jobs_payload.IMAGE
    assert body["flavor"] == "cpu-basic" and body["timeoutSeconds"] == 1800
    assert body["environment"] == {
        "PYTHONUNBUFFERED": "1",
        "GRPO_JOB_SAMPLES_STDOUT": "1",
        "GRPO_JOB_SYSTEM_GPUS": "0",
    }  # the dashboard samples the Hub's GPU metrics
    assert body["labels"] == {"app": "grpo-dashboard", "grpo-dashboard-run": run.id, "name": "smoke"}
    assert body["volumes"] == [
        {"type": "bucket", "source": "alice/jobs-artifacts", "mountPath": "/data", "path": run.id, "readOnly": False}
    ]
    uploaded = hub.buckets["alice/jobs-artifacts"]
    job_modules = {p.name: p for p in job_files()}
    assert {"grpo_job.py", "grpo_rewards.py", "grpo_sandbox.py", "grpo_answers.py"} <= set(job_modules)
    assert set(uploaded) == {f"{run.id}/{n}" for n in (*job_modules, "run.yaml", "data/smoke.jsonl")}
    for name, path in job_modules.items():
        assert hub.bucket_file("alice/jobs-artifacts", f"{run.id}/{name}") == path.read_bytes()
    assert hub.bucket_file("alice/jobs-artifacts", f"{run.id}/data/smoke.jsonl") == SMOKE_DATA.read_bytes()
    inner = yaml.safe_load(hub.bucket_file("alice/jobs-artifacts", f"{run.id}/run.yaml"))
    assert inner["model"]["name_or_path"] == "/tmp/grpo-dashboard/tiny-model"
    assert inner["dataset"]["data_files"] == "/data/data/smoke.jsonl" and inner["output_dir"] == "/data/output"
    details = hf_jobs_text.job_details(run)
    assert (
        details["job_id"] == job.id
        and details["timeout_s"] == 1800
        and "--secrets HF_TOKEN" in details["equivalent_command"]
    )
    assert not [r for r in hub.requests if r.path == "/api/whoami-v2"]  # namespace passed everywhere
    assert_token_confined(hub, capsys, caplog)


@pytest.mark.training
def test_a_real_job_runs_from_the_uploaded_files_and_the_store_matches_its_output(
    hub: FakeHub, tmp_path: Path, capsys: Any
) -> None:
    store = Store()
    run = launch(hf_spec(tmp_path), store, base_dir=REPO, token=TOKEN)  # no plan: the fake runs the command
    run = follow_until_done(store, run.id, timeout=600)
    job = hub.only_job()
    assert run.status == "completed", (run.error, job.printed[-20:])
    printed = printed_records(job.printed)
    assert len([k for k in printed if k[0] == "train"]) == 4
    # The store holds what the job printed (its own process samples included) and the dashboard's samples of the
    # Jobs metrics stream (the job samples no GPU itself there), which no job line carries
    assert same_values(printed, logged_records(store, run.id))
    assert any(k[0] == "system" and "system/process/rss_gb" in m for k, m in printed.items())
    assert not any(key.startswith("system/gpu") for m in printed.values() for key in m)
    assert job.workdir is not None
    on_disk = jsonl_records(job.workdir / "tmp" / "grpo_dashboard_metrics.jsonl")
    assert same_values(on_disk, printed)
    assert (job.workdir / "data" / "output" / "model.safetensors").is_file()  # the model lands in the bucket folder
    assert [e["event"] for e in store.events(run.id)] == ["starting", "started", "finished"]
    # The job's sample rows travel back in its log (GRPO_JOB_SAMPLES_STDOUT=1): the completions and trajectory
    # views read them from the run directory like a local run's.
    from grpo_dashboard.views import completions

    steps = completions.sample_steps(run.run_dir)
    assert steps and completions.read_step(run.run_dir, steps[-1])[0]["completion"]
    assert_token_confined(hub, capsys)


def test_a_job_that_fails_reports_the_python_error(hub: FakeHub, tmp_path: Path) -> None:
    hub.plans.append(
        Plan(lines=protocol_lines(3, end="failed"), final="ERROR", message="Job failed with exit code: 1")
    )
    store = Store()
    run = follow_until_done(store, launch(hf_spec(tmp_path), store, base_dir=REPO, token=TOKEN).id)
    assert run.status == "failed" and run.error == "ValueError: boom"
    assert run.n_records == 3


def test_a_job_that_dies_without_a_word_fails_with_the_hub_message_and_last_log_line(
    hub: FakeHub, tmp_path: Path
) -> None:
    lines = protocol_lines(2, end="none") + [
        "Traceback (most recent call last):",
        '  File "grpo_job.py", line 9',
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2 GiB",
        "[rank0]: exiting",
    ]
    hub.plans.append(Plan(lines=lines, final="ERROR", message="Job failed with exit code: 137"))
    store = Store()
    run = follow_until_done(store, launch(hf_spec(tmp_path), store, base_dir=REPO, token=TOKEN).id)
    assert run.status == "failed"
    assert "exit code: 137" in run.error and "OutOfMemoryError" in run.error, run.error


def test_a_job_killed_by_its_timeout_says_so(hub: FakeHub, tmp_path: Path) -> None:
    hub.plans.append(Plan(lines=protocol_lines(2, end="none"), final="ERROR", message="Job timed out after 30m"))
    store = Store()
    run = follow_until_done(store, launch(hf_spec(tmp_path), store, base_dir=REPO, token=TOKEN).id)
    assert run.status == "failed" and "raise backend.timeout" in run.error


def test_cancel_stops_the_job_and_gpu_metrics_and_refresh_never_block(
    hub: FakeHub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GRPO_DASHBOARD_SYSTEM_INTERVAL_S", "0.5")
    hub.plans.append(Plan(lines=protocol_lines(20), hold_at=10))
    store = Store()
    run = launch(hf_spec(tmp_path), store, base_dir=REPO, token=TOKEN)
    wait_for(lambda: refresh(store, store.get_run(run.id)).ingest_offset >= 10, timeout=30)
    assert store.get_run(run.id).status == "running"
    feed = Feed(store, run.id, 0.6)
    # The fake Hub's metrics stream (a sample every 0.2 s, GPU entries included) reaches the store as system series
    wait_for(lambda: len(store.arrays(run.id, "system/gpu0/utilization", "system")) >= 2, timeout=30)
    feed.advance()
    util = store.arrays(run.id, "system/gpu0/utilization", "system")
    assert (util.values >= 90).all() and (util.values <= 94).all()
    assert (np.diff(util.times) >= 0.5 - 0.05).all()  # one sample kept per interval, not every streamed one
    assert np.array_equal(util.steps, (util.times * 1000).astype(np.int64))  # stepped by wall time (ms)
    now = store.latest_metrics(run.id, "system")
    assert now["system/gpu0/memory_total_gb"] == pytest.approx(22.836)
    assert now["system/gpu0/memory_pct"] == pytest.approx(100 * 20 * 2**30 / 22836000000)
    assert 50 <= now["system/cpu/utilization"] <= 59 and now["system/memory/used_gb"] == pytest.approx(2 * 2**30 / 1e9)
    assert store.get_run(run.id).last_step <= 20  # samples are not training steps (max_steps is 20)
    assert "GPU0 9" in remote_markdown(store.get_run(run.id), store)  # "Hardware now" from the newest sample
    # ... and the System chart of Run detail and of the live page draw them, against time
    spec = charts.run_specs(store, run.id, charts.ChartOptions(), None, None, None, ())["system"]
    drawn = {t["meta"]["s"]: t for t in spec[0] if t["meta"]["r"] == "value"}
    assert {
        "system|system/gpu0/utilization",
        "system|system/gpu0/memory_used_gb",
        "system|system/gpu0/memory_pct",
        "system|system/cpu/utilization",
        "system|system/memory/used_gb",
    } <= drawn.keys()
    assert drawn["system|system/gpu0/utilization"]["meta"]["x"] == "relative time"
    shown = drawn["system|system/gpu0/utilization"]["y"]
    assert list(shown[: len(util)]) == list(util.values)
    snapshot = json.loads(feed.snapshot())
    assert any(t["meta"]["s"] == "system|system/gpu0/utilization" for t in snapshot["panels"]["system"]["data"])
    n = len(store.arrays(run.id, "system/gpu0/utilization", "system"))
    wait_for(lambda: len(store.arrays(run.id, "system/gpu0/utilization", "system")) > n, timeout=30)
    assert feed.advance()  # new samples move the run's change token: the live page gets them as a delta
    assert "system|system/gpu0/utilization" in feed.versions[-1].series
    state = backends.shared().hf_jobs.follow_state(run.id)
    assert state is not None and state["stage"] == "RUNNING" and state["phase"] == "streaming"
    started = time.perf_counter()
    for _ in range(20):
        refresh(store, store.get_run(run.id))
    assert (time.perf_counter() - started) / 20 < 0.05  # a UI tick never waits on the network

    run = cancel(store, store.get_run(run.id), wait=True)
    assert run.status == "canceled" and run.error == "canceled by user"
    assert hub.only_job().stage == "CANCELED"
    assert len(hub.requests_to("POST", f"/api/jobs/alice/{hub.only_job().id}/cancel")) == 1


def test_the_stream_dropping_mid_run_resumes_without_loss_or_duplication(hub: FakeHub, tmp_path: Path) -> None:
    lines = protocol_lines(40)
    hub.plans.append(Plan(lines=lines, interval=0.02))
    hub.faults["logs"] = ["drop:7", 503, "drop:11"]  # cut mid-stream, refuse a reconnect, cut again
    store = Store()
    run = follow_until_done(store, launch(hf_spec(tmp_path), store, base_dir=REPO, token=TOKEN).id)
    assert run.status == "completed"
    assert len(hub.requests_to("GET", f"/api/jobs/alice/{hub.only_job().id}/logs")) >= 4
    assert same_values(printed_records(lines), logged_records(store, run.id))
    assert run.n_records == 40 and run.n_skipped == 1
    assert [e["event"] for e in store.events(run.id)] == ["starting", "started", "finished"]
    assert job_log(run) == lines  # every line exactly once, in order


def test_dashboard_restart_mid_run_reattaches_and_misses_nothing(hub: FakeHub, tmp_path: Path) -> None:
    lines = protocol_lines(30)
    hub.plans.append(Plan(lines=lines, hold_at=16))
    store = Store()
    run = launch(hf_spec(tmp_path), store, base_dir=REPO, token=TOKEN)
    wait_for(lambda: refresh(store, store.get_run(run.id)).ingest_offset >= 16, timeout=30)
    backends.restart()  # the dashboard process dies (its threads and in-memory token with it)
    store.close()
    hub.only_job().release.set()  # the job goes on without anyone watching, and ends
    wait_for(lambda: hub.only_job().stage == "COMPLETED", timeout=30)

    restarted = Store()
    assert restarted.get_run(run.id).status == "running"
    (found,) = reattach(restarted, token=TOKEN, namespace="alice")
    assert found.id == run.id
    run = follow_until_done(restarted, run.id)
    assert run.status == "completed"
    assert same_values(printed_records(lines), logged_records(restarted, run.id))
    assert run.n_records == 30 and job_log(run) == lines
    listing = [r for r in hub.requests_to("GET", "/api/jobs/alice") if r.path == "/api/jobs/alice"]
    assert listing and listing[-1].query["label"] == ["app=grpo-dashboard"]


def test_reattach_recreates_runs_a_fresh_dashboard_has_never_seen(
    hub: FakeHub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    lines = protocol_lines(5)
    hub.plans.append(Plan(lines=lines))
    store = Store()
    run = follow_until_done(store, launch(hf_spec(tmp_path), store, base_dir=REPO, token=TOKEN).id)
    monkeypatch.setenv("GRPO_DASHBOARD_DATA_DIR", str(tmp_path / "elsewhere"))
    fresh = Store()
    (found,) = reattach(fresh, token=TOKEN, namespace="alice", owner="alice")
    assert found.id == run.id and found.name == "smoke" and found.owner == "alice"
    again = follow_until_done(fresh, run.id)
    assert again.status == "completed"
    assert same_values(printed_records(lines), logged_records(fresh, run.id))


def test_the_reattach_command_puts_a_lost_stores_runs_back(
    hub: FakeHub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from grpo_dashboard import cli

    hub.plans.append(Plan(lines=protocol_lines(5)))
    store = Store()
    run = follow_until_done(store, launch(hf_spec(tmp_path), store, base_dir=REPO, token=TOKEN).id)
    fresh_dir = tmp_path / "fresh"
    monkeypatch.setenv("GRPO_DASHBOARD_DATA_DIR", str(fresh_dir))  # restored after the test; --data-dir sets it
    monkeypatch.delenv("HF_TOKEN", raising=False)
    capsys.readouterr()
    assert cli.main(["--data-dir", str(fresh_dir), "reattach", "--backend", "hf_jobs"]) == cli.EXIT_FAILED
    assert "hf auth login" in capsys.readouterr().err  # no login: said, and nothing written
    assert Store().list_runs() == []
    monkeypatch.setenv("HF_TOKEN", TOKEN)  # the saved login, as `hf auth login` leaves it for the CLI
    assert cli.main(["--data-dir", str(fresh_dir), "reattach", "--backend", "hf_jobs"]) == cli.EXIT_OK
    out = capsys.readouterr().out
    assert "hf_jobs: 1 run(s) found again:" in out and run.id in out
    again = follow_until_done(Store(), run.id)
    assert again.status == "completed" and again.n_records == 5
    assert TOKEN not in out


def test_401_and_402_and_unknown_namespace_fail_the_run_with_clear_messages(hub: FakeHub, tmp_path: Path) -> None:
    store = Store()
    bad = "hf_SomeoneElsesToken98765"
    run = launch(hf_spec(tmp_path), store, base_dir=REPO, token=bad)
    assert run.status == "failed" and "401" in run.error and "hf auth login" in run.error
    assert bad not in run.error
    hub.no_credits = True
    run = launch(hf_spec(tmp_path), store, base_dir=REPO, token=TOKEN)
    assert run.status == "failed" and "402" in run.error and "credits" in run.error
    assert "positive credit balance" in run.error  # the Hub's own words are kept
    hub.no_credits = False
    run = launch(hf_spec(tmp_path, namespace="bob"), store, base_dir=REPO, token=TOKEN)
    assert run.status == "failed" and "'bob' was not found" in run.error
    assert not hub.jobs


def test_no_token_is_a_clear_error_and_writes_nothing(hub: FakeHub, tmp_path: Path) -> None:
    store = Store()
    with pytest.raises(BackendError, match="hf auth login"):
        launch(hf_spec(tmp_path), store, base_dir=REPO)
    assert store.list_runs() == [] and not (data_dir() / "runs").exists() and not hub.requests


@pytest.mark.parametrize("fault", ["drop-after", "drop", 503])
def test_submission_retries_never_duplicate_the_job(hub: FakeHub, tmp_path: Path, fault: Any) -> None:
    hub.faults["create"] = [fault]
    hub.plans.append(Plan(lines=protocol_lines(2)))
    store = Store()
    run = launch(hf_spec(tmp_path), store, base_dir=REPO, token=TOKEN)
    assert len(hub.jobs) == 1 and run.external_id == f"alice/{hub.only_job().id}"
    posts = len(hub.requests_to("POST", "/api/jobs/alice"))
    assert posts == (1 if fault == "drop-after" else 2)  # found by its label instead of posting again
    lookups = [r for r in hub.requests_to("GET", "/api/jobs/alice") if r.path == "/api/jobs/alice"]
    assert lookups[0].query["label"] == [f"grpo-dashboard-run={run.id}"]
    assert follow_until_done(store, run.id).status == "completed"


def test_live_prices_come_from_the_hardware_endpoint(hub: FakeHub) -> None:
    table = hardware.flavors(token=TOKEN, endpoint=hub.url, live=True)
    assert table["l4x1"].price_per_hour == pytest.approx(0.90) and table["l4x1"].source == "live"
    assert table["h200"].source == "built-in"  # not in the live list: kept from the table


def _cli_env(hub: FakeHub, tmp_path: Path, token: str | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "HF_TOKEN")}
    env.update(
        HF_ENDPOINT=hub.url,
        HF_HOME=str(tmp_path / "hf-home"),
        GRPO_DASHBOARD_HF_POLL_S="0.2",
        HF_HUB_DISABLE_PROGRESS_BARS="1",
    )
    if token:
        env["HF_TOKEN"] = token
    return env


def test_cli_launches_and_follows_an_hf_jobs_spec(hub: FakeHub, tmp_path: Path) -> None:
    hub.plans.append(Plan(lines=protocol_lines(6)))
    proc = subprocess.run(
        [sys.executable, "-m", "grpo_dashboard", "launch", str(hf_spec(tmp_path)), "--wait"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=180,
        env=_cli_env(hub, tmp_path, TOKEN),
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "completed" in proc.stdout and TOKEN not in proc.stdout + proc.stderr
    assert f"job {hub.url}/jobs/alice/{hub.only_job().id} on cpu-basic, timeout 30m (set in the spec)" in proc.stdout
    (run,) = Store().list_runs()
    assert run.n_records == 6 and run.backend == "hf_jobs"
    shown = subprocess.run(
        [sys.executable, "-m", "grpo_dashboard", "logs", run.id],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        env=_cli_env(hub, tmp_path, TOKEN),
    )
    assert "Installed 87 packages" in shown.stdout


def test_cli_without_a_login_says_how_to_log_in(hub: FakeHub, tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "grpo_dashboard", "launch", str(hf_spec(tmp_path))],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        env=_cli_env(hub, tmp_path, None),
    )
    assert proc.returncode == 1 and "hf auth login" in proc.stderr and "Traceback" not in proc.stderr


def test_hardware_now_names_the_cpu_the_job_sampled_instead_of_a_question_mark() -> None:
    # A job whose Jobs metrics stream has not sent a sample yet: only the job's own sampler's keys exist
    sys.path.insert(0, str(REPO / "jobs"))
    try:
        from grpo_job_setup import process_metrics
    finally:
        sys.path.remove(str(REPO / "jobs"))
    _, clock = process_metrics(None)
    sum(i * i for i in range(200_000))  # some CPU time to measure
    sampled, _ = process_metrics(clock)
    line = hf_jobs_text.hardware_now(sampled)
    assert "?" not in line
    assert f"CPU {sampled['system/process/cpu_pct']:.3g}% of one core (training process)" in line
    assert f"RAM {sampled['system/process/rss_gb']:.3g} GB (training process)" in line
    # The job's own CPU and RAM (the Jobs metrics stream) win where both exist; a GPU's missing figures are left out
    both = {**sampled, "system/cpu/utilization": 55.0, "system/memory/used_gb": 2.1, "system/gpu0/memory_used_gb": 3.0}
    line = hf_jobs_text.hardware_now(both)
    assert line == "GPU0 · 3 GB; CPU 55%; RAM 2.1 GB"
    assert hf_jobs_text.hardware_now({"system/gpu1/utilization": float("nan")}) == "GPU1"
