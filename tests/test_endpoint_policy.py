"""Every endpoint of the running app has a declared policy, and the gate applies it (space/policy.py, ui/guard.py).

The app is served in Space mode (fake Hub, real OAuth sign-in for alice and bob). Its endpoints are enumerated from
the running server — `/gradio_api/info`, every registered event handler (private ones too: the page calls them by
index) and every HTTP route — and each must be declared; a handler registered without the gate makes the app
refuse to build or launch.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import gradio as gr
import httpx
import pytest
from gradio_client import Client

from grpo_dashboard.space import policy
from grpo_dashboard.space.budget import Busy, FairPool, RateBudget, UploadQuota
from grpo_dashboard.spec import presets
from grpo_dashboard.ui import build_app, guard
from grpo_dashboard.ui.route_gate import declared_routes

from .space_harness import sign_in, space_fixtures

SMOKE = presets.preset_yaml(presets.DEFAULT_PRESET)
README_SECURITY = Path(__file__).resolve().parents[1] / "SECURITY.md"


module_data, data_dir, served, clients = space_fixtures("policy")


# --- the declaration covers the running app ------------------------------------------------------------------------
def test_every_api_endpoint_of_the_running_app_has_a_policy(served: dict[str, Any]) -> None:
    info = httpx.get(served["url"] + "gradio_api/info", timeout=30).json()
    named = {name.lstrip("/") for name in info["named_endpoints"]}
    assert named and named <= set(policy.ENDPOINTS), sorted(named - set(policy.ENDPOINTS))
    demo = served["demo"]
    assert guard.ungated(demo) == []
    handlers = {getattr(f.fn, guard.GATE_ATTR) for f in demo.fns.values() if f.fn is not None}
    assert handlers <= set(policy.ENDPOINTS)
    assert set(policy.ENDPOINTS) <= handlers, "a declared endpoint that no longer exists: remove it"


def test_every_http_route_of_the_running_app_is_declared(served: dict[str, Any]) -> None:
    routes = declared_routes(served["demo"].server_app)
    assert len(routes) > 60
    missing = [
        (path, method)
        for path, method in routes
        if path not in policy.ROUTES or method not in policy.ROUTES[path].methods
    ]
    assert missing == []


def test_denied_and_undeclared_routes_answer_404(served: dict[str, Any]) -> None:
    url = served["url"].rstrip("/")
    cookie = {"Cookie": sign_in(served["url"], "alice")}
    for path in (
        "/monitoring",
        "/gradio_api/vibe-code",
        "/gradio_api/run-history/buckets",
        "/openapi.json",
        "/gradio_api/token",
        "/gradio_api/proxy=https://example.com/x",
        "/no/such/route",
    ):
        answer = httpx.get(url + path, headers=cookie, timeout=30)
        assert answer.status_code == 404, (path, answer.status_code)
    assert httpx.post(url + "/gradio_api/run-history/connect", json={}, headers=cookie).status_code == 404
    assert httpx.get(url + "/config", timeout=30).status_code == 200


def test_an_ungated_handler_stops_the_app_from_being_built(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("GRPO_DASHBOARD_DATA_DIR", str(tmp_path))
    demo = build_app(monitor=False)
    with demo:
        button = gr.Button(visible=False)
        button.click(lambda: "no policy", None, None, api_name="sneaky")
    with pytest.raises(RuntimeError, match="without a policy: sneaky"):
        guard.seal(demo, demo.ctx)
    with pytest.raises(RuntimeError, match="sneaky"):
        demo.launch(prevent_thread_lock=True, server_name="127.0.0.1", server_port=0, quiet=True)
    with pytest.raises(KeyError, match="declare it in grpo_dashboard/space/policy.py"):
        guard.gate(demo.ctx, "sneaky", lambda: None)


def test_security_md_lists_every_endpoint_as_declared() -> None:
    assert policy.markdown_table() in README_SECURITY.read_text(encoding="utf-8")


# --- who may call what ---------------------------------------------------------------------------------------------
def test_signed_in_endpoints_refuse_anonymous_callers_before_reading_input(served: dict[str, Any]) -> None:
    demo = served["demo"]
    refused = []
    for block_fn in demo.fns.values():
        name = getattr(block_fn.fn, guard.GATE_ATTR, None) if block_fn.fn else None
        if name is None or policy.ENDPOINTS[name].who != policy.SIGNED_IN:
            continue
        with pytest.raises(gr.Error, match="Sign in with Hugging Face"):
            block_fn.fn(None, None, *([object()] * 200))  # inputs that would break any handler that read them
        refused.append(name)
    assert {
        "import_trl",
        "import_run",
        "form_to_yaml",
        "yaml_to_form",
        "export_metrics",
        "resume_run",
        "check_rewards",
        "launch",
    } <= set(refused)


def test_anonymous_calls_are_refused_through_the_api(clients: dict[str, Client]) -> None:
    recipe = "model_name_or_path: x\naccelerator_config: /dev/zero\n"
    with pytest.raises(Exception, match="Sign in with Hugging Face"):
        clients["anonymous"].predict(recipe, None, api_name="/import_trl")
    with pytest.raises(Exception, match="Sign in with Hugging Face"):
        clients["anonymous"].predict(SMOKE, api_name="/yaml_to_form")


def test_text_caps_hold_per_endpoint(clients: dict[str, Client]) -> None:
    with pytest.raises(Exception, match="over the limit of 400"):
        clients["alice"].predict("x" * 401, api_name="/open_run_by_ref")


# --- bounded work ------------------------------------------------------------------------------------------------
@contextlib.contextmanager
def alices_share_held(served: dict[str, Any]) -> Iterator[None]:
    """alice's share of the editor pool is taken by a call of hers that is still running (as a slow parse would)."""
    pool = guard.budgets(served["demo"].ctx).pools["edit"]
    release = threading.Event()
    holder = threading.Thread(target=pool.run, args=("user:alice", release.wait, 60.0, "test"), daemon=True)
    holder.start()
    try:
        for _ in range(100):
            if pool.in_use("user:alice"):
                break
            threading.Event().wait(0.05)
        yield
    finally:
        release.set()
        holder.join(10)


