"""Remote faults of the Hugging Face Hub, against the fake Hub of fake_hub.py and the real `huggingface_hub` client:
rate limits (HTTP 429, with and without Retry-After) and answers that come later than the client waits, on the job's
submission, its status polls and its log reads. Retries are bounded, say what is happening, never submit the job
twice, and the store ends holding exactly what the job printed.

Backoffs are shortened by the existing knobs (hub_calls.RETRY_BASE_S, GRPO_DASHBOARD_HF_POLL_S) and the client's wait
by GRPO_DASHBOARD_HF_TIMEOUT_S, so each test takes a few seconds.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

from grpo_dashboard.launch import backends
from grpo_dashboard.launch.hf_jobs import hub_calls
from grpo_dashboard.launch.hf_jobs import hub_calls as hf_jobs_hub_calls
from grpo_dashboard.launch.runs import launch, reattach, refresh
from grpo_dashboard.store.db import Store
from grpo_dashboard.views.remote_status import remote_markdown

from .conftest import REPO, same_values, wait_for
from .fake_hub import FakeHub, Plan
from .hf_jobs_helpers import TOKEN, follow_until_done, hf_spec, logged_records, printed_records, protocol_lines

CLIENT_TIMEOUT_S = 2
SLOW_S = 4  # the fake's late answers: well past CLIENT_TIMEOUT_S


@pytest.fixture
def notices(caplog: pytest.LogCaptureFixture) -> Any:
    """The backend's retry notices (what it says while it waits to try again)."""
    caplog.set_level(logging.WARNING, logger=hub_calls.__name__)
    return lambda: [r.getMessage() for r in caplog.records if r.name == hub_calls.__name__]


@pytest.fixture
def short_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GRPO_DASHBOARD_HF_TIMEOUT_S", str(CLIENT_TIMEOUT_S))


def posts(hub: FakeHub) -> list[Any]:
    """Job submissions the fake received (not cancels)."""
    return [r for r in hub.requests if r.method == "POST" and r.path == "/api/jobs/alice"]


def label_lookups(hub: FakeHub) -> list[Any]:
    return [
        r
        for r in hub.requests
        if r.method == "GET"
        and r.path == "/api/jobs/alice"
        and any(v.startswith("grpo-dashboard-run=") for v in r.query.get("label", []))
    ]


def assert_exactly_what_was_printed(store: Store, run_id: str, lines: list[str]) -> None:
    run = store.get_run(run_id)
    assert run.status == "completed", run.error
    assert same_values(printed_records(lines), logged_records(store, run_id))
    assert run.ingest_offset == len(lines)
    assert [e["event"] for e in store.events(run_id)] == ["starting", "started", "finished"]


# --- rate limits ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("retry_after", [None, "1"])
def test_rate_limited_submission_backs_off_then_posts_once_more_and_never_twice(
    hub: FakeHub, tmp_path: Path, notices: Any, retry_after: str | None
) -> None:
    refusal = 429 if retry_after is None else (429, {"Retry-After": retry_after})
    hub.faults["create"] = [refusal, refusal]
    lines = protocol_lines(4)
    hub.plans.append(Plan(lines=lines))
    store = Store()
    run = launch(hf_spec(tmp_path), store, base_dir=REPO, token=TOKEN)
    assert len(posts(hub)) == 3 and len(hub.jobs) == 1, "two refusals, then one accepted submission"
    assert run.external_id == f"alice/{hub.only_job().id}"
    assert not label_lookups(hub)  # a 429 is a refusal: nothing to look for
    waits = ["0.05", "0.1"] if retry_after is None else ["1", "1"]  # backoff, or what the Hub asked for
    assert notices() == [
        f"rate limited by the Hub (HTTP 429) while trying to submit the job; retrying in {w} s (attempt {i} of 3)"
        for i, w in enumerate(waits, start=2)
    ]
    follow_until_done(store, run.id)
    assert_exactly_what_was_printed(store, run.id, lines)


def test_submission_rate_limited_for_good_fails_the_run_after_bounded_attempts(
    hub: FakeHub, tmp_path: Path, notices: Any
) -> None:
    hub.faults["create"] = [(429, {"Retry-After": "0"})] * 50
    store = Store()
    run = launch(hf_spec(tmp_path), store, base_dir=REPO, token=TOKEN)
    assert run.status == "failed"
    assert "Rate-limited by the Hub (429) while trying to submit the job (3 attempts)" in run.error, run.error
    assert len(posts(hub)) == hf_jobs_hub_calls.SUBMIT_ATTEMPTS == 3 and not hub.jobs
    assert len(notices()) == 2 and TOKEN not in run.error


def launch_held(hub: FakeHub, tmp_path: Path) -> tuple[list[str], Store, Any]:
    """A launched job the fake holds after 10 of its 20 records, once those are ingested: (lines, store, run)."""
    lines = protocol_lines(20)
    hub.plans.append(Plan(lines=lines, hold_at=10))
    store = Store()
    run = launch(hf_spec(tmp_path), store, base_dir=REPO, token=TOKEN)
    wait_for(lambda: refresh(store, store.get_run(run.id)).ingest_offset >= 10, timeout=30)
    return lines, store, run


