"""Benchmark: what `DashboardCallback` costs a user's own TRL script (target: <= 1% of training time).

A plain GRPOTrainer run (the tiny locally built Qwen2, `tests/plain_trl_script.py`'s settings: 4 generations, 8
completions of up to 8 tokens per step, `logging_steps=1`, seed 0) is trained in one fresh child process, after an
unmeasured warm-up run, round-robin (the order rotated each round): without the callback, with it on the directory
transport, and with it on the HTTP transport to a real dashboard served by the parent process (`build_app`, local mode,
POST /grpo/ingest).
`trainer.train()` alone is timed; every run must train identically (same reward and completion length at every
step). The callback's own hooks are also timed directly (the share free of run-to-run noise); the HTTP sender runs
in its own thread and is charged through the wall-clock ratio only.

    python benchmarks/external_callback.py [--steps 30] [--rounds 3]

The peer is the same script without the callback (measured in the same process).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common

TARGET = 0.01
SIDES = ("without", "directory", "http")
STEP_HOOKS = ("on_log", "on_step_end", "on_save")  # called every step or log: they scale with the run
HOOKS = ("on_train_begin", *STEP_HOOKS, "on_train_end")  # begin and end: once per run, whatever its length


def train_once(model: str, out: Path, steps: int, target: str | None) -> dict[str, Any]:
    """One training run in this process; `target`: the callback's directory or URL (None: no callback)."""
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    sys.path.insert(0, str(common.ROOT / "tests"))
    from plain_trl_script import PROMPTS, letter_reward

    from grpo_dashboard.integrations import DashboardCallback

    callbacks: list[Any] = []
    hook = {name: 0.0 for name in HOOKS}
    calls = {"n": 0}
    if target is not None:
        cb = DashboardCallback(target, name="bench", spool=out / "spool", flush_s=30.0)
        for name in HOOKS:
            inner = getattr(cb, name)

            def timed(*a: Any, _inner: Any = inner, _name: str = name, **kw: Any) -> Any:
                t = time.perf_counter()
                try:
                    return _inner(*a, **kw)
                finally:
                    hook[_name] += time.perf_counter() - t
                    calls["n"] += 1

            setattr(cb, name, timed)
        callbacks.append(cb)
    config = GRPOConfig(
        output_dir=str(out),
        max_steps=steps,
        num_generations=4,
        per_device_train_batch_size=8,
        max_completion_length=8,
        logging_steps=1,
        beta=0.04,
        report_to="none",
        use_cpu=True,
        bf16=False,
        save_strategy="no",
        seed=0,
        disable_tqdm=True,
    )
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=letter_reward,
        args=config,
        train_dataset=Dataset.from_dict({"prompt": PROMPTS}),
        callbacks=callbacks,
    )
    t = time.perf_counter()
    trainer.train()
    train_s = time.perf_counter() - t
    trajectory = [(h.get("reward"), h.get("completions/mean_length")) for h in trainer.state.log_history]
    per_step = sum(hook[n] for n in STEP_HOOKS)
    fixed = hook["on_train_begin"] + hook["on_train_end"]
    return {
        "train_s": train_s,
        "hook_s": per_step + fixed,
        "step_hook_s": per_step,
        "fixed_s": fixed,
        "hooks": hook,
        "hook_calls": calls["n"],
        "trajectory": trajectory,
    }


