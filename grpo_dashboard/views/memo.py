"""Sharing one computation between concurrent callers (many viewers of one live run ask for the same thing at once)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable
from concurrent.futures import Future
from typing import TypeVar

T = TypeVar("T")


class SingleFlight:
    """Callers of `do` with the same key while a computation for it runs wait for that computation's result (or
    exception) instead of starting their own."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._running: dict[Hashable, Future[object]] = {}

    def busy(self, key: Hashable) -> bool:
        """True while a computation for `key` runs."""
        with self._lock:
            return key in self._running

    def do(self, key: Hashable, compute: Callable[[], T]) -> T:
        """`compute()`, or the result of the call of it already running for `key`."""
        with self._lock:
            running = self._running.get(key)
            if running is None:
                mine: Future[object] = Future()
                self._running[key] = mine
        if running is not None:
            return running.result()  # type: ignore[return-value]
        try:
            result = compute()
        except BaseException as exc:
            mine.set_exception(exc)
            raise
        else:
            mine.set_result(result)
            return result
        finally:
            with self._lock:
                self._running.pop(key, None)
