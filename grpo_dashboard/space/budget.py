"""Bounded work per user: worker pools with per-user fair shares, and per-user call rates (no gradio here).

A `FairPool` runs a call in one of its worker threads under a wall-clock limit. A caller who already holds the
user's share of workers, or who finds every worker busy, is told so at once (`Busy`) instead of queuing behind
someone else's work: one user's load can cost another user at most a worker's share of the CPU, never a place in
a queue. A call past its limit is answered with `TimedOut`; its thread cannot be killed (Python threads cannot be),
so it keeps its worker, and its user's share, until it ends — a user cannot pile up stuck calls.
"""

from __future__ import annotations

import contextvars
import math
import threading
import time
from collections import Counter, deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any, TypeVar

from grpo_dashboard.space.policy import POOLS, Pool

T = TypeVar("T")


class Busy(RuntimeError):
    """No worker for this caller now; the message says why and when to try again."""


class TimedOut(RuntimeError):
    """The call ran past its limit and was given up."""


class FairPool:
    """`workers` threads; at most `per_user` of them busy for one user."""

    def __init__(
        self, name: str, workers: int, per_user: int, busy_s: float | None = None, window_s: float = 20.0
    ) -> None:
        self.name, self.workers, self.per_user = name, workers, per_user
        self.busy_s, self.window_s = busy_s, window_s
        self._executor = ThreadPoolExecutor(max_workers=workers, thread_name_prefix=f"grpo-{name}")
        self._lock = threading.Lock()
        self._busy: Counter[str] = Counter()
        self._spent: dict[str, deque[tuple[float, float]]] = {}  # user -> (end time, seconds of work)

    @classmethod
    def of(cls, name: str, pool: Pool) -> FairPool:
        """A pool sized as declared in policy.POOLS."""
        return cls(name, pool.workers, pool.per_user, pool.busy_s, pool.window_s)

    def _used(self, user: str, now: float) -> float:
        spent = self._spent.get(user)
        if not spent:
            return 0.0
        while spent and now - spent[0][0] >= self.window_s:
            spent.popleft()
        if not spent:
            del self._spent[user]
            return 0.0
        return sum(seconds for _, seconds in spent)

    def in_use(self, user: str | None = None) -> int:
        """Busy workers (of one user, or in all)."""
        with self._lock:
            return self._busy[user] if user is not None else sum(self._busy.values())

    def _take(self, user: str, what: str) -> None:
        with self._lock:
            if self._busy[user] >= self.per_user:
                raise Busy(
                    f"Your previous {what} is still running (at most {self.per_user} at a time per user on "
                    f"this dashboard); wait for it to finish, then try again."
                )
            if self.busy_s is not None:
                used = self._used(user, time.monotonic())
                if used >= self.busy_s:
                    raise Busy(
                        f"You have kept the {self.name} workers busy for {used:.1f} s in the last "
                        f"{self.window_s:g} s (at most {self.busy_s:g} s per user, so others get their "
                        f"turn); try again in a few seconds."
                    )
            if sum(self._busy.values()) >= self.workers:
                raise Busy(
                    f"All {self.workers} workers for {self.name} work are busy with other users' requests "
                    f"right now; try again in a few seconds."
                )
            self._busy[user] += 1

    def _give(self, user: str, started: float, fair: bool) -> None:
        now = time.monotonic()
        with self._lock:
            if fair and self.busy_s is not None:
                self._spent.setdefault(user, deque()).append((now, now - started))
                if len(self._spent) > 10_000:  # forget users whose window has passed
                    for stale in [u for u, v in self._spent.items() if now - v[-1][0] >= self.window_s]:
                        del self._spent[stale]
            self._busy[user] -= 1
            if self._busy[user] <= 0:
                del self._busy[user]

    def run(self, user: str, call: Callable[[], T], limit_s: float, what: str, fair: bool = True) -> T:
        """`call()` in a worker within `limit_s` seconds; Busy or TimedOut otherwise. Context variables (gradio's
        request context, for gr.Warning) travel with the call. `fair=False` (one trusted user, locally): no share
        or busy refusal, a call waits for a worker like in any thread pool."""
        if fair:
            self._take(user, what)
        else:
            with self._lock:
                self._busy[user] += 1
        context = contextvars.copy_context()
        started = time.monotonic()

        def work() -> T:
            try:
                return context.run(call)
            finally:
                self._give(user, started, fair)

        try:
            future = self._executor.submit(work)
        except RuntimeError:  # the executor is shut down
            self._give(user, started, fair)
            raise
        try:
            return future.result(timeout=limit_s)
        except FutureTimeout:
            raise TimedOut(f"The {what} took longer than {limit_s:g} s and was given up.") from None