def test_a_user_holding_the_pool_is_told_busy_while_another_user_gets_a_worker(
    served: dict[str, Any], clients: dict[str, Client]
) -> None:
    with alices_share_held(served):
        with pytest.raises(Exception, match="still running"):
            clients["alice"].predict(SMOKE, api_name="/yaml_to_form")
        assert "YAML applied" in str(clients["bob"].predict(SMOKE, api_name="/yaml_to_form"))
    assert "YAML applied" in str(clients["alice"].predict(SMOKE, api_name="/yaml_to_form"))


def test_one_users_flood_is_told_busy_and_does_not_queue_another_user(
    served: dict[str, Any], clients: dict[str, Client]
) -> None:
    """alice sends eight ~117 KiB YAML texts at once (the stall attack) while her share of the pool is busy: each is
    told busy at once, none waits for a worker, and bob's call is answered meanwhile. Sent again with her share free,
    each is answered or told busy, never queued behind the others."""
    big = "name: big\ndataset:\n  data_files:\n" + "".join(
        f"  - data/shard-{i:06d}-with-a-long-name.jsonl\n" for i in range(3000)
    )
    assert len(big) > 110_000

    def flood() -> list[str]:
        jobs = [clients["alice"].submit(big, api_name="/yaml_to_form") for _ in range(8)]
        assert "YAML applied" in str(clients["bob"].predict(SMOKE, api_name="/yaml_to_form"))
        outcomes = []
        for job in jobs:
            try:
                job.result(timeout=120)
                outcomes.append("answered")
            except Exception as exc:  # the refusal is what is counted
                outcomes.append("busy" if "still running" in str(exc) else str(exc)[:200])
        return outcomes

    with alices_share_held(served):  # so that the refusal does not depend on how fast this machine parses
        assert flood() == ["busy"] * 8
    outcomes = flood()
    assert "answered" in outcomes and set(outcomes) <= {"answered", "busy"}, outcomes


