"""A memo of a sandboxed check worker's answers, so that checking an unchanged spec again is instant.

The key is the worker's whole request and the state of every host path it may read: each file's path, size and
modification time (as `make` would see them), and the content of small files such as code. The sandbox shows the
worker nothing else of the host, so an answer for the same key is the answer the worker would give again. Editing a
tool, an environment or the model, or changing a field of the spec, changes the key. Only complete answers are kept:
a worker that timed out or crashed is run again next time. The memo lives in this process, holds a few entries and
is never written to disk.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import threading
from collections import OrderedDict
from collections.abc import Iterable
from pathlib import Path
from typing import Any

MAX_ENTRIES = 32
HASHED_BYTES = 1 << 20  # files up to this size are keyed by their content too (an edit within one mtime tick)
MAX_FILES = 20_000  # a path list larger than this is not memoised (walking it would cost more than it saves)

_memo: OrderedDict[str, Any] = OrderedDict()
_lock = threading.Lock()


def _state(paths: Iterable[str]) -> list[list[Any]] | None:
    rows: list[list[Any]] = []
    for top in sorted(set(paths)):
        found = [top] if not os.path.isdir(top) else _walk(top)
        for path in found:
            try:
                st = os.stat(path)
            except OSError:
                rows.append([path, None, None])
                continue
            rows.append([path, st.st_size, st.st_mtime_ns, _digest(path) if st.st_size <= HASHED_BYTES else None])
            if len(rows) > MAX_FILES:
                return None
    return rows


def _digest(path: str) -> str | None:
    try:
        with open(path, "rb") as fh:
            return hashlib.sha256(fh.read()).hexdigest()
    except OSError:
        return None


def _walk(top: str) -> list[str]:
    out = [top]
    for root, dirs, files in os.walk(top, followlinks=False):
        dirs.sort()
        out.extend(os.path.join(root, name) for name in sorted(files))
        if len(out) > MAX_FILES:
            break
    return out


def key(request: Any, paths: Iterable[str | Path]) -> str | None:
    """The memo key of a worker run: its `request` (JSON-serialisable) and the state of `paths`; None: do not memo."""
    state = _state(str(p) for p in paths)
    if state is None:
        return None
    text = json.dumps([request, state], sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def get(k: str | None) -> Any | None:
    """The answer kept under `k` (a copy), or None."""
    if k is None:
        return None
    with _lock:
        if k not in _memo:
            return None
        _memo.move_to_end(k)
        return copy.deepcopy(_memo[k])


def put(k: str | None, answer: Any) -> None:
    """Keep `answer` under `k`, dropping the least recently used entry past `MAX_ENTRIES`."""
    if k is None:
        return
    with _lock:
        _memo[k] = copy.deepcopy(answer)
        _memo.move_to_end(k)
        while len(_memo) > MAX_ENTRIES:
            _memo.popitem(last=False)


def clear() -> None:
    """Forget every answer."""
    with _lock:
        _memo.clear()
