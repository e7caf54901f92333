"""Broken states a newcomer hit on the run page, each reproduced in headless Chromium against the real app: a
finished run's status and health on a deep link and after re-renders (also at phone width), Compare's choices for
runs made after the page loaded with its selection in the URL, chart settings in the URL, a YAML value the dropdown
cannot show, and help text without raw Markdown escapes. (Launch moving the page to the new run at once is checked
on a real launch in test_ui_browser.py.)"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from grpo_dashboard.spec import presets
from grpo_dashboard.store.db import ACTIVE, Run, Store
from grpo_dashboard.store.ingest import ingest_file
from grpo_dashboard.ui import build_app, launch_options

from .conftest import free_port
from .test_ui_browser import ARTIFACTS, chromium_browser, fill

pytestmark = pytest.mark.browser

POINTS = "() => Number(document.body.dataset.grpoPoints || 0)"


def finished_run(store: Store, data: Path, run_id: str, steps: int = 40, t0: float | None = None) -> None:
    """A completed local run, its metrics.jsonl ingested as the monitor would (started, logs, finished)."""
    run_dir = data / "runs" / run_id
    run_dir.mkdir(parents=True)
    t0 = t0 or time.time() - 600
    lines = [{"v": 1, "type": "event", "event": "started", "time": t0, "max_steps": steps}]
    for s in range(1, steps + 1):
        m = {
            "reward": 0.2 + 0.5 * s / steps,
            "reward_std": 0.3,
            "frac_reward_zero_std": 0.1,
            "kl": 1e-4 * 1000 ** (s / steps),  # a KL that grows over three decades (log-axis labels)
            "loss": 0.01,
            "entropy": 1.0 - 0.01 * s,
            "grad_norm": 1.0,
            "completions/mean_length": 20.0,
            "completions/clipped_ratio": 0.0,
            "rewards/acc/mean": s / steps,
            "rewards/acc/std": 0.2,
        }
        lines.append({"v": 1, "type": "log", "split": "train", "step": s, "time": t0 + s, "metrics": m})
    lines.append({"v": 1, "type": "event", "event": "finished", "time": t0 + steps + 1, "step": steps})
    path = run_dir / "metrics.jsonl"
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    spec = presets.preset_yaml(presets.DEFAULT_PRESET).replace("name: smoke", f"name: {run_id}", 1)
    store.insert_run(
        Run(
            id=run_id,
            name=run_id,
            spec_yaml=spec,
            backend="local",
            status="queued",
            created_at=t0,
            run_dir=str(run_dir),
        )
    )
    ingest_file(store, run_id, path)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    data = tmp_path_factory.mktemp("states-browser-data")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("GRPO_DASHBOARD_DATA_DIR", str(data))
        store = Store()
        finished_run(store, data, "first-run", t0=time.time() - 900)
        finished_run(store, data, "done-run")
        demo = build_app(store)
        _, url, _ = demo.launch(
            prevent_thread_lock=True, server_name="127.0.0.1", server_port=free_port(), quiet=True, **launch_options()
        )
        try:
            yield {"url": url, "store": store, "demo": demo, "data": data}
        finally:
            for run in store.list_runs(status=list(ACTIVE)):
                store.finish_run(run.id, "canceled")
            demo.close()
            demo.monitor.stop()


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    yield from chromium_browser()


def _page(browser: Any, request: pytest.FixtureRequest, width: int, height: int) -> Iterator[Any]:
    pg = browser.new_page(viewport={"width": width, "height": height}, is_mobile=width < 600)
    pg.set_default_timeout(60_000)
    pg.console_errors = []
    pg.on("pageerror", lambda e: pg.console_errors.append(str(e)))
    failed = request.session.testsfailed
    yield pg
    if request.session.testsfailed > failed:
        ARTIFACTS.mkdir(exist_ok=True)
        pg.screenshot(path=str(ARTIFACTS / f"failure-{request.node.name}.png"), full_page=True)
    pg.close()


@pytest.fixture
def page(browser: Any, request: pytest.FixtureRequest) -> Iterator[Any]:
    yield from _page(browser, request, 1440, 900)


@pytest.fixture
def phone(browser: Any, request: pytest.FixtureRequest) -> Iterator[Any]:
    yield from _page(browser, request, 390, 844)


def text_of(selector: str) -> str:
    return f"(document.querySelector('{selector}') || {{}}).innerText || ''"


def wait_status_and_health(pg: Any, run_id: str) -> None:
    pg.wait_for_function(f"() => ({POINTS})() >= 1")
    pg.wait_for_function(f"() => ({text_of('#live-status')}).includes('{run_id}')")
    pg.wait_for_function(f"() => ({text_of('#live-status')}).includes('completed')")
    pg.wait_for_function(f"() => ({text_of('#live-findings')}).trim().length > 0")


# State 2: a finished run's deep link shows charts, status and health, on reload and after re-renders too.
def test_a_finished_runs_link_shows_status_and_health_after_any_render(page: Any, served: dict) -> None:
    for _ in range(2):  # open, then reload
        page.goto(served["url"] + "?run=done-run&tab=detail")
        wait_status_and_health(page, "done-run")
    # Leave the tab and come back: Gradio renders the tab's content again; the finished run sends nothing new.
    page.get_by_role("tab", name="Runs", exact=True).click()
    page.get_by_role("tab", name="Run detail", exact=True).click()
    wait_status_and_health(page, "done-run")
    # Another run, then back: nothing of the other run stays under this one's name.
    page.goto(served["url"] + "?run=first-run&tab=detail")
    wait_status_and_health(page, "first-run")
    assert "done-run" not in page.evaluate(f"() => {text_of('#live-status')}")
    assert page.locator("#light-link").get_attribute("href") == "/grpo/run?run=first-run"
    assert not page.console_errors


def test_the_phone_shows_a_finished_runs_status_and_health(phone: Any, served: dict) -> None:
    phone.goto(served["url"] + "?run=done-run&tab=detail")
    wait_status_and_health(phone, "done-run")


# State 4: Compare follows runs made after the page loaded; its selection and the chart settings are in the URL.
def test_compare_choices_follow_new_runs_and_the_selection_survives_a_reload(page: Any, served: dict) -> None:
    page.goto(served["url"])
    page.wait_for_selector("#validate-btn")
    page.wait_for_function("() => window.grpoLive && window.grpoLive.state.loaded")
    finished_run(served["store"], served["data"], "late-run")  # launched after the page loaded
    page.get_by_role("tab", name="Compare", exact=True).click()
    page.wait_for_function(f"() => ({text_of('#compare-runs')}).includes('late-run')")  # preselected, newest two
    page.wait_for_function(f"() => ({text_of('#compare-runs')}).includes('done-run')")
    page.wait_for_function("() => new URLSearchParams(location.search).get('compare') === 'late-run,done-run'")
    page.wait_for_function("() => !!document.querySelector('#compare-plot .js-plotly-plot')")
    page.reload()
    page.get_by_role("tab", name="Compare", exact=True).click()
    page.wait_for_function(f"() => ({text_of('#compare-runs')}).includes('late-run')")
    assert "first-run" not in page.evaluate(f"() => {text_of('#compare-runs')}")


def test_chart_settings_travel_with_the_link(page: Any, served: dict) -> None:
    page.goto(served["url"] + "?run=done-run&tab=detail&smoothing=0.2&log_y=1")
    page.wait_for_function(f"() => ({POINTS})() >= 1")
    page.wait_for_function("() => document.querySelector('#log-y input').checked")
    assert page.locator("#smoothing input[type=number]").input_value() == "0.2"
    query = page.evaluate("() => Object.fromEntries(new URLSearchParams(location.search))")
    assert query["smoothing"] == "0.2" and query["log_y"] == "1" and query["run"] == "done-run"
    # On log axes the tick labels of one chart do not run into each other (KL over three decades gets plotly's 1-2-5
    # labels), here nor on the light page's shorter charts.
    overlaps = page.evaluate(LABEL_OVERLAPS)
    assert overlaps["axes"] >= 3 and overlaps["overlapping"] == [], overlaps
    page.goto(served["url"] + "grpo/run?run=done-run&log_y=1")
    page.wait_for_function(f"() => ({POINTS})() >= 1")
    overlaps = page.evaluate(LABEL_OVERLAPS)
    assert overlaps["axes"] >= 3 and overlaps["overlapping"] == [], overlaps


LABEL_OVERLAPS = """() => {
  const out = {axes: 0, overlapping: []};
  for (const plot of document.querySelectorAll('.js-plotly-plot')) {
    for (const axis of plot.querySelectorAll('.yaxislayer-above, .yaxislayer-below')) {
      const boxes = [...axis.querySelectorAll('.ytick text, .y2tick text')]
        .map((t) => [t.textContent, t.getBoundingClientRect()]).filter(([, r]) => r.height > 0);
      if (boxes.length < 2) continue;
      out.axes += 1;
      for (let i = 0; i < boxes.length; i++) for (let j = i + 1; j < boxes.length; j++) {
        const [a, ra] = boxes[i], [b, rb] = boxes[j];
        if (ra.top < rb.bottom - 1 && rb.top < ra.bottom - 1 && ra.left < rb.right && rb.left < ra.right)
          out.overlapping.push(a + ' / ' + b);
      }
    }
  }
  return out;
}"""


# State 1: a YAML value the dropdown cannot show is reported on its field, and later edits keep reaching the YAML.
def test_a_yaml_choice_the_dropdown_lacks_is_reported_and_edits_keep_flowing(page: Any, served: dict) -> None:
    page.goto(served["url"])
    page.wait_for_selector("#spec-yaml .cm-content")
    text = page.locator("#spec-yaml .cm-content").inner_text()
    assert "training:" in text
    # a user with a recipe finds its import above the form, not under it
    assert (
        page.locator("#trl-import").bounding_box()["y"] < page.locator("#field-training-max-steps").bounding_box()["y"]
    )
    bad = text.replace("training:", "training:\n  loss_type: foo", 1)
    page.locator("#spec-yaml .cm-content").click()
    page.keyboard.press("Control+A")
    page.keyboard.insert_text(bad)
    field = "#field-training-loss-type"
    page.wait_for_function(f"() => ({text_of(field)}).includes('must be one of')")
    assert page.locator(f"{field} input").input_value() == "foo"  # shown, not blanked
    assert "'grpo'" in page.locator(field).inner_text()
    # A later edit of another field reaches the YAML, which keeps the value it had.
    box = page.locator("#field-training-max-steps input")
    box.fill("3")
    box.press("Tab")
    page.wait_for_function("() => document.querySelector('#spec-yaml').innerText.includes('max_steps: 3')")
    assert "loss_type: foo" in page.locator("#spec-yaml").inner_text()
    page.locator("#validate-btn").click()
    page.wait_for_function(f"() => ({text_of('#new-run-summary')}).includes('the launch')")
    summary = page.locator("#new-run-summary").inner_text()
    assert "training.loss_type" in summary and "must be one of" in summary
    assert page.locator(".toast-body").filter(has_text="not in the list of choices").count() == 0
    assert page.locator("text=Error").count() < 3  # no red badge over every field


# Each validation message once at the top and once beside its field; the other fields it involves are marked red
# and point at it instead of repeating it.
def test_a_validation_message_appears_once_in_the_summary_and_once_beside_its_field(page: Any, served: dict) -> None:
    page.goto(served["url"])
    page.wait_for_selector("#validate-btn")
    fill(page, "field-training-num-generations", "3")
    page.wait_for_function("() => document.querySelector('#spec-yaml').innerText.includes('num_generations: 3')")
    page.locator("#validate-btn").click()
    page.wait_for_function(f"() => ({text_of('#new-run-summary')}).includes('the launch')")
    summary = page.locator("#new-run-summary").inner_text()
    assert "1 problem blocks the launch" in summary
    message = next(line for line in summary.splitlines() if "num_generations (3)" in line).split(": ", 1)[1]
    shown = page.evaluate("() => document.body.innerText")
    assert shown.count(message[:60]) == 2, shown.count(message[:60])
    marked = page.evaluate("() => Array.from(document.querySelectorAll('.has-error')).map(e => [e.id, e.innerText])")
    assert len(marked) >= 2, marked  # the field with the message and at least one it involves
    pointers = [text for _, text in marked if message[:60] not in text]
    assert pointers and all("see" in text and "✖" in text for text in pointers), marked


# Pre-flight: each check says it is running the moment its button is pressed, reports in its own box (running one
# keeps the others' reports), and a check that cannot run says so in its box instead of staying "running".
def test_each_preflight_check_reports_in_its_own_box_and_shows_it_is_running(page: Any, served: dict) -> None:
    page.goto(served["url"])
    page.wait_for_selector("#spec-yaml .cm-content")
    page.get_by_role("tab", name="Pre-flight").click()
    page.wait_for_selector("#preflight-rewards-btn")
    boxes = {k: f"#preflight-{k}" for k in ("dataset", "rewards", "hardware")}
    assert all("Not run yet" in page.locator(b).inner_text() for b in boxes.values())
    seen = page.evaluate_handle(
        """() => { const seen = [], box = document.querySelector('#preflight-rewards');
          const btn = document.querySelector('#preflight-rewards-btn');
          new MutationObserver(() => seen.push((btn.disabled ? 'disabled: ' : '') + box.innerText))
            .observe(box, {subtree: true, childList: true, characterData: true});
          return seen; }"""
    )
    page.locator("#preflight-rewards-btn").click()
    page.wait_for_function(f"() => ({text_of(boxes['rewards'])}).includes('letter_fraction')", timeout=60_000)
    # running: the box says so and the button cannot start a second run; afterwards it can be pressed again
    running = [t for t in seen.json_value() if "⏳ Running the rewards in the sandbox" in t]
    assert running and all(t.startswith("disabled: ") for t in running), seen.json_value()
    page.wait_for_function("() => !document.querySelector('#preflight-rewards-btn').disabled")
    page.locator("#preflight-hardware-btn").click()
    page.wait_for_function(f"() => /GB|GiB/.test({text_of(boxes['hardware'])})", timeout=60_000)
    assert "letter_fraction" in page.locator(boxes["rewards"]).inner_text()  # not overwritten by the estimate
    assert "Not run yet" in page.locator(boxes["dataset"]).inner_text()
    # An unreadable spec: the toast gives the reason and the box says the check did not run.
    page.get_by_role("tab", name="New run").click()
    page.locator("#spec-yaml .cm-content").click()
    page.keyboard.press("Control+A")
    page.keyboard.insert_text("name: [oops")
    page.get_by_role("tab", name="Pre-flight").click()
    page.locator("#preflight-dataset-btn").click()
    page.wait_for_function(f"() => ({text_of(boxes['dataset'])}).includes('did not run')", timeout=30_000)
    page.wait_for_function("() => !document.querySelector('#preflight-dataset-btn').disabled")  # after a failure too
    assert page.locator(".toast-body").filter(has_text="cannot be read").count() >= 1
    assert "letter_fraction" in page.locator(boxes["rewards"]).inner_text()


# State 6: help text reads as text (no Markdown escapes, no escaped tags).
def test_help_text_has_no_raw_markdown_escapes(page: Any, served: dict) -> None:
    page.goto(served["url"])
    page.wait_for_selector("#validate-btn")
    infos = page.evaluate("() => Array.from(document.querySelectorAll('.info-text')).map(e => e.innerText)")
    assert len(infos) > 20
    raw = [t for t in infos if "\\_" in t or "\\[" in t or "\\*" in t or "&lt;" in t or "&gt;" in t]
    assert not raw, raw[:3]
    batch = page.locator("#field-training-per-device-train-batch-size").inner_text()
    assert "per_device" in batch or "batch" in batch


# The light run page: charts first (six or more above the fold at 1440 x 900), status and health, on the stream.
ABOVE_FOLD = """() => Array.from(document.querySelectorAll('.grpo-panel')).filter(p => p.offsetParent !== null &&
  p.querySelector('.js-plotly-plot') && p.getBoundingClientRect().bottom <= window.innerHeight).length"""


SPILL = """() => {
  const out = {panels: 0, over: []};
  const below = document.querySelector('#live-hidden') || document.querySelector('details');
  for (const p of document.querySelectorAll('.grpo-panel')) {
    const svg = p.offsetParent !== null && p.querySelector('.main-svg');
    if (!svg) continue;
    out.panels += 1;
    const box = p.getBoundingClientRect(), fig = svg.getBoundingClientRect();
    if (fig.bottom > box.bottom + 1) out.over.push(p.id + ' runs ' + Math.round(fig.bottom - box.bottom) + 'px past');
    if (below && fig.bottom > below.getBoundingClientRect().top + 1) out.over.push(p.id + ' covers the text below');
  }
  return out;
}"""


def test_the_light_run_page_draws_charts_first_with_status_and_health(page: Any, served: dict) -> None:
    page.goto(served["url"] + "grpo/run?run=done-run")
    wait_status_and_health(page, "done-run")
    page.wait_for_function(f"() => ({ABOVE_FOLD})() >= 6")
    # No figure runs past its box (its legend hidden under the next chart, the last row over the text below).
    spill = page.evaluate(SPILL)
    assert spill["panels"] >= 6 and spill["over"] == [], spill
    # Panels this run cannot fill (agent tools on an ordinary run) are hidden, named in one line; KL's note stays.
    page.wait_for_function(f"() => ({text_of('#live-hidden')}).includes('Tool calls')")
    assert not page.locator("#plot-tools").is_visible() and page.locator("#plot-kl").is_visible()
    href = page.locator("#full-link").get_attribute("href")
    assert href == "/?run=done-run&tab=detail"
    assert not page.console_errors


def test_the_light_run_page_on_a_phone_opens_on_a_chart(phone: Any, served: dict) -> None:
    phone.goto(served["url"] + "grpo/run?run=done-run")
    wait_status_and_health(phone, "done-run")
    top = phone.locator("#plot-reward .js-plotly-plot").evaluate("e => e.getBoundingClientRect().top")
    width = phone.locator("#plot-reward .js-plotly-plot").evaluate("e => e.getBoundingClientRect().width")
    assert top < 200 and width <= 390


def test_the_light_run_page_echoes_nothing_and_shows_no_other_run(served: dict) -> None:
    """Attack: the page's HTML is the same whatever the query says (nothing reflected), and a run that does not
    exist (or is not the visitor's) gets nothing from the stream."""
    import urllib.error
    import urllib.parse
    import urllib.request

    base = served["url"] + "grpo/run"
    evil = "<script>alert(1)</script>\"'><img src=x onerror=alert(2)>"
    with urllib.request.urlopen(base, timeout=30) as r:  # localhost
        plain = r.read()
    with urllib.request.urlopen(base + "?run=" + urllib.parse.quote(evil), timeout=30) as r:  # localhost
        attacked = r.read()
    assert attacked == plain and b"alert(" not in attacked
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(served["url"] + "grpo/live?run=" + urllib.parse.quote(evil), timeout=30)  # localhost
    assert err.value.code in (400, 404)


OVERLAID = """(run) => Array.from(document.querySelectorAll('#live-charts .js-plotly-plot')).filter(gd =>
  (gd.data || []).some(t => t.meta && t.meta.ov === run)).length"""
OVERLAY_POINTS = """([pid, run]) => { const gd = document.querySelector('#plot-' + pid + ' .js-plotly-plot');
  const t = gd && (gd.data || []).find(t => t.meta && t.meta.ov === run && t.meta.s === 'train|reward');
  return t ? t.x.length : 0; }"""


def test_runs_ticked_in_the_sidebar_overlay_every_chart_and_follow_live(page: Any, served: dict) -> None:
    """trackio's habit: the sidebar lists the runs, a ticked one is drawn on every chart beside this run's lines
    (its name on each trace, its own colour) and follows its own live stream; the ticked runs travel with the link and
    survive a reload; unticking takes them off. A run name that is HTML shows as text."""
    from .store_helpers import append_log

    store, data = served["store"], served["data"]
    finished_run(store, data, "overlay-live", steps=10)
    evil = "<img src=x onerror=alert(1)> live"
    store.rename_run("overlay-live", evil)
    dialogs: list[str] = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    page.goto(served["url"] + "grpo/run?run=done-run")
    page.wait_for_function(f"() => ({POINTS})() >= 1")
    other = page.locator('#overlay-runs input[data-run="overlay-live"]')
    other.wait_for()
    assert page.locator('#overlay-runs input[data-run="done-run"]').is_disabled()
    other.check()
    page.wait_for_function(f"() => ({OVERLAID})('overlay-live') >= 5")
    assert page.evaluate(OVERLAY_POINTS, ["reward", "overlay-live"]) == 10
    own = page.evaluate(
        "() => document.querySelector('#plot-reward .js-plotly-plot').data.filter(t => t.meta && t.meta.s && "
        "!t.meta.ov).map(t => t.x.length)"
    )
    assert own and max(own) == 40  # this run's own lines are untouched
    names = page.evaluate(
        "() => document.querySelector('#plot-reward .js-plotly-plot').data.filter(t => t.meta && t.meta.ov)"
        ".map(t => t.name)"
    )
    assert names and all(" · " in n for n in names), names
    assert "overlay=overlay-live" in page.url
    # live: new records of the overlaid run reach its traces through its own stream
    path = data / "runs" / "overlay-live" / "metrics.jsonl"
    append_log(path, range(11, 16), reward=lambda s: 0.9)
    ingest_file(store, "overlay-live", path)
    page.wait_for_function(f"() => ({OVERLAY_POINTS})(['reward', 'overlay-live']) === 15")
    page.reload()
    page.wait_for_function(f"() => ({OVERLAID})('overlay-live') >= 5")
    assert page.locator('#overlay-runs input[data-run="overlay-live"]').is_checked()
    page.locator('#overlay-runs input[data-run="overlay-live"]').uncheck()
    page.wait_for_function(f"() => ({OVERLAID})('overlay-live') === 0")
    assert "overlay=" not in page.url
    text = page.locator("#overlay-runs").inner_text()
    assert "done-run (this run)" in text and "first-run" in text and evil in text  # shown as text, not HTML
    assert not page.console_errors and not dialogs


def test_the_light_run_page_shows_a_sampled_steps_completions_and_trajectories(page: Any, served: dict) -> None:
    """The light page's folded Completions and Trajectories: opened, they show the latest sampled step (sortable by a
    reward, filterable by environment, failed tool calls marked), follow new steps as the samples file grows, keep a
    chosen step and the open sections in the link across a reload, and show a completion that is HTML as text."""
    from grpo_dashboard.views import completions

    from .test_trajectories import rows

    store, data = served["store"], served["data"]
    finished_run(store, data, "sampled-run", steps=5)
    evil = "<img src=x onerror=alert(1)> answer"
    html_row = {**rows()[1], "completion": evil, "rewards": {"answer": 0.5, "tool_success": 1.0}}
    path = completions.samples_path(data / "runs" / "sampled-run")
    path.write_text("".join(json.dumps(r) + "\n" for r in [*rows(), html_row]))
    dialogs: list[str] = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    page.goto(served["url"] + "grpo/run?run=sampled-run")
    page.wait_for_function(f"() => ({POINTS})() >= 1")
    box = "#samples-completions"
    page.locator(box + " summary").click()
    page.wait_for_function(f"() => ({text_of(box + ' .grpo-samples-note')}).includes('Step 3: 4 samples')")
    assert page.locator(box + " tbody tr").count() == 4
    assert evil in page.locator(box + " tbody").inner_text()  # as text, not as an element
    page.locator(box + " [data-k=sort]").select_option("answer")
    first_answer = (
        "() => { const t = document.querySelector('#samples-completions table'); if (!t) return null; "
        "const i = Array.from(t.querySelectorAll('th')).findIndex(th => th.textContent === 'answer'); "
        "return t.querySelector('tbody tr').children[i].textContent; }"
    )
    page.wait_for_function(f"() => ({first_answer})() === '1'")
    page.locator(box + " [data-k=desc]").uncheck()
    page.wait_for_function(f"() => ({first_answer})() === '0'")
    traj = "#samples-trajectories"
    page.locator(traj + " summary").click()
    page.wait_for_function(f"() => ({text_of(traj)}).includes('division by zero')")
    assert page.locator(traj + " article.grpo-traj").count() == 4
    assert page.locator(traj + " .grpo-failed").count() >= 2  # the two failed calculator results, marked
    page.locator(traj + " [data-k=filter]").select_option("environment=game")
    page.wait_for_function(f"() => ({text_of(traj + ' .grpo-samples-note')}).includes('1 of 4 samples match')")
    assert "samples=completions%2Ctrajectories" in page.url or "samples=completions,trajectories" in page.url
    # a new sampled step: both open sections follow it (the stream says the file grew)
    with path.open("a") as f:
        f.write("".join(json.dumps({**r, "step": 5}) + "\n" for r in rows()))
    page.wait_for_function(f"() => ({text_of(box + ' .grpo-samples-note')}).includes('Step 5: 3 samples')")
    page.wait_for_function(f"() => ({text_of(traj + ' .grpo-samples-note')}).includes('Step 5:')")
    page.locator(box + " [data-k=step]").select_option("3")
    page.wait_for_function(f"() => ({text_of(box + ' .grpo-samples-note')}).includes('Step 3: 4 samples')")
    assert "sample_step=3" in page.url
    page.reload()
    page.wait_for_function(f"() => ({text_of(box + ' .grpo-samples-note')}).includes('Step 3: 4 samples')")
    page.wait_for_function(f"() => ({text_of(traj + ' .grpo-samples-note')}).includes('Step 3:')")
    assert page.locator(box).get_attribute("open") is not None
    assert not page.console_errors and not dialogs


def test_a_panel_this_run_lacks_is_shown_for_an_overlaid_run_that_logged_it(page: Any, served: dict) -> None:
    """An ordinary run hides its agent panels ("Not shown, nothing logged…"); ticking an agent run that logged tool
    calls brings the Tool calls panel back with that run's lines (at full width, without the "not logged" note),
    and unticking it hides the panel again."""
    from .store_helpers import append_log

    store, data = served["store"], served["data"]
    finished_run(store, data, "agent-overlay", steps=6)
    path = data / "runs" / "agent-overlay" / "metrics.jsonl"
    append_log(path, range(7, 13), reward=0.5, **{"tools/call_frequency": lambda s: 1 + s / 10})
    ingest_file(store, "agent-overlay", path)
    page.goto(served["url"] + "grpo/run?run=done-run")
    page.wait_for_function(f"() => ({text_of('#live-hidden')}).includes('Tool calls and failures')")
    assert not page.locator("#plot-tools").is_visible()
    page.locator('#overlay-runs input[data-run="agent-overlay"]').check()
    page.wait_for_function(
        "() => { const gd = document.querySelector('#plot-tools .js-plotly-plot'); return !!gd && "
        "gd.data.some(t => t.meta && t.meta.ov === 'agent-overlay' && t.x.length === 6); }"
    )
    page.wait_for_function("() => document.querySelector('#plot-tools').offsetParent !== null")
    assert "Tool calls and failures" not in page.locator("#live-hidden").inner_text()
    chart = page.locator("#plot-tools .js-plotly-plot")
    notes = chart.evaluate("gd => (gd.layout.annotations || []).map(a => a.text)")
    assert "not logged (yet)" not in notes, notes
    page.wait_for_function("() => document.querySelector('#plot-tools .main-svg').getBoundingClientRect().width > 300")
    page.locator('#overlay-runs input[data-run="agent-overlay"]').uncheck()
    page.wait_for_function(f"() => ({text_of('#live-hidden')}).includes('Tool calls and failures')")
    assert not page.locator("#plot-tools").is_visible() and not page.console_errors


def test_runs_made_after_the_light_page_opened_join_its_sidebar_and_their_spec_differences_are_listed(
    page: Any, served: dict
) -> None:
    """Compare on the light page: a run created after the page opened appears in the sidebar without a reload;
    ticked, the folded "Spec differences" lists the fields it differs in from this run, the section stays open across
    a reload (?diff=1), and unticking every run says what to do."""
    store, data = served["store"], served["data"]
    page.goto(served["url"] + "grpo/run?run=done-run")
    page.wait_for_function(f"() => ({POINTS})() >= 1")
    page.locator('#overlay-runs input[data-run="done-run"]').wait_for()
    finished_run(store, data, "late-sidebar-run", steps=5)
    late = page.locator('#overlay-runs input[data-run="late-sidebar-run"]')
    late.wait_for(timeout=30_000)  # read again within the page's relist interval
    page.locator("#spec-diff summary").click()
    page.wait_for_function(f"() => ({text_of('#spec-diff')}).includes('Tick runs in the sidebar')")
    late.check()
    page.wait_for_function("() => !!document.querySelector('#spec-diff table')")
    table = page.locator("#spec-diff table").inner_text()
    assert "name" in table and "late-sidebar-run" in table and "done-run" in table, table
    assert "diff=1" in page.url and "overlay=late-sidebar-run" in page.url
    page.reload()
    page.wait_for_function("() => !!document.querySelector('#spec-diff table')")
    page.locator('#overlay-runs input[data-run="late-sidebar-run"]').uncheck()
    page.wait_for_function(f"() => ({text_of('#spec-diff')}).includes('Tick runs in the sidebar')")
    assert not page.console_errors


def test_a_runs_link_opens_on_run_detail_without_mounting_the_new_run_form_first(page: Any, served: dict) -> None:
    """A link to a run (or to a tab) opens on that tab at once: the New run form (about a hundred components) is not
    mounted before the first chart, only when its tab is opened."""
    page.goto(served["url"] + "?run=done-run&tab=detail")
    page.wait_for_function(f"() => ({POINTS})() >= 1")
    assert page.evaluate("() => document.querySelector('#validate-btn') === null")
    assert page.get_by_role("tab", name="Run detail", exact=True).get_attribute("aria-selected") == "true"
    page.get_by_role("tab", name="New run", exact=True).click()
    page.wait_for_selector("#validate-btn")
    page.goto(served["url"] + "?tab=compare")
    page.wait_for_selector("#compare-runs")
    assert page.evaluate("() => document.querySelector('#validate-btn') === null")
    assert not page.console_errors


FULL_ABOVE_FOLD = """() => Array.from(document.querySelectorAll('#live-charts .grpo-panel')).filter(b => {
  const r = b.getBoundingClientRect(); return r.width > 0 && r.top >= 0 && r.bottom <= window.innerHeight; }).length"""


def test_the_full_apps_run_detail_shows_charts_first(page: Any, phone: Any, served: dict) -> None:
    """Run detail in the full app: the charts come right under the run's status, three to a row at 1440x900 (a row
    wholly above the fold), before health and the run's controls, whose checkpoint and export tools are folded; on a
    phone the first chart is on the first screen."""
    page.goto(served["url"] + "?run=done-run&tab=detail")
    wait_status_and_health(page, "done-run")
    assert page.evaluate(FULL_ABOVE_FOLD) >= 3
    top = page.evaluate("s => document.querySelector(s).getBoundingClientRect().top", "#plot-reward")
    for below in ("#detail-health", "#detail-tools", "#smoothing"):
        assert page.evaluate("s => document.querySelector(s).getBoundingClientRect().top", below) > top, below
    assert not page.locator("#export-btn").is_visible()  # folded
    phone.goto(served["url"] + "?run=done-run&tab=detail")
    phone.wait_for_function(f"() => ({POINTS})() >= 1")
    assert phone.evaluate("() => document.querySelector('#plot-reward').getBoundingClientRect().top") < 844
