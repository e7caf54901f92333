"""Command line: `grpo-dashboard COMMAND` (the installed console script), or `python -m grpo_dashboard COMMAND`.

`serve` (the web app) is parsed here but runs in `__main__.py`, the layer above: it is the one command that needs the
UI, and nothing below the UI imports gradio.

Exit codes: 0 success; 1 invalid spec, or the run failed (launch --wait); 2 usage error or unreadable input;
3 no such run; 4 the run was canceled (launch --wait); 5 the store cannot be used (read-only or full data directory).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_NOT_FOUND, EXIT_CANCELED, EXIT_STORAGE = 0, 1, 2, 3, 4, 5


def _prog() -> str:
    """How the user called us: the console script, or `python -m grpo_dashboard`."""
    name = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else ""
    return "grpo-dashboard" if name.startswith("grpo-dashboard") else "python -m grpo_dashboard"


def _parser() -> argparse.ArgumentParser:
    from grpo_dashboard.launch.backends import REMOTE_KINDS

    p = argparse.ArgumentParser(prog=_prog(), description="Launch and watch TRL GRPO runs.")
    p.add_argument("--data-dir", help="Data directory (default: $GRPO_DASHBOARD_DATA_DIR or ~/.grpo_dashboard).")
    sub = p.add_subparsers(dest="command", required=True)

    s = sub.add_parser(
        "serve",
        help="Serve the dashboard web app (what `python app.py` does).",
        description="Serve the dashboard on 127.0.0.1:7860, or $GRADIO_SERVER_NAME / "
        "$GRADIO_SERVER_PORT, or --host / --port.",
    )
    s.add_argument(
        "--host", help="Address to listen on (default: $GRADIO_SERVER_NAME or 127.0.0.1; 0.0.0.0 for every interface)."
    )
    s.add_argument(
        "--port", type=int, help="Port to listen on (default: $GRADIO_SERVER_PORT, else the first free one from 7860)."
    )

    s = sub.add_parser("launch", help="Validate a run spec and start it.")
    s.add_argument("spec", help="Run spec YAML file.")
    s.add_argument("--wait", action="store_true", help="Follow the run until it ends; exit code reflects the result.")
    s.add_argument("--json", action="store_true", help="Print the run as JSON.")

    s = sub.add_parser("validate", help="Check a run spec without starting anything.")
    s.add_argument("spec")
    s.add_argument("--json", action="store_true")

    s = sub.add_parser("runs", help="List runs.")
    s.add_argument("--status", action="append", help="Only runs with this status (repeatable).")
    s.add_argument("--tag", help="Only runs with this tag (or `group:NAME` for a group).")
    s.add_argument("--json", action="store_true")

    s = sub.add_parser("show", help="Status, progress and latest metrics of a run.")
    s.add_argument("run", help="Run id, unique id prefix, or name.")
    s.add_argument("--json", action="store_true")

    s = sub.add_parser("logs", help="The tail of a run's job log.")
    s.add_argument("run")
    s.add_argument("-n", "--lines", type=int, default=50)
    s.add_argument("-f", "--follow", action="store_true", help="Keep printing new lines until the run ends.")

    s = sub.add_parser("cancel", help="Stop a run (SIGTERM, then SIGKILL after a grace period).")
    s.add_argument("run")
    s.add_argument("--no-wait", action="store_true", help="Return right after signalling.")

    s = sub.add_parser("watch", help="Ingest and supervise active runs in the foreground (what the app does).")
    s.add_argument("--interval", type=float, default=0.5)
    s.add_argument("--until-idle", action="store_true", help="Exit once no run is active.")

    s = sub.add_parser(
        "reattach",
        help="Find this dashboard's jobs on Slurm and Hugging Face Jobs and put them back "
        "in the store (after losing the store, or on another machine).",
    )
    s.add_argument(
        "--backend",
        choices=list(REMOTE_KINDS),
        action="append",
        help=f"Only this backend (repeatable; default: {', '.join(REMOTE_KINDS)}).",
    )
    s.add_argument("--namespace", help="Hugging Face Jobs namespace to list (default: your username).")
    s = sub.add_parser("build-tiny-model", help="Build the tiny random Qwen2 + char tokenizer used offline.")
    s.add_argument("path")

    sub.add_parser(
        "doctor",
        help="Diagnose a GRPO log (trainer_state.json, checkpoint dir, metrics.jsonl, JSONL) or a run by id or name.",
        add_help=False,
    )
    sub.add_parser(
        "forecast",
        help="Forecast a GRPO log: reward ceiling, plateau, stop step, cost (LOG [--json] "
        "[--at-step N] [--flavor NAME | --price-per-hour USD]).",
        add_help=False,
    )
    sub.add_parser(
        "check-rewards",
        help="Run every reward on real rows (ideal, wrong-format, empty, garbage) in a sandbox and flag broken ones.",
        add_help=False,
    )
    sub.add_parser(
        "inspect-dataset",
        help="Show a spec's dataset: columns, prompt column, chat template, prompt lengths.",
        add_help=False,
    )
    sub.add_parser(
        "hardware", help="Estimate GPU memory, time and cost of a spec on HF Jobs; recommend a flavor.", add_help=False
    )
    sub.add_parser(
        "deploy-space",
        help="Create or update a Hugging Face Space running this dashboard (OWNER/NAME).",
        add_help=False,
    )
    # --- bring your own TRL workflow (issue 16): recipes in and out, resume, runs from other tools -------------
    sub.add_parser(
        "import-trl", help="Map a flat TRL config (trl grpo --config, open-r1, ...) to a run spec.", add_help=False
    )
    sub.add_parser(
        "export-trl",
        help="Write a run spec as a flat TRL config, with trl/accelerate/hf jobs commands.",
        add_help=False,
    )
    sub.add_parser(
        "resume",
        help="Continue a canceled, failed or stopped run from its latest (or a chosen) checkpoint.",
        add_help=False,
    )
    sub.add_parser(
        "import-run",
        help="Import a run made elsewhere (trainer_state.json, checkpoint dir, TRL JSONL, "
        "trackio project, TensorBoard dir, W&B run dir or history) as a read-only run; --follow: live.",
        add_help=False,
    )
    sub.add_parser("rename", help="Give a run another display name (RUN NAME).", add_help=False)
    sub.add_parser("tag", help="Show, add (--add T) or remove (--remove T) a run's tags (RUN).", add_help=False)
    sub.add_parser(
        "export-metrics",
        help="Write a run's stored metrics (one row per step and split) to .csv, .jsonl or .parquet.",
        add_help=False,
    )
    return p


def main(argv: list[str] | None = None, serve: Callable[[argparse.Namespace], int] | None = None) -> int:
    """Run the CLI; returns the exit code. `serve` runs the `serve` command (`__main__.py` passes it)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    i, data_dir = 0, None
    if argv[:1] == ["--data-dir"] and len(argv) > 1:
        i, data_dir = 2, argv[1]
    elif argv[:1] and argv[0].startswith("--data-dir="):
        i, data_dir = 1, argv[0].split("=", 1)[1]
    delegated = DELEGATED.get(argv[i] if len(argv) > i else "")
    if delegated:
        if data_dir:
            os.environ["GRPO_DASHBOARD_DATA_DIR"] = data_dir
        return delegated(argv[i + 1 :])
    args = _parser().parse_args(argv)
    if args.data_dir:
        os.environ["GRPO_DASHBOARD_DATA_DIR"] = args.data_dir
    if args.command == "serve":
        if serve is None:
            print("serve: run `grpo-dashboard serve` or `python -m grpo_dashboard serve`.", file=sys.stderr)
            return EXIT_USAGE
        return serve(args)
    from grpo_dashboard.errors import BackendError, RunNotFound, SpecError, StoreError

    try:
        return COMMANDS[args.command](args)
    except (SpecError, BackendError) as exc:
        print(str(exc), file=sys.stderr)
        return EXIT_FAILED
    except RunNotFound as exc:
        print(str(exc), file=sys.stderr)
        return EXIT_NOT_FOUND
    except StoreError as exc:
        print(str(exc), file=sys.stderr)
        return EXIT_STORAGE


