"""Resume a canceled, failed or stopped run from one of its checkpoints, as the same run: its curves continue.

The checkpoints of a run are the `checkpoint` events its job reported (every backend), and for a local run the
`checkpoint-N` directories in its output directory. Resuming from step N drops the stored points after N (the
resumed job logs those steps again, from the checkpoint's state), sets `training.resume_from_checkpoint` in the run's
run.yaml and starts a new job of the same run on its backend; a local job appends to the same metrics.jsonl (its byte
offsets carry on), a Jobs job gets a new log (its events are renumbered to follow the old ones). Bad input (a run still
active, no such checkpoint, a checkpoint of another run) raises ResumeError and changes nothing. A run that already
reached its end (completed, or a checkpoint at `max_steps`) resumes only with a larger `max_steps`: otherwise TRL
would train past the end and write over the final model.
"""

from __future__ import annotations

import argparse
import copy
import sys
import time
from pathlib import Path
from typing import Any

from grpo_dashboard.errors import BackendError, RunNotFound, SpecError
from grpo_dashboard.launch.backends import BACKEND_TYPES, KINDS, Backends, shared
from grpo_dashboard.spec.run_spec import RunSpec
from grpo_dashboard.store.db import ACTIVE, Run, RunStatus, Store


class ResumeError(BackendError):
    """The run cannot be resumed as asked; the message says why and what to do."""


def checkpoints(store: Store, run: Run, backends: Backends | None = None) -> dict[int, str]:
    """Step -> path of the run's checkpoints, by step: those its job reported, as its backend finds them
    (`Backend.checkpoints`: a local run's only while on disk, and the ones in its output directory)."""
    found: dict[int, str] = {}
    for e in store.events(run.id):
        if e.get("event") == "checkpoint" and isinstance(e.get("step"), int):
            found[e["step"]] = str(e.get("path") or "")
    table = backends or shared()
    if run.backend in table:
        found = table.get(run.backend).checkpoints(run, found)
    return dict(sorted(found.items()))


def checkpoint_before(store: Store, run: Run, step: int, backends: Backends | None = None) -> tuple[int, str] | None:
    """The latest checkpoint saved before `step` (a finding's onset: resume from before it went wrong), or None."""
    before = [(s, p) for s, p in checkpoints(store, run, backends).items() if s < step]
    return before[-1] if before else None


def choose(
    store: Store, run: Run, checkpoint: int | str | None = None, backends: Backends | None = None
) -> tuple[int, str]:
    """The (step, path) to resume from: the latest checkpoint, a step number, or a checkpoint path of this run."""
    found = checkpoints(store, run, backends)
    listed = ", ".join(str(s) for s in found) or "none"
    if not found:
        raise ResumeError(
            f"Run {run.id} has no checkpoint to resume from (its job saved none). Set "
            "training.save_strategy: steps and save_steps in the spec, and launch it again."
        )
    if checkpoint is None:
        step = max(found)
        return step, found[step]
    text = str(checkpoint).strip()
    if text.isdigit():
        step = int(text)
        if step not in found:
            raise ResumeError(
                f"Run {run.id} has no checkpoint at step {step}; its checkpoints are at steps {listed}. "
                f"Pass one of them with --checkpoint, or leave it out for the latest."
            )
        return step, found[step]
    path = Path(text).expanduser().resolve()
    for step, p in found.items():
        if p and Path(p).expanduser().resolve() == path:
            return step, p
    owner = _owner(store, path)
    if owner is not None and owner.id != run.id:
        raise ResumeError(
            f"Checkpoint {text} belongs to run {owner.id}, not to {run.id}: a run resumes only from its "
            f"own checkpoints (steps {listed}). Resume {owner.id} instead, or pick one of these."
        )
    raise ResumeError(
        f"{text} is not a checkpoint of run {run.id} (its checkpoints are at steps {listed}). Pass a "
        "step number with --checkpoint, or leave it out for the latest."
    )


def _owner(store: Store, path: Path) -> Run | None:
    for r in store.list_runs():
        if r.output_dir and not r.output_dir.startswith("hf://"):
            out = Path(r.output_dir).expanduser().resolve()
            if out == path or out in path.parents:
                return r
    return None


