"""Benchmark 9: many streaming viewers. 50 viewers on 5 live runs, pushed (the page's stream, /grpo/live) and, in
the same run against the same app, polled (today's path: /detail_poll at 1 Hz, as viewers.py measures it).

The real app runs as its own process (`python app.py`); five synthetic writers keep five local runs live (each with
`--history` steps logged before, one record every `--interval` s). Phase 1: `--clients` polling sessions (Gradio's
queue protocol, live_app.HttpSession) for `--duration` s; per-request latency. Phase 2: the same number of viewers
streaming: `--pages` real Chromium pages on the detail page and the rest plain event-stream clients spread over
`--client-procs` processes; per delivered version, delivery = received - published (the version's `at`), and
record -> received (the newest point's write time). The app's resident memory is sampled through phase 2 (levelling
off: its growth over the second half against the first).

    python benchmarks/push_viewers.py [--clients 50] [--pages 3] [--runs 5] [--duration 45] [--history 5000]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common
import live_app

TARGET_P95_MS = 250.0
WARMUP_S = 8.0


def stream_client(
    url: str, run_id: str, until: float, out: list[tuple[float, float, float]], errors: list[str]
) -> None:
    """One streaming viewer: (seconds since start, delivery s, record -> received s) per delta."""
    import httpx

    try:
        with (
            httpx.Client(timeout=httpx.Timeout(30.0, read=60.0)) as http,
            http.stream("GET", url + "grpo/live", params={"run": run_id, "smoothing": "0.6"}) as r,
        ):
            r.raise_for_status()
            kind = None
            for line in r.iter_lines():
                if time.time() > until:
                    return
                if line.startswith("event:"):
                    kind = line[6:].strip()
                elif line.startswith("data:") and kind == "delta":
                    now = time.time()
                    msg = json.loads(line[5:])
                    newest = max(
                        (
                            max(t for t in d["time"] if t is not None)
                            for d in msg["series"].values()
                            if any(t is not None for t in d["time"])
                        ),
                        default=None,
                    )
                    out.append((now, now - msg["at"], now - newest if newest else float("nan")))
    except Exception as exc:  # counted and reported
        errors.append(f"{type(exc).__name__}: {exc}")


def streams_main(url: str, run_ids: list[str], duration: float) -> None:
    """A client process: one streaming viewer per run id in threads; prints one JSON line."""
    out: list[tuple[float, float, float]] = []
    errors: list[str] = []
    until = time.time() + duration
    threads = [
        threading.Thread(target=stream_client, args=(url, rid, until, out, errors), daemon=True) for rid in run_ids
    ]
    for t in threads:
        t.start()
        time.sleep(0.05)
    for t in threads:
        t.join(timeout=duration + 60)
    print(json.dumps({"samples": out, "errors": errors}))


def spread(run_ids: list[str], n: int, procs: int) -> list[list[str]]:
    """Viewer i watches run i % runs; viewers dealt over `procs` processes."""
    return [[run_ids[i % len(run_ids)] for i in range(p, n, procs)] for p in range(procs)]


def sample_rss(pid: int, until: float, rss: list[tuple[float, float]]) -> None:
    """The app's RSS every 2 s until `until`."""
    while time.time() < until:
        rss.append((time.time(), common.rss_mb(pid)))
        time.sleep(2.0)


