"""Benchmark: the store at scale, 200 runs x 10,000 steps x 27 GRPO metrics (54 million values).

Targets: the runs table (`overview.runs_frame(store)`, what the Runs tab loads) in < 200 ms on a fresh process's first
load, <= 50 ms on later loads, <= 5 s for the load that diagnoses every never-seen run once, and the database size
per million metric values, compared with trackio's SQLite database fed the same records.

How:

- one metrics.jsonl of `--steps` log records (common's 27-key GRPO generator) between a `started` and a `finished`
  event is written once; each of `--runs` run rows (a distinct smoke spec each, status queued) is then filled by
  the dashboard's own ingestion, `grpo_dashboard.ingest.ingest_file`, which also sets the run's progress, start and
  end (completed) as it does for a real job;
- trackio 0.43 gets the same records parsed once (`common.log_records`) through `SQLiteStorage.bulk_log`, one call
  per run, into its project database (`--trackio-runs` of them; a subset when smaller than `--runs`: the size per
  million values is then measured on that subset and the output says so);
- sizes are the database files with their WAL checkpointed in, over the metric values stored;
- the runs table is timed in a fresh process against the filled store: the first call (a dashboard just started:
  modules imported, nothing in memory; each run's health badge read from the store, where the dashboard saves it
  when a run ends), then the median of `--repeat` later calls. Because ingestion alone (as here) saves no badges,
  a first process loads the table once before: that very first load diagnoses every run once and saves its badge
  (what a dashboard pays once for runs that ended while it was not running); it is reported for orientation.
  For the peer, its run list (`get_runs` + `get_max_steps_for_runs`: names and progress only, no health or reward)
  is timed the same way, for reference only.

    python benchmarks/store_scale.py [--runs 200] [--steps 10000] [--trackio-runs 200] [--repeat 5]
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
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common

TARGET_MS = 200.0  # the first load of a fresh process
TARGET_LATER_MS = 50.0  # later loads (the Runs tab's timer reloads the table every 2 s)
TARGET_FIRST_PASS_S = 5.0  # the load that diagnoses every never-seen run once
PROJECT = "bench"


def run_spec_yaml(i: int) -> str:
    """The smoke preset's YAML under a distinct name per run (a real store holds one spec text per run)."""
    text = (common.ROOT / "examples" / "smoke.yaml").read_text(encoding="utf-8")
    return text.replace("name: smoke", f"name: scale-{i:04d}", 1)


def write_log(path: Path, steps: int) -> Path:
    """metrics.jsonl: `started`, the log records, `finished` (the run ends completed)."""
    common.write_metrics_jsonl(path, steps)
    with path.open("a", encoding="utf-8") as f:
        f.write(
            json.dumps(
                {"v": 1, "type": "event", "event": "finished", "time": common.T0 + 10.0 * steps + 5, "step": steps}
            )
            + "\n"
        )
    return path


def fill_ours(data: Path, jsonl: Path, runs: int) -> tuple[Any, float]:
    """`runs` run rows, each ingested from `jsonl` by ingest_file; (store, seconds)."""
    from grpo_dashboard.store.db import Run, Store
    from grpo_dashboard.store.ingest import ingest_file

    store = Store(data / "dashboard.db")
    t = time.perf_counter()
    for i in range(runs):
        run_id = f"scale-{i:04d}"
        run_dir = data / "runs" / run_id
        run_dir.mkdir(parents=True)
        store.insert_run(
            Run(
                id=run_id,
                name=f"scale-{i:04d}",
                spec_yaml=run_spec_yaml(i),
                backend="local",
                status="queued",
                created_at=common.T0 + i,
                run_dir=str(run_dir),
            )
        )
        ingest_file(store, run_id, jsonl)
        if (i + 1) % 50 == 0 or i + 1 == runs:
            print(f"  ours: {i + 1}/{runs} runs ingested, {time.perf_counter() - t:.0f} s", flush=True)
    return store, time.perf_counter() - t


def fill_trackio(jsonl: Path, runs: int) -> float:
    """`runs` trackio runs fed the same records with bulk_log (TRACKIO_DIR already set); seconds."""
    storage = common.trackio_storage()
    target = storage.get_project_db_path(PROJECT)
    if not target.resolve().is_relative_to(Path(os.environ["TRACKIO_DIR"]).resolve()):
        raise RuntimeError(f"trackio would write to {target}, outside the benchmark's temporary TRACKIO_DIR")
    metrics, steps, stamps = common.log_records(jsonl)
    t = time.perf_counter()
    for i in range(runs):
        storage.bulk_log(PROJECT, f"scale-{i:04d}", metrics, steps=steps, timestamps=stamps)
        if (i + 1) % 20 == 0 or i + 1 == runs:
            print(f"  trackio: {i + 1}/{runs} runs bulk-logged, {time.perf_counter() - t:.0f} s", flush=True)
    return time.perf_counter() - t


