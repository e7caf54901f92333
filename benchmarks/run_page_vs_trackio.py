"""Benchmark: the run page against trackio's dashboard, side by side in Chromium on the same data, in one run.

Three figures, each for both dashboards:

- deep link -> first chart: a fresh page opened on a finished run's link (ours: the full app's
  `?run=ID&tab=detail` and the light run page's `/grpo/run?run=ID`; trackio's
  `?project=P&runs=NAME`) until its first chart has drawn points (ours: the reward chart's logged points, as
  `data-grpo-points`; trackio: a chart canvas of the plot grid); median of `--loads` fresh pages;
- page open -> usable: the same fresh page until the first chart is drawn *and* the page's controls are wired
  (ours: the app's load handler has filled the pickers, `grpoLive.state.loaded`; the light page: the run's status
  is on it; trackio: its run list's checkboxes are on the page); median of `--loads`;
- record written -> drawn, p95 (and p50): a live run fed one GRPO record every `--interval` s (ours: the synthetic
  job writer of live_app.py appending to metrics.jsonl, ingested by the app's monitor; trackio: a writer process
  calling its SQLite storage's `bulk_log` with one record, as `trackio.log` ends up doing), each stamped with the
  wall time just before its write. Ours: a 20 ms sampler in the page notes when the reward chart's newest step
  (`data-grpo-step`) moves. trackio draws on a canvas that does not expose its data, so its sampler notes when the
  reward chart's pixels change; a change is credited to every record written before it (a redraw fetched just
  before a write is counted as showing it: this favours trackio by up to one fetch).

Both dashboards hold the same records: `--steps` steps of common's 27-key GRPO log for the finished run, and the
live run's. The machine's load is printed with the figures (`load_1m`): on a shared machine both sides slow down.

    python benchmarks/run_page_vs_trackio.py [--steps 2000] [--loads 5] [--duration 40] [--interval 0.5]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
import urllib.request
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common
import live_app

CHROMIUM = "/usr/bin/chromium"
BROWSER_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-timer-throttling",
    "--disable-renderer-backgrounding",
    "--disable-backgrounding-occluded-windows",
]
PROJECT = "bench"
TARGET_FIRST_S, TARGET_USABLE_S, TARGET_P95_S = 1.0, 1.5, 0.5

OURS_FIRST = "() => Number(document.body.dataset.grpoPoints || 0) > 0"
OURS_USABLE = f"() => ({OURS_FIRST})() && !!(window.grpoLive && window.grpoLive.state.loaded)"
# The light run page (/grpo/run) has no Gradio: usable once its first chart and the run's status are on it.
LIGHT_USABLE = f"() => ({OURS_FIRST})() && !!document.getElementById('live-status').innerText.trim()"
PEER_FIRST = """() => Array.from(document.querySelectorAll('.plot canvas')).some(c => c.width > 0 && c.height > 0)"""
PEER_USABLE = f"() => ({PEER_FIRST})() && document.querySelectorAll('input[type=checkbox]').length > 0"

OURS_SAMPLER = """() => {
  window.__drawn = [];
  let last = -1;
  setInterval(() => {
    const s = Number(document.body.dataset.grpoStep || -1);
    if (s > last) { last = s; window.__drawn.push(Date.now()); window.__steps = (window.__steps || []).concat([s]); }
  }, 20);
}"""
# trackio's reward chart: the plot whose title is `reward`; a sparse checksum of its canvas every 20 ms.
PEER_SAMPLER = """() => {
  window.__drawn = [];
  let last = null;
  const canvas = () => {
    for (const box of document.querySelectorAll('.plot-container')) {
      const t = box.querySelector('.plot-title');
      if (t && t.innerText.trim() === 'reward') return box.querySelector('canvas');
    }
    return null;
  };
  setInterval(() => {
    const c = canvas();
    if (!c || !c.width) return;
    let sum = 0;
    try {
      const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
      for (let i = 0; i < d.length; i += 4 * 7) sum = (sum * 31 + d[i] + 3 * d[i + 1] + 7 * d[i + 2]) % 1000000007;
    } catch (e) { return; }
    if (last !== null && sum !== last) window.__drawn.push(Date.now());
    last = sum;
  }, 20);
}"""

PEER_WRITER = textwrap.dedent("""
    import json, os, sys, time
    from datetime import datetime, timezone
    sys.path.insert(0, sys.argv[1])
    from common import grpo_metrics, trackio_storage
    out, interval, n, project, run = sys.argv[2], float(sys.argv[3]), int(sys.argv[4]), sys.argv[5], sys.argv[6]
    storage = trackio_storage()
    next_t = time.monotonic()
    with open(out, "a") as f:
        for step in range(1, n + 1):
            next_t += interval
            time.sleep(max(0.0, next_t - time.monotonic()))
            t = time.time()
            stamp = datetime.fromtimestamp(t, timezone.utc).isoformat()
            storage.bulk_log(project, run, [grpo_metrics(step, n)], steps=[step], timestamps=[stamp])
            f.write(json.dumps([step, t]) + "\\n")
            f.flush()
