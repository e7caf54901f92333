"""The items of the new user's afternoon that a unit test can hold (the browser ones are in test_ui_live_browser.py):
each test fails on the code before its fix."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import gradio as gr
import numpy as np
import pytest

from grpo_dashboard.errors import SpecError
from grpo_dashboard.launch import runs
from grpo_dashboard.spec import forms, presets
from grpo_dashboard.spec.run_spec import RunSpec
from grpo_dashboard.store import ingest
from grpo_dashboard.store.db import Run, Store
from grpo_dashboard.store.series import SeriesArrays
from grpo_dashboard.ui import app as ui_app
from grpo_dashboard.ui import new_run, preflight
from grpo_dashboard.ui.context import UiContext
from grpo_dashboard.views import charts, completions, display, overview

from .store_helpers import new_run as new_run_row

SMOKE = presets.preset_yaml(presets.DEFAULT_PRESET)


def ctx_of(tmp_path: Path) -> UiContext:
    return UiContext(Store(tmp_path / "d.db"), presets.PROJECT_ROOT)


# 2. errors beside every field they involve
def test_a_batch_error_marks_num_generations_too() -> None:
    values = forms.values_from_yaml(SMOKE)
    values["training.num_generations"] = 3
    spec = forms.spec_from_values(values, RunSpec.from_yaml(SMOKE))
    _, report = runs.check(spec, presets.PROJECT_ROOT)
    placed, _ = forms.place_errors(report.errors, [f.key for f in forms.form_fields()])
    target = next(k for k in placed if any("num_generations (3)" in m for m in placed[k]))
    assert target in ("training.per_device_train_batch_size", "training.generation_batch_size")
    assert placed["training.num_generations"] == [f"see {target}: the problem there involves this field"]
    assert sum("num_generations (3)" in m for msgs in placed.values() for m in msgs) == 1  # said once


def test_section_boxes_name_their_marked_fields_and_repeat_only_the_rewards_messages() -> None:
    fields = forms.form_fields()
    boxes = {g: gr.Markdown() for g in new_run.FORM_GROUPS}
    tab = new_run.NewRunTab(None, fields, [gr.Textbox() for _ in fields], None, None, None, boxes)  # type: ignore[arg-type]
    group_of = {f.key: f.group for f in fields}
    placed = {
        "name": ["must not be empty"],
        "training.num_generations": ["must be ≥ 2"],
        "training.beta": ["see training.num_generations: the problem there involves this field"],
        "rewards": ["rewards[0].name: unknown reward"],
    }
    shown = {g: new_run._group_error_updates(tab, placed)[box]["value"] for g, box in boxes.items()}
    training = group_of["training.num_generations"]
    assert group_of["training.beta"] == training
    assert shown[training].startswith("✖ Marked below: **training.num_generations**, **training.beta**")
    assert "≥ 2" not in shown[training]  # the message sits beside its field, not here again
    assert "rewards[0].name: unknown reward" in shown[group_of["rewards"]]
    assert not any("name**" in text and "must not be empty" in text for text in shown.values())
    assert all(not text for g, text in shown.items() if g not in (training, group_of["rewards"]))


def test_field_errors_are_marked_for_the_red_style() -> None:
    fields = forms.form_fields()
    inputs = [gr.Textbox() for _ in fields]
    tab = new_run.NewRunTab(None, fields, inputs, None, None, None)  # type: ignore[arg-type]
    updates = new_run._form_updates(tab, {}, {"training.beta": ["must be ≥ 0"]})
    by_key = {f.key: updates[c] for f, c in zip(fields, inputs, strict=True)}
    assert by_key["training.beta"]["elem_classes"] == ["has-error"]
    assert "✖ must be ≥ 0" in by_key["training.beta"]["info"]
    assert by_key["training.epsilon"]["elem_classes"] == []


# 5. help text rendered as text
def test_help_text_keeps_tags_and_stars() -> None:
    shown = new_run.as_text("Writes <think> then <answer>; *args as in TRL; ~20%% slower")
    assert "&lt;think&gt;" in shown and "&lt;answer&gt;" in shown
    assert r"\*args" in shown and "20% slower" in shown and "%%" not in shown
    assert "has &lt;think&gt;...&lt;/think&gt; then &lt;answer&gt;" in new_run._rewards_help()
    # A field's info line is text (Gradio escapes its HTML and shows backslashes as they are): nothing escaped.
    info = new_run.info_text(r"num_processes * per_device_train_batch_size in [2, 4, 8]; <think>; ~20%% slower")
    assert info == "num_processes ∗ per_device_train_batch_size in [2, 4, 8]; <think>; ~20% slower"


# 3. / 4. pre-flight
def test_reward_check_on_an_offline_hub_preset_says_why(tmp_path: Path) -> None:
    text = preflight.rewards_text(ctx_of(tmp_path), presets.preset_yaml(presets.preset_names()[1]), 4)
    assert "could not run" in text and "openai/gsm8k" in text


def test_hardware_estimate_keeps_its_line_breaks(tmp_path: Path) -> None:
    text = preflight.hardware_text(ctx_of(tmp_path), presets.preset_yaml(presets.preset_names()[1]))
    assert text.startswith("```\n") and text.rstrip().endswith("```")
    assert "\nRecommended:" in text  # its own line in a verbatim block, not the tail of the last bullet


# 6. ETA from the recent step rate
def test_eta_uses_the_recent_step_rate(tmp_path: Path) -> None:
    store = Store(tmp_path / "d.db")
    path = new_run_row(store, tmp_path)
    t0 = 1000.0
    store.update_run("r1", started_at=t0, max_steps=100)
    # Step 1 after 60 s of model loading, then one step per second.
    import json

    def first(n: int) -> Any:
        lines = path.read_text().splitlines()[:n]
        early = tmp_path / f"early{n}.jsonl"
        early.write_text("".join(x + "\n" for x in lines))
        return early

    with path.open("w") as f:
        for step in range(1, 11):
            f.write(
                json.dumps(
                    {
                        "v": 1,
                        "type": "log",
                        "split": "train",
                        "step": step,
                        "max_steps": 100,
                        "time": t0 + 60 + (step - 1),
                        "metrics": {"loss": 0.1},
                    }
                )
                + "\n"
            )
    # at step 1 (60 s of loading, one step) no ETA: not 99 x 61 s
    ingest.ingest_file(store, "r1", first(1))
    run = store.get_run("r1")
    assert run.last_step == 1 and overview.recent_pace(store, run) is None and overview.eta_s(run) is None
    assert "ETA" not in overview.status_markdown(run)
    ingest.ingest_file(store, "r1", path)
    run = store.get_run("r1")
    pace = overview.recent_pace(store, run)
    assert pace == pytest.approx(1.0)
    assert overview.eta_s(run, pace=pace) == pytest.approx(90.0)
    assert overview.eta_s(run) > 500  # from the start: loading counted as training
    assert "ETA 1m30s" in overview.status_markdown(run, pace=pace)


# 7. runs of one name told apart; rename, note, delete; a name means its newest run
def _run(store: Store, tmp_path: Path, rid: str, spec: str, created: float, status: str = "completed") -> Run:
    run_dir = tmp_path / "data" / "runs" / rid
    run_dir.mkdir(parents=True)
    (run_dir / "job.log").write_text("hello\n")
    run = Run(
        id=rid, name="smoke", spec_yaml=spec, backend="local", status=status, created_at=created, run_dir=str(run_dir)
    )
    store.insert_run(run)
    return run


def test_same_name_runs_differ_visibly_and_the_name_means_the_newest(tmp_path: Path) -> None:
    store = Store(tmp_path / "data" / "dashboard.db")
    _run(store, tmp_path, "smoke-1", SMOKE, 1.0)
    _run(store, tmp_path, "smoke-2", SMOKE.replace("max_steps: 100", "max_steps: 300"), 2.0)
    labels = dict((v, k) for k, v in overview.run_choices(store))
    assert "max_steps=300" in labels["smoke-2"] and "max_steps=100" in labels["smoke-1"]
    frame = overview.runs_frame(store)
    assert set(frame["differs"]) == {"max_steps=100", "max_steps=300"}
    assert store.find_run("smoke").id == "smoke-2"  # not "matches 2 runs"


def test_rename_note_delete(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GRPO_DASHBOARD_DATA_DIR", str(tmp_path / "data"))
    store = Store(tmp_path / "data" / "dashboard.db")
    done = _run(store, tmp_path, "smoke-1", SMOKE, 1.0)
    live = _run(store, tmp_path, "smoke-2", SMOKE, 2.0, status="running")
    store.rename_run(done.id, "baseline")
    store.set_note(done.id, "lr sweep, first point")
    assert store.get_run(done.id).name == "baseline" and store.notes() == {done.id: "lr sweep, first point"}
    assert overview.runs_frame(store).set_index("id").loc[done.id, "note"] == "lr sweep, first point"
    with pytest.raises(runs.BackendError, match="cancel it first"):
        runs.delete(store, live)
    assert runs.delete(store, done) == []
    assert not Path(done.run_dir).exists() and [r.id for r in store.list_runs()] == [live.id]
    assert store.notes() == {}


# 8. charts
def test_log_y_skips_zeros_and_fractions_get_their_own_axis() -> None:
    steps = np.arange(1, 6)
    zero = SeriesArrays(steps, np.zeros(5), np.zeros(5, bool), np.arange(5.0))
    frac = SeriesArrays(steps, np.full(5, 0.3), np.zeros(5, bool), np.arange(5.0))
    std = SeriesArrays(steps, np.full(5, 4.0), np.zeros(5, bool), np.arange(5.0))
    frames = display.reduce_all(
        {("train", "kl"): zero, ("train", "frac_reward_zero_std"): frac, ("train", "reward_std"): std}
    )
    opts = charts.ChartOptions(smoothing=0.0, log_y=True)
    traces, layout = charts.panel_spec("kl", ["kl"], frames, opts)
    assert np.isnan(traces[0]["y"]).all()
    traces, layout = charts.panel_spec("reward_spread", ["frac_reward_zero_std", "reward_std"], frames, opts)
    on_right = {t["name"] for t in traces if t.get("yaxis") == "y2"}
    assert on_right == {"frac_reward_zero_std"} and "fraction" in layout["yaxis2"]["title"]["text"]
    assert layout["hoverlabel"]["namelength"] == -1 and layout["title"]["xanchor"] == "left"
    assert all(p.y_title != "value" for p in charts.PANELS if p.id != "other")


# 9. completions
def test_scores_rounded_and_steps_snap() -> None:
    rows = [{"step": 3, "prompt": "p", "completion": "c", "rewards": {"acc": 0.123456789012345}, "advantage": 1 / 3}]
    frame = completions.samples_frame(rows)
    assert frame.loc[0, "acc"] == 0.1235 and frame.loc[0, "advantage"] == 0.3333
    assert completions.nearest_step([10, 20, 30], 25) == 20 and completions.nearest_step([10, 20], None) == 20
    assert completions.nearest_step([10, 20], 3) == 10 and completions.nearest_step([], 3) is None


# 10. cancel state shown until the run ends
def test_cancel_requested_stays_in_the_status() -> None:
    run = Run(
        id="r",
        name="r",
        spec_yaml="",
        backend="local",
        status="running",
        created_at=1.0,
        run_dir="/x",
        started_at=1.0,
        cancel_requested_at=time.time(),
    )
    assert "Cancel requested" in overview.status_markdown(run)


def test_a_run_in_its_warm_up_shows_the_jobs_own_progress_then_its_steps(tmp_path: Path) -> None:
    import json

    from grpo_dashboard.views import live

    store = Store(tmp_path / "store.db")
    metrics = new_run_row(store, tmp_path)
    with metrics.open("a") as f:
        for done in (40, 80):
            event = {"message": f"building the agent model: step {done}/200", "done": done, "total": 200}
            f.write(json.dumps({"v": 1, "type": "event", "event": "preparing", "time": 1.0, **event}) + "\n")
    ingest.ingest_file(store, "r1", metrics)
    html = live.status_parts(store.get_run("r1"), store=store)["html"]
    assert "Preparing: building the agent model: step 80/200" in html and "Waiting for the first" not in html
    with metrics.open("a") as f:
        f.write(json.dumps({"v": 1, "type": "log", "split": "train", "step": 1, "time": 2.0, "metrics": {"loss": 1}}))
        f.write("\n")
    ingest.ingest_file(store, "r1", metrics)
    assert "Preparing" not in live.status_parts(store.get_run("r1"), store=store)["html"]


# 11. YAML editor
def test_yaml_errors_name_line_and_column() -> None:
    with pytest.raises(SpecError) as err:
        forms.values_from_yaml(SMOKE + "\nextra: [1, 2\n")
    assert "at line" in str(err.value) and ", column " in str(err.value)


def test_a_value_the_form_cannot_show_is_reported_not_blanked() -> None:
    bad = SMOKE.replace("beta: 0.0", "beta: 0.0 [unclosed")
    problems = forms.unshowable(bad)
    assert [(p.field, p.value) for p in problems] == [("training.beta", "0.0 [unclosed")]


def test_form_edits_keep_yaml_comments() -> None:
    text = "# my sweep\n" + SMOKE.replace("training:", "training:  # TRL arguments")
    values = forms.values_from_yaml(text)
    values["training.learning_rate"] = 2e-5
    out = forms.yaml_from_values(values, text)
    assert "# my sweep" in out and "# TRL arguments" in out
    assert RunSpec.from_yaml(out).training["learning_rate"] == 2e-5


# deep links
def test_initial_view_follows_the_url(tmp_path: Path) -> None:
    ctx = UiContext(Store(tmp_path / "data" / "dashboard.db"), presets.PROJECT_ROOT)
    _run(ctx.store, tmp_path, "smoke-1", SMOKE, 1.0)
    _run(ctx.store, tmp_path, "smoke-2", SMOKE, 2.0)
    user = ui_app.access.ANONYMOUS
    assert ui_app.initial_view(ctx, user, {})[1:] == ("smoke-2", "new")  # the newest, preselected
    assert ui_app.initial_view(ctx, user, {"run": "smoke-1"})[1:] == ("smoke-1", "detail")
    assert ui_app.initial_view(ctx, user, {"run": "smoke-1", "tab": "compare"})[1:] == ("smoke-1", "compare")
    assert ui_app.initial_view(ctx, user, {"tab": "bogus"})[2] == "new"


def test_a_bad_threshold_override_is_reported_as_such_on_the_run_page(tmp_path: Path) -> None:
    store = Store(tmp_path / "store.db")
    metrics = new_run_row(store, tmp_path)
    spec = RunSpec.from_yaml(SMOKE)
    spec.health.thresholds = {"truncation.wran": 0.4}
    store.update_run("r1", spec_yaml=spec.to_yaml())
    with metrics.open("a") as f:
        for step in range(1, 6):
            f.write(f'{{"v": 1, "type": "log", "split": "train", "step": {step}, "time": {step}, ')
            f.write('"metrics": {"loss": 0.1, "reward": 0.5}}\n')
    ingest.ingest_file(store, "r1", metrics)
    (finding,) = overview.findings(store, store.get_run("r1"))
    assert finding.rule == "health.thresholds" and "truncation.wran" in finding.message
