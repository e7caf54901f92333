"""Benchmark: the doctor CLI on long GRPO logs (10,000 and 100,000 steps), against rldoctor 0.2 in the same run.

Prints, per log length and tool, the wall time and the peak RSS of the diagnosing subprocess alone (``os.wait4``
gives that child's own resource usage, so nothing else this process started is counted), plus our ratio to the
peer. Speed and memory are measured here, never asserted in the test suite.

    python benchmarks/doctor_long_log.py [--steps 10000 100000] [--repeat 3]

rldoctor is compared when importable (``pip install --no-deps rldoctor==0.2.0``, ideally in a throwaway venv with
``--system-site-packages``); otherwise the script says so and prints ours alone.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LINE = (
    '{{"loss": 0.0, "grad_norm": {g}, "learning_rate": 1e-06, "num_tokens": {t}.0, '
    '"completions/mean_length": {ln}, "completions/min_length": 5.0, "completions/max_length": 12.0, '
    '"completions/clipped_ratio": 0.05, "completions/mean_terminated_length": 9.0, '
    '"rewards/count_a/mean": {r}, "rewards/count_a/std": 0.2, "reward": {r}, "reward_std": 0.2, '
    '"frac_reward_zero_std": 0.04, "entropy": {e}, "clip_ratio/low_mean": 0.0, "clip_ratio/high_mean": 0.0, '
    '"clip_ratio/region_mean": 0.0, "step_time": 0.05, "epoch": {ep}, "step": {s}}}\n'
)


def write_log(path: Path, n: int) -> Path:
    """A healthy TRL 1.x GRPO log of ``n`` steps, one log dict per line (the keys TRL writes)."""
    with path.open("w") as fh:
        for s in range(1, n + 1):
            fh.write(
                LINE.format(
                    g=0.5 + (s % 7) / 20,
                    t=160 * s,
                    ln=10 + (s % 5) / 5,
                    r=0.1 + 0.5 * s / n + (s % 3) / 30,
                    e=4.3 - 2.2 * s / n + (s % 4) / 40,
                    ep=s / 1000,
                    s=s,
                )
            )
    return path


def measure(cmd: list[str], memory_gb: float | None = None, stdout: Path | None = None) -> tuple[float, float, int]:
    """(wall seconds, peak RSS in MB, exit code) of one subprocess, measured alone, its address space capped at
    ``memory_gb`` (a MemoryError then ends it instead of the machine's OOM killer); its output goes to ``stdout``."""

    def cap() -> None:
        if memory_gb:
            limit = int(memory_gb * 2**30)
            resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    out = stdout.open("wb") if stdout is not None else subprocess.DEVNULL
    start = time.perf_counter()
    try:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.DEVNULL, cwd=ROOT, preexec_fn=cap)
        _, status, usage = os.wait4(proc.pid, 0)
    finally:
        if stdout is not None:
            out.close()
    wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    rss_mb = usage.ru_maxrss / 1024 if sys.platform != "darwin" else usage.ru_maxrss / 2**20
    return wall, rss_mb, proc.returncode


def ours_cmd(path: Path) -> list[str]:
    return [sys.executable, "-m", "grpo_dashboard", "doctor", str(path), "--json"]


def rldoctor_cmd(path: Path) -> list[str] | None:
    if importlib.util.find_spec("rl_doctor") is None:
        return None
    code = "import sys; from rl_doctor.cli import main; sys.exit(main(sys.argv[1:]))"
    return [sys.executable, "-c", code, "diagnose", str(path), "-f", "json"]


def best_of(
    cmd: list[str], repeat: int, memory_gb: float | None = None, stdout: Path | None = None
) -> tuple[float, float, int]:
    """The fastest of ``repeat`` runs (and its RSS), which is the least disturbed by other load on the machine."""
    return min((measure(cmd, memory_gb, stdout) for _ in range(repeat)), key=lambda r: r[0])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--repeat", type=int, default=3, help="runs of ours per size; the fastest is reported")
    parser.add_argument("--peer-repeat", type=int, default=1, help="runs of rldoctor per size (it is slow)")
    parser.add_argument("--memory-gb", type=float, default=8.0, help="address-space cap for every run (GB)")
    args = parser.parse_args(argv)
    peer_available = rldoctor_cmd(Path("x")) is not None
    if not peer_available:
        print("rldoctor is not importable here: printing ours alone (pip install --no-deps rldoctor==0.2.0).")
    header = ("steps", "tool", "wall s", "peak RSS MB", "exit", "wall ratio", "RSS ratio")
    print("{:>8} {:<10} {:>8} {:>12} {:>5} {:>11} {:>10}".format(*header))
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for n in args.steps:
            path = write_log(Path(tmp) / f"log_{n}.jsonl", n)
            wall, rss, code = best_of(ours_cmd(path), args.repeat, args.memory_gb)
            print(f"{n:>8} {'ours':<10} {wall:>8.2f} {rss:>12.0f} {code:>5}")
            if n >= 100_000:
                rows.append(
                    _row(
                        f"doctor --json on a {n:,}-step log ({path.stat().st_size / 1e6:.0f} MB), wall / peak RSS",
                        f"{wall:.2f} s / {rss:.0f} MB",
                        "-",
                        "-",
                        "<= 3 s, <= 300 MB",
                        wall <= 3 and rss <= 300,
                    )
                )
            peer = rldoctor_cmd(path)
            if peer is not None:
                report = Path(tmp) / "rldoctor.json"
                p_wall, p_rss, p_code = best_of(peer, args.peer_repeat, args.memory_gb, report)
                skipped = report.read_text(errors="replace").count("detector raised MemoryError")
                note = f"  ({skipped} detectors skipped on MemoryError under the cap)" if skipped else ""
                print(
                    f"{n:>8} {'rldoctor':<10} {p_wall:>8.2f} {p_rss:>12.0f} {p_code:>5} "
                    f"{wall / p_wall:>10.2f}x {rss / p_rss:>9.2f}x{note}"
                )
                rows.append(
                    _row(
                        f"doctor on a {n:,}-step log vs rldoctor 0.2 (peer column), wall",
                        f"{wall:.2f} s",
                        f"{p_wall:.2f} s{' (' + note.strip(' ()') + ')' if note else ''}",
                        f"{p_wall / wall:.1f}x",
                        ">= 10x at 10k steps" if n == 10_000 else "-",
                        p_wall / wall >= 10 if n == 10_000 else None,
                    )
                )
    print(
        "ratios are ours / rldoctor (below 1: ours is faster or smaller). Exit 0/1 = no error / error found (or, "
        f"for a run that hit the {args.memory_gb:g} GB cap, MemoryError; its figures are then up to the cap)."
    )
    print("| figure | ours | peer (rldoctor) | ratio | target | met |\n|---|---|---|---|---|---|")
    for line in rows:
        print(line)
    return 0


def _row(figure: str, ours: str, peer: str, ratio_text: str, target: str, met: bool | None) -> str:
    verdict = {True: "yes", False: "NO", None: "-"}[met]
    return f"| {figure} | {ours} | {peer} | {ratio_text} | {target} | {verdict} |"


if __name__ == "__main__":
    sys.exit(main())
