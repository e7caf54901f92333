"""The `training` section's checks: GRPOConfig field names, types and allowed values, ranges, and TRL's cross-field
rules (batch sizes divisible by num_generations, eval data and eval batch, reference-model sync, clipping bounds).

None changes the spec. TRL accepts numeric strings ("1e-6") and ints for floats; the checks compare the typed
values (`typed_training`), and `normalise_training` is the explicit step that writes them into a spec for launch.
"""

from __future__ import annotations

import difflib
import json
import math
from collections.abc import Callable, Iterator
from typing import Any

from grpo_dashboard.checks.cluster_checks import world_note
from grpo_dashboard.checks.named import Check, CheckInput
from grpo_dashboard.errors import FieldError
from grpo_dashboard.spec import trl_fields
from grpo_dashboard.spec.run_spec import RunSpec, world_size

BAD = object()  # a value that is not of any type the field accepts
CLEAN = "training.clean"  # facts key: the well-typed values of known, allowed fields (the cross-field rules use them)
POSITIVE = (
    "learning_rate",
    "epsilon",
    "temperature",
    "max_completion_length",
    "per_device_train_batch_size",
    "gradient_accumulation_steps",
    "num_iterations",
    "logging_steps",
)


def coerce_trl(f: trl_fields.TrlField, value: Any) -> Any:
    """`value` as the field's type would hold it (a numeric string as a number, an int as a float for a float
    field, a JSON string as a dict), or BAD when it is of no accepted type."""
    kinds = f.types
    if value is None:
        return None if type(None) in kinds else BAD
    if isinstance(value, bool):
        return value if bool in kinds or f.choices and value in f.choices else BAD
    if isinstance(value, int) and (int in kinds):
        return value
    if isinstance(value, (int, float)) and float in kinds:
        return float(value)
    if isinstance(value, str):
        return _coerce_text(kinds, value)
    if isinstance(value, dict) and dict in kinds:
        return value
    if isinstance(value, list) and list in kinds:
        return value
    return BAD


def _coerce_text(kinds: tuple[Any, ...], value: str) -> Any:
    if str in kinds or any(isinstance(k, type) and hasattr(k, "__members__") for k in kinds):
        return value
    for k in (int, float):
        if k in kinds:
            try:
                num = float(value)
            except ValueError:
                continue
            if k is int and num.is_integer():
                return int(num)
            if k is float:
                return num
    if dict in kinds:
        try:
            parsed = json.loads(value)
        except ValueError:
            return BAD
        return parsed if isinstance(parsed, dict) else BAD
    return BAD


def typed_training(training: dict[str, Any]) -> dict[str, Any]:
    """A copy of `training` with every value of a known GRPOConfig field of an accepted type as that type (the rest
    as given); the spec's own dict is not changed."""
    fields = trl_fields.grpo_fields()
    out = dict(training)
    for key, value in training.items():
        if isinstance(key, str) and key not in trl_fields.RESERVED and key in fields:
            coerced = coerce_trl(fields[key], value)
            if coerced is not BAD:
                out[key] = coerced
    return out


def normalise_training(spec: RunSpec) -> None:
    """Write the typed training values into `spec` (what the job gets): the one place a spec's values change."""
    spec.training.update(typed_training(spec.training))


def _field_problem(
    key: Any, value: Any, fields: dict[str, trl_fields.TrlField], trl_version: Callable[[], str]
) -> tuple[FieldError | None, Any]:
    """(the problem of one training entry or None, its typed value or BAD)."""
    where = f"training.{key}"
    if not isinstance(key, str):
        return FieldError(where, value, "has a key that is not a field name; use GRPOConfig field names."), BAD
    if key in trl_fields.RESERVED:
        return FieldError(where, value, f"is managed by the dashboard: {trl_fields.RESERVED[key]}."), BAD
    if key not in fields:
        close = difflib.get_close_matches(key, list(fields), n=2)
        hint = f" Did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
        return FieldError(where, value, f"is not a GRPOConfig field of trl {trl_version()}.{hint}"), BAD
    coerced = coerce_trl(fields[key], value)
    if coerced is BAD:
        names = "/".join(getattr(k, "__name__", str(k)) for k in fields[key].types)
        return FieldError(where, value, f"must be of type {names}."), BAD
    choices = fields[key].choices
    if choices is not None and coerced is not None and coerced not in choices:
        return FieldError(where, value, f"must be one of {', '.join(repr(c) for c in choices)}."), BAD
    return None, coerced