def test_fair_pool_shares_and_refuses_without_queueing() -> None:
    pool = FairPool("t", workers=2, per_user=1)
    gate_a, gate_b = threading.Event(), threading.Event()
    a = threading.Thread(target=pool.run, args=("a", gate_a.wait, 10.0, "x"))
    b = threading.Thread(target=pool.run, args=("b", gate_b.wait, 10.0, "x"))
    a.start()
    b.start()
    for _ in range(100):
        if pool.in_use() == 2:
            break
        threading.Event().wait(0.02)
    with pytest.raises(Busy, match="still running"):
        pool.run("a", lambda: 1, 1.0, "x")
    with pytest.raises(Busy, match="All 2 workers"):
        pool.run("c", lambda: 1, 1.0, "x")
    gate_a.set()
    a.join(5)
    assert pool.run("c", lambda: 7, 5.0, "x") == 7
    gate_b.set()
    b.join(5)
    assert pool.in_use() == 0


def test_a_users_share_of_work_is_bounded_over_a_window() -> None:
    pool = FairPool("edit", workers=2, per_user=1, busy_s=0.05, window_s=600.0)
    assert pool.run("a", lambda: time.sleep(0.06) or "done", 5.0, "x") == "done"
    with pytest.raises(Busy, match=r"kept the edit workers busy for 0\.\d s in the last 600 s"):
        pool.run("a", lambda: 1, 5.0, "x")
    assert pool.run("b", lambda: 2, 5.0, "x") == 2  # another user is not charged for it


def test_rate_budget_and_upload_quota_name_the_limit() -> None:
    budget = RateBudget(2, 60.0)
    budget.take("u", "import", now=0.0)
    budget.take("u", "import", now=1.0)
    with pytest.raises(Busy, match=r"at most 2 per 60 s per user.*Try again in 59 s"):
        budget.take("u", "import", now=1.0)
    budget.take("v", "import", now=1.0)
    budget.take("u", "import", now=60.5)
    quota = UploadQuota(files=2, nbytes=100, window_s=10.0)
    assert quota.take("u", 60, now=0.0) is None
    assert "at most 2 uploads and 0 MB" in (quota.take("u", 60, now=1.0) or "")  # 120 bytes > 100
    assert quota.take("u", 30, now=1.0) is None
    assert "used: 2 uploads" in (quota.take("u", 1, now=2.0) or "")
    assert quota.take("v", 1, now=2.0) is None
    assert quota.take("u", 1, now=11.0) is None


def test_uploads_need_sign_in_and_spend_a_quota(served: dict[str, Any]) -> None:
    url = served["url"]
    assert httpx.post(url + "gradio_api/upload", files={"files": ("a.txt", b"a")}).status_code == 401
    budgets = guard.budgets(served["demo"].ctx)
    before, budgets.uploads = budgets.uploads, UploadQuota(files=3, nbytes=2**20, window_s=600.0)
    try:
        bob, alice = {"Cookie": sign_in(url, "bob")}, {"Cookie": sign_in(url, "alice")}
        answers = [
            httpx.post(url + "gradio_api/upload", files={"files": ("a.txt", b"a" * 1000)}, headers=bob, timeout=30)
            for _ in range(4)
        ]
        assert [a.status_code for a in answers] == [200, 200, 200, 429]
        assert "upload quota reached: at most 3 uploads" in answers[-1].text
        assert (
            httpx.post(url + "gradio_api/upload", files={"files": ("a.txt", b"a")}, headers=alice).status_code == 200
        )
    finally:
        budgets.uploads = before