# Commands with a parser of their own, in the stage they belong to; each gets the arguments after its name.
def _doctor(argv: list[str]) -> int:
    """doctor PATH|RUN [--json] [--threshold K=V]: a log file or directory, or a run of the store by id or name."""
    import tempfile

    from grpo_dashboard.health import doctor_main

    with tempfile.TemporaryDirectory(prefix="grpo-doctor-") as tmp:
        return doctor_main(_doctor_target(argv, Path(tmp)))


def _doctor_target(argv: list[str], tmp: Path) -> list[str]:
    """argv with a run reference (not an existing path) replaced by its log: a local run's directory (its
    metrics.jsonl, samples and started config), else its stored train metrics written to `tmp/<run id>.jsonl`."""
    i = 0
    while i < len(argv):
        if argv[i] in ("--threshold", "--config"):
            i += 2
            continue
        if argv[i].startswith("-"):
            i += 1
            continue
        break
    if i >= len(argv) or Path(argv[i]).expanduser().exists():
        return argv
    from grpo_dashboard.errors import RunNotFound
    from grpo_dashboard.store.db import Store
    from grpo_dashboard.store.export import metric_rows

    try:
        store = Store()
        run = store.find_run(argv[i])
    except RunNotFound:
        return argv  # the doctor says the path cannot be read
    if run.run_dir and (Path(run.run_dir) / "metrics.jsonl").is_file():
        target = run.run_dir
    else:
        path = tmp / f"{run.id}.jsonl"
        with open(path, "w", encoding="utf-8") as f:
            for row in metric_rows(store, run.id):
                if row.pop("split") == "train":
                    row.pop("time", None)
                    f.write(json.dumps(row) + "\n")
        target = str(path)
    return [*argv[:i], target, *argv[i + 1 :]]


