"""Benchmark 8: record written -> drawn, in real Chromium pages: the pushed page against today's polling page, in the
same run, on the same live run.

Two apps serve one store (two dashboards on one data directory are supported): this checkout's (`python app.py`,
the push path) and the polling page of `--peer-rev` (default: the commit before the push path), extracted with
`git archive` into a temporary directory and started the same way. A synthetic writer (live_app.py) appends one
record every `--interval` s to a live local run, stamping each with its wall time just before the write. One
headless Chromium page per app opens the run's detail page; inside each page a 20 ms sampler notes when the reward
chart's last x (the newest step drawn) moves. Latency per step = first time the page drew it - its write time
(same machine clock).

Also reported: the time from navigation to the first drawn chart of a page opened on the run ("usable"), median of
`--loads` fresh loads per page (the Lighthouse-style check's figure).

    python benchmarks/push_latency.py [--duration 40] [--interval 0.5] [--peer-rev c230c55] [--loads 5]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common
import live_app

CHROMIUM = "/usr/bin/chromium"
# Both pages stay foreground pages: a background tab's timers and frames are throttled.
BROWSER_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-timer-throttling",
    "--disable-renderer-backgrounding",
    "--disable-backgrounding-occluded-windows",
]
PEER_REV = "c230c55"
TARGET_P50_S, TARGET_P95_S, TARGET_USABLE_S = 0.5, 1.0, 2.0

# The newest step the reward chart shows, sampled every 20 ms into window.__drawn as [wall ms, step] changes (the
# pushed page publishes it as data-grpo-step after each draw; the polling page's plotly data is read).
SAMPLER = """() => {
  window.__drawn = [];
  let last = -1;
  const newest = () => {
    if (document.body.dataset.grpoStep !== undefined) return Number(document.body.dataset.grpoStep);  // live.js
    const gd = document.querySelector('#plot-reward .js-plotly-plot');
    if (!gd || !gd._fullData) return -1;
    let best = -1;
    for (const t of gd._fullData) {
      const x = t.x;
      if (x && x.length) { const v = Number(x[x.length - 1]); if (v > best) best = v; }
    }
    return best;
  };
  setInterval(() => { const s = newest(); if (s > last) { last = s; window.__drawn.push([Date.now(), s]); } }, 20);
}"""
FIRST_DRAWN = """() => { const gd = document.querySelector('#plot-reward .js-plotly-plot');
  return !!(gd && gd._fullData && gd._fullData.some(t => t.x && t.x.length)); }"""


def peer_tree(rev: str, into: Path) -> Path:
    """The checkout of `rev` (git archive) under `into`."""
    into.mkdir(parents=True, exist_ok=True)
    archive = subprocess.run(["git", "-C", str(common.ROOT), "archive", rev], check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into


def open_detail(browser: Any, url: str, run_id: str, push: bool) -> Any:
    """A page on the run's detail tab (the old page has no deep link: pick the run in the Runs table)."""
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.set_default_timeout(120_000)
    if push:
        page.goto(f"{url}?run={run_id}&tab=detail")
    else:
        page.goto(url)
        page.get_by_role("tab", name="Runs", exact=True).click()
        page.locator("#runs-table").get_by_text(run_id).locator("visible=true").first.click()
    page.wait_for_function(FIRST_DRAWN)
    return page


def usable_s(browser: Any, url: str, run_id: str, push: bool, loads: int) -> float:
    """Median seconds from navigation to the first drawn chart."""
    times = []
    for _ in range(loads):
        start = time.monotonic()
        page = open_detail(browser, url, run_id, push)
        times.append(time.monotonic() - start)
        page.close()
    return statistics.median(times)


def latencies(drawn: list[list[float]], written: dict[int, float], after: float) -> list[float]:
    """Per step written after `after`: when a page first drew it (or a later step) minus its write time."""
    out, i = [], 0
    for step in sorted(written):
        if written[step] < after:
            continue
        while i < len(drawn) and drawn[i][1] < step:
            i += 1
        if i == len(drawn):
            break
        out.append(drawn[i][0] / 1000.0 - written[step])
    return out


