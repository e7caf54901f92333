"""Read GRPO training logs from disk: trainer_state.json, checkpoint/output dirs, our metrics.jsonl, plain JSONL,
and a run's console output (``console_log``: TRL's printed log dicts, verl's step lines).

Files are parsed record by record into per-metric float arrays, so a 100,000-step log never exists as a list of
dicts unless a caller asks for one with ``load_log_records``.
"""

from __future__ import annotations

import json
import re
from collections import deque
from collections.abc import Generator, Iterator
from pathlib import Path
from typing import Any

from .console_log import iter_console, looks_like_console
from .series import ColumnBuilder, MetricFrame, record_step

try:  # orjson (a gradio dependency) parses 3x faster; it rejects NaN/Infinity, which json then handles
    from orjson import loads as _fast_loads
except ImportError:  # pragma: no cover - depends on the environment
    _fast_loads = json.loads  # type: ignore[assignment]

_LOG_HISTORY = re.compile(rb'"log_history"\s*:\s*\[')
_BLOCK = 1 << 20
_STATE_HINTS = ("max_steps", "logging_steps", "train_batch_size", "num_train_epochs", "global_step", "eval_steps")
_SNIFF_BYTES = 65536
# Console output of a run (nohup, Slurm, a pasted log): TRL's printed log dicts or verl's step lines.
CONSOLE_SUFFIXES = (".log", ".txt", ".out", ".err")


def resolve_log_path(path: str | Path) -> tuple[Path, str]:
    """Find the log file behind ``path`` and its kind (``"json"``, ``"jsonl"`` or ``"console"``: printed output).

    A directory is searched for ``metrics.jsonl`` (our run dir), then ``trainer_state.json`` (a checkpoint), then
    the newest ``checkpoint-*/trainer_state.json`` (an output dir).

    Raises:
        ValueError: the path does not exist or holds no known log.
    """
    try:
        p = Path(path).expanduser()
    except RuntimeError:  # `~name` of no known user: the literal path, reported as missing below
        p = Path(path)
    if not p.exists():
        raise ValueError(f"{p}: no such file or directory")
    if p.is_dir():
        if (p / "metrics.jsonl").is_file():
            return p / "metrics.jsonl", "jsonl"
        if (p / "trainer_state.json").is_file():
            return p / "trainer_state.json", "json"
        checkpoints = [d for d in p.glob("checkpoint-*") if (d / "trainer_state.json").is_file()]
        if checkpoints:
            newest = max(checkpoints, key=_checkpoint_order)
            return newest / "trainer_state.json", "json"
        raise ValueError(
            f"{p} is a directory without metrics.jsonl, trainer_state.json or checkpoint-*/trainer_state.json; "
            "pass a checkpoint directory, an output directory with checkpoints, or the log file itself"
        )
    if p.suffix == ".jsonl":
        return p, "jsonl"
    if p.suffix == ".json":
        return p, "json"
    with p.open("rb") as fh:
        head = fh.read(_SNIFF_BYTES)
    first_line = head.split(b"\n", 1)[0].strip()
    try:
        obj = json.loads(first_line)
        if isinstance(obj, dict) and "log_history" not in obj:
            return p, "jsonl"
    except (ValueError, UnicodeDecodeError):
        pass
    if not _LOG_HISTORY.search(head) and (p.suffix in CONSOLE_SUFFIXES or looks_like_console(head)):
        return p, "console"
    return p, "json"


def _checkpoint_order(directory: Path) -> tuple[int, float]:
    suffix = directory.name.rsplit("-", 1)[-1]
    return (int(suffix) if suffix.isdigit() else -1, directory.stat().st_mtime)


