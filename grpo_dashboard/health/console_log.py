"""Read a training run's console output (``nohup.out``, a Slurm ``.out``, a pasted ``.log``) as log records.

Two shapes are read, line by line, so a log of any length streams:

* TRL's printed log dicts, ``{'loss': '0.01', 'reward': '0.4', ..., 'epoch': '0.02'}`` (transformers 5 prints the
  values as 4-digit strings, older releases as floats), one per logging step (tqdm may share the line). They carry
  no step: it is the training progress bar's counter (``10/300 [``) redrawn right after the dict (``_Steps``), or the
  dict's position when there is no bar. Evaluation dicts (``eval_*`` keys) take the step of the training record
  before them, not the evaluation bar's. The end-of-training summary (``train_runtime``) is left out.
* verl's console lines, ``step:12 - actor/pg_clipfrac:0.003 - critic/score/mean:0.41 - ...`` (values may be printed
  as ``np.float64(0.1)``); their keys are verl's own (``series.normalize_key`` reads them as TRL's).

Everything else (warnings, tracebacks, tqdm lines) is skipped. Inputs are untrusted (uploads): a dict is parsed
only when it is a flat literal of bounded length and read by bounded patterns (nothing is evaluated), and a line is
cut at ``MAX_LINE`` characters.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

MAX_LINE = 1 << 20
_DICT = re.compile(r"\{'[^{}]{0,65536}\}")  # a flat dict: no nested braces, bounded
_NUM = r"[-+]?(?:\d{1,32}(?:\.\d{0,32})?|\.\d{1,32})(?:[eE][-+]?\d{1,4})?|nan|-?inf"
_PAIR = re.compile(rf"'([^'\\]{{1,200}})': (?:'({_NUM})'|({_NUM}))(?=[,}}])")
_BAR = re.compile(r"(?<!\d)(\d{1,9})/(\d{1,9}) \[")
_VERL_STEP = re.compile(r"(?:^|[\s)|])step:(\d{1,12}) - ")
_KV = re.compile(
    rf"(?:^|(?<=\s))([A-Za-z_][\w/.@+\-]{{0,200}}(?:\([\w.+\-]{{1,16}}\))?):(?:np\.\w{{1,16}}\(([^()]{{1,40}})\)|({_NUM}))"
    r"(?=\s|$)"
)
# An evaluation's dict (TRL's eval_*, verl's validation "val-core/..." printed before training as a dict).
_EVAL_PREFIXES = ("eval_", "val-", "val/")
SNIFF = re.compile(rb"(?:^|[\s)|])step:\d{1,12} - [A-Za-z_]|\{'[A-Za-z_/]{1,200}': ")


def looks_like_console(head: bytes) -> bool:
    """Whether the first bytes of a file hold a printed TRL log dict or a verl step line."""
    return SNIFF.search(head) is not None


def _number(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return None
    return None


def _trl_dict(text: str) -> dict[str, float] | None:
    """The numeric entries of a printed flat dict (numbers, or numbers printed as strings, as transformers 5 does)."""
    out = {}
    for m in _PAIR.finditer(text):
        number = _number(m.group(2) if m.group(2) is not None else m.group(3))
        if number is not None:
            out[m.group(1)] = number
    return out or None


def _verl_line(text: str) -> dict[str, float]:
    out = {}
    for m in _KV.finditer(text):
        raw = m.group(2) if m.group(2) is not None else m.group(3)
        number = _number(raw.strip())
        if number is not None and m.group(1) != "step":
            out[m.group(1)] = number
    return out


def iter_console(file: Path, hints: dict[str, Any]) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield ``(step, record)`` for every log dict or verl step line of a console log, in order.

    Raises:
        ValueError: the file holds neither (not a console log of a run).
    """
    hints.setdefault("format", "console")
    steps = _Steps()
    found = False
    with file.open("r", encoding="utf-8", errors="replace", newline="") as fh:
        for line in fh:
            for part in line[:MAX_LINE].split("\r"):
                verl = _VERL_STEP.search(part)
                if verl is not None:
                    record = _verl_line(part[verl.end() :])
                    if record:
                        found = True
                        hints["format"] = "verl console"
                        steps.step = int(verl.group(1))
                        yield steps.step, record
                    continue
                pos = 0
                for m in _DICT.finditer(part):
                    yield from steps.bars(part, pos, m.start())
                    pos = m.end()
                    printed = _trl_dict(m.group(0))
                    if printed is None or "train_runtime" in printed:
                        continue
                    found = True
                    yield from steps.record(printed)
                yield from steps.bars(part, pos, len(part))
    yield from steps.flush()
    if not found:
        raise ValueError(
            f"{file}: no TRL log dict ({{'loss': ...}}) or verl step line (step:N - key:value) found; not a console "
            "log of a training run"
        )


class _Steps:
    """Gives printed log dicts their steps. Transformers writes a dict through the progress bar (``tqdm.write``), which
        redraws the bar right after it: the first training-bar counter after a training dict is its step. The training
        bar is the first one drawn after a training dict (bars drawn before, such as "Loading weights", have other
        totals; so has an evaluation's). A dict with no counter after it (no bar, or the end of the log) takes the step
        after the one before. An evaluation dict takes the step of the training record before it (0 before the first:
    verl's "Initial validation metrics")."""

    def __init__(self) -> None:
        self.total: int | None = None
        self.pending: dict[str, float] | None = None
        self.step = 0

    def bars(self, text: str, start: int, end: int) -> Iterator[tuple[int, dict[str, float]]]:
        for bar in _BAR.finditer(text, start, end):
            count, total = int(bar.group(1)), int(bar.group(2))
            if self.pending is not None and self.total is None:
                self.total = total
            if self.pending is not None and total == self.total and count > self.step:
                yield from self._emit(count)

    def record(self, record: dict[str, float]) -> Iterator[tuple[int, dict[str, float]]]:
        yield from self.flush()
        if any(k.startswith(_EVAL_PREFIXES) for k in record):
            yield self.step, record
        else:
            self.pending = record

    def flush(self) -> Iterator[tuple[int, dict[str, float]]]:
        if self.pending is not None:
            yield from self._emit(self.step + 1)

    def _emit(self, step: int) -> Iterator[tuple[int, dict[str, float]]]:
        assert self.pending is not None
        record, self.pending, self.step = self.pending, None, step
        yield step, record
