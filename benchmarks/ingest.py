"""Benchmark 1: bulk ingestion of a 100,000-step x 27-metric GRPO log, ours against trackio's `bulk_log`.

Both sides get the same records and write them into a fresh SQLite database. Every measurement runs in its own
fresh Python process (so neither side pays for the other's objects in memory), alternating sides, best of
`--repeat`:

- ours, end to end: `ingest_file` on metrics.jsonl (read, JSON parsing, columnar write, offset commit);
- ours, write only: `apply_records` on records parsed before the clock starts, in one transaction;
- trackio, write only: `SQLiteStorage.bulk_log(project, run, metrics, steps=..., timestamps=...)` on parsed dicts;
- trackio, end to end: parsing the same file with orjson, then `bulk_log`.

The target (>= 3x trackio's throughput) is judged on the strictest pairing: ours *with* parsing against trackio
*without* it. The like-for-like ratios are printed too.

    python benchmarks/ingest.py [--steps 100000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common

TARGET = 3.0
KINDS = ("ours_e2e", "ours_write", "trackio_write", "trackio_e2e")


def measure_one(kind: str, jsonl: Path, work: Path) -> float:
    """One timed ingestion of `jsonl` into a fresh database under `work` (run in a child process)."""
    if kind.startswith("ours"):
        from grpo_dashboard.store.ingest import _parse_lines, apply_records, ingest_file

        store = common.new_store(work)
        n_values = common.count_values(jsonl)
        if kind == "ours_e2e":
            t = time.perf_counter()
            ingest_file(store, common.RUN_ID, jsonl)
            elapsed = time.perf_counter() - t
        else:
            items, _ = _parse_lines(jsonl.read_bytes(), 0)
            t = time.perf_counter()
            with store.transaction() as conn:
                apply_records(conn, common.RUN_ID, items)
            elapsed = time.perf_counter() - t
        stored = store.count_metric_values(common.RUN_ID)
        if stored != n_values:
            raise AssertionError(f"ours stored {stored} of {n_values} values")
        return elapsed
    with common.trackio_dir():
        storage = common.trackio_storage()
        if storage is None:
            raise RuntimeError("trackio is not installed")
        if kind == "trackio_write":
            metrics, steps, stamps = common.log_records(jsonl)
            t = time.perf_counter()
            storage.bulk_log("bench", "run", metrics, steps=steps, timestamps=stamps)
            elapsed = time.perf_counter() - t
        else:
            t = time.perf_counter()
            metrics, steps, stamps = common.log_records(jsonl)
            storage.bulk_log("bench", "run", metrics, steps=steps, timestamps=stamps)
            elapsed = time.perf_counter() - t
        stored = len(storage.get_logs("bench", "run"))
        if stored != len(steps):
            raise AssertionError(f"trackio stored {stored} of {len(steps)} records")
        return elapsed


def main(argv: list[str] | None = None) -> dict[str, float]:
    """Run the benchmark and print its figures; returns them."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--one", choices=KINDS, help=argparse.SUPPRESS)  # child mode
    parser.add_argument("--jsonl", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--work", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.one:
        print(json.dumps({"seconds": measure_one(args.one, args.jsonl, args.work)}))
        return {}

    common.print_machine()
    have_peer = common.trackio_storage() is not None
    kinds = KINDS if have_peer else KINDS[:2]
    with tempfile.TemporaryDirectory(prefix="bench-ingest-") as tmp:
        tmp_path = Path(tmp)
        jsonl = common.write_metrics_jsonl(tmp_path / "metrics.jsonl", args.steps)
        n_values = args.steps * len(common.GRPO_KEYS)
        print(
            f"log: {args.steps:,} steps x {len(common.GRPO_KEYS)} metrics = {n_values:,} values, "
            f"{jsonl.stat().st_size / 1e6:.1f} MB of JSONL; each figure is the best of {args.repeat} runs, "
            f"each run in a fresh process"
        )
        best = dict.fromkeys(kinds, float("inf"))
        for rep in range(args.repeat):
            for kind in kinds:
                work = tmp_path / f"{kind}-{rep}"
                work.mkdir()
                out = subprocess.run(
                    [sys.executable, __file__, "--one", kind, "--jsonl", str(jsonl), "--work", str(work)],
                    capture_output=True,
                    text=True,
                    check=True,
                    cwd=common.ROOT,
                )
                best[kind] = min(best[kind], json.loads(out.stdout.strip().splitlines()[-1])["seconds"])
        rate = {k: n_values / v for k, v in best.items()}
        labels = {
            "ours_e2e": "ours, with JSON parsing",
            "ours_write": "ours, write only",
            "trackio_write": "trackio bulk_log (parsed)",
            "trackio_e2e": "trackio, parse + bulk_log",
        }
        print(f"{'':28}{'seconds':>10}{'values/s':>14}")
        for kind in kinds:
            print(f"{labels[kind]:28}{best[kind]:>10.2f}{rate[kind]:>14,.0f}")
        if not have_peer:
            print("trackio is not installed: no ratio (pip install 'trackio>=0.43,<1')")
            return best
        strict = best["trackio_write"] / best["ours_e2e"]
        print(
            f"ratio, ours with parsing vs trackio bulk_log without: {strict:.1f}x "
            f"(target >= {TARGET:.0f}x: {'met' if strict >= TARGET else 'NOT met'})"
        )
        print(
            f"ratio, both without parsing: {best['trackio_write'] / best['ours_write']:.1f}x; "
            f"both with parsing: {best['trackio_e2e'] / best['ours_e2e']:.1f}x"
        )
        print(common.TABLE_HEAD)
        print(
            common.row(
                "ingest 100k x 27, ours with parsing vs trackio bulk_log",
                f"{best['ours_e2e']:.2f} s",
                f"{best['trackio_write']:.2f} s",
                f"{strict:.1f}x",
                ">= 3x",
                strict >= TARGET,
            )
        )
        print(
            common.row(
                "ingest, both write only (parsed records)",
                f"{best['ours_write']:.2f} s",
                f"{best['trackio_write']:.2f} s",
                f"{best['trackio_write'] / best['ours_write']:.1f}x",
                "-",
                None,
            )
        )
        print(
            common.row(
                "ingest, both with parsing",
                f"{best['ours_e2e']:.2f} s",
                f"{best['trackio_e2e']:.2f} s",
                f"{best['trackio_e2e'] / best['ours_e2e']:.1f}x",
                "-",
                None,
            )
        )
        return best


if __name__ == "__main__":
    main()