def time_tables(db: Path, trackio_dir: Path | None, repeat: int) -> dict[str, Any]:
    """(child process) First and later runs-table loads, ours and the peer's run list."""
    from grpo_dashboard.store.db import Store
    from grpo_dashboard.views import overview

    store = Store(db)
    overview.health_available()  # imports the doctor: part of the dashboard's start, not of loading the table
    out: dict[str, Any] = {}
    t = time.perf_counter()
    frame = overview.runs_frame(store)
    out["first_s"] = time.perf_counter() - t
    later = []
    for _ in range(repeat):
        t = time.perf_counter()
        frame = overview.runs_frame(store)
        later.append(time.perf_counter() - t)
    out["later_s"] = statistics.median(later)
    out["rows"] = len(frame)
    out["health"] = sorted(set(frame["health"]))
    out["progress"] = frame["progress"].iloc[0]
    if trackio_dir is not None:
        storage = common.trackio_storage()

        def peer_list() -> int:
            names = storage.get_runs(PROJECT)
            storage.get_max_steps_for_runs(PROJECT)
            return len(names)

        t = time.perf_counter()
        out["peer_rows"] = peer_list()
        out["peer_first_s"] = time.perf_counter() - t
        out["peer_later_s"] = common.median_of(peer_list, repeat)
    return out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Run the benchmark and print its figures; returns them."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--steps", type=int, default=10_000)
    parser.add_argument(
        "--trackio-runs",
        type=int,
        default=None,
        help="runs fed to trackio (default: --runs; fewer: size measured on that subset)",
    )
    parser.add_argument("--repeat", type=int, default=5, help="later runs-table loads timed (median)")
    parser.add_argument("--child-db", type=Path, help=argparse.SUPPRESS)  # child mode
    parser.add_argument("--child-trackio", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child_db:
        if args.child_trackio is not None:
            os.environ["TRACKIO_DIR"] = str(args.child_trackio)
        print(json.dumps(time_tables(args.child_db, args.child_trackio, args.repeat)))
        return {}

    n_keys = len(common.GRPO_KEYS)
    peer_runs = args.runs if args.trackio_runs is None else min(args.trackio_runs, args.runs)
    # trackio reads TRACKIO_DIR when imported: only look for it here, import it inside the temporary directory.
    have_peer = importlib.util.find_spec("trackio") is not None and peer_runs > 0
    with tempfile.TemporaryDirectory(prefix="bench-scale-") as tmp, common.trackio_dir() as tdir:
        common.print_machine()  # imports trackio (for its version): only now that TRACKIO_DIR is the temporary one
        tmp_path = Path(tmp)
        jsonl = write_log(tmp_path / "metrics.jsonl", args.steps)
        values = args.runs * args.steps * n_keys
        print(
            f"store: {args.runs} runs x {args.steps:,} steps x {n_keys} metrics = {values:,} values "
            f"(metrics.jsonl of one run: {jsonl.stat().st_size / 1e6:.1f} MB, ingested once per run)",
            flush=True,
        )
        data = tmp_path / "data"
        store, ours_fill_s = fill_ours(data, jsonl, args.runs)
        stored = sum(store.count_metric_values(r.id) for r in store.list_runs())
        if stored != values:
            raise AssertionError(f"ours stored {stored:,} of {values:,} values")
        statuses = {r.status for r in store.list_runs()}
        store.close()
        ours_bytes = common.db_bytes(data / "dashboard.db")
        peer_bytes = peer_fill_s = None
        if have_peer:
            peer_fill_s = fill_trackio(jsonl, peer_runs)
            peer_bytes = common.db_bytes(common.trackio_storage().get_project_db_path(PROJECT))
        cmd = [sys.executable, __file__, "--child-db", str(data / "dashboard.db"), "--repeat", str(args.repeat)]
        if have_peer:
            cmd += ["--child-trackio", str(tdir)]
        timings = []
        for _ in range(2):  # the first process diagnoses every run once and saves the badges; the second reads them
            out = subprocess.run(cmd, capture_output=True, text=True, cwd=common.ROOT)
            if out.returncode != 0:
                raise SystemExit(f"the timing process failed:\n{out.stderr[-4000:]}")
            timings.append(json.loads(out.stdout.strip().splitlines()[-1]))
        never_seen, timed = timings
    if timed["rows"] != args.runs:
        raise AssertionError(f"runs table has {timed['rows']} rows, not {args.runs}")
    ours_per_m = ours_bytes / values * 1e6
    print(
        f"ours: filled in {ours_fill_s:.1f} s ({values / ours_fill_s:,.0f} values/s), run statuses "
        f"{sorted(statuses)}, database {ours_bytes / 1e6:,.1f} MB = {ours_per_m / 1e6:.2f} MB per million values "
        f"({ours_bytes / values:.2f} bytes per value)"
    )
    print(
        f"runs table: {timed['rows']} rows (health badges {timed['health']}, progress e.g. {timed['progress']!r}); "
        f"first load {timed['first_s'] * 1e3:,.0f} ms, later loads {timed['later_s'] * 1e3:,.1f} ms "
        f"(median of {args.repeat}); the very first load of all, which diagnoses every run and saves its health "
        f"badge (runs that ended while no dashboard ran), {never_seen['first_s'] * 1e3:,.0f} ms"
    )
    rows = []
    if have_peer:
        peer_values = peer_runs * args.steps * n_keys
        peer_per_m = peer_bytes / peer_values * 1e6
        subset = "" if peer_runs == args.runs else f" (trackio measured on a subset: {peer_runs} of {args.runs} runs)"
        print(
            f"trackio: {peer_runs} runs filled in {peer_fill_s:.1f} s ({peer_values / peer_fill_s:,.0f} values/s), "
            f"database {peer_bytes / 1e6:,.1f} MB = {peer_per_m / 1e6:.2f} MB per million values "
            f"({peer_bytes / peer_values:.2f} bytes per value){subset}"
        )
        print(
            f"trackio run list (names + max step): first {timed['peer_first_s'] * 1e3:,.0f} ms, later "
            f"{timed['peer_later_s'] * 1e3:,.1f} ms ({timed['peer_rows']} runs)"
        )
        size_cell = f"{peer_per_m / 1e6:.2f} MB" + ("" if not subset else f" ({peer_runs} runs)")
        rows.append(
            common.row(
                f"database size per million metric values ({args.runs} x {args.steps:,} x {n_keys})",
                f"{ours_per_m / 1e6:.2f} MB",
                size_cell,
                common.ratio(peer_per_m, ours_per_m),
                "smaller than trackio",
                ours_per_m < peer_per_m,
            )
        )
    else:
        print("trackio is not installed (or --trackio-runs 0): no peer (pip install 'trackio>=0.43,<1')")
        rows.append(
            common.row(
                f"database size per million metric values ({args.runs} x {args.steps:,} x {n_keys})",
                f"{ours_per_m / 1e6:.2f} MB",
                "-",
                "n/a",
                "-",
                None,
            )
        )
    peer_first = f"{timed['peer_first_s'] * 1e3:,.0f} ms (run list only)" if have_peer else "-"
    peer_later = f"{timed['peer_later_s'] * 1e3:,.1f} ms (run list only)" if have_peer else "-"
    rows.append(
        common.row(
            f"runs table, first load in a fresh process ({args.runs} runs x {args.steps:,} steps)",
            f"{timed['first_s'] * 1e3:,.0f} ms",
            peer_first,
            "-",
            "< 200 ms",
            timed["first_s"] * 1e3 < TARGET_MS,
        )
    )
    rows.append(
        common.row(
            "runs table, very first load: every run diagnosed once, badges saved",
            f"{never_seen['first_s'] * 1e3:,.0f} ms",
            "-",
            "-",
            f"<= {TARGET_FIRST_PASS_S:.0f} s",
            never_seen["first_s"] <= TARGET_FIRST_PASS_S,
        )
    )
    rows.append(
        common.row(
            f"runs table, later loads, median of {args.repeat}",
            f"{timed['later_s'] * 1e3:,.1f} ms",
            peer_later,
            "-",
            f"<= {TARGET_LATER_MS:.0f} ms",
            timed["later_s"] * 1e3 <= TARGET_LATER_MS,
        )
    )
    print(common.TABLE_HEAD)
    for line in rows:
        print(line)
    return {"ours_bytes": ours_bytes, "peer_bytes": peer_bytes, **timed}


if __name__ == "__main__":
    main()
