"""Benchmark 4: many viewers. 20 clients poll the run-detail page at 1 Hz while 5 runs are live.

The real app runs as its own process (`python app.py`). Five synthetic writers (see live_app.py) keep five local
runs live, each starting from `--history` steps already logged and adding one record every `--interval` seconds.
Client processes (`--client-procs`, 4) start `--clients` sessions between them in threads, each speaking Gradio's
own HTTP queue protocol like a page in a browser (see live_app.HttpSession; gradio_client's per-call overhead, or one
client process's GIL, would otherwise be measured instead of the server); session i watches run i % 5 and calls
`/detail_poll` (the endpoint of the page's timer) once a second for `--duration` seconds, so most answers carry
freshly drawn charts.

Reported: per-request latency (p50 / p95 / max, after a warm-up in which every session draws its page once), the
error count, and the app process's resident memory before and after the viewers (for the reliability issue:
growth over the run).

    python benchmarks/viewers.py [--clients 20] [--runs 5] [--duration 60] [--history 20000] [--client-procs 4]
                                 [--json]
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

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common
import live_app

TARGET_P95_MS = 250.0
WARMUP_S = 10.0


def client_loop(
    url: str,
    run_id: str,
    period: float,
    start: float,
    until: float,
    samples: list[tuple[float, float, bool]],
    errors: list[str],
) -> None:
    """One viewer: a session polling /detail_poll every `period` s; records (start offset, seconds, redrawn)."""
    try:
        session = live_app.HttpSession(url, "detail_poll")
    except Exception as exc:  # counted and reported
        errors.append(f"connect: {type(exc).__name__}: {exc}")
        return
    next_t = time.monotonic()
    while next_t < until:
        t = time.monotonic()
        try:
            out = session.call(*live_app.poll_args(run_id))
            redrawn = any(isinstance(x, dict) and x.get("type") == "plotly" for x in out)
            samples.append((t - start, time.monotonic() - t, redrawn))
        except Exception as exc:  # counted and reported
            errors.append(f"{type(exc).__name__}: {exc}")
        next_t += period
        time.sleep(max(0.0, next_t - time.monotonic()))


def clients_main(url: str, run_ids: list[str], n_clients: int, duration: float) -> None:
    """The second process: n_clients sessions in threads; prints one JSON line with samples and errors."""
    samples: list[tuple[float, float, bool]] = []
    errors: list[str] = []
    start = time.monotonic()
    until = start + duration
    threads = [
        threading.Thread(
            target=client_loop, args=(url, run_ids[i % len(run_ids)], 1.0, start, until, samples, errors), daemon=True
        )
        for i in range(n_clients)
    ]
    for t in threads:
        t.start()
        time.sleep(0.05)  # people do not open the page in the same millisecond
    for t in threads:
        t.join(timeout=duration + 120)
    print(json.dumps({"samples": samples, "errors": errors}))


def main(argv: list[str] | None = None) -> dict[str, float]:
    """Run the benchmark and print its figures; returns them."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=20)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--duration", type=float, default=60.0)
    parser.add_argument("--interval", type=float, default=1.0, help="seconds between a live run's records")
    parser.add_argument("--history", type=int, default=20_000, help="steps each run has logged before")
    parser.add_argument("--client-procs", type=int, default=4, help="client processes the sessions are spread over")
    parser.add_argument("--json", action="store_true", help="also print the figures as one JSON line (last)")
    parser.add_argument("--child", nargs=2, metavar=("URL", "RUN_IDS"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        clients_main(args.child[0], args.child[1].split(","), args.clients, args.duration)
        return {}

    common.print_machine()
    with tempfile.TemporaryDirectory(prefix="bench-viewers-") as tmp:
        data = Path(tmp)
        app, writers = None, []
        rss: list[tuple[float, float]] = []
        try:
            app, url = live_app.start_app(data, data / "app.log")
            run_ids = [f"live-{i}" for i in range(args.runs)]
            n_steps = args.history + int((args.duration + 120) / args.interval)
            for run_id in run_ids:
                writers.append(live_app.add_live_run(data, run_id, args.interval, n_steps, history=args.history))
            # Let the monitor ingest every run's history before the viewers arrive.
            live_app.wait_for_history(data, run_ids, args.history)
            from grpo_dashboard.store.db import Store

            rss_start = common.rss_mb(app.pid)
            # The sessions are spread over a few processes, so that no client process's own GIL delays what it
            # measures; session i still watches run i % runs.
            procs = max(1, min(args.client_procs, args.clients))
            children = []
            for p in range(procs):
                mine = [run_ids[i % len(run_ids)] for i in range(p, args.clients, procs)]
                children.append(
                    subprocess.Popen(
                        [
                            sys.executable,
                            __file__,
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
                )
            t0 = time.monotonic()
            while any(c.poll() is None for c in children):
                rss.append((time.monotonic() - t0, common.rss_mb(app.pid)))
                time.sleep(2.0)
            result = {"samples": [], "errors": []}
            for c in children:
                part = json.loads(c.stdout.read().strip().splitlines()[-1])  # type: ignore[union-attr]
                result["samples"] += part["samples"]
                result["errors"] += part["errors"]
            rss_end = common.rss_mb(app.pid)
            steps_end = {r: Store(data / "dashboard.db").get_run(r).last_step for r in run_ids}
        finally:
            for w in writers:
                live_app.stop(w)
            live_app.stop(app)
    samples = [(t, d, r) for t, d, r in result["samples"]]
    steady = [d for t, d, _ in samples if t >= WARMUP_S]
    redrawn = [d for t, d, r in samples if t >= WARMUP_S and r]
    errors = result["errors"]
    if not steady:
        print(f"no answers; errors: {errors[:3]}")
        if args.json:
            print(json.dumps({"errors": float(len(errors)), "answers": 0.0}))
        return {}
    p50, p95 = statistics.median(steady) * 1000, common.percentile(steady, 95) * 1000
    worst = max(steady) * 1000
    expected = args.clients * (args.duration - WARMUP_S)
    print(
        f"{args.clients} clients x 1 Hz for {args.duration:.0f} s on {args.runs} live runs ({args.history:,} steps "
        f"of history, +1 record / {args.interval} s each; last steps {sorted(steps_end.values())})"
    )
    print(
        f"answers after the {WARMUP_S:.0f} s warm-up: {len(steady)} (~{expected:.0f} expected at 1 Hz), "
        f"{len(redrawn)} with redrawn charts; errors: {len(errors)}{' ' + errors[0] if errors else ''}"
    )
    print(
        f"latency: p50 {p50:.0f} ms, p95 {p95:.0f} ms, max {worst:.0f} ms "
        f"(all answers incl. warm-up: p95 {common.percentile([d for _, d, _ in samples], 95) * 1000:.0f} ms)"
    )
    quarters = [rss[min(len(rss) - 1, int(len(rss) * q))][1] for q in (0.25, 0.5, 0.75)] if rss else []
    print(
        f"app RSS: {rss_start:.0f} MB before the viewers, {rss_end:.0f} MB after ({rss_end - rss_start:+.0f} MB); "
        f"at 1/4, 1/2, 3/4 of the run: {', '.join(f'{m:.0f}' for m in quarters)} MB; "
        f"peak {max((m for _, m in rss), default=rss_end):.0f} MB"
    )
    print(common.TABLE_HEAD)
    print(
        common.row(
            f"{args.clients} viewers x 1 Hz, {args.runs} live runs: p50 / p95 latency",
            f"{p50:.0f} / {p95:.0f} ms",
            "-",
            "-",
            "p95 <= 250 ms",
            p95 <= TARGET_P95_MS,
        )
    )
    print(common.row("same: errors", str(len(errors)), "-", "-", "0", not errors))
    print(
        common.row(
            "same: app RSS growth over the run",
            f"{rss_end - rss_start:+.0f} MB ({rss_start:.0f} -> {rss_end:.0f})",
            "-",
            "-",
            "(reliability)",
            None,
        )
    )
    result = {
        "p50_ms": p50,
        "p95_ms": p95,
        "errors": float(len(errors)),
        "answers": float(len(steady)),
        "expected_answers": expected,
        "rss_start_mb": rss_start,
        "rss_end_mb": rss_end,
        "rss_quarter_mb": quarters[0] if quarters else rss_end,
        "rss_half_mb": quarters[1] if len(quarters) > 1 else rss_end,
        "rss_three_quarter_mb": quarters[2] if len(quarters) > 2 else rss_end,
        "rss_peak_mb": max((m for _, m in rss), default=rss_end),
    }
    if args.json:
        print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
