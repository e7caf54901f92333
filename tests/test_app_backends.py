"""The app's own backends: a run launched and canceled through the served app lives in the `Backends` the app was
built with, not in the process's `backends.shared()`."""

from __future__ import annotations

from pathlib import Path

import pytest
from gradio_client import Client

from grpo_dashboard.launch import backends
from grpo_dashboard.spec import forms
from grpo_dashboard.store.db import Store
from grpo_dashboard.ui import build_app

from .conftest import free_port_app
from .fake_hub import FakeHub, Plan
from .hf_jobs_helpers import TOKEN, hf_spec, protocol_lines


def launch_args(demo: object, text: str) -> list[object]:
    values = forms.values_from_yaml(text)
    return [
        *[
            {"headers": list(forms.REWARD_COLUMNS), "data": values[k]} if k == "rewards" else values[k]
            for k in demo.form_keys
        ],
        text,
    ]  # type: ignore[attr-defined]


def test_an_app_with_its_own_backends_follows_its_runs_there(
    hub: FakeHub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_TOKEN", TOKEN)  # the saved login a local dashboard launches with
    hub.plans.append(Plan(lines=protocol_lines(8), hold_at=3))
    own = backends.Backends()
    store = Store()
    demo = build_app(store, monitor=False, backends=own)
    try:
        client = Client(free_port_app(demo), verbose=False)
        out = client.predict(*launch_args(demo, hf_spec(tmp_path).read_text()), api_name="/launch")
        run_id = out[-1]
        assert "Launched" in out[0] and store.get_run(run_id).backend == "hf_jobs", out[0]
        assert own.hf_jobs.follower(run_id) is not None  # the app's instance follows the job
        assert backends.shared().hf_jobs.follower(run_id) is None  # and the process's knows nothing of it
        client.predict(run_id, api_name="/cancel_run")
        assert store.get_run(run_id).cancel_requested_at is not None
        assert hub.requests_to("POST", f"/api/jobs/alice/{hub.only_job().id}/cancel")
    finally:
        demo.close()
        own.stop()