""")


def finished_run(data: Path, run_id: str, steps: int) -> Path:
    """A completed run in our store (ingested as the monitor would); returns its metrics.jsonl for the peer."""
    from grpo_dashboard.store.db import Run, Store
    from grpo_dashboard.store.ingest import ingest_file

    run_dir = data / "runs" / run_id
    run_dir.mkdir(parents=True)
    path = common.write_metrics_jsonl(run_dir / "metrics.jsonl", steps)
    with path.open("a", encoding="utf-8") as f:
        f.write(json.dumps({"v": 1, "type": "event", "event": "finished", "time": common.T0 + 10 * steps}) + "\n")
    store = Store(data / "dashboard.db")
    spec = (common.ROOT / "examples" / "smoke.yaml").read_text().replace("name: smoke", f"name: {run_id}", 1)
    store.insert_run(
        Run(
            id=run_id,
            name=run_id,
            spec_yaml=spec,
            backend="local",
            status="queued",
            created_at=common.T0,
            run_dir=str(run_dir),
        )
    )
    ingest_file(store, run_id, path)
    store.close()
    return path


def start_peer(trackio_dir: Path, log: Path) -> tuple[subprocess.Popen[bytes], str]:
    """trackio's dashboard (`trackio.show`) on a free port over `trackio_dir`; (process, url) once it answers."""
    port = live_app.free_port()
    code = (
        f"import trackio; trackio.show(project={PROJECT!r}, open_browser=False, block_thread=True, "
        f"server_port={port}, host='127.0.0.1')"
    )
    env = {**os.environ, "TRACKIO_DIR": str(trackio_dir), "HF_HUB_OFFLINE": "1", "GRADIO_ANALYTICS_ENABLED": "False"}
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-c", code], env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    url = f"http://127.0.0.1:{port}/"
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"trackio's dashboard exited with {proc.returncode}; see {log}")
        try:
            with urllib.request.urlopen(url, timeout=2) as r:  # localhost
                if r.status == 200:
                    return proc, url
        except OSError:
            time.sleep(0.5)
    proc.kill()
    raise RuntimeError(f"trackio's dashboard did not answer within 180 s; see {log}")


def fresh_loads(browser: Any, link: str, first_js: str, usable_js: str, loads: int) -> tuple[float, float]:
    """Medians over `loads` fresh pages of (navigation -> first chart, navigation -> usable), seconds."""
    firsts, usables = [], []
    for _ in range(loads):
        page = browser.new_page(viewport={"width": 1440, "height": 900})
        page.set_default_timeout(120_000)
        start = time.monotonic()
        page.goto(link, wait_until="commit")
        try:
            page.wait_for_function(first_js, polling=20)
        except Exception:
            if os.environ.get("BENCH_SHOT"):
                page.screenshot(path=os.environ["BENCH_SHOT"])
                print(page.evaluate("() => document.body.innerText.slice(0, 600)"))
            raise
        firsts.append(time.monotonic() - start)
        page.wait_for_function(usable_js, polling=20)
        usables.append(time.monotonic() - start)
        page.close()
    return statistics.median(firsts), statistics.median(usables)