def _forecast(argv: list[str]) -> int:
    """LOG [--json] [--at-step N] [--max-steps N] [--flavor NAME | --price-per-hour USD]; the flavor's price comes from
    the Hub's live hardware list when reachable, else the built-in table."""
    from grpo_dashboard.health.forecast_cli import forecast_main

    rest, flavor = list(argv), None
    if "--flavor" in rest:
        i = rest.index("--flavor")
        if i + 1 >= len(rest):
            print("forecast: --flavor needs a Jobs flavor name, e.g. --flavor a10g-small", file=sys.stderr)
            return 2
        flavor = rest[i + 1]
        del rest[i : i + 2]
    if flavor is None:
        return forecast_main(rest)
    from grpo_dashboard.spec.flavors import flavors

    table = flavors(live=os.environ.get("HF_HUB_OFFLINE", "0") not in ("1", "true", "True"))
    if flavor not in table:
        print(f"forecast: unknown HF Jobs flavor {flavor!r}; known: {', '.join(sorted(table))}", file=sys.stderr)
        return 2
    chosen = table[flavor]
    return forecast_main(rest, chosen.price_per_hour, f" ({flavor}, {chosen.source} price)")


def _check_rewards(argv: list[str]) -> int:
    from grpo_dashboard.checks.reward_check import check_rewards_main  # SPEC [--rows N] [--json]

    return check_rewards_main(argv)


def _inspect_dataset(argv: list[str]) -> int:
    from grpo_dashboard.checks.dataset_inspect import inspect_main  # SPEC [--json]

    return inspect_main(argv)


def _hardware(argv: list[str]) -> int:
    from grpo_dashboard.checks.hardware import hardware_main  # SPEC [--json] [--live] [--all]

    return hardware_main(argv)


def _deploy_space(argv: list[str]) -> int:
    from grpo_dashboard.space.deploy import deploy_main  # OWNER/NAME [--private] [--bucket B] [--dry-run]

    return deploy_main(argv)


# --- bring your own TRL workflow (issue 16) -------------------------------------------------------------------
def _import_trl(argv: list[str]) -> int:
    from grpo_dashboard.checks.trl_check import parse_local
    from grpo_dashboard.spec.trl_cli import import_trl_main  # RECIPE [-o SPEC] [--trl-version V] [--model M] ...

    return import_trl_main(argv, parse=parse_local)