def child(model: str, work: Path, steps: int, rounds: int, url: str) -> None:
    """Warm-up, then `rounds` of the three sides, the order rotated each round; one JSON line per run."""
    train_once(model, work / "warm", 3, None)
    for i in range(rounds):
        # Rotated so that no side always runs first or last in a round (drift in the machine's load is shared).
        for side in SIDES[i % len(SIDES) :] + SIDES[: i % len(SIDES)]:
            target = {"without": None, "directory": str(work / "data"), "http": url}[side]
            r = train_once(model, work / f"{side}-{i}", steps, target)
            with (work / "results.jsonl").open("a", encoding="utf-8") as f:
                f.write(json.dumps({"side": side, **r}) + "\n")


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Run the benchmark and print its figures; returns them."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    p.add_argument("--model", help=argparse.SUPPRESS)
    p.add_argument("--url", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        child(args.model, args.child, args.steps, args.rounds, args.url)
        return {}
    common.print_machine()
    with tempfile.TemporaryDirectory(prefix="bench-external-") as tmp:
        work = Path(tmp)
        os.environ["GRPO_DASHBOARD_DATA_DIR"] = str(work / "dashboard")
        sys.path.insert(0, str(common.ROOT / "jobs"))
        import grpo_job

        from grpo_dashboard.store.db import Store
        from grpo_dashboard.ui import build_app

        model = str(grpo_job.build_tiny_model(work / "tiny"))
        store = Store()
        demo = build_app(store, monitor=False)
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        _, url, _ = demo.launch(prevent_thread_lock=True, server_name="127.0.0.1", server_port=port, quiet=True)
        print(f"run: {args.steps} steps x {args.rounds} rounds of {', '.join(SIDES)}; dashboard at {url}", flush=True)
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HUB_DISABLE_TELEMETRY": "1", "PYTHONPATH": str(common.ROOT)}
        cmd = [sys.executable, __file__, "--child", str(work), "--model", model, "--url", url]
        cmd += ["--steps", str(args.steps), "--rounds", str(args.rounds)]
        with (work / "child.log").open("wb") as log:
            proc = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=common.ROOT)
        if proc.returncode != 0:
            sys.stdout.write((work / "child.log").read_text(errors="replace")[-4000:])
            raise SystemExit(f"the measuring process exited {proc.returncode}")
        results = [json.loads(line) for line in (work / "results.jsonl").open(encoding="utf-8")]
        received = {r.id: r.last_step for r in store.list_runs()}
        demo.close()
    runs = {s: [r for r in results if r["side"] == s] for s in SIDES}
    if any(r["trajectory"] != results[0]["trajectory"] for r in results):
        raise AssertionError("the runs did not train identically")
    if sorted(received.values()) != [args.steps] * args.rounds:
        raise AssertionError(f"the dashboard did not receive every HTTP run whole: {received}")
    print(f"every run trained identically; the dashboard holds {len(received)} HTTP runs, each to the last step")
    print(common.TABLE_HEAD.replace("peer (trackio)", "peer (no callback)"))
    out: dict[str, Any] = {}
    for side in ("directory", "http"):
        ratios = [w["train_s"] / o["train_s"] for w, o in zip(runs[side], runs["without"], strict=True)]
        ratio = statistics.median(ratios)
        share = statistics.median(r["hook_s"] / r["train_s"] for r in runs[side])
        med_w = statistics.median(r["train_s"] for r in runs[side])
        med_o = statistics.median(r["train_s"] for r in runs["without"])
        spread = (max(ratios) - min(ratios)) * 100
        print(
            common.row(
                f"train() with DashboardCallback ({side}) / without ({args.steps} steps, median of {args.rounds}; "
                f"ratios {min(ratios):.3f}-{max(ratios):.3f}, spread {spread:.1f} points)",
                f"{med_w:.2f} s",
                f"{med_o:.2f} s",
                f"{ratio:.3f}x",
                "<= 1% overhead",
                ratio - 1 <= TARGET if spread <= 2 * TARGET * 100 else None,
            )
        )
        print(common.row(f"callback hooks' own time / train() ({side}, direct)", f"{share * 100:.2f}%", "-", "-",
                         "<= 1%", share <= TARGET))  # fmt: skip
        step_share = statistics.median(r["step_hook_s"] / r["train_s"] for r in runs[side])
        per_log_ms = statistics.median(r["hooks"]["on_log"] / args.steps * 1000 for r in runs[side])
        print(common.row(f"per-step hooks' own time / train() ({side}, direct; on_log {per_log_ms:.2f} ms per step)",
                         f"{step_share * 100:.2f}%", "-", "-", "<= 1%", step_share <= TARGET))  # fmt: skip
        for name in ("on_train_begin", "on_train_end"):
            ms = statistics.median(r["hooks"][name] * 1000 for r in runs[side])
            print(common.row(f"{name}, once per run ({side}, direct)", f"{ms:.1f} ms", "-", "-", "-", None))
        out[side] = {"ratio": ratio, "share": share, "step_share": step_share}
    return out


if __name__ == "__main__":
    main()
