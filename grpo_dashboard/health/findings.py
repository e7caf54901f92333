"""The ``Finding`` value, the run-config view the rules consult, and the context handed to every rule."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from .series import MetricFrame, baseline_count, fmt, lattice_count, short_required, trailing_streak

INFO, WARNING, ERROR = "info", "warning", "error"
SEVERITY_RANK = {INFO: 0, WARNING: 1, ERROR: 2}
# Evidence key of the finding that stands in for a rule that crashed (``rule_failure``): never read as healthy.
RULE_FAILED = "rule_failed"

# Nested sections a run spec or a saved config may use; their fields are merged into the flat view.
_NESTED_SECTIONS = ("grpo", "config", "training", "training_args", "args", "trainer")


@dataclass
class Finding:
    """One diagnosed problem: which rule, how bad, from which step, the evidence and what to change."""

    rule: str
    severity: str
    step: int
    message: str
    remedy: str
    metric: str | None = None
    evidence: dict[str, Any] = field(default_factory=dict)
    # History (see history.py): "active" while the rule still fires on the log so far, else "resolved" at the step
    # of the first evaluation it no longer fired at; ``step`` stays the first onset either way.
    status: str = "active"
    resolved_step: int | None = None

    def to_dict(self) -> dict[str, Any]:
        """A JSON-safe dict (numpy scalars become Python numbers, non-finite floats become strings)."""
        return _json_safe(asdict(self))


def _json_safe(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    if isinstance(value, np.ndarray):
        return [_json_safe(v) for v in value.tolist()]
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value


# Symptoms: what a collapse, a truncation or a KL blow-up leaves behind. With the same severity and onset, the cause
# is listed before them.
SYMPTOMS = ("zero_variance", "zero_gradient", "flat_reward", "reward_drop", "plateau", "forecast_stop")


def rule_failure(rule_id: str, exc: BaseException, step: int) -> Finding:
    """The finding that reports a rule which raised ``exc``: a warning, so the badge and the report never show the
    run healthy when the doctor could not check it (the guard never stops a run on it)."""
    return Finding(
        rule_id,
        WARNING,
        int(step),
        f"rule {rule_id} failed: {type(exc).__name__}: {exc} — the doctor could not check this; report it",
        "Report it with the run's log (metrics.jsonl or trainer_state.json): this rule's condition went unchecked; "
        "the other rules' findings are unaffected.",
        None,
        {RULE_FAILED: type(exc).__name__},
    )


def is_rule_failure(finding: Any) -> bool:
    """Whether ``finding`` (a Finding or a finding-like object) stands in for a rule that crashed."""
    evidence = getattr(finding, "evidence", None)
    return isinstance(evidence, Mapping) and RULE_FAILED in evidence


def order_key(f: Finding, rule_order: dict[str, int]) -> tuple[int, int, int, int]:
    """Sort key that puts causes before symptoms: worst severity, earliest onset, causes before symptoms."""
    return (-SEVERITY_RANK[f.severity], f.step, f.rule in SYMPTOMS, rule_order.get(f.rule, len(rule_order)))


class RunConfig:
    """Read-only view of whatever GRPOConfig fields are known for a run; every getter tolerates absence."""

    def __init__(self, config: Mapping[str, Any] | None) -> None:
        flat: dict[str, Any] = {}
        for section in _NESTED_SECTIONS:
            nested = (config or {}).get(section)
            if isinstance(nested, Mapping):
                flat.update(nested)
        flat.update({k: v for k, v in (config or {}).items() if not isinstance(v, Mapping)})
        self.raw = flat

    def number(self, name: str) -> float | None:
        """A numeric field, or None when absent or not a number."""
        value = self.raw.get(name)
        if isinstance(value, bool) or value is None:
            return None
        try:
            number = float(value)
        except (TypeError, ValueError):
            return None
        return number if math.isfinite(number) else None

    def flag(self, name: str) -> bool | None:
        """A boolean field, or None when absent."""
        value = self.raw.get(name)
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in {"true", "false"}:
            return value.lower() == "true"
        return None

    def now(self, name: str) -> str:
        """`` (now X)`` when the field is known, else an empty string, for remedies."""
        value = self.raw.get(name)
        if value is None:
            return ""
        if isinstance(value, float):
            return f" (now {value:g})"
        return f" (now {value})"

    def saved_by(self, step: int) -> bool | None:
        """Whether the run has saved a checkpoint by ``step``: False when ``save_strategy`` is 'no' or the first
        ``save_steps`` lies past ``step``; None when the config does not say (no save fields, or per epoch)."""
        strategy = self.raw.get("save_strategy")
        if strategy is None:
            return None
        name = str(getattr(strategy, "value", strategy)).lower().rsplit(".", 1)[-1]
        if name == "no":
            return False
        every = self.number("save_steps")
        if name != "steps" or every is None or every <= 0:
            return None
        if every < 1:  # TrainingArguments reads a save_steps below 1 as a share of max_steps
            total = self.number("max_steps")
            if total is None or total <= 0:
                return None
            every = math.ceil(every * total)
        return every <= step

    def stop_advice(self, step: int) -> str:
        """How to stop at ``step`` and keep the result, as the run's checkpointing allows: stopping a run that
        has saved nothing keeps nothing (the model is written only at the end)."""
        saved = self.saved_by(step)
        if saved:
            return "stop here and keep the last checkpoint"
        if saved is None:
            return "stop here and keep the last checkpoint (if the run saves them: save_strategy, save_steps)"
        return (
            f"this run has saved no checkpoint by step {step}{self.now('save_strategy')}, so stopping it keeps "
            f"nothing: let it finish, and next time set max_steps near {step} or save_strategy: steps"
        )

    def resume_advice(self, step: int) -> str:
        """Resume from before ``step``, or, on a run that saved nothing by then, rerun with checkpoints."""
        if self.saved_by(step) is False:
            return (  # a clause the rules extend ("... with a lower learning_rate"), so the why stays inside
                f"rerun with checkpoints before step {step} (save_strategy: steps, save_steps below {step}; this run "
                f"saved none to resume from, save_strategy {self.raw.get('save_strategy')})"
            )
        return f"resume from a checkpoint saved before step {step}"

    @property
    def beta(self) -> float | None:
        return self.number("beta")

    @property
    def off_policy(self) -> bool | None:
        """True when updates reuse generations (clip ratios carry information); None when the config is unknown."""
        iterations = self.number("num_iterations")
        vllm = self.flag("use_vllm")
        spg, gas = self.number("steps_per_generation"), self.number("gradient_accumulation_steps")
        if (iterations is not None and iterations > 1) or vllm:
            return True
        if spg is not None and spg > (gas or 1):
            return True
        if iterations is not None or vllm is not None:
            return False
        return None

    @property
    def max_completion_length(self) -> float | None:
        return self.number("max_completion_length")

    @property
    def reward_names(self) -> list[str]:
        names = self.raw.get("reward_names") or self.raw.get("reward_funcs") or []
        if isinstance(names, str):
            names = [names]
        return [str(n).rsplit(".", 1)[-1].rsplit("/", 1)[-1] for n in names]

    def names_in(self, key: str) -> set[str]:
        """Reward names the user explicitly tagged, e.g. ``format_rewards: [...]``."""
        value = self.raw.get(key) or []
        return {str(v) for v in ([value] if isinstance(value, str) else value)}


@dataclass
class Context:
    """What every rule sees: the metrics, the known config, the resolved thresholds and optional samples."""

    frame: MetricFrame
    config: RunConfig
    thresholds: dict[str, Any]
    completions: list[dict[str, Any]] | None = None

    def t(self, key: str) -> Any:
        """A resolved threshold value."""
        return self.thresholds[key]

    def baseline_n(self, n: int) -> int:
        """Warm-up baseline length for an ``n``-point series."""
        return baseline_count(n, self.t("baseline.window"), self.t("baseline.fraction"))

    def smooth_n(self, n: int) -> int:
        """Trailing-mean window for an ``n``-point series: never more than a third of it, so short logs stay raw."""
        return max(1, min(int(self.t("smooth.window")), n // 3))

    def groups_per_log(self) -> int | None:
        """How many prompt groups each logged record averages over, read from the lattice of its
        ``frac_reward_zero_std`` values (a share of G groups is a multiple of 1/G); None when the log does not say.
        A record of one prompt's group measures that prompt as much as the policy."""
        frac = self.frame.get("frac_reward_zero_std")
        return None if frac is None else lattice_count(frac.values)


