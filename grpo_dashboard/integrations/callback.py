"""`DashboardCallback`: the dashboard's own job callback (jobs/grpo_job.py `make_callback`), for any TRL script.

    from grpo_dashboard.integrations import DashboardCallback
    trainer = GRPOTrainer(..., callbacks=[DashboardCallback("~/.grpo_dashboard", health={"guard": True})])

It records exactly what a launched run records, with the job's own code: every log record with TRL's names, the
trainer's resolved config (in the `started` event and as the run's spec), sample completions, system samples, and
the health guard/alerts from the dashboard's rules with the same `health:` options as a launched spec (`guard`,
`guard_persist`, `thresholds`, `alerts`, `webhook_url`). Only the main process (rank 0 under accelerate/torchrun)
writes; every process takes the guard's decision from it, as in a launched job.

Transports: a directory, the dashboard's data directory (local or a shared filesystem): the run is written to
`runs/<id>/` (store/external.py says which files) and a running dashboard picks it up and follows it; or a URL
(`http://host:7860`, a Space's `https://...hf.space`): the same files are spooled locally and sent in batches
(integrations/http.py), with `token` (default `$HF_TOKEN`) on a Space, where the run belongs to the token's user;
the dashboard's Cancel then stops the trainer cleanly.
"""

from __future__ import annotations

import atexit
import dataclasses
import json
import os
import re
import secrets
import socket
import sys
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from transformers import TrainerCallback

from grpo_dashboard.health.job import JobHealth
from grpo_dashboard.spec.jobfiles import job_module
from grpo_dashboard.spec.run_spec import HealthSpec
from grpo_dashboard.store import external
from grpo_dashboard.store.db import data_dir
from grpo_dashboard.store.import_spec import spec_yaml_from_config


def _health_settings(health: Mapping[str, Any] | None) -> dict[str, Any]:
    """The spec's `health:` options, checked as a launched spec checks them; ValueError naming a wrong key."""
    try:
        return dataclasses.asdict(HealthSpec(**dict(health or {})))
    except TypeError as exc:
        allowed = ", ".join(f.name for f in dataclasses.fields(HealthSpec))
        given = dict(health or {})
        raise ValueError(f"DashboardCallback(health={given!r}): {exc}; the options are {allowed}.") from None


def _find_trainer() -> Any:
    """The Trainer whose loop is calling back: transformers passes callbacks the model, not the trainer, and the job's
    callback reads the trainer's reward names and last generation batch (samples, tool turns) from it."""
    from transformers import Trainer

    frame = sys._getframe(1)
    while frame is not None:
        candidate = frame.f_locals.get("self")
        if isinstance(candidate, Trainer):
            return candidate
        frame = frame.f_back  # type: ignore[assignment]
    return None


