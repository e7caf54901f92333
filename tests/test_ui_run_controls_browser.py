"""Run controls in headless Chromium against the real app: the New-run form's "resumable" switch and the fields it
sets, no Resume for an imported run, the note on an x axis a run did not log (epoch, wall time), and local uploads
over the Space's 1 MB."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from grpo_dashboard.store.db import ACTIVE, Store
from grpo_dashboard.store.importers import import_run
from grpo_dashboard.ui import build_app, launch_options

from .conftest import free_port
from .test_ui_browser import ARTIFACTS, chromium_browser
from .test_ui_states_browser import finished_run, text_of

pytestmark = pytest.mark.browser

HIDDEN = "(sel) => { const b = document.querySelector(sel); return !b || b.offsetParent === null; }"
YAML = "() => document.querySelector('#spec-yaml .cm-content').innerText"


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    data = tmp_path_factory.mktemp("controls-browser-data")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("GRPO_DASHBOARD_DATA_DIR", str(data))
        store = Store()
        finished_run(store, data, "local-run", t0=time.time() - 900)  # logs no epoch
        log = data / "trl-log.jsonl"  # a TRL JSONL log: steps, no wall times
        log.write_text("".join(json.dumps({"reward": s / 10, "loss": 0.1, "step": s}) + "\n" for s in range(1, 9)))
        imported = import_run(log, store)
        demo = build_app(store)
        _, url, _ = demo.launch(
            prevent_thread_lock=True, server_name="127.0.0.1", server_port=free_port(), quiet=True, **launch_options()
        )
        try:
            yield {"url": url, "store": store, "imported": imported.id}
        finally:
            for run in store.list_runs(status=list(ACTIVE)):
                store.finish_run(run.id, "canceled")
            demo.close()
            demo.monitor.stop()


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    yield from chromium_browser()


@pytest.fixture
def page(browser: Any, request: pytest.FixtureRequest) -> Iterator[Any]:
    pg = browser.new_page(viewport={"width": 1440, "height": 900})
    pg.set_default_timeout(60_000)
    failed = request.session.testsfailed
    yield pg
    if request.session.testsfailed > failed:
        ARTIFACTS.mkdir(exist_ok=True)
        pg.screenshot(path=str(ARTIFACTS / f"failure-{request.node.name}.png"), full_page=True)
    pg.close()


def _set_yaml(page: Any, text: str) -> None:
    page.locator("#spec-yaml .cm-content").click()
    page.keyboard.press("Control+A")
    page.keyboard.insert_text(text)


def test_the_resumable_switch_sets_both_save_fields_and_follows_the_yaml(page: Any, served: dict) -> None:
    page.goto(served["url"])
    page.wait_for_selector("#spec-yaml .cm-content")
    page.get_by_text("Logging & eval", exact=True).click()  # open the group
    switch = page.locator("#field-resumable input")
    strategy = page.locator("#field-training-save-strategy input")
    steps = page.locator("#field-training-save-steps input")
    assert not switch.is_checked() and strategy.input_value() == "no"  # the smoke preset saves nothing
    default_steps = steps.input_value()  # TRL's save_steps default, as the form shows it
    switch.check()
    page.wait_for_function(f"() => ({YAML})().includes('save_steps: {default_steps}')")
    assert 'save_strategy: "no"' not in page.evaluate(YAML) and "save_strategy" in page.evaluate(YAML)
    page.wait_for_function("() => document.querySelector('#field-training-save-strategy input').value === 'steps'")
    switch.uncheck()
    page.wait_for_function(f"() => !({YAML})().includes('save_steps')")
    assert 'save_strategy: "no"' in page.evaluate(YAML) or "save_strategy: no" in page.evaluate(YAML)
    page.wait_for_function("() => document.querySelector('#field-training-save-strategy input').value === 'no'")
    # A spec that already sets both shows the switch on.
    text = page.evaluate(YAML)
    both = text.replace('save_strategy: "no"', "save_strategy: steps\n  save_steps: 3", 1)
    assert both != text
    _set_yaml(page, both)
    page.wait_for_function("() => document.querySelector('#field-resumable input').checked")
    assert steps.input_value() == "3"


def test_an_imported_run_offers_no_resume_and_says_why(page: Any, served: dict) -> None:
    page.goto(served["url"] + f"?run={served['imported']}&tab=detail")
    page.wait_for_function(f"() => ({text_of('#resume-note')}).includes('was imported')")
    assert "cannot resume it" in page.locator("#resume-note").inner_text()
    page.wait_for_function(HIDDEN, arg="#resume-btn")
    page.wait_for_function(HIDDEN, arg="#cancel-btn")  # Cancel is absent too
    # A run the dashboard launched keeps its Resume control.
    page.goto(served["url"] + "?run=local-run&tab=detail")
    page.wait_for_function(f"() => ({text_of('#resume-note')}).includes('No checkpoints')")
    page.locator("#detail-tools").get_by_text("Resume from a checkpoint, export metrics").click()  # folded
    page.locator("#resume-btn").wait_for()
    assert page.locator("#resume-btn").is_visible()


CHARTS = "() => (document.querySelector('#live-charts') || {}).innerText || ''"


@pytest.mark.parametrize(
    ("run", "axis", "says"),
    [
        ("local-run", "epoch", "epoch is not logged as a growing metric by this run"),
        ("imported", "wall time", "wall time: this run logged no wall-clock times"),
        ("imported", "relative time", "relative time: this run logged no wall-clock times"),
    ],
)
def test_an_x_axis_the_run_lacks_shows_the_note_why(page: Any, served: dict, run: str, axis: str, says: str) -> None:
    run_id = served["imported"] if run == "imported" else run
    page.goto(served["url"] + f"?run={run_id}&tab=detail")
    page.wait_for_function("() => Number(document.body.dataset.grpoPoints || 0) >= 1")  # drawn on steps first
    page.locator("#x-axis").get_by_text(axis, exact=True).click()
    # The panels redraw one after another: wait for a second one to say it too (a slow machine is between them).
    page.wait_for_function(f"() => ({CHARTS})().split({says!r}).length - 1 >= 2")
    assert page.evaluate(f"() => ({CHARTS})().split({says!r}).length - 1") >= 2  # every panel, not one


def test_locally_the_page_uploads_and_imports_a_log_over_the_spaces_1_mb(
    page: Any, served: dict, tmp_path: Path
) -> None:
    """The Space keeps its 1 MB cap (test_space_exploits); locally the page takes what the CLI's import-run reads."""
    from grpo_dashboard.store.import_guard import LIMITS
    from grpo_dashboard.ui import serving

    assert serving.upload_limit(on_space=True) == serving.MAX_UPLOAD
    assert serving.upload_limit(on_space=False) == LIMITS.max_bytes
    log = tmp_path / "big-log.jsonl"
    rows = (
        json.dumps({"reward": s / 20000, "loss": 0.5 - s / 40000, "kl": 0.001, "entropy": 1.0, "step": s}) + "\n"
        for s in range(1, 20001)
    )
    log.write_text("".join(rows))
    size = log.stat().st_size
    assert 2**20 < size < LIMITS.max_bytes
    page.goto(served["url"] + "?tab=runs")
    page.get_by_role("tab", name="Runs", exact=True).click()
    page.locator("#import-run-file input[type=file]").set_input_files(str(log))
    # Gradio shows the file's stem and extension in separate elements
    page.wait_for_function(f"() => ({text_of('#import-run-file')}).replace(/\\s+/g, '').includes('big-log.jsonl')")
    page.locator("#import-run-btn").click()
    page.wait_for_function(f"() => ({text_of('#import-run-note')}).includes('Imported')", timeout=120_000)
    assert (
        "20000 records" in page.locator("#import-run-note").inner_text()
        or "20,000" in page.locator("#import-run-note").inner_text()
    )
    run = next(r for r in served["store"].list_runs() if r.name == "big-log")
    assert run.last_step == 20000