def make_finding(
    rule: str,
    severity: str,
    step: int | float,
    message: str,
    remedy: str,
    metric: str | None,
    **evidence: Any,
) -> Finding:
    """Build a Finding, rounding evidence floats so messages and JSON stay readable."""
    clean = {
        k: (round(float(v), 6) if isinstance(v, (float, np.floating)) and math.isfinite(v) else v)
        for k, v in evidence.items()
    }
    return Finding(rule, severity, int(step), message, remedy, metric, clean)


def judge_state(
    n_post: int,
    persist_warn: int,
    persist_err: int,
    warn: np.ndarray | None = None,
    err: np.ndarray | None = None,
    extreme: np.ndarray | None = None,
    extreme_severity: str = ERROR,
    extreme_required: int | None = None,
) -> tuple[str | None, int]:
    """Severity of a state that must hold on the latest logs, and how many logs the episode spans.

    ``warn``/``err`` are judged on smoothed values and must persist; ``extreme`` (unmistakable raw values) needs
    fewer logs when the log is short, so a run that collapses within its first records is still caught
    (``extreme_required`` overrides how many).
    """
    w = trailing_streak(warn) if warn is not None else 0
    e = trailing_streak(err) if err is not None else 0
    x = trailing_streak(extreme) if extreme is not None else 0
    severity: str | None = None
    if e >= persist_err and err is not None:
        severity = ERROR
    required = short_required(n_post, persist_err) if extreme_required is None else extreme_required
    if extreme is not None and n_post >= 1 and x >= required:
        if severity is None or SEVERITY_RANK[extreme_severity] > SEVERITY_RANK[severity]:
            severity = extreme_severity
    if severity is None and warn is not None and w >= persist_warn:
        severity = WARNING
    return severity, max(w, e, x)


def join_fixes(fixes: list[str]) -> str:
    """Join remedy clauses into one sentence: 'Lower X; raise Y.'."""
    text = "; ".join(f for f in fixes if f)
    return text[:1].upper() + text[1:] + ("" if text.endswith(".") else ".")


__all__ = [
    "Finding",
    "RunConfig",
    "Context",
    "make_finding",
    "judge_state",
    "rule_failure",
    "is_rule_failure",
    "RULE_FAILED",
    "join_fixes",
    "fmt",
    "INFO",
    "WARNING",
    "ERROR",
    "SEVERITY_RANK",
]