def clean_values(inp: CheckInput) -> dict[str, Any]:
    """The well-typed values of known, allowed training fields (computed once per validation, kept in the facts)."""
    if CLEAN not in inp.facts:
        fields = trl_fields.grpo_fields()
        clean = {}
        for key, value in inp.spec.training.items():
            problem, coerced = _field_problem(key, value, fields, lambda: "")
            if problem is None:
                clean[key] = coerced
        inp.facts[CLEAN] = clean
    return inp.facts[CLEAN]


def _eff(inp: CheckInput, name: str) -> Any:
    return trl_fields.effective(clean_values(inp), name)


def _field_values(trl_version: Callable[[], str]) -> Callable[[CheckInput], Iterator[FieldError]]:
    def run(inp: CheckInput) -> Iterator[FieldError]:
        fields = trl_fields.grpo_fields()
        for key, value in list(inp.spec.training.items()):
            problem, _ = _field_problem(key, value, fields, trl_version)
            if problem is not None:
                yield problem

    return run


def _in_range(name: str, allow_zero: bool = False, upper: float | None = None) -> Check:
    def run(inp: CheckInput) -> Iterator[FieldError]:
        v = _eff(inp, name)
        if v is None or not isinstance(v, (int, float)):
            return
        bad = (v < 0 if allow_zero else v <= 0) or (upper is not None and v > upper) or not math.isfinite(v)
        if bad:
            rng = f"{'≥' if allow_zero else '>'} 0" + (f" and ≤ {upper}" if upper is not None else "")
            yield FieldError(f"training.{name}", v, f"must be {rng}.")

    return Check(f"training.{name}.range", (f"training.{name}",), run)


def _epsilon_high(inp: CheckInput) -> Iterator[FieldError]:
    high, low = _eff(inp, "epsilon_high"), _eff(inp, "epsilon")
    if high is not None and high < low:
        yield FieldError(
            "training.epsilon_high",
            high,
            f"is below epsilon ({low}); DAPO's clip-higher uses epsilon_high ≥ epsilon (e.g. 0.28).",
            "warning",
        )


def _max_steps(inp: CheckInput) -> Iterator[FieldError]:
    if isinstance(_eff(inp, "max_steps"), int) and _eff(inp, "max_steps") == 0:
        yield FieldError("training.max_steps", 0, "must be positive, or -1 to train for num_train_epochs.")


def _save_steps_unused(inp: CheckInput) -> Iterator[FieldError]:
    t = inp.spec.training
    if "save_steps" in t and str(_eff(inp, "save_strategy")) == "no":
        yield FieldError(
            "training.save_steps",
            t["save_steps"],
            "is set, but save_strategy is 'no', so the job saves no checkpoint and the run cannot be resumed. "
            "Set `save_strategy: steps` to save every save_steps steps, or remove save_steps.",
            "warning",
        )


def _num_generations(inp: CheckInput) -> Iterator[FieldError]:
    g = _eff(inp, "num_generations")
    if isinstance(g, int) and g < 2:
        yield FieldError(
            "training.num_generations",
            g,
            "must be ≥ 2: GRPO compares completions within a group of "
            "num_generations to compute advantages. Use 4, 8 or 16.",
        )


def _generation_batch_exclusive(inp: CheckInput) -> Iterator[FieldError]:
    spg = _eff(inp, "steps_per_generation")
    if _eff(inp, "generation_batch_size") is not None and spg is not None:
        yield FieldError(
            "training.steps_per_generation",
            spg,
            "cannot be set together with generation_batch_size; remove one of them.",
        )


