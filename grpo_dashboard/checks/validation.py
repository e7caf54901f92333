"""Validation of a run spec before anything starts: every check TRL would only make inside the first training step.

`validate(spec)` returns every problem at once; each names the field, the value, what is allowed, and the fix.
It runs the generic checks plus the backend's own (`checks_with`): small named checks (`checks/named.py`) in report
order, each declaring the fields it involves; none changes the spec.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from grpo_dashboard.checks import agents, spec_checks, spec_extras
from grpo_dashboard.checks.cluster_checks import backend_settings, server_needed
from grpo_dashboard.checks.dataset_files import DatasetSample
from grpo_dashboard.checks.named import Check, CheckInput, run_checks, sample_of
from grpo_dashboard.checks.training_checks import training_checks, typed_training
from grpo_dashboard.errors import FieldError, SpecError
from grpo_dashboard.spec import trl_schema
from grpo_dashboard.spec.run_spec import RunSpec


@dataclass
class ValidationReport:
    """Errors block a launch; warnings are shown but do not."""

    errors: list[FieldError] = field(default_factory=list)
    warnings: list[FieldError] = field(default_factory=list)
    dataset: DatasetSample | None = None

    @property
    def ok(self) -> bool:
        """True when nothing blocks the launch."""
        return not self.errors

    def raise_if_errors(self) -> None:
        """Raise SpecError listing every error."""
        if self.errors:
            raise SpecError(self.errors)


def validate(
    spec: RunSpec, base_dir: str | Path | None = None, backend_checks: Sequence[Check] = ()
) -> ValidationReport:
    """Check a parsed spec completely; relative paths are resolved against `base_dir` (default: cwd).

    `backend_checks`: the checks of the spec's backend (its package's `CHECKS`; `launch.runs.check` passes them,
    this layer knows no backend). Without them only what holds for every backend is checked.

    The checks read the training values as TRL would type them (`typed_training`); `spec` itself is not changed
    (`training_checks.normalise_training` writes the typed values, as `launch.runs.check` does).
    """
    inp = CheckInput(typed_view(spec), Path(base_dir) if base_dir else Path.cwd())
    errors, warnings = run_checks(checks_with(backend_checks), inp)
    return ValidationReport(errors, warnings, sample_of(inp))


def typed_view(spec: RunSpec) -> RunSpec:
    """A shallow copy of `spec` whose training values are typed (the other sections are `spec`'s own)."""
    view = copy.copy(spec)
    view.training = typed_training(spec.training)
    return view


def _trl_version() -> str:
    version = trl_schema.installed_versions()["trl"]  # from the package metadata: trl is not imported
    return version or f"{trl_schema.schema()['versions']['trl']} (the dashboard's schema; trl is not installed here)"


def checks_with(backend_checks: Sequence[Check]) -> list[Check]:
    """Every check of a spec in report order: the generic ones with a backend's checks where its fields are read,
    and the backend's checks that need a sound spec (after_errors=False: asking a cluster) after all others that
    can find errors (the chat template, read from the model's files, comes last)."""
    sound = [c for c in backend_checks if not c.after_errors]
    return [*HEAD, *(c for c in backend_checks if c.after_errors), *TAIL, *sound, *spec_checks.CHAT_TEMPLATE]


# "backend" and "generation" are sections, not form fields: each problem names its own field.
HEAD: list[Check] = [
    *spec_checks.NAME,
    *spec_checks.MODEL,
    *spec_checks.DATASET_CHECKS,
    *spec_checks.REWARDS,
    *agents.CHECKS,
    *training_checks(lambda: _trl_version()),
    Check(
        "backend.settings",
        ("backend.kind", "backend.stall_timeout_s", "backend.num_processes", "backend.accelerate_config"),
        backend_settings,
    ),
    Check("generation.server_needed", ("training.use_vllm", "training.vllm_mode", "generation"), server_needed),
]
TAIL: list[Check] = [*spec_checks.HEALTH, *spec_extras.CHECKS]
CHECKS: list[Check] = checks_with(())  # the generic checks alone
