"""Named checks: each one small, read-only over the spec, declaring the fields it involves.

A `Check` has a dotted `name` (``training.batch_divisible``), the spec `fields` it reads (``training.
per_device_train_batch_size``, ``backend.flavor``...) and a function from a `CheckInput` to the problems it finds.
`run_checks` runs checks in order and stamps each problem with its check's fields (`FieldError.involves`), so the form
marks fields from that list, never from message text. A check never changes the spec: `run_checks` hands every check
the same spec and a test verifies it is unchanged after each one.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from grpo_dashboard.checks.dataset_files import DatasetSample
from grpo_dashboard.errors import FieldError
from grpo_dashboard.spec.run_spec import RunSpec

DATASET_SAMPLE = "dataset.sample"  # facts key: the DatasetSample the dataset checks read (absent: none was read)


@dataclass
class CheckInput:
    """What a check reads: the parsed spec, the folder its relative paths resolve against, and facts earlier checks
    established for later ones (`facts`, e.g. the dataset sample), which is the only thing a check may add to."""

    spec: RunSpec
    base: Path
    facts: dict[str, Any] = field(default_factory=dict)
    errors_so_far: int = 0


def sample_of(inp: CheckInput) -> DatasetSample | None:
    """The dataset sample the dataset checks read for the checks after them (None when none could be read)."""
    return inp.facts.get(DATASET_SAMPLE)


@dataclass(frozen=True)
class Check:
    """One named check: `run(inp)` yields FieldErrors (severity "error" blocks a launch; any other does not)."""

    name: str
    fields: tuple[str, ...]
    run: Callable[[CheckInput], Iterable[FieldError]]
    after_errors: bool = True  # False: skipped when earlier checks found errors (it needs a sound spec)


def run_checks(checks: Sequence[Check], inp: CheckInput) -> tuple[list[FieldError], list[FieldError]]:
    """(errors, warnings) of `checks` run in order over `inp`; each problem carries its check's fields."""
    errors: list[FieldError] = []
    warnings: list[FieldError] = []
    for check in checks:
        if errors and not check.after_errors:
            continue
        inp.errors_so_far = len(errors)
        try:
            for problem in check.run(inp):
                involves = tuple(dict.fromkeys((*problem.involves, *check.fields)))
                stamped = dataclasses.replace(problem, involves=involves)
                (errors if problem.severity == "error" else warnings).append(stamped)
        except OSError as exc:
            # A path the file system refuses to look up (a name over 255 bytes, a folder it may not read): the
            # spec's value, not a crash of the validation.
            errors.append(_unusable_path(check, inp.spec, exc))
    return errors, warnings


def _unusable_path(check: Check, spec: RunSpec, exc: OSError) -> FieldError:
    """The error for the path one of `check`'s fields names and the file system would not look up."""
    looked_up = str(exc.filename or "")
    values = [(f, _field_value(spec, f)) for f in check.fields]
    named = [(f, v) for f, v in values if isinstance(v, str) and v and v in looked_up]
    field_name, value = named[0] if named else (values[0] if values else ("spec", looked_up))
    return FieldError(
        field_name,
        value,
        f"is a path the file system cannot look up ({exc.strerror or type(exc).__name__}); use a shorter path (each "
        "part at most 255 bytes) in a folder the dashboard may read, or a Hub id.",
        involves=check.fields,
    )


def _field_value(spec: RunSpec, dotted: str) -> Any:
    node: Any = spec
    for part in dotted.split("."):
        node = getattr(node, part, None)
        if node is None:
            return None
    return node


Sink = Callable[[FieldError], None]


def collected(body: Callable[[Sink, Sink], None]) -> list[FieldError]:
    """The problems a callback-style check body reports through its (err, warn) sinks, in the order reported."""
    found: list[FieldError] = []
    body(found.append, found.append)
    return found