def _groups(inp: CheckInput) -> tuple[int, int, int] | None:
    """(num_generations, per-device batch, accumulation) when they are sound enough to divide, else None."""
    g, bs, ga = (
        _eff(inp, n) for n in ("num_generations", "per_device_train_batch_size", "gradient_accumulation_steps")
    )
    if isinstance(g, int) and g >= 2 and all(isinstance(v, int) and v > 0 for v in (bs, ga)):
        return g, bs, ga
    return None


def _not_divisible(field: str, shown: Any, how: str, gbs: int, g: int) -> FieldError:
    ok = [m for m in range(2, min(gbs, 64) + 1) if gbs % m == 0]
    return FieldError(
        field,
        shown,
        f"gives a generation batch of {how} completions, which is not divisible by "
        f"num_generations ({g}); each prompt needs a full group. Make the batch a multiple of {g}, or "
        f"use num_generations in {ok}.",
    )


def _generation_batch_divisible(inp: CheckInput) -> Iterator[FieldError]:
    gbs, groups = _eff(inp, "generation_batch_size"), _groups(inp)
    if gbs is None or _eff(inp, "steps_per_generation") is not None or groups is None:
        return
    g, bs, _ = groups
    global_bs = bs * world_size(inp.spec)
    if gbs % global_bs:
        yield FieldError(
            "training.generation_batch_size",
            gbs,
            f"must be divisible by the global batch size per_device_train_batch_size × processes = {global_bs}.",
        )
    if gbs % g:
        yield _not_divisible("training.generation_batch_size", gbs, f"generation_batch_size = {gbs}", gbs, g)


def _batch_divisible(inp: CheckInput) -> Iterator[FieldError]:
    groups = _groups(inp)
    if _eff(inp, "generation_batch_size") is not None or groups is None:
        return
    g, bs, ga = groups
    spg = _eff(inp, "steps_per_generation")
    gbs = bs * world_size(inp.spec) * (spg if isinstance(spg, int) and spg > 0 else ga)
    if gbs % g:
        how = (
            f"per_device_train_batch_size ({bs}) × processes ({world_note(inp.spec)}) × steps_per_generation "
            f"({spg if spg else ga}) = {gbs}"
        )
        yield _not_divisible("training.per_device_train_batch_size", bs, how, gbs, g)


def _auto_batch(inp: CheckInput) -> Iterator[FieldError]:
    if _eff(inp, "auto_find_batch_size"):
        yield FieldError(
            "training.auto_find_batch_size",
            True,
            "is not supported by GRPO (it breaks prompt "
            "groups); set it to false and lower per_device_train_batch_size instead.",
        )


def _completions_repo(inp: CheckInput) -> Iterator[FieldError]:
    repo = _eff(inp, "log_completions_hub_repo")
    if repo and not _eff(inp, "log_completions"):
        yield FieldError(
            "training.log_completions_hub_repo",
            repo,
            "needs log_completions: true; enable it or remove log_completions_hub_repo.",
        )


def _sync_ref(inp: CheckInput) -> Iterator[FieldError]:
    if _eff(inp, "sync_ref_model") and not _eff(inp, "beta"):
        yield FieldError(
            "training.sync_ref_model",
            True,
            "needs beta > 0 (no reference model exists at beta=0); set beta (e.g. 0.04) or remove sync_ref_model.",
        )


def _clip_bounds(inp: CheckInput) -> Iterator[FieldError]:
    lo, hi = _eff(inp, "vllm_importance_sampling_clip_min"), _eff(inp, "vllm_importance_sampling_clip_max")
    if lo is not None and hi is not None and lo >= hi:
        yield FieldError(
            "training.vllm_importance_sampling_clip_min",
            lo,
            f"must be less than vllm_importance_sampling_clip_max ({hi}).",
        )


def _evaluates(inp: CheckInput) -> tuple[bool, bool]:
    """(eval_strategy asks for evaluation, the dataset has eval data)."""
    d = inp.spec.dataset
    return str(_eff(inp, "eval_strategy") or "no") != "no", bool(d.eval_split or d.eval_data_files)