def main(argv: list[str] | None = None) -> dict[str, float]:
    """Run the benchmark and print its figures; returns them."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=40.0)
    parser.add_argument("--interval", type=float, default=0.5)
    parser.add_argument("--peer-rev", default=PEER_REV, help="commit whose polling page is the peer")
    parser.add_argument("--loads", type=int, default=5, help="fresh page loads for the usable-time figure")
    args = parser.parse_args(argv)
    from playwright.sync_api import sync_playwright

    common.print_machine()
    with tempfile.TemporaryDirectory(prefix="bench-push-") as tmp:
        data, peer_dir = Path(tmp) / "data", Path(tmp) / "peer"
        data.mkdir()
        procs: list[Any] = []
        try:
            app, url = live_app.start_app(data, Path(tmp) / "app.log")
            procs.append(app)
            peer, peer_url = live_app.start_app(data, Path(tmp) / "peer.log", cwd=peer_tree(args.peer_rev, peer_dir))
            procs.append(peer)
            run_id = "push-latency"
            procs.append(live_app.add_live_run(data, run_id, args.interval, int(args.duration / args.interval) + 400))
            with sync_playwright() as p:
                browser = p.chromium.launch(executable_path=CHROMIUM, args=BROWSER_ARGS)
                pages = {
                    "push": open_detail(browser, url, run_id, True),
                    "poll": open_detail(browser, peer_url, run_id, False),
                }
                for page in pages.values():
                    page.evaluate(SAMPLER)
                start = time.time()
                time.sleep(args.duration)
                drawn = {k: page.evaluate("() => window.__drawn") for k, page in pages.items()}
                state = pages["push"].evaluate("""() => [window.grpoLive && grpoLive.state.received,
                    !!document.querySelector('#plot-reward .js-plotly-plot'), document.body.dataset.grpoPoints,
                    location.href]""")
                for page in pages.values():
                    page.close()
                usable = {
                    "push": usable_s(browser, url, run_id, True, args.loads),
                    "poll": usable_s(browser, peer_url, run_id, False, args.loads),
                }
                browser.close()
        finally:
            for proc in procs:
                live_app.stop(proc)
        written = live_app.written_times(data / "runs" / run_id / "metrics.jsonl")
    figures: dict[str, float] = {}
    rows = []
    for kind in ("push", "poll"):
        lat = latencies(drawn[kind], written, start + 3.0)
        if not lat:
            print(
                f"{kind}: no step was drawn (page samples: {drawn[kind][:3]} ... {drawn[kind][-3:]}; push page "
                f"[events, chart, points, url]: {state})"
            )
            continue
        p50, p95 = statistics.median(lat), common.percentile(lat, 95)
        figures.update({f"{kind}_p50_s": p50, f"{kind}_p95_s": p95, f"{kind}_usable_s": usable[kind]})
        print(
            f"{kind}: {len(lat)} steps; write -> drawn p50 {p50:.2f} s, p95 {p95:.2f} s, max {max(lat):.2f} s; "
            f"navigation -> first chart {usable[kind]:.2f} s (median of {args.loads})"
        )
        rows.append((kind, p50, p95))
    print(common.TABLE_HEAD.replace("peer (trackio)", f"peer (polling page, {args.peer_rev})"))
    if len(rows) == 2:
        (_, a50, a95), (_, b50, b95) = rows
        print(
            common.row(
                "record written -> drawn in Chromium, p50",
                f"{a50:.2f} s",
                f"{b50:.2f} s",
                f"{b50 / a50:.1f}x",
                "<= 0.5 s",
                a50 <= TARGET_P50_S,
            )
        )
        print(
            common.row(
                "record written -> drawn in Chromium, p95",
                f"{a95:.2f} s",
                f"{b95:.2f} s",
                f"{b95 / a95:.1f}x",
                "<= 1.0 s",
                a95 <= TARGET_P95_S,
            )
        )
        print(
            common.row(
                "page usable: navigation -> first chart drawn (median)",
                f"{usable['push']:.2f} s",
                f"{usable['poll']:.2f} s",
                f"{usable['poll'] / usable['push']:.1f}x",
                "<= 2 s",
                usable["push"] <= TARGET_USABLE_S,
            )
        )
    return figures


if __name__ == "__main__":
    main()