class DashboardCallback(TrainerCallback):
    """Stream a TRL run into a GRPO Dashboard.

    Args:
        target: the dashboard's data directory (default: `$GRPO_DASHBOARD_DATA_DIR`, else `~/.grpo_dashboard`).
        name: the run's name in the dashboard (default: the trainer's `run_name`, else the script's name).
        tags: tags of the run (`external` is always added).
        health: the spec's `health:` options: `{"guard": True}` stops training cleanly on an error finding.
        samples: record sample completions (up to 64 per logged step, as a launched run).
        token: the Hugging Face token a Space's ingest checks (default `$HF_TOKEN`; HTTP only).
        spool: where the HTTP transport spools the run (default `$GRPO_DASHBOARD_SPOOL`, else
            `~/.cache/grpo_dashboard/spool`).
        flush_s: HTTP only: how long the last batches may take after training. `train()` returns at once; they go
            out in the background, and the process waits for them (up to this long in all) before it exits.
    """

    def __init__(
        self,
        target: str | os.PathLike[str] | None = None,
        *,
        name: str | None = None,
        tags: list[str] | None = None,
        health: Mapping[str, Any] | None = None,
        samples: bool = True,
        token: str | None = None,
        spool: str | os.PathLike[str] | None = None,
        flush_s: float = 60.0,
    ) -> None:
        self.job = job_module()
        self.url = str(target) if str(target or "").startswith(("http://", "https://")) else None
        if self.url:
            default_spool = Path(os.environ.get("GRPO_DASHBOARD_SPOOL") or "~/.cache/grpo_dashboard/spool")
            self.root = Path(spool or default_spool).expanduser()
        else:
            self.root = Path(target).expanduser() if target is not None else data_dir()
        self.token = token or os.environ.get("HF_TOKEN")
        self.flush_s = flush_s
        self.sender: Any = None
        self.heartbeat: external.Heartbeat | None = None
        self.name = name
        self.tags = list(tags or [])
        self.health_settings = _health_settings(health)
        self.samples = samples
        self.main = self.job._is_main_process()
        self.run_id: str | None = None
        self.run_dir: Path | None = None
        self.emitter: Any = None
        self.inner: Any = None
        self.health: JobHealth | None = None
        self._t0 = 0.0
        self._ended = False
        self._error: BaseException | None = None

    # --- the run's files -------------------------------------------------------------------------------------
    def _open(self, args: Any) -> None:
        title = self.name or (args.run_name if args.run_name and args.run_name != args.output_dir else None)
        title = title or Path(sys.argv[0]).stem or "external"
        slug = re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-")[:40] or "run"
        self.run_id = f"{slug}-{time.strftime('%Y%m%d-%H%M%S', time.gmtime())}-{secrets.token_hex(3)}"
        self.run_dir = (self.root / self.run_id) if self.url else (self.root / "runs" / self.run_id)
        self.run_dir.mkdir(parents=True)
        config = self.job._config_dict(args)
        spec_yaml = spec_yaml_from_config(
            config,
            name=title,
            tags=[*self.tags, external.EXTERNAL],
            description=f"external: {' '.join(sys.argv)[:300]} on {socket.gethostname()}",
            output_dir=str(Path(args.output_dir).resolve()),
            health=HealthSpec(**self.health_settings),
        )
        (self.run_dir / "run.yaml").write_text(spec_yaml, encoding="utf-8")
        self.emitter = self.job.Emitter(self.run_dir / "metrics.jsonl", enabled=True, stdout=False)
        self.emitter.event("starting", pid=os.getpid())
        marker = {
            "v": 1,
            "transport": "http" if self.url else "directory",
            "pid": os.getpid(),
            "started_ticks": external.process_ticks(os.getpid()),
            "host": socket.gethostname(),
            "created_at": time.time(),
            "output_dir": str(Path(args.output_dir).resolve()),
            "argv": sys.argv[:50],
        }
        tmp = self.run_dir / f".{external.MARKER_FILE}.tmp"
        tmp.write_text(json.dumps(marker), encoding="utf-8")
        os.replace(tmp, self.run_dir / external.MARKER_FILE)  # last: the directory is complete once it is there
        if self.url:
            from grpo_dashboard.integrations.http import Sender

            self.sender = Sender(self.run_dir, self.url, self.run_id, self.token).start()
        else:
            self.heartbeat = external.Heartbeat(self.run_dir).start()
        self._watch_exit()

    def _watch_exit(self) -> None:
        """A script that dies in training (an exception, a `sys.exit`) still ends its run, with the error."""
        previous = sys.excepthook

        def hook(kind: Any, exc: BaseException, tb: Any) -> None:
            self._error = exc
            previous(kind, exc, tb)

        sys.excepthook = hook
        if threading.current_thread() is threading.main_thread():
            atexit.register(self._at_exit)

    def _at_exit(self) -> None:
        if self._ended or self.emitter is None:
            return
        exc = self._error
        self.emitter.event(
            "failed",
            error_type=type(exc).__name__ if exc else "Exit",
            message=str(exc)[:4000] if exc else "the script exited during training (no on_train_end)",
        )
        self.emitter.close()
        if self.heartbeat is not None:
            self.heartbeat.stop()
        if self.sender is not None:
            self.sender.close(min(self.flush_s, 10.0))

    # --- TrainerCallback ---------------------------------------------------------------------------------------
    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """Open the run (main process) and start the job's callback on every process."""
        if self.inner is None:
            if self.main and state.is_world_process_zero:
                self._open(args)
            else:
                self.emitter = self.job.Emitter(None, enabled=False, stdout=False)
            wants = self.job.wants_job_health(self.health_settings)
            if wants and self.main:
                self.health = JobHealth(self.health_settings, run_name=self.name, report_to=args.report_to)
            samples = self.run_dir / "samples.jsonl" if (self.samples and self.run_dir is not None) else None
            self.inner = self.job.make_callback(
                self.emitter,
                samples,
                self.job.MAX_SAMPLES_PER_STEP,
                health=self.health,
                guard=wants and bool(self.health_settings.get("guard")),
            )
            self.inner.trainer = _find_trainer()
        self._t0 = time.perf_counter()
        self.inner.on_train_begin(args, state, control, **kwargs)

    def on_log(self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None, **kwargs: Any) -> None:
        """Record the log (a copy: other callbacks see TRL's record unchanged) and run the guard."""
        if self.inner is not None:
            self.inner.on_log(args, state, control, logs=dict(logs) if logs else logs, **kwargs)

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """Stop when asked to (the dashboard's Cancel, over HTTP)."""
        if self.sender is not None and self.sender.stop_asked and self.inner is not None:
            self.inner.stop_requested = True
        if self.inner is not None:
            self.inner.on_step_end(args, state, control, **kwargs)

    def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """Record the checkpoint."""
        if self.inner is not None:
            self.inner.on_save(args, state, control, **kwargs)

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """End the run as the job does: guard stop and health summary, then `finished` (or `canceled`)."""
        if self.inner is None or self._ended:
            return
        self.inner.on_train_end(args, state, control, **kwargs)
        if self.health is not None:
            self.health.close()
        step = state.global_step
        self.job.health_events(self.emitter, self.health, step, args.output_dir, time.perf_counter() - self._t0)
        self.emitter.event("canceled" if self.inner.stop_requested else "finished", step=step)
        self.emitter.close()
        self._ended = True
        if self.heartbeat is not None:
            self.heartbeat.stop()
        if self.sender is not None:
            # Training returns now; the last batches go out in the background, and the process waits for them
            # (at most `flush_s` in all) before it exits.
            self.sender.finish(self.flush_s)
            atexit.register(self.sender.close_finished)