def latencies_by_step(drawn: list[int], steps: list[int], written: dict[int, float], after: float) -> list[float]:
    """Ours: for each step written after `after`, the first sample showing it (or a later step) minus its write."""
    out, i = [], 0
    pairs = list(zip(drawn, steps, strict=True))
    for step in sorted(written):
        if written[step] < after:
            continue
        while i < len(pairs) and pairs[i][1] < step:
            i += 1
        if i == len(pairs):
            break
        out.append(pairs[i][0] / 1000.0 - written[step])
    return out


def latencies_by_change(drawn: list[int], written: dict[int, float], after: float) -> list[float]:
    """trackio: for each record written after `after`, the first redraw after its write minus its write."""
    out, i = [], 0
    changes = sorted(d / 1000.0 for d in drawn)
    for step in sorted(written):
        t = written[step]
        if t < after:
            continue
        while i < len(changes) and changes[i] < t:
            i += 1
        if i == len(changes):
            break
        out.append(changes[i] - t)
    return out


def main(argv: list[str] | None = None) -> dict[str, float]:
    """Run the benchmark and print its figures; returns them."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=2000, help="steps of the finished run both dashboards hold")
    parser.add_argument("--loads", type=int, default=5, help="fresh page loads per dashboard")
    parser.add_argument("--duration", type=float, default=40.0, help="seconds the live pages are watched")
    parser.add_argument("--interval", type=float, default=0.5, help="seconds between live records")
    args = parser.parse_args(argv)
    # Only looked for here: trackio reads TRACKIO_DIR when imported, so it is imported inside the temporary one.
    if importlib.util.find_spec("trackio") is None:
        raise SystemExit("trackio is not installed: no peer (pip install 'trackio>=0.43,<1')")
    from playwright.sync_api import sync_playwright

    procs: list[Any] = []
    with tempfile.TemporaryDirectory(prefix="bench-page-") as tmp, common.trackio_dir() as tdir:
        common.print_machine()
        data = Path(tmp) / "data"
        data.mkdir()
        jsonl = finished_run(data, "done-run", args.steps)
        metrics, steps, stamps = common.log_records(jsonl)
        common.trackio_storage().bulk_log(PROJECT, "done-run", metrics, steps=steps, timestamps=stamps)
        n_live = int(args.duration / args.interval) + 400
        peer_written_path = Path(tmp) / "peer_written.jsonl"
        try:
            app, url = live_app.start_app(data, Path(tmp) / "app.log")
            procs.append(app)
            peer, peer_url = start_peer(tdir, Path(tmp) / "peer.log")
            procs.append(peer)
            with sync_playwright() as p:
                browser = p.chromium.launch(executable_path=CHROMIUM, args=BROWSER_ARGS)
                # One warm-up load each (first compilation of the page's scripts, server caches), not counted.
                fresh_loads(browser, f"{url}?run=done-run&tab=detail", OURS_FIRST, OURS_USABLE, 1)
                fresh_loads(browser, f"{peer_url}?project={PROJECT}&runs=done-run", PEER_FIRST, PEER_USABLE, 1)
                ours_first, ours_usable = fresh_loads(
                    browser, f"{url}?run=done-run&tab=detail", OURS_FIRST, OURS_USABLE, args.loads
                )
                fresh_loads(browser, f"{url}grpo/run?run=done-run", OURS_FIRST, LIGHT_USABLE, 1)
                light_first, light_usable = fresh_loads(
                    browser, f"{url}grpo/run?run=done-run", OURS_FIRST, LIGHT_USABLE, args.loads
                )
                peer_first, peer_usable = fresh_loads(
                    browser, f"{peer_url}?project={PROJECT}&runs=done-run", PEER_FIRST, PEER_USABLE, args.loads
                )
                load_pages = os.getloadavg()[0]
                # Live: both writers start together; one page per dashboard watches its live run.
                procs.append(live_app.add_live_run(data, "live-run", args.interval, n_live))
                procs.append(
                    subprocess.Popen(
                        [
                            sys.executable,
                            "-c",
                            PEER_WRITER,
                            str(Path(__file__).resolve().parent),
                            str(peer_written_path),
                            str(args.interval),
                            str(n_live),
                            PROJECT,
                            "live-run",
                        ],
                        env={**os.environ, "TRACKIO_DIR": str(tdir)},
                        stdout=subprocess.DEVNULL,
                        stderr=subprocess.DEVNULL,
                        start_new_session=True,
                    )
                )
                ours = browser.new_page(viewport={"width": 1440, "height": 900})
                ours.set_default_timeout(120_000)
                ours.goto(f"{url}?run=live-run&tab=detail")
                ours.wait_for_function(OURS_FIRST)
                peer_page = browser.new_page(viewport={"width": 1440, "height": 900})
                peer_page.set_default_timeout(120_000)
                peer_page.goto(f"{peer_url}?project={PROJECT}&runs=live-run")
                peer_page.wait_for_function(PEER_FIRST)
                ours.evaluate(OURS_SAMPLER)
                peer_page.evaluate(PEER_SAMPLER)
                start = time.time()
                time.sleep(args.duration)
                load_live = os.getloadavg()[0]
                ours_drawn = ours.evaluate("() => [window.__drawn, window.__steps || []]")
                peer_drawn = peer_page.evaluate("() => window.__drawn")
                browser.close()
        finally:
            for proc in procs:
                live_app.stop(proc)
        ours_written = live_app.written_times(data / "runs" / "live-run" / "metrics.jsonl")
        peer_written = {
            int(s): float(t) for s, t in (json.loads(x) for x in peer_written_path.read_text().splitlines() if x)
        }
    ours_lat = latencies_by_step(ours_drawn[0], ours_drawn[1], ours_written, start + 3.0)
    peer_lat = latencies_by_change(peer_drawn, peer_written, start + 3.0)
    if not ours_lat or not peer_lat:
        raise SystemExit(f"no live step was drawn (ours {len(ours_lat)}, trackio {len(peer_lat)} measured)")
    figures = {
        "ours_first_s": ours_first,
        "peer_first_s": peer_first,
        "ours_usable_s": ours_usable,
        "light_first_s": light_first,
        "light_usable_s": light_usable,
        "peer_usable_s": peer_usable,
        "ours_p50_s": statistics.median(ours_lat),
        "peer_p50_s": statistics.median(peer_lat),
        "ours_p95_s": common.percentile(ours_lat, 95),
        "peer_p95_s": common.percentile(peer_lat, 95),
    }
    print(
        f"fresh pages: {args.loads} per dashboard on a finished run of {args.steps:,} steps x "
        f"{len(common.GRPO_KEYS)} metrics (load_1m {load_pages:.1f}); live: {len(ours_lat)} / {len(peer_lat)} "
        f"records measured (ours / trackio), one every {args.interval} s (load_1m {load_live:.1f})"
    )
    print(common.TABLE_HEAD)
    rows = (
        ("light run page: deep link -> first chart (median)", "light", "first", TARGET_FIRST_S),
        ("light run page: page open -> usable (median)", "light", "usable", TARGET_USABLE_S),
        ("full app: deep link -> first chart (median)", "ours", "first", TARGET_FIRST_S),
        ("full app: page open -> usable (median)", "ours", "usable", TARGET_USABLE_S),
        ("record written -> drawn, p50 (full app)", "ours", "p50", None),
        ("record written -> drawn, p95 (full app)", "ours", "p95", TARGET_P95_S),
    )
    for label, side, key, target in rows:
        a, b = figures[f"{side}_{key}_s"], figures[f"peer_{key}_s"]
        print(
            common.row(
                label,
                f"{a:.2f} s",
                f"{b:.2f} s",
                common.ratio(b, a),
                f"<= {target} s" if target else "-",
                (a <= target) if target else None,
            )
        )
    return figures


if __name__ == "__main__":
    main()
