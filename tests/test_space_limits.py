"""The smaller holes of a public Space, each tried against the running app in Space mode (fake Hub, real sign-in):
resume past the active-run cap, a token a job prints kept in the store, a live feed kept per smoothing value."""

from __future__ import annotations

import json
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx
import pytest
from gradio_client import Client

from grpo_dashboard.store.db import Run
from grpo_dashboard.ui import stream

from .conftest import wait_for
from .fake_hub import Plan
from .space_harness import ALICE, MARK, sign_in, space_fixtures
from .test_space import jobs_yaml, launch_args

module_data, data_dir, served, clients = space_fixtures("limits")


def _record(**fields: Any) -> str:
    return MARK + json.dumps({"v": 1, "time": 1.0, **fields})


def _launch(served: dict[str, Any], client: Client, name: str, plan: Plan) -> str:
    served["hub"].plans.append(plan)
    out = client.predict(*launch_args(served["demo"], jobs_yaml(name)), api_name="/launch")
    assert "Launched" in out[0], out[0]
    return out[-1]


@pytest.fixture(scope="module")
def failed_run(served: dict[str, Any], clients: dict[str, Client]) -> str:
    """alice's Jobs run that saved a checkpoint, printed her token and failed quoting it."""
    lines = [
        _record(type="event", event="started", max_steps=10),
        *(_record(type="log", split="train", step=s, max_steps=10, metrics={"reward": 0.1 * s}) for s in range(1, 4)),
        _record(type="event", event="checkpoint", step=2, path="/data/output/checkpoint-2"),
        f"debug: logging in with {ALICE}",
        _record(
            type="event", event="error", error_type="ValueError", message=f"push_to_hub refused the token {ALICE}"
        ),
    ]
    run_id = _launch(
        served,
        clients["alice"],
        "alice-fails",
        Plan(lines=lines, final="ERROR", message=f"job crashed (token {ALICE})"),
    )
    store = served["store"]
    wait_for(lambda: store.get_run(run_id).status == "failed", timeout=60)
    return run_id


def test_a_token_a_job_prints_is_nowhere_at_rest(served: dict[str, Any], failed_run: str, module_data: Path) -> None:
    store = served["store"]
    run = store.get_run(failed_run)
    assert "hf_***" in (run.error or ""), run.error
    assert any("hf_***" in json.dumps(e) for e in store.events(failed_run))
    store.connection().execute("PRAGMA wal_checkpoint(PASSIVE)")
    secret = ALICE.encode()
    leaks = [str(p) for p in module_data.rglob("*") if p.is_file() and secret in p.read_bytes()]
    assert leaks == []


def test_resumes_new_max_steps_is_alices_own_and_bounded(
    served: dict[str, Any], clients: dict[str, Client], failed_run: str
) -> None:
    """The New max_steps input on the Space: bob cannot resume alice's run with it (answered as a missing run), and
    a value that is no whole step count is refused naming the field; no job is submitted either way."""
    hub, store = served["hub"], served["store"]
    jobs_before = len(hub.jobs)
    with pytest.raises(Exception) as bob:
        clients["bob"].predict(failed_run, "2", 50, api_name="/resume_run")
    assert f"No run {failed_run!r} among your runs (signed in as bob)" in str(bob.value)
    with pytest.raises(Exception, match="New max_steps"):
        clients["alice"].predict(failed_run, "2", 1e12, api_name="/resume_run")
    assert len(hub.jobs) == jobs_before and store.get_run(failed_run).status == "failed"


def test_resume_obeys_the_active_run_cap(served: dict[str, Any], clients: dict[str, Client], failed_run: str) -> None:
    store, hub = served["store"], served["hub"]
    lines = [
        _record(type="event", event="started", max_steps=10),
        *(_record(type="log", split="train", step=s, max_steps=10, metrics={"reward": 0.1}) for s in (1, 2)),
    ]
    held = [_launch(served, clients["alice"], f"alice-held-{i}", Plan(lines=lines, hold_at=2)) for i in range(2)]
    wait_for(lambda: all(store.get_run(r).status in ("queued", "running") for r in held), timeout=60)
    jobs_before = len(hub.jobs)
    with pytest.raises(Exception, match="already have 2 queued or running runs"):
        clients["alice"].predict(failed_run, "2", api_name="/resume_run")
    assert store.get_run(failed_run).status == "failed"
    assert len(hub.jobs) == jobs_before
    with pytest.raises(Exception, match="Sign in"):
        clients["anonymous"].predict(failed_run, "2", api_name="/resume_run")
    for run_id in held:
        clients["alice"].predict(run_id, api_name="/cancel_run")


def test_live_feeds_per_run_stay_bounded_whatever_smoothing_is_asked(
    served: dict[str, Any], module_data: Path
) -> None:
    store, url = served["store"], served["url"]
    run_dir = module_data / "runs" / "alice-feeds"
    run_dir.mkdir(parents=True)
    store.insert_run(
        Run(
            id="alice-feeds",
            name="alice-feeds",
            spec_yaml="name: x\n",
            backend="hf_jobs",
            status="running",
            created_at=time.time(),
            run_dir=str(run_dir),
            owner="alice",
        )
    )
    cookie = sign_in(url, "alice")
    for i in range(12):
        with ExitStack() as stack:
            http = stack.enter_context(httpx.Client(timeout=30))
            response = stack.enter_context(
                http.stream(
                    "GET",
                    url + "grpo/live",
                    headers={"Cookie": cookie},
                    params={"run": "alice-feeds", "smoothing": f"0.{10 + i}"},
                )
            )
            assert response.status_code == 200
            next(line for line in response.iter_lines() if line.startswith("data:"))
    hub = served["demo"].live

    def kept() -> int:
        return sum(1 for c in list(hub.channels.values()) if c.feed.run_id == "alice-feeds")

    wait_for(lambda: kept() <= stream.IDLE_PER_RUN + 1, timeout=10)
    assert len([k for k in hub.feeds._feeds if k[1] == "alice-feeds"]) <= stream.IDLE_PER_RUN + 1


def test_the_pages_load_fills_manage_run_only_with_the_visitors_own_run(
    served: dict[str, Any], clients: dict[str, Client], failed_run: str
) -> None:
    """/page_state fills the Manage-run boxes for the run a link opens: alice gets her run's note and tags, bob
    and an anonymous visitor given her run's id get none of them."""
    from grpo_dashboard.store import run_labels

    store = served["store"]
    store.set_note(failed_run, "alice-private-note")
    run_labels.set_tags(store, store.get_run(failed_run), ["alice-secret-tag"], [])
    own = str(clients["alice"].predict(f"?run={failed_run}", api_name="/page_state"))
    assert "alice-private-note" in own and "alice-secret-tag" in own
    for who in ("bob", "anonymous"):
        other = str(clients[who].predict(f"?run={failed_run}", api_name="/page_state"))
        assert "alice-private-note" not in other and "alice-secret-tag" not in other and "alice-fails" not in other
