"""Benchmark 3: live latency, from the job writing a record to the dashboard's refresh endpoint returning it.

The real app runs as its own process (`python app.py`, its monitor ingesting active runs). A synthetic writer (see
live_app.py) appends GRPO records to a local run's metrics.jsonl every `--interval` seconds, stamping each with the
wall time just before the write. From this process, gradio_client polls the run-detail page's `/detail_poll`
endpoint, the one the page's gr.Timer calls, and notes when each step first comes back (the last point of the
redrawn charts). Latency = first answer showing the step - the step's write time.

Two pollers run side by side: one at 10 Hz (the server's own latency, +<=0.1 s of polling granularity) and one at
the page's timer period (what a person sees, which adds up to one period of waiting for the next tick).

    python benchmarks/live_latency.py [--duration 60] [--interval 0.5]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common
import live_app

TARGET_P95_S = 1.5


def poller(
    url: str, run_id: str, period: float, until: float, seen: list[tuple[float, int]], errors: list[str]
) -> None:
    """Poll /detail_poll every `period` seconds until `until`, recording (answer time, visible step)."""
    from gradio_client import Client

    client = Client(url, verbose=False)
    next_t = time.monotonic()
    while time.monotonic() < until:
        try:
            out = client.predict(*live_app.poll_args(run_id), api_name="/detail_poll")
            step = live_app.visible_step(list(out))
            if step is not None:
                seen.append((time.time(), step))
        except Exception as exc:  # counted and reported
            errors.append(f"{type(exc).__name__}: {exc}")
        next_t += period
        time.sleep(max(0.0, next_t - time.monotonic()))


def latencies(seen: list[tuple[float, int]], written: dict[int, float], after: float) -> list[float]:
    """Per step written after `after`: first time an answer showed it (or a later step) minus its write time."""
    out = []
    seen = sorted(seen)
    i = 0
    for step in sorted(written):
        if written[step] < after:
            continue
        while i < len(seen) and seen[i][1] < step:
            i += 1
        if i == len(seen):
            break
        out.append(seen[i][0] - written[step])
    return out


def main(argv: list[str] | None = None) -> dict[str, float]:
    """Run the benchmark and print its figures; returns them."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=60.0, help="seconds of polling")
    parser.add_argument("--interval", type=float, default=0.5, help="seconds between the writer's records")
    args = parser.parse_args(argv)

    from grpo_dashboard.ui.detail import POLL_S

    common.print_machine()
    with tempfile.TemporaryDirectory(prefix="bench-live-") as tmp:
        data = Path(tmp)
        app, writer = None, None
        try:
            app, url = live_app.start_app(data, data / "app.log")
            run_id = "live-latency"
            n_steps = int(args.duration / args.interval) + 100
            writer = live_app.add_live_run(data, run_id, args.interval, n_steps)
            start = time.time()
            until = time.monotonic() + args.duration
            fast, page, errors = [], [], []
            threads = [
                threading.Thread(target=poller, args=(url, run_id, 0.1, until, fast, errors)),
                threading.Thread(target=poller, args=(url, run_id, POLL_S, until, page, errors)),
            ]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        finally:
            live_app.stop(writer)
            live_app.stop(app)
        written = {}
        with (data / "runs" / run_id / "metrics.jsonl").open() as f:
            for line in f:
                rec = json.loads(line)
                if rec.get("type") == "log":
                    written[rec["step"]] = rec["time"]
        warmup = start + 5.0  # the first answers include the clients' connection and the page's first draw
        fast_lat = latencies(fast, written, warmup)
        page_lat = latencies(page, written, warmup)
    if not fast_lat:
        print(f"no step became visible; errors: {errors[:3]}")
        return {}
    p50, p95 = statistics.median(fast_lat), common.percentile(fast_lat, 95)
    q50, q95 = statistics.median(page_lat), common.percentile(page_lat, 95)
    print(
        f"writer: one record every {args.interval} s for {args.duration:.0f} s; {len(fast_lat)} steps measured; "
        f"poll errors: {len(errors)}"
    )
    print(
        f"write -> visible via /detail_poll polled at 10 Hz: p50 {p50:.2f} s, p95 {p95:.2f} s, max "
        f"{max(fast_lat):.2f} s"
    )
    print(f"write -> visible at the page's own timer ({POLL_S} s): p50 {q50:.2f} s, p95 {q95:.2f} s")
    print(common.TABLE_HEAD)
    print(
        common.row(
            "live latency write -> /detail_poll (10 Hz poller), p50 / p95",
            f"{p50:.2f} / {p95:.2f} s",
            "-",
            "-",
            "p95 <= 1.5 s",
            p95 <= TARGET_P95_S and not errors,
        )
    )
    print(
        common.row(
            f"same, polled at the page's timer period ({POLL_S} s), p50 / p95",
            f"{q50:.2f} / {q95:.2f} s",
            "-",
            "-",
            "(orientation)",
            None,
        )
    )
    return {"p50_s": p50, "p95_s": p95, "page_p50_s": q50, "page_p95_s": q95, "errors": float(len(errors))}


if __name__ == "__main__":
    main()
