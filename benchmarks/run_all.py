"""Run every benchmark, one after the other, and write their figures to benchmarks/RESULTS.md.

Each benchmark is its own script (run any of them alone: `python benchmarks/<name>.py --help`); this one runs them in
fresh processes with their default sizes, keeps each one's full output, and collects the table rows (`| figure |
ours | peer | ratio | target | met |`) into one summary at the top of RESULTS.md, with the machine and the commit.
Run it on an otherwise idle machine: the latency figures are absolute, and the machine has only a few cores.

    python benchmarks/run_all.py [--only ingest chart_data ...] [--out benchmarks/RESULTS.md]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import common  # noqa: E402

# (script, arguments, what it answers), in the order of the performance issue's targets
BENCHMARKS: list[tuple[str, list[str], str]] = [
    ("ingest", [], "1. ingest: metrics.jsonl -> store, against trackio's bulk_log"),
    ("chart_data", [], "2. chart data of a 100k-step run, and refresh ticks"),
    ("live_latency", [], "3. live latency: job writes a record -> the UI's refresh endpoint returns it"),
    ("viewers", [], "4. viewers: 20 clients at 1 Hz while 5 runs are live"),
    ("training_overhead", [], "5. training overhead of the job's metrics callback"),
    ("store_scale", [], "6. store scale: 200 runs x 10,000 steps"),
    ("doctor_long_log", [], "7. the doctor on long logs"),
    ("doctor_real_logs", [], "8. the doctor on labelled real GRPO logs, against rldoctor"),
    ("forecast_backtest", [], "9. the forecast, backtested on real GRPO logs"),
    ("push_latency", [], "10. live page: record written -> drawn in Chromium, pushed vs polled"),
    ("push_viewers", [], "11. 50 viewers on 5 live runs, pushed vs polled"),
    ("push_refresh", [], "12. refresh work of 100 new records, pushed vs polled"),
    ("light_start", [], "13. validate and the app start without torch/trl, against the old trl import"),
    ("external_callback", [], "14. DashboardCallback in a user's own TRL script, directory and HTTP, vs none"),
]


def run_one(name: str, extra: list[str]) -> tuple[str, float, int]:
    """(output, seconds, exit code) of one benchmark script run in a fresh process."""
    start = time.monotonic()
    proc = subprocess.run(
        [sys.executable, str(HERE / f"{name}.py"), *extra], cwd=common.ROOT, capture_output=True, text=True
    )
    return (
        proc.stdout + (f"\n[stderr]\n{proc.stderr[-4000:]}" if proc.returncode else ""),
        time.monotonic() - start,
        proc.returncode,
    )


def table_rows(output: str) -> list[str]:
    """The result-table rows a benchmark printed (header lines excluded)."""
    return [line for line in output.splitlines() if line.startswith("| ") and not line.startswith("| figure |")]


def main(argv: list[str] | None = None) -> int:
    """Run the benchmarks and write RESULTS.md; returns 1 if any script failed."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="+", choices=[b[0] for b in BENCHMARKS], help="run only these")
    parser.add_argument("--out", type=Path, default=HERE / "RESULTS.md")
    args = parser.parse_args(argv)

    chosen = [b for b in BENCHMARKS if not args.only or b[0] in args.only]
    sections, summary, failed = [], [], []
    for name, extra, title in chosen:
        print(f"== {name} ...", flush=True)
        output, seconds, code = run_one(name, extra)
        print(output, flush=True)
        if code:
            failed.append(name)
        summary += [f"{row.rstrip()} {name}.py |" for row in table_rows(output)]
        sections.append(
            f"## {title}\n\n`python benchmarks/{name}.py {' '.join(extra)}`".rstrip()
            + f" ({seconds:.0f} s{', FAILED with exit code ' + str(code) if code else ''})\n\n"
            f"```\n{output.strip()}\n```\n"
        )
    machine = ", ".join(f"{k}={v}" for k, v in common.machine().items())
    text = [
        "# Benchmark results",
        "",
        f"Written by `python benchmarks/run_all.py` on {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
        f"commit {common.git_rev()}.",
        "",
        f"Machine: {machine}.",
        "",
        "The peer is trackio (rldoctor 0.2 for the doctor rows), fed the same records in the same run; `ratio` is "
        "how many times faster (or smaller) ours is. "
        "`met` compares with the performance issue's target. Each section below keeps the script's whole output.",
        "",
        "| figure | ours | peer (trackio) | ratio | target | met | script |",
        "|---|---|---|---|---|---|---|",
        *summary,
        "",
        *sections,
    ]
    args.out.write_text("\n".join(text))
    print(f"wrote {args.out}" + (f"; failed: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
