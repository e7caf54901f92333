"""Many viewers of one live run: one computation per run state, and nobody queues behind another viewer's build."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest

from grpo_dashboard.store.db import Store
from grpo_dashboard.store.ingest import ingest_file
from grpo_dashboard.views import chart_json, charts
from grpo_dashboard.views.memo import SingleFlight

from .store_helpers import append_log, new_run


def test_single_flight_runs_one_computation_for_concurrent_callers_and_shares_its_result() -> None:
    flight = SingleFlight()
    gate, entered = threading.Event(), threading.Event()
    calls: list[int] = []

    def compute() -> list[int]:
        calls.append(1)
        entered.set()
        gate.wait(10)
        return [42]

    results: list[Any] = []
    threads = [threading.Thread(target=lambda: results.append(flight.do("k", compute))) for _ in range(8)]
    threads[0].start()
    assert entered.wait(10)
    assert flight.busy("k") and not flight.busy("other")
    for t in threads[1:]:
        t.start()
    gate.set()
    for t in threads:
        t.join(10)
    assert calls == [1]
    assert len(results) == 8 and all(r is results[0] for r in results)
    assert not flight.busy("k")
    assert flight.do("k", lambda: [7]) == [7]  # finished: the next call computes again


def test_single_flight_hands_the_exception_to_every_waiter_and_recovers() -> None:
    flight = SingleFlight()
    gate, entered = threading.Event(), threading.Event()

    def failing() -> None:
        entered.set()
        gate.wait(10)
        raise ValueError("broken")

    errors: list[BaseException] = []

    def call() -> None:
        try:
            flight.do("k", failing)
        except ValueError as exc:
            errors.append(exc)

    first = threading.Thread(target=call)
    first.start()
    assert entered.wait(10)
    others = [threading.Thread(target=call) for _ in range(3)]
    for t in others:
        t.start()
    gate.set()
    for t in [first, *others]:
        t.join(10)
    assert len(errors) == 4
    assert flight.do("k", lambda: "ok") == "ok"


class GatedStore(Store):
    """The real store, with a gate that holds chart reads (a slow build) until the test opens it."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = threading.Event()
        self.gate.set()
        self.reading = threading.Event()

    def series_heads(self, *args: Any, **kwargs: Any) -> Any:
        self.reading.set()
        assert self.gate.wait(30)
        return super().series_heads(*args, **kwargs)


def test_a_viewer_gets_the_newest_finished_charts_while_another_builds_the_current_ones(tmp_path: Path) -> None:
    store = GatedStore()
    path = new_run(store, tmp_path)
    append_log(path, range(1, 101), reward=lambda s: s / 100, loss=0.5)
    ingest_file(store, "r1", path)
    opts = charts.ChartOptions()
    token1, plots1 = chart_json.live_plots(store, "r1", opts)
    assert token1 == store.change_token("r1")

    append_log(path, range(101, 111), reward=2.0, loss=0.5)
    ingest_file(store, "r1", path)
    token2 = store.change_token("r1")
    assert token2 != token1
    store.gate.clear()
    store.reading.clear()
    builder: list[Any] = []
    thread = threading.Thread(target=lambda: builder.append(chart_json.live_plots(store, "r1", opts)))
    thread.start()
    try:
        assert store.reading.wait(30)  # the first viewer is building the new state
        other = chart_json.live_plots(store, "r1", opts)  # a second viewer does not wait for it
        assert other is not None
        assert other[0] == token1 and other[1] == plots1
    finally:
        store.gate.set()
        thread.join(30)
    assert builder[0][0] == token2 and builder[0][1]["reward"] != plots1["reward"]
    again = chart_json.live_plots(store, "r1", opts)
    assert again is not None and again[0] == token2
    assert all(again[1][k] is builder[0][1][k] for k in again[1])  # built once, shared


@pytest.mark.parametrize("wait", [True, False])
def test_nobody_building_means_the_caller_builds_the_current_state(tmp_path: Path, wait: bool) -> None:
    store = Store()
    path = new_run(store, tmp_path)
    append_log(path, range(1, 51), reward=0.1)
    ingest_file(store, "r1", path)
    found = chart_json.live_plots(store, "r1", charts.ChartOptions(smoothing=0.3), wait=wait)
    assert found is not None and found[0] == store.change_token("r1")
    assert list(found[1]) == list(charts.PANEL_IDS)
    assert '"reward (weighted sum)"' in found[1]["reward"]


def test_a_finished_runs_health_badge_is_saved_and_read_back_without_a_doctor_pass(tmp_path: Path) -> None:
    from grpo_dashboard.views import overview

    store = Store()
    path = new_run(store, tmp_path)
    append_log(path, range(1, 201), reward=0.0, reward_std=0.0, frac_reward_zero_std=1.0, loss=0.0, grad_norm=0.0)
    ingest_file(store, "r1", path)
    live_badge = overview.health_badge(store, store.get_run("r1"))
    assert live_badge != "—"
    assert store.health_badges() == {}  # a live run's badge moves with every record: not saved

    store.finish_run("r1", "completed")
    badge = overview.health_badge(store, store.get_run("r1"))
    saved = store.health_badges()
    assert saved["r1"][1] == badge and json.loads(saved["r1"][0]) == list(store.change_token("r1"))

    overview.FINDINGS.entries.clear()  # a freshly started dashboard: nothing diagnosed in memory
    overview.FINDINGS.badges.clear()
    fresh = Store(store.path)
    table = overview.runs_frame(fresh)
    assert table["health"].tolist() == [badge]
    assert len(overview.FINDINGS.entries) == len(overview.FINDINGS.badges) == 0  # read, not re-diagnosed

    append_log(path, range(201, 211), reward=1.0, reward_std=0.5, frac_reward_zero_std=0.0, loss=0.1, grad_norm=1.0)
    ingest_file(fresh, "r1", path)  # late records of a finished run: the saved badge no longer applies
    overview.runs_frame(fresh)
    assert len(overview.FINDINGS.badges) > 0  # judged again (the table needs one evaluation, not the history)
    assert json.loads(fresh.health_badges()["r1"][0]) == list(fresh.change_token("r1"))


def test_the_views_caches_are_bounded(tmp_path: Path) -> None:
    """Findings and samples indexes are owned by objects with a size limit: a long-lived dashboard that has shown
    thousands of runs keeps only the most recently used."""
    from grpo_dashboard.views import overview
    from grpo_dashboard.views.completions import SampleIndexes
    from grpo_dashboard.views.memo import LruCache

    cache: LruCache[str, int] = LruCache(2)
    for i, key in enumerate("abc"):
        cache.put(key, i)
    assert len(cache) == 2 and cache.get("a") is None and cache.get("c") == 2
    cache.get("b")
    cache.put("d", 3)
    assert cache.get("c") is None and cache.get("b") == 1  # the least recently used went first
    indexes = SampleIndexes(size=1)
    files = []
    for n in range(3):
        path = tmp_path / f"samples{n}.jsonl"
        path.write_text("".join(f'{{"step": {s}, "completion": "x"}}\n' for s in range(n + 1)))
        files.append(path)
        assert sorted(indexes.index(path).steps) == list(range(n + 1))
    assert len(indexes.files) == 1
    assert sorted(indexes.index(files[0]).steps) == [0]  # dropped, then rebuilt from the file when read again
    assert overview.FINDINGS.entries.size == overview.HEALTH_CACHE_RUNS
