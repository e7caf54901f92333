"""The backend table: the one place where a run's `backend.kind` picks the code that runs it.

Each backend is one package here (`local/`, `hf_jobs/`, `slurm/`) whose runner class implements the `Backend`
protocol (interface.py) and whose `options.py` declares its `backend:` fields. Another backend is another package,
listed in kinds.py (its kind and options: the spec's `backend.kind` choices and fields come from there) and here in
`BACKEND_TYPES` (its runner class), in the same order: importing this module checks that the two tables agree.

The live state (followers, tokens, caches, started processes) lives in backend instances; a `Backends` holds one of
each. The app and the CLI hold theirs (`build_app(backends=)`, `cli.main`); `shared()` is the process's instance the
orchestration uses when no other is passed.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

from grpo_dashboard.checks.named import Check
from grpo_dashboard.errors import BackendError
from grpo_dashboard.launch import kinds
from grpo_dashboard.launch.hf_jobs.runner import HfJobsBackend
from grpo_dashboard.launch.interface import Backend, SpacePolicy
from grpo_dashboard.launch.local.runner import LocalBackend
from grpo_dashboard.launch.slurm.runner import SlurmBackend

BACKEND_TYPES: tuple[type[Backend], ...] = (LocalBackend, HfJobsBackend, SlurmBackend)
KINDS: tuple[str, ...] = tuple(t.KIND for t in BACKEND_TYPES)
if KINDS != kinds.KINDS:
    raise ImportError(
        f"launch/backends.py runs the kinds {KINDS}, launch/kinds.py lists {kinds.KINDS}: list each "
        f"backend in both tables, in the same order."
    )
# The kinds whose jobs run elsewhere and that `reattach` can find again after a restart (the CLI's choices).
REMOTE_KINDS: tuple[str, ...] = tuple(t.KIND for t in BACKEND_TYPES if t is not LocalBackend)


def space_policy(kind: str) -> SpacePolicy:
    """What a backend of this kind may do on a shared Space; an unknown kind is treated as running on the host."""
    found = [t.SPACE for t in BACKEND_TYPES if t.KIND == kind]
    return found[0] if found else SpacePolicy(on_dashboard_host=True)


def space_kinds() -> tuple[str, ...]:
    """The kinds a Space allows without its owner enabling the dashboard host's own backends."""
    return tuple(t.KIND for t in BACKEND_TYPES if not t.SPACE.on_dashboard_host)


def checks_for(kind: str) -> tuple[Check, ...]:
    """The named checks of the backend of this kind (none for an unknown kind: the generic checks name it)."""
    return next((t.CHECKS for t in BACKEND_TYPES if t.KIND == kind), ())


def unknown_kind(kind: str) -> BackendError:
    """The error for a kind this dashboard does not run, naming the ones it does."""
    known = ", ".join(repr(k) for k in KINDS)
    return BackendError(
        f"Unknown backend {kind!r} (backend.kind): this dashboard runs {known} runs. A run of "
        f"another backend was made by another version of the dashboard; open it there."
    )


class Backends:
    """One instance of every backend in the table, with its live state."""

    def __init__(self) -> None:
        self._by_kind: dict[str, Backend] = {t.KIND: t() for t in BACKEND_TYPES}

    def get(self, kind: str) -> Backend:
        """The backend that runs runs of this `backend.kind`; BackendError naming the known kinds for any other."""
        try:
            return self._by_kind[kind]
        except KeyError:
            raise unknown_kind(kind) from None

    def __contains__(self, kind: object) -> bool:
        return kind in self._by_kind

    def __iter__(self) -> Iterator[Backend]:
        return iter(self._by_kind.values())

    @property
    def local(self) -> LocalBackend:
        """The local backend (typed)."""
        backend = self._by_kind[LocalBackend.KIND]
        assert isinstance(backend, LocalBackend)
        return backend

    @property
    def hf_jobs(self) -> HfJobsBackend:
        """The Hugging Face Jobs backend (typed)."""
        backend = self._by_kind[HfJobsBackend.KIND]
        assert isinstance(backend, HfJobsBackend)
        return backend

    @property
    def slurm(self) -> SlurmBackend:
        """The Slurm backend (typed)."""
        backend = self._by_kind[SlurmBackend.KIND]
        assert isinstance(backend, SlurmBackend)
        return backend

    def stop(self, timeout: float = 5.0) -> None:
        """Stop every backend's followers and forget their live state (app shutdown, a simulated restart)."""
        for backend in self:
            backend.stop(timeout)


_shared: Backends | None = None
_shared_lock = threading.Lock()


def shared() -> Backends:
    """The process's backends: the ones the orchestration uses when none are passed (created on first use)."""
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = Backends()
        return _shared


def restart() -> Backends:
    """Stop the process's backends and start fresh ones, as a restarted dashboard has (their live state is gone)."""
    global _shared
    old = shared()
    old.stop()
    with _shared_lock:
        _shared = Backends()
        return _shared


def backend_for(kind: str) -> Backend:
    """The process's backend for this `backend.kind`; BackendError naming the known kinds for any other."""
    return shared().get(kind)
