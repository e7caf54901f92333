"""Benchmark 10: the refresh work of a live run after 100 new records across its 27 series: the push path's one
version (`live.Feed.advance`: the display series brought up to date, the new points per series, its JSON, made once
and sent to every viewer) against today's polling path (`chart_json.run_plots`: every panel's plotly JSON, rebuilt
whenever the change token moves), in the same process on the same store.

Each tick appends 100 records to metrics.jsonl and ingests them (not timed), then times each side. The doctor's
findings are left out of the feed's tick (it runs them on its own cadence, at most every few seconds; see
benchmarks/doctor_long_log.py for their cost) and the polling side gets the same findings it had.

    python benchmarks/push_refresh.py [--steps 20000] [--ticks 30]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common

TARGET_P95_MS = 10.0


def main(argv: list[str] | None = None) -> dict[str, float]:
    """Run the benchmark and print its figures; returns them."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20_000, help="steps logged before the ticks")
    parser.add_argument("--ticks", type=int, default=30)
    parser.add_argument("--batch", type=int, default=100, help="new records per tick")
    args = parser.parse_args(argv)

    from grpo_dashboard.store.ingest import ingest_file
    from grpo_dashboard.views import chart_json, charts, live

    common.print_machine()
    with tempfile.TemporaryDirectory(prefix="bench-refresh-") as tmp:
        data = Path(tmp)
        total = args.steps + args.ticks * args.batch
        jsonl = common.write_metrics_jsonl(data / "metrics.jsonl", args.steps)
        store = common.new_store(data)
        ingest_file(store, common.RUN_ID, jsonl)
        from grpo_dashboard.store.db import Store

        peer_store = Store(store.path)  # its own display caches: each side brings its series up to date itself
        feed = live.Feed(store, common.RUN_ID, 0.6)
        feed.advance()
        feed.snapshot()
        opts = charts.ChartOptions(smoothing=0.6)
        chart_json.run_plots(peer_store, common.RUN_ID, opts)
        ours, peer, sent = [], [], []
        step = args.steps
        for _ in range(args.ticks):
            with jsonl.open("a") as f:
                f.writelines(common.protocol_line(s, total) for s in range(step + 1, step + args.batch + 1))
            step += args.batch
            ingest_file(store, common.RUN_ID, jsonl)
            t = time.perf_counter()
            assert feed.advance(findings=False)
            ours.append(time.perf_counter() - t)
            sent.append(len(feed.versions[-1].text))
            t = time.perf_counter()
            chart_json.run_plots(peer_store, common.RUN_ID, opts)
            peer.append(time.perf_counter() - t)
        n_series = len(feed.versions[-1].series)
    a50, a95 = statistics.median(ours) * 1000, common.percentile(ours, 95) * 1000
    b50, b95 = statistics.median(peer) * 1000, common.percentile(peer, 95) * 1000
    print(
        f"run of {args.steps:,} steps x 27 metrics; {args.ticks} ticks of {args.batch} new records; the push "
        f"version carries {n_series} drawn series, {statistics.median(sent) / 1024:.0f} KiB of JSON (median)"
    )
    print(
        f"push (Feed.advance): median {a50:.1f} ms, p95 {a95:.1f} ms; poll (run_plots, 11 panels): median "
        f"{b50:.1f} ms, p95 {b95:.1f} ms"
    )
    print(common.TABLE_HEAD.replace("peer (trackio)", "peer (polling: run_plots)"))
    print(
        common.row(
            f"refresh work, {args.batch} new records x 27 series, p50 / p95",
            f"{a50:.1f} / {a95:.1f} ms",
            f"{b50:.1f} / {b95:.1f} ms",
            f"{b95 / a95:.1f}x",
            "p95 <= 10 ms",
            a95 <= TARGET_P95_MS,
        )
    )
    return {"push_p95_ms": a95, "poll_p95_ms": b95}


if __name__ == "__main__":
    main()