def _eval_data(inp: CheckInput) -> Iterator[FieldError]:
    evals, has_eval = _evaluates(inp)
    if evals and not has_eval:
        yield FieldError(
            "training.eval_strategy",
            _eff(inp, "eval_strategy"),
            "needs eval data: set dataset."
            "eval_split (Hub) or dataset.eval_data_files (local), or set eval_strategy: 'no'.",
        )
    if has_eval and not evals:
        yield FieldError(
            "training.eval_strategy",
            _eff(inp, "eval_strategy"),
            "is 'no', so the eval data is never used; set eval_strategy: steps and eval_steps to evaluate.",
            "warning",
        )


def _eval_batch(inp: CheckInput) -> Iterator[FieldError]:
    if _evaluates(inp) != (True, True):
        return
    world = world_size(inp.spec)
    eg = _eff(inp, "num_generations_eval") or _eff(inp, "num_generations")
    ebs = _eff(inp, "per_device_eval_batch_size")
    if isinstance(eg, int) and isinstance(ebs, int) and (ebs * world) % eg:
        yield FieldError(
            "training.per_device_eval_batch_size",
            ebs,
            f"× processes ({world}) = {ebs * world} is not divisible by num_generations_eval/"
            f"num_generations ({eg}); make it a multiple of {eg}.",
        )


def training_checks(trl_version: Callable[[], str]) -> list[Check]:
    """The training checks in report order; `trl_version` names the installed TRL. (Whether vLLM is installed is the
    optional-packages check's, checks/spec_extras.py, which gives the fix: one warning, not two.)"""
    t = "training."
    batch = (
        f"{t}per_device_train_batch_size",
        f"{t}gradient_accumulation_steps",
        f"{t}steps_per_generation",
        f"{t}num_generations",
        "backend.num_processes",
    )
    return [
        Check("training.fields", ("training",), _field_values(trl_version)),
        *(_in_range(name) for name in POSITIVE),
        _in_range("beta", allow_zero=True),
        _in_range("top_entropy_quantile", upper=1.0),
        _in_range("top_p", upper=1.0),
        Check("training.epsilon_high.not_below_epsilon", (f"{t}epsilon_high", f"{t}epsilon"), _epsilon_high),
        Check("training.max_steps.nonzero", (f"{t}max_steps",), _max_steps),
        Check("training.save_steps.needs_strategy", (f"{t}save_steps", f"{t}save_strategy"), _save_steps_unused),
        Check("training.num_generations.group", (f"{t}num_generations",), _num_generations),
        Check(
            "training.generation_batch.one_way",
            (f"{t}steps_per_generation", f"{t}generation_batch_size"),
            _generation_batch_exclusive,
        ),
        Check(
            "training.generation_batch.divisible",
            (
                f"{t}generation_batch_size",
                f"{t}per_device_train_batch_size",
                f"{t}num_generations",
                "backend.num_processes",
            ),
            _generation_batch_divisible,
        ),
        Check("training.batch_divisible", batch, _batch_divisible),
        Check("training.auto_find_batch_size", (f"{t}auto_find_batch_size",), _auto_batch),
        Check(
            "training.log_completions_hub_repo",
            (f"{t}log_completions_hub_repo", f"{t}log_completions"),
            _completions_repo,
        ),
        Check("training.sync_ref_model.needs_beta", (f"{t}sync_ref_model", f"{t}beta"), _sync_ref),
        Check(
            "training.vllm_importance_sampling_clip",
            (f"{t}vllm_importance_sampling_clip_min", f"{t}vllm_importance_sampling_clip_max"),
            _clip_bounds,
        ),
        Check(
            "training.eval_strategy.eval_data",
            (f"{t}eval_strategy", "dataset.eval_split", "dataset.eval_data_files"),
            _eval_data,
        ),
        Check(
            "training.eval_batch_divisible",
            (
                f"{t}per_device_eval_batch_size",
                f"{t}num_generations_eval",
                f"{t}num_generations",
                "backend.num_processes",
            ),
            _eval_batch,
        ),
    ]