def resume_run(
    store: Store,
    run: Run,
    checkpoint: int | str | None = None,
    token: str | None = None,
    backends: Backends | None = None,
    max_steps: int | None = None,
) -> Run:
    """Start the run again from a checkpoint (see the module docstring); ResumeError, nothing changed, if it cannot.
    `backends`: the app's (default: the process's, `backends.shared()`); `max_steps`: a new end for the run (needed
    to go on with a run that reached its end)."""
    table = backends or shared()
    if run.status in ACTIVE:
        raise ResumeError(
            f"Run {run.id} is still {run.status}; cancel it first (`python -m grpo_dashboard cancel "
            f"{run.id}`), then resume it."
        )
    from grpo_dashboard.launch.runs import why_not_resumable

    refused = why_not_resumable(run)
    if refused is not None:
        raise ResumeError(refused)
    if run.backend not in KINDS or not table.get(run.backend).RESUMABLE:
        can = " and ".join(t.KIND for t in BACKEND_TYPES if t.RESUMABLE)
        raise ResumeError(f"Run {run.id} ({run.backend}) cannot be resumed here: only {can} runs can.")
    try:
        spec = RunSpec.from_yaml(run.spec_yaml)
    except SpecError as exc:
        raise ResumeError(
            f"Run {run.id} has no readable spec (imported or recovered run), so it cannot be resumed: {exc}"
        ) from exc
    step, path = choose(store, run, checkpoint, table)
    end = _new_end(run, spec, step, max_steps)
    backend = table.get(run.backend)
    token = backend.launch_token(token)
    resumed = copy.deepcopy(spec)
    if end is not None:
        resumed.training["max_steps"] = end
    path = backend.checkpoint_path(step, path)
    resumed.training["resume_from_checkpoint"] = path
    run_dir = Path(run.run_dir)
    tmp = run_dir / ".run.yaml.tmp"
    tmp.write_text(resumed.to_job_yaml(), encoding="utf-8")
    tmp.replace(run_dir / "run.yaml")
    store.truncate_after(run.id, step)
    fields: dict[str, Any] = dict(
        status=RunStatus.QUEUED.value,
        ended_at=None,
        error=None,
        exit_code=None,
        cancel_requested_at=None,
        pid=None,
        pid_start=None,
        last_step=step,
    )
    fields.update(backend.resubmit_fields(store, run))
    store.update_run(run.id, **fields)
    with open(run_dir / "job.log", "a", encoding="utf-8") as f:
        f.write(f"\n--- resumed from checkpoint {step} ({path}) at {time.strftime('%Y-%m-%d %H:%M:%S')} ---\n")
    return backend.submit(store, store.get_run(run.id), resumed, token, run_dir)


def _new_end(run: Run, spec: RunSpec, step: int, max_steps: int | None) -> int | None:
    """The max_steps the resumed job gets (None: the spec's); ResumeError when the run ended and none is given."""
    old = spec.training.get("max_steps")
    old = old if isinstance(old, int) and old > 0 else None
    if max_steps is not None:
        if not isinstance(max_steps, int) or max_steps <= step:
            raise ResumeError(
                f"max_steps {max_steps} must be more than the checkpoint's step {step}: the resumed job trains "
                f"from step {step + 1} up to it. Give a larger number."
            )
        return max_steps
    ended = run.status == RunStatus.COMPLETED.value or (old is not None and step >= old)
    if ended:
        where = f"max_steps {old}" if old is not None else "the end of its epochs"
        raise ResumeError(
            f"Run {run.id} reached {where} (checkpoint at step {step}); resuming it as it is would train past "
            f"that and write over its final model. Give a new end to train on from the checkpoint: "
            f"`--max-steps {step + (old or step)}`, or New max_steps in Run detail."
        )
    return None


def resume_main(argv: list[str]) -> int:
    """resume RUN [--checkpoint N|PATH] [--wait]: continue a run from its latest or a chosen checkpoint."""
    from grpo_dashboard.launch.runs import wait

    p = argparse.ArgumentParser(
        prog="resume",
        description="Continue a canceled, failed or stopped run from its "
        "latest (or a chosen) checkpoint; its curves carry on.",
    )
    p.add_argument("run", help="Run id, unique id prefix, or name.")
    p.add_argument("--checkpoint", help="Checkpoint step (or path) to resume from (default: the latest).")
    p.add_argument(
        "--max-steps",
        type=int,
        help="A new max_steps, above the checkpoint's step (needed to go on with a run that reached its end).",
    )
    p.add_argument("--wait", action="store_true", help="Follow the run until it ends; exit code reflects the result.")
    args = p.parse_args(argv)
    store = Store()
    try:
        run = resume_run(store, store.find_run(args.run), args.checkpoint, max_steps=args.max_steps)
    except RunNotFound as exc:
        print(str(exc), file=sys.stderr)
        return 3
    except BackendError as exc:
        print(str(exc), file=sys.stderr)
        return 1
    print(f"resumed {run.id} from step {run.last_step} ({run.status})")
    if not args.wait:
        return 0 if run.status != RunStatus.FAILED.value else 1
    run = wait(
        store, run, on_update=lambda r: print(f"  {r.status} step {r.last_step or 0}/{r.max_steps or '?'}", flush=True)
    )
    print(f"{run.id}: {run.status}" + (f" — {run.error}" if run.error else ""))
    return {RunStatus.COMPLETED.value: 0, RunStatus.CANCELED.value: 4}.get(run.status, 1)