def _export_trl(argv: list[str]) -> int:
    import functools

    from grpo_dashboard.launch.hf_jobs.export import export_job
    from grpo_dashboard.launch.runs import prepare
    from grpo_dashboard.spec.trl_cli import export_trl_main  # SPEC [-o RECIPE]

    return export_trl_main(argv, job_export=functools.partial(export_job, prepare=prepare))


def _resume(argv: list[str]) -> int:
    from grpo_dashboard.launch.resume import resume_main  # RUN [--checkpoint N] [--wait]

    return resume_main(argv)


def _import_run(argv: list[str]) -> int:
    from grpo_dashboard.store.follow import main  # PATH [--name N] [--tag T] [--follow]

    return main(argv)


def _rename(argv: list[str]) -> int:
    from grpo_dashboard.store.run_labels import rename_main  # RUN NAME

    return rename_main(argv)


def _tag(argv: list[str]) -> int:
    from grpo_dashboard.store.run_labels import tag_main  # RUN [--add T] [--remove T]

    return tag_main(argv)


def _export_metrics(argv: list[str]) -> int:
    from grpo_dashboard.store.export import export_metrics_main  # RUN -o FILE

    return export_metrics_main(argv)


DELEGATED: dict[str, Callable[[list[str]], int]] = {
    "doctor": _doctor,
    "forecast": _forecast,
    "check-rewards": _check_rewards,
    "inspect-dataset": _inspect_dataset,
    "hardware": _hardware,
    "deploy-space": _deploy_space,
    "import-trl": _import_trl,
    "export-trl": _export_trl,
    "resume": _resume,
    "rename": _rename,
    "tag": _tag,
    "import-run": _import_run,
    "export-metrics": _export_metrics,
}


def _cmd_validate(args: argparse.Namespace) -> int:
    from grpo_dashboard.errors import SpecError
    from grpo_dashboard.launch.runs import check

    if not Path(args.spec).is_file():
        print(f"Spec file {args.spec!r} does not exist.", file=sys.stderr)
        return EXIT_USAGE
    try:
        spec, report = check(args.spec)
    except SpecError as exc:
        spec, report = _check_partial(args.spec, exc)
    if args.json:
        print(
            json.dumps(
                {
                    "ok": report.ok,
                    "errors": [e.to_dict() for e in report.errors],
                    "warnings": [w.to_dict() for w in report.warnings],
                },
                indent=2,
            )
        )
    else:
        for w in report.warnings:
            print(f"warning: {w}", file=sys.stderr)
        for e in report.errors:
            print(f"error: {e}", file=sys.stderr)
        if report.ok:
            print(f"{args.spec}: valid ({spec.name}).")
    return EXIT_OK if report.ok else EXIT_FAILED


def _check_partial(path: str, exc: Any) -> tuple[Any, Any]:
    """A spec with structural problems: the other checks still run on its well-formed parts, and every problem of
    both kinds is reported (a flat TRL file keeps its one "import it" error)."""
    from grpo_dashboard.launch.runs import validate
    from grpo_dashboard.spec import safe_yaml
    from grpo_dashboard.spec.run_spec import RunSpec

    if len(exc.errors) == 1 and exc.errors[0].field == "(file)":
        raise exc
    spec, structural = RunSpec.from_dict_partial(safe_yaml.load(Path(path).read_text(encoding="utf-8")) or {})
    report = validate(spec)
    report.errors = structural + [e for e in report.errors if e.field not in {s.field for s in structural}]
    return spec, report


