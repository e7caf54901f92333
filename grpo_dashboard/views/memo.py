"""Sharing one computation between concurrent callers (many viewers of one live run ask for the same thing at once),
and a bounded least-recently-used mapping for the caches the views keep."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from concurrent.futures import Future
from typing import Generic, TypeVar

T = TypeVar("T")
K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class LruCache(Generic[K, V]):
    """A thread-safe mapping that keeps at most `size` entries, forgetting the least recently used first."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._items: OrderedDict[K, V] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: K) -> V | None:
        """The value for `key` (now the most recently used), or None."""
        with self._lock:
            value = self._items.get(key)
            if value is not None:
                self._items.move_to_end(key)
            return value

    def put(self, key: K, value: V) -> None:
        """Set `key`, dropping the least recently used entries beyond `size`."""
        with self._lock:
            self._items[key] = value
            self._items.move_to_end(key)
            while len(self._items) > self.size:
                self._items.popitem(last=False)

    def clear(self) -> None:
        """Forget everything."""
        with self._lock:
            self._items.clear()

    def __len__(self) -> int:
        with self._lock:
            return len(self._items)


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