def main(argv: list[str] | None = None) -> dict[str, float]:
    """Run the benchmark and print its figures; returns them."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--pages", type=int, default=3, help="of the streaming viewers, real Chromium pages")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--duration", type=float, default=45.0, help="seconds per phase")
    parser.add_argument("--interval", type=float, default=1.0)
    parser.add_argument("--history", type=int, default=5000)
    parser.add_argument("--client-procs", type=int, default=4)
    parser.add_argument("--child", nargs=2, metavar=("URL", "RUN_IDS"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        streams_main(args.child[0], args.child[1].split(","), args.duration)
        return {}

    common.print_machine()
    with tempfile.TemporaryDirectory(prefix="bench-push-viewers-") as tmp:
        data = Path(tmp)
        procs: list[Any] = []
        try:
            app, url = live_app.start_app(data, data / "app.log")
            procs.append(app)
            run_ids = [f"live-{i}" for i in range(args.runs)]
            n_steps = args.history + int((2 * args.duration + 180) / args.interval)
            for rid in run_ids:
                procs.append(live_app.add_live_run(data, rid, args.interval, n_steps, history=args.history))
            live_app.wait_for_history(data, run_ids, args.history)

            # Phase 1: today's polling path.
            children = [
                subprocess.Popen(
                    [
                        sys.executable,
                        str(Path(__file__).parent / "viewers.py"),
                        "--child",
                        url,
                        ",".join(mine),
                        "--clients",
                        str(len(mine)),
                        "--duration",
                        str(args.duration),
                    ],
                    stdout=subprocess.PIPE,
                    text=True,
                    cwd=common.ROOT,
                )
                for mine in spread(run_ids, args.clients, args.client_procs)
                if mine
            ]
            polled: list[Any] = []
            poll_errors: list[str] = []
            for child in children:
                got = json.loads(child.communicate(timeout=args.duration + 300)[0].strip().splitlines()[-1])
                polled += got["samples"]
                poll_errors += got["errors"]
            rss_poll_end = common.rss_mb(app.pid)

            # Phase 2: pushed.
            n_streams = max(0, args.clients - args.pages)
            start = time.time()
            until = start + args.duration
            rss: list[tuple[float, float]] = []
            sampler = threading.Thread(target=sample_rss, args=(app.pid, until, rss), daemon=True)
            sampler.start()
            children = [
                subprocess.Popen(
                    [sys.executable, __file__, "--child", url, ",".join(mine), "--duration", str(args.duration)],
                    stdout=subprocess.PIPE,
                    text=True,
                    cwd=common.ROOT,
                )
                for mine in spread(run_ids, n_streams, args.client_procs)
                if mine
            ]
            page_points = _pages(url, run_ids, args.pages, until) if args.pages else []
            pushed: list[Any] = []
            push_errors: list[str] = []
            for child in children:
                got = json.loads(child.communicate(timeout=args.duration + 300)[0].strip().splitlines()[-1])
                pushed += got["samples"]
                push_errors += got["errors"]
            sampler.join()
        finally:
            for proc in procs:
                live_app.stop(proc)
    poll_lat = [d for t, d, _ in polled if t >= WARMUP_S]
    push_lat = [d for t, d, _ in pushed if t >= start + WARMUP_S]
    e2e = [e for t, _, e in pushed if t >= start + WARMUP_S and e == e]
    a50, a95 = statistics.median(push_lat), common.percentile(push_lat, 95)
    b50, b95 = statistics.median(poll_lat), common.percentile(poll_lat, 95)
    half = [m for t, m in rss if t >= start + args.duration / 2]
    first = [m for t, m in rss if t < start + args.duration / 2]
    growth_first = (max(first) - first[0]) if first else 0.0
    growth_second = (max(half) - half[0]) if half else 0.0
    print(
        f"{args.clients} viewers on {args.runs} live runs (+1 record / {args.interval} s each, {args.history:,} "
        f"steps of history), {args.duration:.0f} s per phase"
    )
    print(
        f"polled (today's /detail_poll, 1 Hz): {len(poll_lat)} answers, p50 {b50 * 1000:.0f} ms, p95 "
        f"{b95 * 1000:.0f} ms; errors {len(poll_errors)}{' ' + poll_errors[0] if poll_errors else ''}"
    )
    print(
        f"pushed ({n_streams} event-stream clients + {args.pages} Chromium pages): {len(push_lat)} deliveries, "
        f"p50 {a50 * 1000:.0f} ms, p95 {a95 * 1000:.0f} ms, max {max(push_lat) * 1000:.0f} ms; record -> received "
        f"p50 {statistics.median(e2e):.2f} s, p95 {common.percentile(e2e, 95):.2f} s; errors {len(push_errors)}"
        f"{' ' + push_errors[0] if push_errors else ''}; Chromium pages' reward points at the end: {page_points}"
    )
    print(
        f"app RSS: {rss_poll_end:.0f} MB after polling; during the push phase {rss[0][1]:.0f} -> "
        f"{rss[-1][1]:.0f} MB "
        f"(growth {growth_first:+.0f} MB in the first half, {growth_second:+.0f} MB in the second)"
    )
    print(common.TABLE_HEAD.replace("peer (trackio)", "peer (polling /detail_poll)"))
    print(
        common.row(
            f"{args.clients} viewers, {args.runs} live runs: p95 delivery (push) vs request latency (poll)",
            f"{a95 * 1000:.0f} ms",
            f"{b95 * 1000:.0f} ms",
            f"{b95 / a95:.1f}x",
            "p95 <= 250 ms",
            a95 * 1000 <= TARGET_P95_MS,
        )
    )
    print(common.row("same: errors", str(len(push_errors)), str(len(poll_errors)), "-", "0", not push_errors))
    print(
        common.row(
            "same: app RSS growth, first / second half of the push phase",
            f"{growth_first:+.0f} / {growth_second:+.0f} MB",
            "-",
            "-",
            "levelling off",
            growth_second <= max(5.0, growth_first),
        )
    )
    return {"push_p95_ms": a95 * 1000, "poll_p95_ms": b95 * 1000, "push_errors": float(len(push_errors))}


def _pages(url: str, run_ids: list[str], n: int, until: float) -> list[int]:
    """`n` Chromium pages on run detail pages until `until`; their reward charts' point counts at the end."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path="/usr/bin/chromium",
            args=[
                "--no-sandbox",
                "--disable-gpu",
                "--disable-background-timer-throttling",
                "--disable-renderer-backgrounding",
            ],
        )
        pages = []
        for i in range(n):
            page = browser.new_page(viewport={"width": 1200, "height": 900})
            page.goto(f"{url}?run={run_ids[i % len(run_ids)]}&tab=detail")
            pages.append(page)
        time.sleep(max(0.0, until - time.time()))
        points = [int(pg.evaluate("() => Number(document.body.dataset.grpoPoints || 0)")) for pg in pages]
        browser.close()
    return points


if __name__ == "__main__":
    main()
