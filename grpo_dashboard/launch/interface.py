"""The interface every backend implements, as a `typing.Protocol` (mypy checks each class against it, and
tests/test_backends.py does at run time).

A backend is a class whose instance holds its live state (followers, tokens, caches, the processes it started); the
app holds one instance of each (`backends.Backends`). Its methods:

- `launch_token(token)`: the Hugging Face token a launch uses, the user's `token` else the saved login;
  BackendError when the backend needs one and there is none. Called before anything is written.
- `submit(store, run, spec, token, base_dir)`: start the job of `run` (in the store as queued, its run.yaml
  written) for its resolved `spec`; `base_dir` resolves the spec's relative paths. A refused start is a failed run,
  never an exception. Returns the run.
- `refresh(store, run)`: ingest what the job reported and settle the run if the job ended; never blocks.
- `reap(store)`: settle what the backend tracks beyond the active runs (local: exit codes of ended jobs); called
  before each pass over the active runs.
- `await_exit(store, run)`: after the run reached a terminal status, wait a moment for its job to exit.
- `cancel(store, run, wait, token, grace_s)`: ask the job to stop, with the user's own `token` where the backend
  needs one; with `wait`, return once it is settled or after `grace_s` (None: the backend's default) seconds.
- `resume(store, run, token)`: after a restart, follow an active run again with the user's token; True when
  following started now.
- `reattach(store, token, namespace, owner)`: after a restart, find this dashboard's runs on the backend
  (recreating ones missing from the store for `owner`) and follow them again; returns them.
- `job_summary(run)`: one line saying where the run's job went (URL, hardware, timeout), or None.
- `status_markdown(run, store)`: the run page's lines about the job (Markdown; "" when there is nothing to say).
- `checkpoints(run, reported)`: the run's checkpoints (step -> path) as the backend finds them, from the ones its
  job `reported` (local: those still on disk, and the `checkpoint-N` folders of its output directory).
- `checkpoint_path(step, path)`: where a resumed job finds checkpoint `step` (`path` as the store knows it).
- `resubmit_fields(store, run)`: the run's fields a resubmission resets beyond the common ones (and what it clears
  in the store first: a log replayed from its start needs its events shifted).
- `command_preview(spec)`: what the backend would run for `spec`, with placeholder paths, for the new-run page's
  equivalent command: (a comment saying what it is, the text), or None.
- `probe()`: why the backend cannot be asked now (its cluster or service does not answer), or None.
- `stop(timeout)`: stop what runs in the dashboard for this backend (followers) and forget its live state.

A backend may add keyword parameters with defaults (hf_jobs: `endpoint=`). Besides the methods, a backend class
declares `KIND` (the `backend.kind` it runs), `RESUMABLE` (whether `resume` may start a run of it again from a
checkpoint), `SPACE` (its `SpacePolicy`: what it may do on a shared Space) and `CHECKS` (its named checks, which
`runs.check` adds to the generic ones: `checks.validation.checks_with`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar, Protocol, runtime_checkable

if TYPE_CHECKING:
    from grpo_dashboard.checks.named import Check
    from grpo_dashboard.spec.run_spec import RunSpec
    from grpo_dashboard.store.db import Run, Store


@dataclass(frozen=True)
class SpacePolicy:
    """What a backend may do on a shared Space (space/access.py applies it; nothing is restricted locally).

    `on_dashboard_host`: its jobs run on the dashboard's own machine or cluster, so on a Space only when the owner
    enables it (GRPO_DASHBOARD_ALLOW_LOCAL_BACKEND), and never posting webhooks from there.
    `namespace_is_user`: its jobs run in a Hub namespace, which defaults to the signed-in user's own.
    """

    on_dashboard_host: bool
    namespace_is_user: bool = False


@runtime_checkable
class Backend(Protocol):
    """One backend (`KIND` is the `backend.kind` it runs); see the module docstring for each method's contract."""

    KIND: ClassVar[str]
    SPACE: ClassVar[SpacePolicy]
    RESUMABLE: ClassVar[bool]
    CHECKS: ClassVar[tuple[Check, ...]]

    def launch_token(self, token: str | None = None) -> str | None:
        """The token a launch uses; BackendError when the backend needs one and there is none."""
        ...

    def submit(self, store: Store, run: Run, spec: RunSpec, token: str | None, base_dir: Path | None = None) -> Run:
        """Start the job of a queued run; a refused start is a failed run."""
        ...

    def refresh(self, store: Store, run: Run) -> Run:
        """Ingest what the job reported and settle the run if its job ended; never blocks."""
        ...

    def reap(self, store: Store) -> None:
        """Settle what the backend tracks beyond the active runs."""
        ...

    def await_exit(self, store: Store, run: Run) -> Run:
        """After a terminal status: wait a moment for the job to exit."""
        ...

    def cancel(
        self, store: Store, run: Run, wait: bool = False, token: str | None = None, grace_s: float | None = None
    ) -> Run:
        """Ask the job to stop; with `wait`, return once settled or after `grace_s` seconds."""
        ...

    def resume(self, store: Store, run: Run, token: str | None) -> bool:
        """Follow an active run again after a restart; True when following started now."""
        ...

    def reattach(
        self, store: Store, token: str | None = None, namespace: str | None = None, owner: str | None = None
    ) -> list[Run]:
        """Find this dashboard's runs on the backend after a restart and follow them again."""
        ...

    def job_summary(self, run: Run) -> str | None:
        """One line saying where the run's job went, or None."""
        ...

    def status_markdown(self, run: Run, store: Store | None = None) -> str:
        """The run page's lines about the job (Markdown), or ""."""
        ...

    def checkpoints(self, run: Run, reported: dict[int, str]) -> dict[int, str]:
        """The run's checkpoints (step -> path) as the backend finds them, from the ones its job reported."""
        ...

    def checkpoint_path(self, step: int, path: str) -> str:
        """Where a resumed job finds checkpoint `step`."""
        ...

    def resubmit_fields(self, store: Store, run: Run) -> dict[str, object]:
        """The run's fields a resubmission resets beyond the common ones."""
        ...

    def command_preview(self, spec: RunSpec) -> tuple[str, str] | None:
        """What the backend would run for `spec` (placeholder paths): (what it is, the text), or None."""
        ...

    def probe(self) -> str | None:
        """Why the backend cannot be asked now, or None when it can."""
        ...

    def stop(self, timeout: float = 5.0) -> None:
        """Stop what runs in the dashboard for this backend and forget its live state."""
        ...