class RateBudget:
    """At most `calls` per `window_s` seconds per key, in a sliding window (in memory)."""

    def __init__(self, calls: int, window_s: float) -> None:
        self.calls, self.window_s = calls, window_s
        self._times: dict[str, deque[float]] = {}
        self._lock = threading.Lock()

    def take(self, key: str, what: str, now: float | None = None) -> None:
        """Count one call for `key`; Busy naming the limit and the wait when the budget is spent."""
        now = time.monotonic() if now is None else now
        with self._lock:
            times = self._times.setdefault(key, deque())
            while times and now - times[0] >= self.window_s:
                times.popleft()
            if len(times) >= self.calls:
                wait = max(1, math.ceil(times[0] + self.window_s - now))
                raise Busy(
                    f"Too many {what}s: at most {self.calls} per {self.window_s:g} s per user on this "
                    f"dashboard. Try again in {wait} s."
                )
            times.append(now)
            if len(self._times) > 10_000:  # forget keys whose window has passed
                for stale in [k for k, v in self._times.items() if not v or now - v[-1] >= self.window_s]:
                    del self._times[stale]


UPLOAD_FILES = 60  # per user per window
UPLOAD_BYTES = 40 * 2**20
UPLOAD_WINDOW_S = 600.0


class UploadQuota:
    """Uploads per user in a sliding window: at most `files` requests and `nbytes` bytes."""

    def __init__(
        self, files: int = UPLOAD_FILES, nbytes: int = UPLOAD_BYTES, window_s: float = UPLOAD_WINDOW_S
    ) -> None:
        self.files, self.nbytes, self.window_s = files, nbytes, window_s
        self._seen: dict[str, deque[tuple[float, int]]] = {}
        self._lock = threading.Lock()

    def take(self, user: str, size: int, now: float | None = None) -> str | None:
        """Count one upload of `size` bytes; the refusal's text when it is over the quota (nothing counted then)."""
        now = time.monotonic() if now is None else now
        with self._lock:
            seen = self._seen.setdefault(user, deque())
            while seen and now - seen[0][0] >= self.window_s:
                seen.popleft()
            used = sum(n for _, n in seen)
            if len(seen) >= self.files or used + size > self.nbytes:
                wait = max(1, int(seen[0][0] + self.window_s - now) + 1) if seen else 1
                return (
                    f"upload quota reached: at most {self.files} uploads and {self.nbytes // 2**20} MB per "
                    f"{self.window_s:g} s per user on this Space (used: {len(seen)} uploads, "
                    f"{used / 2**20:.1f} MB). Try again in {wait} s."
                )
            seen.append((now, size))
            return None


class Budgets:
    """The pools of policy.POOLS, one RateBudget per endpoint and the upload quota, for one app."""

    def __init__(self) -> None:
        self.pools = {name: FairPool.of(name, pool) for name, pool in POOLS.items()}
        self.uploads = UploadQuota()
        self._rates: dict[str, RateBudget] = {}
        self._lock = threading.Lock()

    def rate(self, endpoint: str, calls: int, window_s: float) -> RateBudget:
        """The endpoint's rate budget (created on first use)."""
        with self._lock:
            budget = self._rates.get(endpoint)
            if budget is None:
                budget = self._rates[endpoint] = RateBudget(calls, window_s)
            return budget

    def run(self, pool: str, user: str, call: Callable[[], Any], limit_s: float, what: str, fair: bool = True) -> Any:
        """`call()` in the named pool (see FairPool.run)."""
        return self.pools[pool].run(user, call, limit_s, what, fair)