def test_rate_limited_status_polls_wait_as_asked_say_so_and_lose_nothing(hub: FakeHub, tmp_path: Path) -> None:
    lines, store, run = launch_held(hub, tmp_path)
    hub.faults["inspect"] = [(429, {"Retry-After": "1"})] * 3
    expected = "rate limited by the Hub (HTTP 429) while checking the job's status; retrying in 1 s"
    wait_for(lambda: expected in remote_markdown(store.get_run(run.id)), timeout=30)
    wait_for(lambda: not hub.faults["inspect"], timeout=30)  # the limit was lifted, the polls went on
    assert store.get_run(run.id).status == "running"  # a rate limit never fails a live run
    hub.only_job().release.set()
    follow_until_done(store, run.id)
    assert_exactly_what_was_printed(store, run.id, lines)
    assert len(posts(hub)) == 1


# --- answers later than the client waits -----------------------------------------------------------------------
@pytest.mark.usefixtures("short_timeout")
def test_submission_whose_answer_times_out_finds_the_created_job_instead_of_posting_again(
    hub: FakeHub, tmp_path: Path, notices: Any
) -> None:
    hub.faults["create"] = [f"slow-after:{SLOW_S}"]  # the Hub created the job but answers too late
    lines = protocol_lines(4)
    hub.plans.append(Plan(lines=lines))
    store = Store()
    run = launch(hf_spec(tmp_path), store, base_dir=REPO, token=TOKEN)
    assert len(posts(hub)) == 1 and len(hub.jobs) == 1 and run.external_id == f"alice/{hub.only_job().id}"
    assert len(label_lookups(hub)) == 1
    assert notices()[0] == (
        f"the Hub did not answer within {CLIENT_TIMEOUT_S} s while trying to submit the job "
        f"(ReadTimeout); retrying in 0.05 s (attempt 2 of 3)"
    )
    follow_until_done(store, run.id)
    assert_exactly_what_was_printed(store, run.id, lines)


@pytest.mark.usefixtures("short_timeout")
def test_submission_never_answered_in_time_fails_clearly_after_bounded_attempts(hub: FakeHub, tmp_path: Path) -> None:
    hub.faults["create"] = [f"slow:{SLOW_S}"] * 3  # each attempt: no answer in time, nothing created
    store = Store()
    run = launch(hf_spec(tmp_path), store, base_dir=REPO, token=TOKEN)
    assert run.status == "failed"
    assert (
        f"The Hugging Face Hub did not answer within {CLIENT_TIMEOUT_S} s while trying to submit the job (3 attempts)"
    ) in run.error, run.error
    assert len(posts(hub)) == 3 and not hub.jobs
    assert len(label_lookups(hub)) == 3  # looked for before every new post, and once more before giving up


@pytest.mark.usefixtures("short_timeout")
def test_status_polls_that_time_out_are_retried_and_shown(hub: FakeHub, tmp_path: Path) -> None:
    lines, store, run = launch_held(hub, tmp_path)
    hub.faults["inspect"] = [f"slow:{SLOW_S}"] * 2
    expected = (
        f"the Hub did not answer within {CLIENT_TIMEOUT_S} s while checking the job's status "
        f"(ReadTimeout); retrying in"
    )
    wait_for(lambda: expected in remote_markdown(store.get_run(run.id)), timeout=30)
    wait_for(lambda: not hub.faults["inspect"], timeout=30)
    assert store.get_run(run.id).status == "running"
    hub.only_job().release.set()
    follow_until_done(store, run.id)
    assert_exactly_what_was_printed(store, run.id, lines)
    assert len(posts(hub)) == 1


def test_a_slow_log_replay_after_a_restart_is_read_again_not_taken_for_an_empty_log(
    hub: FakeHub, tmp_path: Path
) -> None:
    lines = protocol_lines(6)
    hub.plans.append(Plan(lines=lines, hold_at=0))
    store = Store()
    run = launch(hf_spec(tmp_path), store, base_dir=REPO, token=TOKEN)
    backends.restart()  # the dashboard goes away before it has read a line
    store.close()
    hub.only_job().release.set()
    wait_for(lambda: hub.only_job().stage == "COMPLETED", timeout=30)
    # The finished job's log is replayed without following, and huggingface_hub waits 5 s for it: answer later.
    hub.faults["logs"] = ["slow:7"]
    restarted = Store()
    (found,) = reattach(restarted, token=TOKEN, namespace="alice")
    follow_until_done(restarted, found.id)
    assert_exactly_what_was_printed(restarted, run.id, lines)


# --- a Hub without buckets ----------------------------------------------------------------------------------------
def test_a_hub_without_the_buckets_api_is_named_not_a_missing_namespace(hub: FakeHub, tmp_path: Path) -> None:
    hub.no_buckets = True
    store = Store()
    run = launch(hf_spec(tmp_path), store, base_dir=REPO, token=TOKEN)
    assert run.status == "failed" and not hub.jobs
    assert "has no Storage Buckets API" in run.error and "namespace 'alice' exists" in run.error, run.error
    assert "was not found" not in run.error and TOKEN not in run.error
    hub.no_buckets = False  # a namespace that really is missing keeps its own message
    run = launch(hf_spec(tmp_path, namespace="nobody"), store, base_dir=REPO, token=TOKEN)
    assert run.status == "failed" and "Buckets API" not in (run.error or "")
