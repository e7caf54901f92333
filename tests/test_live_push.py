"""The live push path without a browser: a feed's versions rebuild exactly the display series a full read gives
(appends and rewritten tails), cursors, one computation shared by viewers, and the stream's access control."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from grpo_dashboard.errors import RunNotFound
from grpo_dashboard.settings import Settings
from grpo_dashboard.space import access
from grpo_dashboard.store import ingest
from grpo_dashboard.store.db import Run, Store
from grpo_dashboard.ui.context import UiContext
from grpo_dashboard.views import charts, display, live

from .store_helpers import append_log, new_run

KEYS = {
    "reward": lambda s: 0.1 * s,
    "loss": lambda s: math.sin(s),
    "kl": lambda s: 0.0 if s < 5 else 0.01 * s,
    "rewards/acc/mean": lambda s: s % 7,
    "rewards/acc/std": 0.5,
    "frac_reward_zero_std": 0.25,
}


def apply(client: dict[str, dict[str, list[Any]]], version: live.Version) -> None:
    """What live.js does with a delta's series: keep the first `keep` points, append the rest."""
    for key, d in version.series.items():
        have = client.setdefault(key, {"step": [], "smooth": []})
        for field in ("step", "smooth"):
            have[field] = have[field][: d["keep"]] + list(np.asarray(d[field]).tolist())


def snapshot_client(feed: live.Feed) -> dict[str, dict[str, list[Any]]]:
    """The per-series (step, smooth) a page holds after a snapshot: read back from its smoothed traces."""
    snap = json.loads(feed.snapshot())
    out: dict[str, dict[str, list[Any]]] = {}
    for fig in snap["panels"].values():
        for t in fig["data"]:
            meta = t.get("meta") or {}
            if meta.get("r") == "smooth" or (meta.get("r") == "value" and meta["s"] not in out):
                out[meta["s"]] = {"step": list(t["x"]), "smooth": list(t["y"])}
    return out


def expected(store: Store, run_id: str, smoothing: float, max_points: int) -> dict[str, dict[str, list[Any]]]:
    frames = display.run_series(store, run_id, smoothing, max_points)
    drawn = live.drawn_series(charts.group_metrics(frames.keys()))
    return {
        charts.series_id(k): {"step": p.steps.tolist(), "smooth": p.smooth.tolist()}
        for k, p in frames.items()
        if k in drawn
    }


def same(a: dict[str, dict[str, list[Any]]], b: dict[str, dict[str, list[Any]]]) -> bool:
    if a.keys() != b.keys():
        return False
    for k in a:
        if a[k]["step"] != b[k]["step"]:
            return False
        x = np.array(a[k]["smooth"], dtype=float)
        y = np.array(b[k]["smooth"], dtype=float)
        if not np.allclose(x, y, equal_nan=True):
            return False
    return True


@pytest.mark.parametrize("max_points", [2000, 24])  # 24: the reduction rewrites tails, deltas keep fewer points
def test_versions_rebuild_the_display_series(tmp_path: Path, max_points: int) -> None:
    store = Store(tmp_path / "d.db")
    path = new_run(store, tmp_path)
    feed = live.Feed(store, "r1", 0.6, max_points=max_points)
    append_log(path, range(1, 4), **KEYS)
    ingest.ingest_file(store, "r1", path)
    assert feed.advance()
    client = snapshot_client(feed)
    assert same(client, expected(store, "r1", 0.6, max_points))
    rewritten = 0
    for start in range(4, 200, 9):
        append_log(path, range(start, start + 9), **KEYS)
        ingest.ingest_file(store, "r1", path)
        before = feed.version
        assert feed.advance()
        versions = feed.since(f"{feed.epoch}:{before}")
        assert versions is not None and [v.number for v in versions] == [before + 1]
        for v in versions:
            rewritten += sum(1 for key, d in v.series.items() if d["keep"] < len(client.get(key, {}).get("step", [])))
            apply(client, v)
        assert same(client, expected(store, "r1", 0.6, max_points)), start
    assert (rewritten > 0) == (max_points < 200)


def test_nothing_new_publishes_nothing_and_cursors(tmp_path: Path) -> None:
    store = Store(tmp_path / "d.db")
    path = new_run(store, tmp_path)
    append_log(path, range(1, 6), **KEYS)
    ingest.ingest_file(store, "r1", path)
    feed = live.Feed(store, "r1", 0.0)
    now = time.time()
    assert feed.advance(now)
    assert not feed.advance(now + 0.1)  # same token, same files, status fresh
    assert feed.since(feed.cursor()) == []
    assert feed.since("other-epoch:1") is None and feed.since(None) is None and feed.since("garbage") is None
    assert feed.advance(now + live.STATUS_EVERY_S + 1)  # an active run's status (elapsed) moves with time
    v = feed.versions[-1]
    assert v.status is not None and not v.series
    # Every viewer gets the same text, made once per version.
    assert json.loads(v.text)["cursor"] == feed.cursor()


