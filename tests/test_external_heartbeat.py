"""A run written from another host is taken as lost by its heartbeat, not by how long it went without logging: the
callback's thread (directory transport) and the HTTP sender's empty batches keep `alive` fresh while the script
lives, so a run that is slow to log stays running, and one whose script died is failed within STALE_HEARTBEAT_S."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import pytest

from grpo_dashboard.integrations.http import Sender
from grpo_dashboard.store import external
from grpo_dashboard.store.db import Store
from grpo_dashboard.ui import build_app

from .conftest import free_port_app, wait_for

ELSEWHERE = {"v": 1, "transport": "directory", "pid": 12345, "host": "another-host", "created_at": 0.0}


def _age(path: Path, seconds: float) -> None:
    then = time.time() - seconds
    os.utime(path, (then, then))


def test_a_fresh_heartbeat_keeps_a_silent_run_and_a_stale_one_ends_it(tmp_path: Path) -> None:
    metrics = tmp_path / "metrics.jsonl"
    metrics.write_text("{}\n")
    _age(metrics, 2 * 3600)  # two hours without a record: a long evaluation, say
    alive = tmp_path / external.HEARTBEAT_FILE
    external.beat(tmp_path)
    assert external._gone(ELSEWHERE, metrics) is None
    _age(alive, external.STALE_HEARTBEAT_S + 60)
    reason = external._gone(ELSEWHERE, metrics)
    assert reason and "no heartbeat for 6 minutes" in reason and "another-host" in reason
    # a writer without a heartbeat (an older callback) keeps the long limit on its records alone
    alive.unlink()
    _age(metrics, external.STALE_S - 60)
    assert external._gone(ELSEWHERE, metrics) is None
    _age(metrics, external.STALE_S + 60)
    assert "nothing was recorded for 31 minutes" in (external._gone(ELSEWHERE, metrics) or "")


def test_the_heartbeat_thread_beats_until_stopped(tmp_path: Path) -> None:
    beat = external.Heartbeat(tmp_path, interval_s=0.05).start()
    alive = tmp_path / external.HEARTBEAT_FILE
    _age(alive, 3600)
    wait_for(lambda: time.time() - alive.stat().st_mtime < 60, timeout=10)
    beat.stop()
    time.sleep(0.2)
    _age(alive, 3600)
    time.sleep(0.3)
    assert time.time() - alive.stat().st_mtime > 3000  # stopped: no more beats


def served_spool(tmp_path: Path, name: str) -> tuple[Store, Any, str, Path]:
    """A dashboard served on 127.0.0.1 (its store, app and URL) and a spool holding run `name`'s run.yaml and one
    log line."""
    store = Store()
    demo = build_app(store, monitor=False)
    url = free_port_app(demo)
    spool = tmp_path / "spool"
    spool.mkdir()
    (spool / "run.yaml").write_text(f"name: {name}\n")
    log(spool, 1)
    return store, demo, url, spool


def log(spool: Path, step: int) -> None:
    """Append one train log line to the spool's metrics.jsonl."""
    line = {"v": 1, "type": "log", "split": "train", "step": step, "metrics": {"reward": 0.5}}
    with (spool / "metrics.jsonl").open("a") as f:
        f.write(json.dumps(line) + "\n")


def test_an_idle_http_sender_beats_with_empty_batches(tmp_path: Path, data_dir: Path) -> None:
    store, demo, url, spool = served_spool(tmp_path, "beats")
    sender = Sender(spool, url, "beats-run-1", None, interval_s=0.05, heartbeat_s=0.3)
    try:
        sender.start()
        run = wait_for(lambda: (r := store.list_runs()) and r[0].n_records == 1 and r[0], timeout=60)
        run_dir = Path(run.run_dir)
        size = (run_dir / "metrics.jsonl").stat().st_size
        _age(run_dir / external.HEARTBEAT_FILE, 3600)
        posts = sender.posts
        wait_for(lambda: time.time() - (run_dir / external.HEARTBEAT_FILE).stat().st_mtime < 60, timeout=30)
        assert sender.posts > posts  # beats came as posts without lines
        assert (run_dir / "metrics.jsonl").stat().st_size == size and store.get_run(run.id).n_records == 1
    finally:
        sender.close(5)
        demo.close()


def test_a_finished_sender_sends_the_rest_on_its_own_then_stops(
    tmp_path: Path, data_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """After training (`finish`) the sender thread delivers what is left and ends by itself, beating no more; the
    exit's `close_finished` then has nothing to wait for. With the dashboard down it gives up at the deadline and
    says where the rest is."""
    store, demo, url, spool = served_spool(tmp_path, "finish")
    sender = Sender(spool, url, "finish-run-1", None, interval_s=0.05, heartbeat_s=0.2)
    try:
        sender.start()
        run = wait_for(lambda: (r := store.list_runs()) and r[0].n_records == 1 and r[0], timeout=60)
        for step in (2, 3, 4):
            log(spool, step)
        sender.finish(60)
        assert sender._thread is not None
        wait_for(lambda: not sender._thread.is_alive(), timeout=60)
        assert sender.done() and store.get_run(run.id).n_records == 4
        posts = sender.posts
        time.sleep(0.5)  # more than two heartbeat intervals: an ended sender does not beat
        assert sender.posts == posts
        assert sender.close_finished() is True and "not all of run" not in capsys.readouterr().err
    finally:
        sender.close(0)
        demo.close()
    log(spool, 5)  # the dashboard is gone now
    late = Sender(spool, url, "finish-run-1", None, interval_s=0.05).start()
    late.finish(0.5)
    assert late._thread is not None
    wait_for(lambda: not late._thread.is_alive(), timeout=30)
    assert late.close_finished() is False and not late.done()
    err = capsys.readouterr().err
    assert "not all of run finish-run-1" in err and str(spool) in err and "integrations.send" in err


def test_a_finished_sender_whose_token_is_refused_ends_at_once_and_says_where_the_run_is(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A dashboard that refuses the token (401) will refuse it at every retry: the process's token does not change,
    so after training the sender ends instead of retrying for `flush_s`, and the exit says how to send the run
    later."""
    import http.server
    import threading

    class Refuse(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            body = b'{"error": "invalid token"}'
            self.send_response(401)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Refuse)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    spool = tmp_path / "spool"
    spool.mkdir()
    (spool / "run.yaml").write_text("name: refused\n")
    log(spool, 1)
    try:
        sender = Sender(spool, f"http://127.0.0.1:{server.server_port}/", "refused-run-1", "hf_wrong", interval_s=0.05)
        sender.start()
        wait_for(lambda: sender.posts >= 1, timeout=30)
        log(spool, 2)
        sender.finish(600)
        assert sender._thread is not None
        wait_for(lambda: not sender._thread.is_alive(), timeout=60)  # not the 600 s it was given
        assert sender.close_finished() is False and not sender.done()
    finally:
        server.shutdown()
    err = capsys.readouterr().err
    assert err.count("refused the token (401") == 1 and "integrations.send" in err and str(spool) in err
