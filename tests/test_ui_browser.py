"""The real app in headless Chromium: pick the smoke preset, launch, watch the reward chart grow, read completions,
cancel a second run. Saves a screenshot of the run detail page to test-artifacts/run_detail.png.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from grpo_dashboard.launch import logs, runs
from grpo_dashboard.store.db import ACTIVE, TERMINAL, Store
from grpo_dashboard.ui import build_app, launch_options

from .conftest import REPO, free_port, wait_for

pytestmark = pytest.mark.browser

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
ARTIFACTS = REPO / "test-artifacts"


def chromium_browser() -> Iterator[Any]:
    """Debian's Chromium under Playwright, for a module's `browser` fixture (skips where either is missing)."""
    sync_api = pytest.importorskip("playwright.sync_api")
    if not CHROMIUM.exists():
        pytest.skip("needs Debian's chromium at /usr/bin/chromium")
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield b
        b.close()


SMOKE = "smoke (offline CPU test)"

# Points of the longest trace of a plotly chart inside a gr.Plot: plotly keeps the decoded traces (our x arrays
# arrive as base64 typed arrays) in the graph div's _fullData.
POINTS_JS = """(sel) => {
  const gd = document.querySelector(sel + ' .js-plotly-plot');
  if (!gd || !gd._fullData) return 0;
  return Math.max(0, ...gd._fullData.map(t => (t.x && t.x.length) || 0));
}"""


@pytest.fixture
def app_url(data_dir: Path) -> Iterator[tuple[str, Store, Any]]:
    store = Store()
    demo = build_app(store)
    _, url, _ = demo.launch(
        prevent_thread_lock=True, server_name="127.0.0.1", server_port=free_port(), quiet=True, **launch_options()
    )
    try:
        yield url, store, demo
    finally:
        for run in store.list_runs(status=list(ACTIVE)):
            runs.cancel(store, run, wait=True)
        demo.close()
        demo.monitor.stop()


@pytest.fixture
def page(app_url: tuple[str, Store, Any], request: pytest.FixtureRequest) -> Iterator[Any]:
    sync_api = pytest.importorskip("playwright.sync_api")
    if not CHROMIUM.exists():
        pytest.skip("needs Debian's chromium at /usr/bin/chromium")
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        pg = browser.new_page(viewport={"width": 1400, "height": 1000})
        pg.set_default_timeout(60_000)
        failed_before = request.session.testsfailed
        try:
            yield pg
        finally:
            if request.session.testsfailed > failed_before:  # the call phase is reported before teardown
                ARTIFACTS.mkdir(exist_ok=True)
                pg.screenshot(path=str(ARTIFACTS / "failure.png"), full_page=True)
            browser.close()


def launch_from_form(page: Any, max_steps: int) -> None:
    """Choose the smoke preset, set max_steps, press Launch, land on the run detail tab."""
    page.get_by_role("tab", name="New run", exact=True).click()
    page.locator("#preset input").click()
    page.get_by_role("option", name=SMOKE, exact=True).click()
    page.wait_for_function("() => document.querySelector('#new-run-summary').innerText.includes('Loaded preset')")
    fill(page, "field-training-max-steps", str(max_steps))
    page.wait_for_function(f"() => document.querySelector('#spec-yaml').innerText.includes('max_steps: {max_steps}')")
    page.locator("#launch-btn").click()
    page.wait_for_function(
        "() => document.querySelector('#new-run-summary').innerText.includes('Launched')", timeout=120_000
    )
    page.get_by_role("tab", name="Run detail", exact=True).wait_for()


def fill(page: Any, elem_id: str, value: str) -> None:
    """Type into a form field (a number input or a textbox) and leave it, as a user would."""
    box = page.locator(f"#{elem_id}").locator("input, textarea").first
    box.fill(value)
    box.press("Tab")


def current_run_id(page: Any, store: Store, before: set[str]) -> str:
    return wait_for(lambda: next((r.id for r in store.list_runs() if r.id not in before), None), timeout=60)


def test_launch_watch_completions_and_cancel(page: Any, app_url: tuple[str, Store, Any]) -> None:
    url, store, demo = app_url
    page.goto(url, wait_until="load")
    page.wait_for_selector("#launch-btn")

    launch_from_form(page, max_steps=300)
    run_id = current_run_id(page, store, set())
    assert "max_steps: 300" in store.get_run(run_id).spec_yaml
    page.wait_for_function(f"() => document.querySelector('#detail-status').innerText.includes('{run_id}')")

    deadline = time.monotonic() + 240
    while store.get_run(run_id).n_records < 3:
        run = store.get_run(run_id)
        assert time.monotonic() < deadline and run.status not in TERMINAL, (
            f"run {run.status} with {run.n_records} records; monitor passes={demo.monitor.passes} "
            f"last_error={demo.monitor.last_error}; log: {logs.tail(runs.log_path(run), 5)}"
        )
        time.sleep(1)
    # Live curves: the reward chart gains points while we watch, without reloading the page.
    page.wait_for_function(f"() => ({POINTS_JS})('#plot-reward') >= 3", timeout=240_000)
    first = page.evaluate(POINTS_JS, "#plot-reward")
    time.sleep(6)
    page.wait_for_function(f"() => ({POINTS_JS})('#plot-reward') > {first}", timeout=120_000)
    second = page.evaluate(POINTS_JS, "#plot-reward")
    assert second > first
    assert "KL not logged: beta is 0" in page.locator("#plot-kl").inner_text()
    assert page.evaluate(POINTS_JS, "#plot-length") >= first

    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "run_detail.png"), full_page=True)

    # Sample completions of the latest step.
    page.get_by_role("tab", name="Completions", exact=True).click()
    page.wait_for_function("() => document.querySelector('#samples-note').innerText.includes('completions')")
    page.wait_for_function("() => document.querySelector('#samples-table').innerText.includes('say ')")
    text = page.locator("#samples-table").inner_text()
    assert "letter_fraction" in text and "total reward" in text and "advantage" in text
    page.screenshot(path=str(ARTIFACTS / "completions.png"), full_page=False)

    # A second run, canceled from its detail page.
    launch_from_form(page, max_steps=300)
    second_id = current_run_id(page, store, {run_id})
    # Launch moves the page to the new run at once: the URL a user copies now names it, and the status line never
    # shows the previous run under it.
    page.wait_for_function(f"() => new URLSearchParams(location.search).get('run') === '{second_id}'", timeout=10_000)
    page.wait_for_function(f"() => document.querySelector('#detail-status').innerText.includes('{second_id}')")
    assert run_id not in page.locator("#detail-status").inner_text()
    page.once("dialog", lambda d: d.accept())  # Cancel asks first
    page.locator("#cancel-btn").click()
    wait_for(lambda: store.get_run(second_id).status in TERMINAL, timeout=120)
    assert store.get_run(second_id).status == "canceled"
    page.wait_for_function(
        "() => document.querySelector('#detail-status').innerText.includes('canceled')", timeout=30_000
    )
    assert store.get_run(run_id).status in ("running", "completed")

    # The runs table lists both, with their states.
    page.get_by_role("tab", name="Runs", exact=True).click()
    page.wait_for_function(f"() => document.querySelector('#runs-table').innerText.includes('{second_id}')")
    text = page.locator("#runs-table").inner_text()
    assert "canceled" in text and run_id in text
    page.screenshot(path=str(ARTIFACTS / "runs.png"), full_page=False)

    # Clicking a row opens that run's detail page.
    page.locator("#runs-table").get_by_text(run_id).locator("visible=true").first.click()
    page.wait_for_function(
        f"() => document.querySelector('#detail-status').innerText.includes('{run_id}')", timeout=30_000
    )
    assert page.locator("#detail-status").is_visible()


def test_validate_marks_each_bad_field(page: Any, app_url: tuple[str, Store, Any]) -> None:
    url, _, _ = app_url
    page.goto(url, wait_until="load")
    page.wait_for_selector("#validate-btn")
    fill(page, "field-training-beta", "-1")
    page.wait_for_function("() => document.querySelector('#spec-yaml').innerText.includes('beta: -1')")
    fill(page, "field-dataset-prompt-column", "question")
    fill(page, "field-training-num-generations", "1")
    page.locator("#validate-btn").click()
    page.wait_for_function("() => document.querySelector('#new-run-summary').innerText.includes('the launch')")
    summary = page.locator("#new-run-summary").inner_text()
    assert "3 problems" in summary and "warning" not in summary  # untouched optional fields stay unset
    assert "must be ≥ 0" in page.locator("#field-training-beta").inner_text()
    assert "is not a column" in page.locator("#field-dataset-prompt-column").inner_text()
    assert "num_generations" in page.locator("#field-training-num-generations").inner_text()
    assert "✖" not in page.locator("#field-training-epsilon").inner_text()
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "validation.png"), full_page=True)


def test_text_pasted_into_a_field_reaches_the_yaml(page: Any, app_url: tuple[str, Store, Any]) -> None:
    """Text that arrives without key presses (pasted with the mouse, dropped, autofilled): Gradio's textbox does not
    send `input` for it, so the YAML follows when the field loses focus."""
    url, _, _ = app_url
    page.goto(url, wait_until="load")
    page.wait_for_selector("#validate-btn")
    yaml_before = page.locator("#spec-yaml").inner_text()
    # Tabbing through a field without changing it leaves the YAML as written.
    box = page.locator("#field-training-num-generations textarea")
    box.click()
    box.press("Tab")
    page.wait_for_timeout(1500)
    assert page.locator("#spec-yaml").inner_text() == yaml_before
    for elem_id, text, line in [
        ("field-training-num-generations", "6", "num_generations: 6"),
        ("field-dataset-prompt-column", "question", "prompt_column: question"),
    ]:
        box = page.locator(f"#{elem_id}").locator("input, textarea").first
        box.click()
        box.press("Control+a")
        page.keyboard.insert_text(text)  # what a paste does: an input event with no key events
        box.press("Tab")
        page.wait_for_function(f"() => document.querySelector('#spec-yaml').innerText.includes('{line}')")
