"""The runs table at scale without timing anything: what each load computes. A never-seen finished run's health
badge comes from one doctor evaluation (equal to the active part of its replayed history), a live run's history
replay continues where it stopped instead of starting over, and later loads parse no spec again."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from grpo_dashboard.health import finding_history
from grpo_dashboard.store.db import Run, Store
from grpo_dashboard.store.ingest import ingest_file
from grpo_dashboard.views import overview, run_data

from .store_helpers import append_log, new_run

ROOT = Path(__file__).resolve().parent.parent


def _troubled(step: int) -> dict[str, float]:
    """A run with a gradient spike at step 150, a reward that climbs then stalls, entropy that collapses."""
    return {
        "reward": min(0.8, step / 200),
        "reward_std": 0.3 if step < 250 else 0.0,
        "frac_reward_zero_std": 0.0 if step < 250 else 1.0,
        "loss": 0.1,
        "grad_norm": 40.0 if step in (150, 151) else 1.0 + 0.1 * math.sin(step),
        "entropy": max(0.01, 1.0 - step / 300),
        "completions/mean_length": 60.0 + (step % 7),
    }


def _log(path: Path, steps: range) -> None:
    append_log(path, steps, **{k: (lambda s, k=k: _troubled(s)[k]) for k in _troubled(1)})


def _clear() -> None:
    for cache in (overview.FINDINGS.entries, overview.FINDINGS.replays, overview.FINDINGS.badges):
        cache.clear()


def test_a_never_seen_runs_badge_is_its_historys_active_findings(tmp_path: Path) -> None:
    store = Store()
    path = new_run(store, tmp_path)
    _log(path, range(1, 401))
    ingest_file(store, "r1", path)
    store.finish_run("r1", "completed")
    run = store.get_run("r1")
    _clear()
    badge = overview.health_badge(store, run)
    assert len(overview.FINDINGS.entries) == 0  # judged without the replay
    history = finding_history(run_data.metric_frame(store, "r1"), *overview.run_config(run)[:1])
    active = [f for f in history if f.status == "active"]
    assert badge == overview.badge_text(active) != overview.badge_text([])
    # The run page's full history agrees with the saved badge.
    assert overview.badge_text([f for f in overview.findings(store, run) if f.status == "active"]) == badge


def test_a_live_runs_replay_continues_and_equals_a_fresh_history(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(overview, "HEALTH_MIN_INTERVAL_S", 0.0)
    store = Store()
    path = new_run(store, tmp_path)
    _clear()
    replays = []
    for end in (30, 90, 200, 330, 420):
        _log(path, range(1 if not replays else replays[-1][0] + 1, end + 1))
        ingest_file(store, "r1", path)
        run = store.get_run("r1")
        got = overview.findings(store, run)
        fresh = finding_history(run_data.metric_frame(store, "r1"), *overview.run_config(run)[:1])
        assert [(f.rule, f.metric, f.severity, f.status, f.step, f.resolved_step) for f in got] == [
            (f.rule, f.metric, f.severity, f.status, f.step, f.resolved_step) for f in fresh
        ], end
        replays.append((end, overview.FINDINGS.replays.get((str(store.path), "r1"))[1]))
    assert len({id(r) for _, r in replays}) == 1  # one replay followed the whole run
    assert any(f.rule == "grad_spike" for f in got)


def test_a_log_cut_below_the_replayed_point_starts_the_replay_over(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(overview, "HEALTH_MIN_INTERVAL_S", 0.0)
    store = Store()
    path = new_run(store, tmp_path)
    _clear()
    _log(path, range(1, 301))
    ingest_file(store, "r1", path)
    overview.findings(store, store.get_run("r1"))
    first = overview.FINDINGS.replays.get((str(store.path), "r1"))[1]
    assert first.committed is not None and first.committed[1] > 20
    store.delete_run_rows("r1")  # the run's rows gone; a run of the same id logs from step 1 again
    path = _renew(store, path)
    _log(path, range(1, 21))
    ingest_file(store, "r1", path)
    got = overview.findings(store, store.get_run("r1"))
    assert overview.FINDINGS.replays.get((str(store.path), "r1"))[1] is not first
    assert all(f.step <= 20 for f in got)


def _renew(store: Store, path: Path) -> Path:
    import shutil

    shutil.rmtree(path.parent)
    return new_run(store, path.parent.parent, "r1")


def test_later_loads_of_a_large_table_parse_no_spec_again(tmp_path: Path) -> None:
    smoke = (ROOT / "examples" / "smoke.yaml").read_text(encoding="utf-8")
    store = Store()
    n = run_data.SPEC_CACHE // 16  # more runs than the old 128-entry cache, which every load emptied
    for i in range(n):
        text = smoke.replace("name: smoke", f"name: scale-{i:04d}", 1) + f"tags: [t{i % 3}]\n"
        store.insert_run(
            Run(
                id=f"s{i:04d}",
                name=f"scale-{i:04d}",
                spec_yaml=text,
                backend="local",
                status="queued",
                created_at=1.0 + i,
                run_dir=str(tmp_path),
            )
        )
    first = overview.runs_frame(store)
    assert len(first) == n and set(first["tags"]) == {"t0", "t1", "t2"}
    misses = run_data._parsed_spec.cache_info().misses
    again = overview.runs_frame(store)
    assert run_data._parsed_spec.cache_info().misses == misses
    assert again["tags"].tolist() == first["tags"].tolist()
    assert overview.run_tags(store.get_run("s0000")) == ["t0"]


@pytest.mark.parametrize("text", ["name: x\n", "name: x\ntags: [a]\ngroup: g\n", 'name: x\n"tags": [b]\n'])
def test_tags_are_read_whenever_the_spec_could_hold_them(text: str) -> None:
    run = Run(id="r", name="x", spec_yaml=text, backend="local", status="queued", created_at=1.0, run_dir="/tmp")
    spec = run_data.run_spec(run)
    expected = [*spec.tags, *([f"group:{spec.group}"] if spec.group else [])] if spec else []
    assert overview.run_tags(run) == expected


def test_the_forecast_cell_from_the_reward_alone_equals_the_whole_frames(tmp_path: Path) -> None:
    from grpo_dashboard.health.fits import FLAT_MODELS
    from grpo_dashboard.health.forecast import forecast
    from grpo_dashboard.views import forecast as forecast_view

    store = Store()
    path = new_run(store, tmp_path)
    _log(path, range(1, 401))
    ingest_file(store, "r1", path)
    run = store.get_run("r1")
    fc = forecast(run_data.metric_frame(store, "r1"), {}, bootstrap=False)
    assert fc.plateau_reward is not None and fc.law is not None  # the whole frame fits the entropy law too
    flat = fc.curve is not None and fc.curve.model in FLAT_MODELS
    step = fc.plateau_step["value"] if fc.plateau_step else None
    expected = (
        f"flat {fc.plateau_reward['value']:.3g}"
        if flat
        else f"{fc.plateau_reward['value']:.3g}" + (f" by {step}" if step is not None else "")
    )
    assert forecast_view._cell(store, run) == expected


def test_a_finished_runs_stop_step_and_fit_stay_within_max_steps(tmp_path: Path) -> None:
    """A run still rising when it reached max_steps: the fit's own stop step lies past the run's end; the run page
    recommends the end itself, in its table and on the chart, and draws the fit no further."""
    from grpo_dashboard.health.forecast import forecast
    from grpo_dashboard.views import forecast as forecast_view

    store = Store()
    path = new_run(store, tmp_path)
    path.write_text('{"v": 1, "type": "event", "event": "started", "time": 1000.0, "max_steps": 60}\n')
    append_log(path, range(1, 61), reward=lambda s: 0.9 - 0.8 * math.exp(-s / 40.0) + 0.01 * math.sin(s))
    with path.open("a") as f:
        f.write('{"v": 1, "type": "event", "event": "finished", "time": 2000.0, "step": 60}\n')
    ingest_file(store, "r1", path)
    store.finish_run("r1", "completed")
    run = store.get_run("r1")
    raw = forecast(run_data.metric_frame(store, "r1"), {"max_steps": 60})
    assert raw.stop_step["value"] > 60  # what the fit alone says
    fc = forecast_view.run_forecast(store, run)
    assert fc.max_steps == 60 and fc.stop_step["value"] == 60
    curves = forecast_view.forecast_curves(fc, store, run)
    assert curves["stop_step"] == 60 and max(curves["fit"]["x"]) == 60
    (row,) = [
        line for line in forecast_view.forecast_markdown(fc).splitlines() if line.startswith("| Recommended stop step")
    ]
    assert row.split("|")[2].strip() == "60", row


def test_the_cost_rows_follow_a_typed_price_and_the_page_names_no_cli_flag(tmp_path: Path) -> None:
    from grpo_dashboard.views import forecast as forecast_view

    store = Store()
    path = new_run(store, tmp_path)
    path.write_text('{"v": 1, "type": "event", "event": "started", "time": 1000.0, "max_steps": 400}\n')
    append_log(path, range(1, 121), reward=lambda s: 0.9 - 0.8 * math.exp(-s / 30.0), step_time=12.0)
    ingest_file(store, "r1", path)
    run = store.get_run("r1")
    panel = forecast_view.forecast_markdown(forecast_view.run_forecast(store, run))
    assert "--flavor" not in panel and forecast_view.PAGE_PRICE_HINT in panel
    priced = forecast_view.cost_markdown(store, run, 3.6)
    # 120 steps of 12 s at $3.60 an hour: $1.44 so far.
    assert "| Cost so far | $1.44 |" in priced and "Cost to max_steps" in priced
    assert "must be a number ≥ 0" in forecast_view.cost_markdown(store, run, -1.0)
    assert "Type the price" in forecast_view.cost_markdown(store, run, None)
