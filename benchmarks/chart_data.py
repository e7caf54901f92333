"""Benchmark 2: chart data of a 100,000-step x 27-metric run, ours against trackio's downsampled read.

- cold read: every series of the run downsampled for display (<= 2,000 points per line, each bucket's min and max
  kept so spikes survive), from a Store with nothing cached, against trackio's
  `SQLiteStorage.get_logs(project, run, max_points=1500)` on the same records. Ours is measured raw (what trackio
  returns) and with the charts' default EMA smoothing computed over the full series.
- refresh tick without new data, and after 100 new records (appended to metrics.jsonl and ingested first; the
  ingestion is timed on its own): the chart data a tick needs, i.e. `Store.change_token` plus `display.run_series`
  (which the run-detail page draws from). For orientation the full chart build (`chart_json.run_plots`: every panel's
  plotly JSON, what the page sends) is timed too; it is what the page pays when the token moved.

Ticks are repeated (`--ticks`) and reported as median and p95.

    python benchmarks/chart_data.py [--steps 100000] [--ticks 20]
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

TARGET_RATIO = 5.0
TARGET_IDLE_MS = 5.0
TARGET_NEW_MS = 20.0
MAX_POINTS = 2000


def _ms(values: list[float]) -> tuple[float, float]:
    return statistics.median(values) * 1000, common.percentile(values, 95) * 1000


def main(argv: list[str] | None = None) -> dict[str, float]:
    """Run the benchmark and print its figures; returns them."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=100_000)
    parser.add_argument("--ticks", type=int, default=20)
    parser.add_argument("--repeat", type=int, default=3, help="cold reads per side (best kept)")
    args = parser.parse_args(argv)

    from grpo_dashboard.store.db import Store
    from grpo_dashboard.store.ingest import ingest_file
    from grpo_dashboard.views import chart_json, charts, display

    common.print_machine()
    out: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="bench-chart-") as tmp, common.trackio_dir():
        data = Path(tmp)
        jsonl = common.write_metrics_jsonl(data / "metrics.jsonl", args.steps)
        store = common.new_store(data)
        ingest_file(store, common.RUN_ID, jsonl)
        storage = common.trackio_storage()
        if storage is not None:
            metrics, steps, stamps = common.log_records(jsonl)
            storage.bulk_log(common.PROJECT, common.RUN_ID, metrics, steps=steps, timestamps=stamps)
            del metrics, steps, stamps
        db = data / "dashboard.db"
        n_series = len(store.metric_keys(common.RUN_ID))

        def cold(smoothing: float) -> dict[tuple[str, str], object]:
            return display.downsampled(Store(db), common.RUN_ID, MAX_POINTS, smoothing)

        # Cold reads, alternating sides.
        best = {
            "ours_raw": float("inf"),
            "ours_smooth": float("inf"),
            "ours_frames": float("inf"),
            "trackio": float("inf"),
        }
        for _ in range(args.repeat):
            t = time.perf_counter()
            pts = cold(0.0)
            best["ours_raw"] = min(best["ours_raw"], time.perf_counter() - t)
            t = time.perf_counter()
            cold(0.6)
            best["ours_smooth"] = min(best["ours_smooth"], time.perf_counter() - t)
            t = time.perf_counter()
            display.run_series(Store(db), common.RUN_ID, 0.6, MAX_POINTS)
            best["ours_frames"] = min(best["ours_frames"], time.perf_counter() - t)
            if storage is not None:
                t = time.perf_counter()
                logs = storage.get_logs(common.PROJECT, common.RUN_ID, max_points=1500)
                best["trackio"] = min(best["trackio"], time.perf_counter() - t)
        longest = max(len(p) for p in pts.values())  # type: ignore[arg-type]
        grad = pts[("train", "grad_norm")]  # type: ignore[index]
        spikes = set(range(997, args.steps + 1, 997))
        kept_spikes = len(spikes & set(grad.steps.tolist()))  # type: ignore[attr-defined]
        print(
            f"ours: {n_series} series, longest line {longest} points, grad_norm spikes kept "
            f"{kept_spikes}/{len(spikes)}"
        )
        if storage is not None:
            lost = len(spikes - {r["step"] for r in logs})
            print(
                f"trackio get_logs(max_points=1500): {len(logs)} rows; grad_norm spikes missing: {lost}/{len(spikes)}"
            )

        # Ticks on a warm store (the app's long-lived one).
        opts = charts.ChartOptions()
        warm = Store(db)
        display.run_series(warm, common.RUN_ID, opts.smoothing, opts.max_points)
        idle_data, idle_store = [], []
        for _ in range(args.ticks):
            t = time.perf_counter()
            warm.change_token(common.RUN_ID)
            idle_store.append(time.perf_counter() - t)
            t = time.perf_counter()
            warm.change_token(common.RUN_ID)
            display.run_series(warm, common.RUN_ID, opts.smoothing, opts.max_points)
            idle_data.append(time.perf_counter() - t)
        new_ingest, new_data, new_figs = [], [], []
        step = args.steps
        for _ in range(args.ticks):
            with jsonl.open("a", encoding="utf-8") as f:
                f.writelines(common.protocol_line(s, args.steps * 2) for s in range(step + 1, step + 101))
            step += 100
            t = time.perf_counter()
            ingest_file(warm, common.RUN_ID, jsonl)
            new_ingest.append(time.perf_counter() - t)
            t = time.perf_counter()
            warm.change_token(common.RUN_ID)
            frames = display.run_series(warm, common.RUN_ID, opts.smoothing, opts.max_points)
            new_data.append(time.perf_counter() - t)
            assert frames[("train", "reward")].steps[-1] == step
            t = time.perf_counter()
            chart_json.run_plots(warm, common.RUN_ID, opts)
            new_figs.append(time.perf_counter() - t)

        ratio_raw = best["trackio"] / best["ours_raw"] if storage is not None else float("nan")
        ratio_smooth = best["trackio"] / best["ours_smooth"] if storage is not None else float("nan")
        idle_med, idle_p95 = _ms(idle_data)
        tok_med, _ = _ms(idle_store)
        new_med, new_p95 = _ms(new_data)
        ing_med, _ = _ms(new_ingest)
        fig_med, fig_p95 = _ms(new_figs)
        print(
            f"cold, every series downsampled: ours raw {best['ours_raw'] * 1000:.0f} ms, ours with EMA "
            f"{best['ours_smooth'] * 1000:.0f} ms, ours as chart frames {best['ours_frames'] * 1000:.0f} ms; "
            f"trackio {best['trackio'] * 1000:.0f} ms"
        )
        print(
            f"tick, no new data: change_token {tok_med:.2f} ms; token + chart frames median {idle_med:.2f} ms, "
            f"p95 {idle_p95:.2f} ms"
        )
        print(
            f"tick, 100 new records: ingest {ing_med:.1f} ms; token + chart frames median {new_med:.1f} ms, "
            f"p95 {new_p95:.1f} ms; chart JSON of 11 panels median {fig_med:.0f} ms, p95 {fig_p95:.0f} ms"
        )
        print(common.TABLE_HEAD)
        print(
            common.row(
                "chart data cold, 27 series <= 2,000 pts, min/max (raw)",
                f"{best['ours_raw'] * 1000:.0f} ms",
                f"{best['trackio'] * 1000:.0f} ms",
                f"{ratio_raw:.1f}x",
                ">= 5x",
                ratio_raw >= TARGET_RATIO if storage is not None else None,
            )
        )
        print(
            common.row(
                "chart data cold, with EMA over full series",
                f"{best['ours_smooth'] * 1000:.0f} ms",
                f"{best['trackio'] * 1000:.0f} ms",
                f"{ratio_smooth:.1f}x",
                ">= 5x",
                ratio_smooth >= TARGET_RATIO if storage is not None else None,
            )
        )
        print(
            common.row(
                "tick, no new data (token + chart frames), median / p95",
                f"{idle_med:.2f} / {idle_p95:.2f} ms",
                "-",
                "-",
                "< 5 ms",
                idle_p95 < TARGET_IDLE_MS,
            )
        )
        print(
            common.row(
                "tick, 100 new records (token + chart frames), median / p95",
                f"{new_med:.1f} / {new_p95:.1f} ms",
                "-",
                "-",
                "< 20 ms",
                new_p95 < TARGET_NEW_MS,
            )
        )
        print(
            common.row(
                "same tick, the page's chart JSON (11 panels), median / p95",
                f"{fig_med:.0f} / {fig_p95:.0f} ms",
                "-",
                "-",
                "(orientation)",
                None,
            )
        )
        out.update(best)
        out.update(
            idle_ms=idle_med,
            idle_p95_ms=idle_p95,
            new_ms=new_med,
            new_p95_ms=new_p95,
            figures_ms=fig_med,
            ingest_100_ms=ing_med,
        )
        return out


if __name__ == "__main__":
    main()