def test_one_feed_per_run_and_smoothing(tmp_path: Path) -> None:
    store = Store(tmp_path / "d.db")
    new_run(store, tmp_path)
    feeds = live.Feeds()
    a, b, c = feeds.get(store, "r1", 0.6), feeds.get(store, "r1", 0.6), feeds.get(store, "r1", 0.0)
    assert a is b and a is not c and len(feeds) == 2
    with pytest.raises(RunNotFound):
        feeds.get(store, "nope", 0.6)


def test_log_y_and_texts_are_escaped(tmp_path: Path) -> None:
    store = Store(tmp_path / "d.db")
    path = new_run(store, tmp_path)
    store.update_run("r1", error="<img src=x onerror=alert(1)>")
    append_log(path, range(1, 6), **KEYS)
    ingest.ingest_file(store, "r1", path)
    feed = live.Feed(store, "r1", 0.0)
    feed.advance()
    snap = json.loads(feed.snapshot("step", True))
    kl = [t for t in snap["panels"]["kl"]["data"] if t["meta"]["r"] == "value"][0]
    assert kl["y"][:4] == [None] * 4  # exact zeros are gaps on a log axis, not points at 1e-16
    assert "<img" not in snap["status"]["html"] and "&lt;img" in snap["status"]["html"]


def _space_ctx(store: Store) -> UiContext:
    return UiContext(store, Path("."), None, Settings(on_space=True))


def test_stream_access_is_that_of_every_read(tmp_path: Path) -> None:
    """On a Space the stream answers another user's run like a missing one, and streams the user's own."""
    from starlette.applications import Starlette
    from starlette.testclient import TestClient

    from grpo_dashboard.ui import stream

    store = Store(tmp_path / "d.db")
    for rid, owner in (("alice-run", "alice"), ("bob-run", "bob")):
        run_dir = tmp_path / rid
        run_dir.mkdir()
        store.insert_run(
            Run(
                id=rid,
                name=rid,
                spec_yaml="name: x\n",
                backend="hf_jobs",
                status="running",
                created_at=time.time(),
                run_dir=str(run_dir),
                owner=owner,
            )
        )
        append_log(run_dir / "metrics.jsonl", range(1, 4), **KEYS)
        ingest.ingest_file(store, rid, run_dir / "metrics.jsonl")
    app = Starlette()
    users = {"alice": access.User("alice", None, True, "session")}
    stream.install(app, _space_ctx(store), lambda request: users.get(request.headers.get("x-user"), access.ANONYMOUS))
    with TestClient(app) as client:
        assert client.get(stream.PATH, params={"run": "bob-run"}, headers={"x-user": "alice"}).status_code == 404
        assert client.get(stream.PATH, params={"run": "alice-run"}).status_code == 404  # anonymous
        assert (
            client.get(
                stream.PATH, params={"run": "alice-run", "xaxis": "hours"}, headers={"x-user": "alice"}
            ).status_code
            == 400
        )
        with client.stream("GET", stream.PATH, params={"run": "alice-run"}, headers={"x-user": "alice"}) as r:
            assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
            lines = []
            for line in r.iter_lines():
                lines.append(line)
                if line.startswith("data:"):
                    break
    assert "event: snapshot" in lines and lines[0].startswith("id: ")
    snap = json.loads(lines[-1][5:])
    assert snap["panels"]["reward"]["data"] and "alice-run" in snap["status"]["html"]


def test_a_snapshot_comes_with_the_cursor_of_the_version_it_shows(tmp_path: Path) -> None:
    """The stream counts a viewer as having what its snapshot's cursor names: a version published while the snapshot
    was built must not be counted (it left a page that came back to an ended run stale, 'running', for good)."""
    import threading

    store = Store(tmp_path / "d.db")
    path = new_run(store, tmp_path)
    append_log(path, range(1, 3), **KEYS)
    ingest.ingest_file(store, "r1", path)
    feed = live.Feed(store, "r1", 0.0)
    assert feed.advance()
    done = threading.Event()

    def grow() -> None:
        for start in range(3, 300, 3):
            append_log(path, range(start, start + 3), **KEYS)
            ingest.ingest_file(store, "r1", path)
            feed.advance()
        done.set()

    threading.Thread(target=grow, daemon=True).start()
    seen = set()
    while not done.is_set():
        snap, cursor = feed.snapshot_and_cursor()
        assert json.loads(snap)["cursor"] == cursor
        seen.add(cursor)
    assert len(seen) > 1  # snapshots were taken while versions were published
