"""A plain TRL script run from a shell (not launched by the dashboard) with `DashboardCallback`, watched live in
headless Chromium against the running app: through the directory transport (the dashboard's data directory) and
through the HTTP transport (POST /grpo/ingest of the same app), the run's page shows what a launched run's shows
(status, the reward and KL charts growing while it trains, health, system, sample completions).

The Space's HTTP transport with two users (each sees only their own) is test_external_http.py's."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from grpo_dashboard.store.db import ACTIVE, Store
from grpo_dashboard.store.external import EXTERNAL
from grpo_dashboard.ui import build_app, launch_options

from . import test_external_callback, test_external_http
from .conftest import free_port, wait_for
from .test_ui_browser import ARTIFACTS, CHROMIUM, CHROMIUM_ARGS, POINTS_JS

pytestmark = [pytest.mark.browser, pytest.mark.training]

STEPS = "8"
SLOW = "1.5"  # seconds each step waits: the run is still training while the page is checked
HOLD_AT = "2"  # each script waits after this step until its page has been opened


@pytest.fixture
def app(data_dir: Path) -> Iterator[tuple[str, Store]]:
    store = Store()
    demo = build_app(store)
    _, url, _ = demo.launch(
        prevent_thread_lock=True, server_name="127.0.0.1", server_port=free_port(), quiet=True, **launch_options()
    )
    try:
        yield url, store
    finally:
        for run in store.list_runs(status=list(ACTIVE)):
            store.finish_run(run.id, "canceled")
        demo.close()
        demo.monitor.stop()


@pytest.fixture
def browser(request: pytest.FixtureRequest) -> Iterator[Any]:
    sync_api = pytest.importorskip("playwright.sync_api")
    if not CHROMIUM.exists():
        pytest.skip("needs Debian's chromium at /usr/bin/chromium")
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        failed = request.session.testsfailed
        try:
            yield b
        finally:
            if request.session.testsfailed > failed:
                ARTIFACTS.mkdir(exist_ok=True)
                for i, pg in enumerate(b.contexts[0].pages if b.contexts else []):
                    pg.screenshot(path=str(ARTIFACTS / f"failure-external-browser-{i}.png"), full_page=True)
            b.close()


def new_page(browser: Any) -> Any:
    """A page that records console errors."""
    pg = browser.new_page(viewport={"width": 1400, "height": 1000})
    pg.set_default_timeout(90_000)
    pg.console_errors = []
    pg.on("console", lambda m: pg.console_errors.append(m.text) if m.type == "error" else None)
    pg.on("pageerror", lambda e: pg.console_errors.append(str(e)))
    return pg


def text_of(selector: str, text: str) -> str:
    """A page predicate: the element's text contains `text`."""
    return f"() => ((document.querySelector('{selector}') || {{}}).innerText || '').includes('{text}')"


def watch_live(page: Any, url: str, store: Store, run_id: str, proc: Any, release: Path) -> None:
    """The run's page while the script trains: every panel a launched run's page shows, the charts growing.

    The script waits after step HOLD_AT until `release` exists, so the page is open before the run goes on."""
    page.goto(f"{url}?run={run_id}&tab=detail")
    page.wait_for_function(text_of("#live-status", run_id))
    page.wait_for_function(f"() => ({POINTS_JS})('#plot-reward') >= 1")
    first = page.evaluate(POINTS_JS, "#plot-reward")
    assert first <= int(HOLD_AT) and proc.poll() is None, "the script went past its hold"
    release.touch()
    page.wait_for_function(f"() => ({POINTS_JS})('#plot-reward') > {first}")  # pushed while it trains, no reload
    assert proc.poll() is None or store.get_run(run_id).last_step > first
    for panel in ("#plot-kl", "#plot-length", "#plot-loss", "#plot-system"):
        page.wait_for_function(f"() => ({POINTS_JS})('{panel}') >= 1")
    page.wait_for_function("() => (document.querySelector('#live-findings').innerText || '').trim().length > 0")
    findings = page.locator("#live-findings").inner_text()
    assert "health problems" in findings or "step" in findings, findings
    page.get_by_role("tab", name="Completions", exact=True).click()
    page.wait_for_function(text_of("#samples-note", "completions"))
    page.wait_for_function(text_of("#samples-table", "Say "))  # the script's prompts
    assert "letter_reward" in page.locator("#samples-table").inner_text()
    page.get_by_role("tab", name="Charts", exact=True).click()


def test_plain_script_is_live_in_chromium_through_each_transport(
    app: tuple[str, Store], browser: Any, tiny_model: Path, tmp_path: Path, data_dir: Path
) -> None:
    url, store = app
    releases = {name: tmp_path / f"release-{name}" for name in ("by-dir", "by-http")}
    common = ("--steps", STEPS, "--step-sleep", SLOW, "--hold-at", HOLD_AT)
    by_dir = test_external_callback.start_script(
        tiny_model, tmp_path / "dir", data_dir, *common, "--hold", str(releases["by-dir"]), "--run-name", "by-dir"
    )
    by_http = test_external_http.start_script(
        tiny_model, tmp_path / "http", url, *common, "--hold", str(releases["by-http"]), "--run-name", "by-http"
    )
    procs = {"by-dir": by_dir, "by-http": by_http}
    pages: dict[str, Any] = {}
    try:
        # each run in its own page, opened while the script trains and watched to its end without a reload
        for name, proc in procs.items():
            run = wait_for(
                lambda n=name: next((r for r in store.list_runs() if r.name == n and r.n_records >= 1), None),
                timeout=240,
            )
            assert run.backend == EXTERNAL and run.status == "running"
            pages[name] = new_page(browser)
            watch_live(pages[name], url, store, run.id, proc, releases[name])
        for name, proc in procs.items():
            out, _ = proc.communicate(timeout=300)
            assert proc.returncode == 0, out[-3000:]
            (run,) = [r for r in store.list_runs() if r.name == name]
            run = wait_for(lambda r=run: (x := store.get_run(r.id)).status == "completed" and x, timeout=60)
            assert run.last_step == int(STEPS)
            page = pages[name]
            page.wait_for_function(text_of("#live-status", "completed"))
            page.wait_for_function(f"() => ({POINTS_JS})('#plot-reward') >= {STEPS}")
            # the Runs table lists it
            page.get_by_role("tab", name="Runs", exact=True).click()
            page.wait_for_function(text_of("#runs-table", run.id))
            ARTIFACTS.mkdir(exist_ok=True)
            page.screenshot(path=str(ARTIFACTS / f"external-{name}.png"), full_page=False)
            assert page.console_errors == [], (name, page.console_errors)
    finally:
        for release in releases.values():
            release.touch()
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