def iter_log_records(path: str | Path, hints: dict[str, Any]) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield ``(step, TRL log dict)`` pairs from any supported log; fills ``hints`` with config hints.

    Raises:
        ValueError: unreadable or not a GRPO/TRL log (raised lazily, while iterating).
    """
    file, kind = resolve_log_path(path)
    hints.setdefault("source", str(file))
    if kind == "jsonl":
        yield from _iter_jsonl(file, hints)
    elif kind == "console":
        yield from iter_console(file, hints)
    else:
        yield from _iter_trainer_state(file, hints)


def _loads(raw: bytes) -> Any:
    try:
        return _fast_loads(raw)
    except ValueError:
        return json.loads(raw)


def _iter_jsonl(file: Path, hints: dict[str, Any]) -> Iterator[tuple[int, dict[str, Any]]]:
    good = bad = 0
    pending_error: str | None = None
    index = 0
    with file.open("rb") as fh:
        for line in fh:
            if not line.strip():
                continue
            if pending_error is not None:
                bad += 1  # only a broken *last* line is expected (a writer mid-append); earlier ones count
            pending_error = None
            try:
                obj = _loads(line)
            except ValueError as exc:
                pending_error = str(exc)
                continue
            if not isinstance(obj, dict):
                bad += 1
                continue
            good += 1
            if obj.get("v") is not None and obj.get("type") in ("log", "event"):
                pair = _from_protocol(obj, hints, index)
                if pair is None:
                    continue
            else:
                pair = record_step(obj, index), obj
            index += 1
            yield pair
    if good == 0:
        detail = f" ({pending_error})" if pending_error else ""
        raise ValueError(f"{file}: no JSON object per line found; not a JSONL log{detail}")
    if bad > max(2, good // 10):
        raise ValueError(f"{file}: {bad} of {good + bad} lines are not JSON objects; not a JSONL log")


def _from_protocol(obj: dict[str, Any], hints: dict[str, Any], index: int) -> tuple[int, dict[str, Any]] | None:
    """One line of our metrics.jsonl protocol -> a TRL log dict (log lines) or config hints (event lines)."""
    if obj["type"] == "event":
        config = obj.get("config")
        if obj.get("event") == "started" and isinstance(config, dict):
            hints.update(config)
        if obj.get("event"):
            hints["last_event"] = obj["event"]
        return None
    metrics = obj.get("metrics")
    if not isinstance(metrics, dict) or obj.get("split") == "system":  # a system sample (wall-time step), not a log
        return None
    if obj.get("max_steps") is not None:
        hints["max_steps"] = obj["max_steps"]
    step = obj.get("step")
    return (step if isinstance(step, int) else record_step(metrics, index)), metrics


def _iter_trainer_state(file: Path, hints: dict[str, Any]) -> Iterator[tuple[int, dict[str, Any]]]:
    data = file.read_bytes()
    match = _LOG_HISTORY.search(data)
    if match is None:
        try:
            obj = _loads(data)
        except (ValueError, UnicodeDecodeError) as exc:
            raise ValueError(f"{file}: not valid JSON ({exc})") from None
        if isinstance(obj, list) and all(isinstance(r, dict) for r in obj):
            for i, record in enumerate(obj):
                yield record_step(record, i), record
            return
        raise ValueError(f"{file}: JSON without a log_history list; not a trainer_state.json")
    end = yield from _iter_log_history(file, data, match.end())
    try:
        rest = _loads(data[: match.start()] + b'"log_history": []' + data[end + 1 :])
    except ValueError:
        rest = {}
    if isinstance(rest, dict):
        hints.update({k: rest[k] for k in _STATE_HINTS if rest.get(k) is not None})


def _iter_log_history(file: Path, data: bytes, pos: int) -> Generator[tuple[int, dict[str, Any]], None, int]:
    """Decode the log_history array a block of elements at a time; returns the offset of its closing bracket.

    A block ends at the last ``}`` within ``_BLOCK`` bytes; it parses only if it holds complete elements, so a
    block that does not (an element larger than a block, braces inside strings) falls back to one element.
    """
    index, length = 0, len(data)
    decoder = json.JSONDecoder()
    text: str | None = None
    while True:
        while pos < length and data[pos] in b" \t\r\n,":
            pos += 1
        if pos >= length:
            raise ValueError(f"{file}: truncated JSON inside log_history")
        if data[pos] == 0x5D:  # "]"
            return pos
        # Flat TRL log dicts hold no "]", so the first one in reach is (usually) the end of the array.
        bracket = data.find(b"]", pos, pos + _BLOCK)
        close = data.rfind(b"}", pos, pos + _BLOCK if bracket < 0 else bracket)
        items = None
        if close > pos:
            try:
                items = _loads(b"[" + data[pos : close + 1] + b"]")
            except ValueError:
                items = None
        if items is not None:
            pos = close + 1
        else:
            try:
                if text is None:
                    text = data.decode("utf-8")
                    if len(text) != length:  # byte and character offsets would differ
                        raise ValueError("log_history entries that are not plain ASCII JSON objects")
                item, pos = decoder.raw_decode(text, pos)
            except (ValueError, UnicodeDecodeError) as exc:
                raise ValueError(f"{file}: malformed log_history entry ({exc})") from None
            items = [item]
        for record in items:
            if isinstance(record, dict):
                yield record_step(record, index), record
            index += 1


def load_log_frame(path: str | Path) -> tuple[MetricFrame, dict[str, Any]]:
    """Stream a log into per-metric arrays; returns ``(frame, config_hints)``.

    Raises:
        ValueError: unreadable, not a TRL log, or no numeric metric in it.
    """
    hints: dict[str, Any] = {}
    builder = ColumnBuilder()
    try:
        for step, record in iter_log_records(path, hints):
            builder.add(record, step)
    except OSError as exc:
        raise ValueError(f"{path}: {exc.strerror or exc}") from None
    frame = builder.build()
    if not frame.columns:
        raise ValueError(f"{hints.get('source', path)}: no numeric metrics found in {builder.n_records} records")
    return frame, hints


def load_log_records(path: str | Path) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Read any supported GRPO log into flat TRL log dicts (each with an int ``step``) plus config hints.

    Accepts a ``trainer_state.json``, a checkpoint directory holding one, an output directory with
    ``checkpoint-*/`` (the newest is used), our ``metrics.jsonl`` (its ``started`` event gives the config hints) or
    a JSONL file with one TRL log dict per line.

    Raises:
        ValueError: with a message saying what was wrong with the input.
    """
    hints: dict[str, Any] = {}
    try:
        records = [{**record, "step": step} for step, record in iter_log_records(path, hints)]
    except OSError as exc:
        raise ValueError(f"{path}: {exc.strerror or exc}") from None
    if not any(_has_number(r) for r in records):
        raise ValueError(f"{hints.get('source', path)}: no numeric metrics found in {len(records)} records")
    return records, hints