def _cmd_launch(args: argparse.Namespace) -> int:
    from grpo_dashboard.launch.runs import launch, wait
    from grpo_dashboard.store.db import RunStatus, Store

    if not Path(args.spec).is_file():
        print(f"Spec file {args.spec!r} does not exist.", file=sys.stderr)
        return EXIT_USAGE
    run = launch(args.spec, on_warning=lambda w: print(f"warning: {w}", file=sys.stderr))
    store = Store()
    if args.json and not args.wait:
        print(json.dumps(_run_dict(run), indent=2))
    else:
        print(f"launched {run.id} ({run.status}); run dir {run.run_dir}")
        _print_job(run)
    if not args.wait:
        return EXIT_OK if run.status != RunStatus.FAILED.value else EXIT_FAILED

    def progress(r: Any) -> None:
        latest = store.latest_metrics(r.id)
        reward = latest.get("reward")
        shown = f" reward={reward:.4g}" if isinstance(reward, float) else ""
        preparing = _preparing(store, r) if r.last_step is None else None
        if preparing:  # work before the first step (the agent model's warm-up) reports its own progress
            print(f"  {r.status}: {preparing}", flush=True)
        else:
            print(f"  {r.status} step {r.last_step or 0}/{r.max_steps or '?'}{shown}", flush=True)

    def terminated(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt  # SIGTERM to `launch --wait` cancels the run, as Ctrl-C does

    previous = signal.signal(signal.SIGTERM, terminated)
    try:
        run = wait(store, run, on_update=progress)
    except KeyboardInterrupt:
        from grpo_dashboard.launch.runs import cancel

        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a second SIGTERM must not cut the cancel short
        print("interrupted: canceling the run...", file=sys.stderr)
        run = cancel(store, store.get_run(run.id), wait=True)
    finally:
        signal.signal(signal.SIGTERM, previous)
    if args.json:
        print(json.dumps(_run_dict(run), indent=2))
    print(f"{run.id}: {run.status}" + (f" — {run.error}" if run.error else ""))
    return {RunStatus.COMPLETED.value: EXIT_OK, RunStatus.CANCELED.value: EXIT_CANCELED}.get(run.status, EXIT_FAILED)


def _preparing(store: Any, run: Any) -> str | None:
    """The message of the run's latest `preparing` event (work before training), if no step has been logged."""
    event = store.latest_event(run.id, "preparing")
    return str(event.get("message") or "") or None if event else None


def _print_job(run: Any) -> None:
    """Where a remote run went (job URL, flavor, timeout and why), and why it could not start."""
    from grpo_dashboard.launch.runs import job_summary

    summary = job_summary(run)
    if summary:
        print(summary)
    if run.error:
        print(f"error: {run.error}", file=sys.stderr)


def _fmt_time(t: float | None) -> str:
    return datetime.fromtimestamp(t).strftime("%Y-%m-%d %H:%M:%S") if t else "-"


def _elapsed(run: Any) -> str:
    if not run.started_at:
        return "-"
    secs = int((run.ended_at or time.time()) - run.started_at)
    return f"{secs // 3600}:{secs % 3600 // 60:02d}:{secs % 60:02d}"


def _run_dict(run: Any) -> dict[str, Any]:
    d = {k: v for k, v in vars(run).items() if k != "spec_yaml"}
    d["progress"] = run.progress
    return d


def _cmd_runs(args: argparse.Namespace) -> int:
    from grpo_dashboard.launch.runs import refresh_active
    from grpo_dashboard.store.db import Store

    store = Store()
    refresh_active(store)
    runs = store.list_runs(status=args.status)
    if args.tag:
        from grpo_dashboard.views.overview import run_tags

        runs = [r for r in runs if args.tag in run_tags(r)]
    if args.json:
        print(json.dumps([_run_dict(r) for r in runs], indent=2))
        return EXIT_OK
    if not runs:
        print("no runs")
        return EXIT_OK
    print(f"{'ID':<44} {'STATUS':<10} {'STEP':>11} {'ELAPSED':>9}  CREATED")
    for r in runs:
        step = f"{r.last_step or 0}/{r.max_steps or '?'}"
        print(f"{r.id:<44} {r.status:<10} {step:>11} {_elapsed(r):>9}  {_fmt_time(r.created_at)}")
    return EXIT_OK


def _cmd_show(args: argparse.Namespace) -> int:
    from grpo_dashboard.launch.runs import refresh
    from grpo_dashboard.store.db import Store

    store = Store()
    run = refresh(store, store.find_run(args.run))
    latest = store.latest_metrics(run.id)
    if args.json:
        print(json.dumps({**_run_dict(run), "latest": latest}, indent=2, default=str))
        return EXIT_OK
    pct = f" ({run.progress:.0%})" if run.progress is not None else ""
    print(f"run      {run.id}\nname     {run.name}\nstatus   {run.status}\nbackend  {run.backend}")
    print(f"progress {run.last_step or 0}/{run.max_steps or '?'}{pct}\nelapsed  {_elapsed(run)}")
    print(f"created  {_fmt_time(run.created_at)}\nrun dir  {run.run_dir}")
    if run.exit_code is not None:
        print(f"exit     {run.exit_code}")
    if run.error:
        print(f"error    {run.error}")
    if run.n_skipped:
        print(f"skipped  {run.n_skipped} invalid value(s) or line(s) while ingesting")
    if latest:
        print("latest metrics:")
        for k in sorted(latest):
            print(f"  {k:<40} {latest[k]}")
    return EXIT_OK


def _cmd_logs(args: argparse.Namespace) -> int:
    from grpo_dashboard.launch.logs import tail
    from grpo_dashboard.launch.runs import log_path, refresh
    from grpo_dashboard.store.db import TERMINAL, Store

    store = Store()
    run = store.find_run(args.run)
    path = log_path(run)
    print(tail(path, args.lines))
    if not args.follow:
        return EXIT_OK
    with open(path, "rb") as f:
        f.seek(0, 2)
        while True:
            chunk = f.read()
            if chunk:
                sys.stdout.write(chunk.decode("utf-8", errors="replace"))
                sys.stdout.flush()
            run = refresh(store, store.get_run(run.id))
            if run.status in TERMINAL and not chunk:
                return EXIT_OK
            time.sleep(0.5)


def _cmd_cancel(args: argparse.Namespace) -> int:
    from grpo_dashboard.launch.runs import cancel
    from grpo_dashboard.store.db import TERMINAL, Store

    store = Store()
    run = store.find_run(args.run)
    if run.status in TERMINAL:
        print(f"{run.id} already ended ({run.status}): nothing to cancel.", file=sys.stderr)
        return EXIT_FAILED
    run = cancel(store, run, wait=not args.no_wait)
    print(f"{run.id}: {run.status}" + ("" if run.status in ("canceled",) else " (cancel requested)"))
    return EXIT_OK


def _cmd_watch(args: argparse.Namespace) -> int:
    from grpo_dashboard.launch.backends import shared
    from grpo_dashboard.launch.runs import refresh_active
    from grpo_dashboard.store.db import Store

    store, backends = Store(), shared()  # the CLI's backends (this process's)
    try:
        while True:
            active = refresh_active(store, backends)
            if args.until_idle and not [r for r in active if r.is_active]:
                return EXIT_OK
            time.sleep(args.interval)
    except KeyboardInterrupt:
        return EXIT_OK


def _cmd_reattach(args: argparse.Namespace) -> int:
    from grpo_dashboard.errors import BackendError
    from grpo_dashboard.launch.backends import REMOTE_KINDS, shared
    from grpo_dashboard.store.db import Store

    store = Store()
    names = args.backend or list(REMOTE_KINDS)
    failed = 0
    for name in names:
        backend = shared().get(name)
        unreachable = backend.probe()  # reattach itself finds nothing, silently, where the backend does not answer
        if unreachable:
            print(f"{name}: {unreachable}", file=sys.stderr)
            failed += 1
            continue
        try:
            found = backend.reattach(store, namespace=args.namespace)
        except BackendError as exc:
            print(f"{name}: {exc}", file=sys.stderr)
            failed += 1
            continue
        print(f"{name}: {len(found)} run(s) found again" + (":" if found else ""))
        for r in found:
            print(f"  {r.id:<44} {r.status:<10} {r.external_id or ''}")
    return EXIT_FAILED if failed == len(names) else EXIT_OK


def _cmd_build_tiny(args: argparse.Namespace) -> int:
    import importlib.util

    from grpo_dashboard.spec.jobfiles import JOB_SCRIPT

    spec = importlib.util.spec_from_file_location("grpo_job", JOB_SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    print(module.build_tiny_model(args.path))
    return EXIT_OK


COMMANDS = {
    "validate": _cmd_validate,
    "launch": _cmd_launch,
    "runs": _cmd_runs,
    "show": _cmd_show,
    "logs": _cmd_logs,
    "cancel": _cmd_cancel,
    "watch": _cmd_watch,
    "reattach": _cmd_reattach,
    "build-tiny-model": _cmd_build_tiny,
}