def _has_number(record: dict[str, Any]) -> bool:
    return any(isinstance(v, (int, float)) and not isinstance(v, bool) for k, v in record.items() if k != "step")


def load_completions(path: str | Path, last_steps: int = 3) -> list[dict[str, Any]] | None:
    """Sample completions of the last ``last_steps`` logged steps found beside a log, or None when there are none.

    Looks for our ``samples.jsonl`` next to the log file, then TRL's ``completions/completions_*.parquet``
    (``log_completions=True``, TRL >= 0.28; read only when pyarrow is installed). Rows keep at least
    ``step``, ``prompt`` and ``completion``.
    """
    try:
        file, _ = resolve_log_path(path)
    except ValueError:
        return None
    roots = [file.parent, file.parent.parent]
    for root in roots:
        samples = root / "samples.jsonl"
        if samples.is_file():
            return _last_steps_jsonl(samples, last_steps)
    for root in roots:
        parquet = sorted((root / "completions").glob("completions_*.parquet"))
        if parquet:
            return _last_parquet(parquet[-last_steps:])
    return None


def _last_steps_jsonl(file: Path, last_steps: int) -> list[dict[str, Any]]:
    groups: deque[list[dict[str, Any]]] = deque(maxlen=last_steps)
    current: Any = object()
    with file.open("rb") as fh:
        for line in fh:
            try:
                row = _loads(line)
            except ValueError:
                continue
            if not isinstance(row, dict) or "completion" not in row:
                continue
            if row.get("step") != current:
                current = row.get("step")
                groups.append([])
            groups[-1].append(row)
    return [row for group in groups for row in group]


def _last_parquet(files: list[Path]) -> list[dict[str, Any]] | None:
    try:
        import pyarrow.parquet as pq
    except ImportError:  # pragma: no cover - depends on the environment
        return None
    rows: list[dict[str, Any]] = []
    for file in files:
        try:
            table = pq.read_table(file, columns=["step", "prompt", "completion"])
        except Exception:  # a parquet file mid-write or from another schema: skip it, samples are optional
            continue
        rows.extend(table.to_pylist())
    return rows
