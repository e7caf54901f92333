"""Validation of a run spec before anything starts: every check TRL would only make inside the first training step.

`validate(spec)` returns every problem at once; each names the field, the value, what is allowed, and the fix.
"""

from __future__ import annotations

import difflib
import json
import math
import re
import string
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from grpo_dashboard.checks import agents
from grpo_dashboard.checks.cluster_checks import (
    check_generation,
    check_processes,
    check_slurm,
    gpu_count,
    world_note,
)
from grpo_dashboard.checks.dataset_files import DatasetFileError, DatasetSample, is_conversational, read_sample
from grpo_dashboard.checks.spec_extras import check_extras
from grpo_dashboard.errors import FieldError, SpecError
from grpo_dashboard.spec import trl_fields
from grpo_dashboard.spec.jobfiles import rewards_module
from grpo_dashboard.spec.paths import user_path
from grpo_dashboard.spec.run_spec import (
    ACCELERATE_CONFIGS,
    BACKENDS,
    DTYPES,
    HF_JOBS,
    LOCAL,
    SLURM,
    RunSpec,
    world_size,
)

HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*(/[\w.-]+)?$")
REWARD_NAME = re.compile(r"^[A-Za-z_][\w.-]*$")


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


def validate(spec: RunSpec, base_dir: str | Path | None = None) -> ValidationReport:
    """Check a parsed spec completely; relative paths are resolved against `base_dir` (default: cwd)."""
    base = Path(base_dir) if base_dir else Path.cwd()
    report = ValidationReport()
    err = report.errors.append
    warn = report.warnings.append

    if not spec.name or not spec.name.strip():
        err(FieldError("name", spec.name, "must be a non-empty run name, e.g. `name: qwen-gsm8k-lr1e-6`."))
    elif len(spec.name) > 100:
        err(FieldError("name", spec.name, "is longer than 100 characters; use a shorter name."))

    _check_model(spec, base, err, warn)
    sample = None if agents.owns_prompts(spec) else _check_dataset(spec, base, err, warn)
    report.dataset = sample
    _check_rewards(spec, base, sample, err)
    agents.check_agent(spec, base, sample, err, warn)
    _check_training(spec, err, warn)
    _check_backend(spec, base, err)
    visible = gpu_count() if spec.backend.kind == LOCAL else None
    check_processes(spec, base, visible, err, warn)
    check_generation(spec, visible, err)
    _check_health(spec, err)
    check_extras(spec, base, err, warn)
    if spec.backend.kind == HF_JOBS:
        _check_hf_jobs(spec, base, err, warn)
    if spec.backend.kind == SLURM and not report.errors:
        check_slurm(spec, report.errors, warn)
    if sample is not None:
        _check_chat_template(spec, base, sample, err, warn)
    return report


def _resolve(base: Path, value: str) -> Path:
    p = user_path(value)
    return p if p.is_absolute() else base / p


def _looks_like_path(value: str) -> bool:
    return value.startswith((".", "/", "~")) or value.count("/") > 1 or "\\" in value


def _check_model(spec: RunSpec, base: Path, err: Any, warn: Any) -> None:
    m = spec.model
    if not m.name_or_path:
        err(FieldError("model.name_or_path", m.name_or_path,
                       "is required: a Hub model id (e.g. Qwen/Qwen2.5-0.5B-Instruct) or a local directory."))
    else:
        local = _resolve(base, m.name_or_path)
        if m.build_tiny and not local.exists():
            pass  # the job builds it there on first use
        elif local.exists():
            if not (local / "config.json").is_file():
                err(FieldError("model.name_or_path", m.name_or_path,
                               f"is a local path ({local}) without config.json; point it at a directory written by "
                               f"save_pretrained, or use a Hub id."))
        elif _looks_like_path(m.name_or_path):
            err(FieldError("model.name_or_path", m.name_or_path,
                           f"looks like a local path but {local} does not exist. Fix the path, or set "
                           f"`model.build_tiny: true` to build the tiny offline test model there."))
        elif not HUB_ID.match(m.name_or_path):
            err(FieldError("model.name_or_path", m.name_or_path,
                           "is neither an existing directory nor a valid Hub id like `owner/model`."))
    if m.dtype not in DTYPES:
        err(FieldError("model.dtype", m.dtype, f"must be one of {', '.join(DTYPES)}."))
    if m.lora is not None:
        if m.lora.r < 1:
            err(FieldError("model.lora.r", m.lora.r, "must be a positive integer rank, e.g. 16."))
        if not 0 <= m.lora.lora_dropout < 1:
            err(FieldError("model.lora.lora_dropout", m.lora.lora_dropout, "must be in [0, 1)."))


def _check_dataset(spec: RunSpec, base: Path, err: Any, warn: Any) -> DatasetSample | None:
    d = spec.dataset
    if d.mixture is not None:
        return None  # checked with the other mixture settings (spec_extras)
    if bool(d.path) == bool(d.data_files):
        err(FieldError("dataset", {"path": d.path, "data_files": d.data_files},
                       "needs exactly one source: `path` (a Hub dataset id) or `data_files` (local .json/.jsonl/.csv/"
                       ".parquet files)."))
        return None
    if d.eval_data_files and d.path:
        err(FieldError("dataset.eval_data_files", d.eval_data_files,
                       "can only be used with local `data_files`; for a Hub dataset set `eval_split`."))
    sample: DatasetSample | None = None
    if d.data_files:
        files = [d.data_files] if isinstance(d.data_files, str) else d.data_files
        try:
            sample = read_sample([str(_resolve(base, f)) for f in files])
        except DatasetFileError as exc:
            err(FieldError("dataset.data_files", d.data_files, str(exc)))
            return None
        if d.eval_data_files:
            efiles = [d.eval_data_files] if isinstance(d.eval_data_files, str) else d.eval_data_files
            try:
                read_sample([str(_resolve(base, f)) for f in efiles], limit=1)
            except DatasetFileError as exc:
                err(FieldError("dataset.eval_data_files", d.eval_data_files, str(exc)))
    else:
        sample = _hub_dataset_sample(spec, warn)
        if sample is None:
            return None
    if d.prompt_template:
        try:
            names = {f[1] for f in string.Formatter().parse(d.prompt_template) if f[1]}
        except ValueError as exc:
            err(FieldError("dataset.prompt_template", d.prompt_template,
                           f"is not a valid format string ({exc}); use {{column}} placeholders."))
            return sample
        missing = sorted(n for n in names if n not in sample.columns)
        if missing:
            err(FieldError("dataset.prompt_template", d.prompt_template,
                           f"uses column(s) {missing} that the dataset lacks; columns are {sample.columns}."))
    elif d.prompt_column not in sample.columns:
        close = difflib.get_close_matches(d.prompt_column, sample.columns, n=1)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        err(FieldError("dataset.prompt_column", d.prompt_column,
                       f"is not a column of the dataset; columns are {sample.columns}. Set `dataset.prompt_column` "
                       f"to the column holding the prompts, or `dataset.prompt_template`.{hint}"))
    if sample.num_rows == 0:
        err(FieldError("dataset.data_files", d.data_files, "holds no rows."))
    return sample


def _hub_dataset_sample(spec: RunSpec, warn: Any) -> DatasetSample | None:
    d = spec.dataset
    try:
        from datasets import load_dataset_builder

        builder = load_dataset_builder(d.path, d.config, revision=d.revision)
        features = builder.info.features
        if features is None:
            raise ValueError("no features in the dataset card")
        return DatasetSample(list(features), [], None)
    except Exception as exc:  # offline or private: checked again by the job, so only a warning here
        warn(FieldError("dataset.path", d.path, f"could not be inspected here ({type(exc).__name__}: "
                        f"{str(exc)[:200]}); its columns will only be checked when the job loads it.", "warning"))
        return None


def _check_rewards(spec: RunSpec, base: Path, sample: DatasetSample | None, err: Any) -> None:
    rewards = rewards_module()
    if not spec.rewards and spec.agent is None:  # an environment's get_reward may be the source (checks/agents.py)
        err(FieldError("rewards", [], f"needs at least one reward function; built-ins: {sorted(rewards.REWARDS)}."))
    seen: set[str] = set()
    for i, r in enumerate(spec.rewards):
        where = f"rewards[{i}]"
        if not r.name or not REWARD_NAME.match(r.name):
            err(FieldError(f"{where}.name", r.name, "must be a name of letters, digits, _ . - (it becomes the "
                           "metric key rewards/<name>/mean)."))
        elif r.name in seen:
            err(FieldError(f"{where}.name", r.name, "is used twice; TRL logs rewards by name, so give each a "
                           "unique `name` (use `builtin:` to reuse one built-in with other params)."))
        seen.add(r.name)
        if not isinstance(r.weight, float) or not math.isfinite(r.weight):
            err(FieldError(f"{where}.weight", r.weight, "must be a finite number, e.g. 1.0."))
        if r.model:
            continue  # a reward model (spec_extras)
        if r.function:
            if r.builtin:
                err(FieldError(f"{where}.builtin", r.builtin, "cannot be combined with `function`; keep one."))
            target = r.function.rsplit(":", 1)[0] if ":" in r.function else ""
            if target.endswith(".py") and not _resolve(base, target).is_file():
                err(FieldError(f"{where}.function", r.function,
                               f"points at {_resolve(base, target)}, which does not exist. "
                               f"Give 'path/to/file.py:func'."))
            elif not target and "." not in r.function:
                err(FieldError(f"{where}.function", r.function,
                               "must look like 'file.py:func' or 'package.module:func'."))
            continue
        key = r.builtin or r.name
        if key not in rewards.REWARDS:
            close = difflib.get_close_matches(key, list(rewards.REWARDS), n=1)
            hint = f" Did you mean {close[0]!r}?" if close else ""
            err(FieldError(f"{where}.{'builtin' if r.builtin else 'name'}", key,
                           f"is not a built-in reward; choose one of {sorted(rewards.REWARDS)}, or set `function` to "
                           f"your own 'file.py:func'.{hint}"))
            continue
        rdef = rewards.REWARDS[key]
        for p in r.params:
            if p not in rdef.params:
                err(FieldError(f"{where}.params.{p}", r.params[p],
                               f"is not a parameter of {key}; allowed: {sorted(rdef.params) or 'none'}."))
        if any(p not in rdef.params for p in r.params):
            continue
        try:
            rdef.factory(**r.params)
        except (ValueError, TypeError) as exc:
            err(FieldError(f"{where}.params", r.params, str(exc)))
        if sample is not None:
            for col in rewards.required_columns(key, r.params):
                if col not in sample.columns:
                    err(FieldError(f"{where}", r.name,
                                   f"reward {key!r} reads dataset column {col!r}, which the dataset lacks "
                                   f"(columns: {sample.columns}). Add the column or choose another reward."))


def _check_training(spec: RunSpec, err: Any, warn: Any) -> None:
    """GRPOConfig fields: names, types, allowed values, ranges, and TRL's cross-field rules (normalises numbers)."""
    fields = trl_fields.grpo_fields()
    t = spec.training
    clean: dict[str, Any] = {}  # only well-typed values take part in the cross-field checks below
    for key, value in list(t.items()):
        where = f"training.{key}"
        if not isinstance(key, str):
            err(FieldError(where, value, "has a key that is not a field name; use GRPOConfig field names."))
            continue
        if key in trl_fields.RESERVED:
            err(FieldError(where, value, f"is managed by the dashboard: {trl_fields.RESERVED[key]}."))
            continue
        if key not in fields:
            close = difflib.get_close_matches(key, list(fields), n=2)
            hint = f" Did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
            err(FieldError(where, value, f"is not a GRPOConfig field of trl {_trl_version()}.{hint}"))
            continue
        coerced = _coerce_trl(fields[key], value)
        if coerced is _BAD:
            names = "/".join(getattr(k, "__name__", str(k)) for k in fields[key].types)
            err(FieldError(where, value, f"must be of type {names}."))
            continue
        t[key] = coerced
        choices = fields[key].choices
        if choices is not None and coerced is not None and coerced not in choices:
            err(FieldError(where, value, f"must be one of {', '.join(repr(c) for c in choices)}."))
            continue
        clean[key] = coerced
    eff = lambda name: trl_fields.effective(clean, name)  # noqa: E731

    def positive(name: str, allow_zero: bool = False, upper: float | None = None) -> None:
        v = eff(name)
        if v is None or not isinstance(v, (int, float)):
            return
        bad = (v < 0 if allow_zero else v <= 0) or (upper is not None and v > upper) or not math.isfinite(v)
        if bad:
            rng = f"{'≥' if allow_zero else '>'} 0" + (f" and ≤ {upper}" if upper is not None else "")
            err(FieldError(f"training.{name}", v, f"must be {rng}."))

    for name in ("learning_rate", "epsilon", "temperature", "max_completion_length", "per_device_train_batch_size",
                 "gradient_accumulation_steps", "num_iterations", "logging_steps"):
        positive(name)
    positive("beta", allow_zero=True)
    positive("top_entropy_quantile", upper=1.0)
    positive("top_p", upper=1.0)
    if eff("epsilon_high") is not None and eff("epsilon_high") < eff("epsilon"):
        warn(FieldError("training.epsilon_high", eff("epsilon_high"),
                        f"is below epsilon ({eff('epsilon')}); DAPO's clip-higher uses epsilon_high ≥ epsilon "
                        f"(e.g. 0.28).", "warning"))
    if isinstance(eff("max_steps"), int) and eff("max_steps") == 0:
        err(FieldError("training.max_steps", 0, "must be positive, or -1 to train for num_train_epochs."))

    g = eff("num_generations")
    if isinstance(g, int) and g < 2:
        err(FieldError("training.num_generations", g, "must be ≥ 2: GRPO compares completions within a group of "
                       "num_generations to compute advantages. Use 4, 8 or 16."))
    world = world_size(spec)
    bs, ga = eff("per_device_train_batch_size"), eff("gradient_accumulation_steps")
    gbs, spg = eff("generation_batch_size"), eff("steps_per_generation")
    if gbs is not None and spg is not None:
        err(FieldError("training.steps_per_generation", spg,
                       "cannot be set together with generation_batch_size; remove one of them."))
    elif isinstance(g, int) and g >= 2 and all(isinstance(v, int) and v > 0 for v in (bs, ga)):
        global_bs = bs * world
        if gbs is None:
            gbs = global_bs * (spg if isinstance(spg, int) and spg > 0 else ga)
            gbs_field = "training.per_device_train_batch_size"
            shown = bs
            how = (f"per_device_train_batch_size ({bs}) × processes ({world_note(spec)}) × steps_per_generation "
                   f"({spg if spg else ga}) = {gbs}")
        else:
            gbs_field, shown, how = "training.generation_batch_size", gbs, f"generation_batch_size = {gbs}"
            if gbs % global_bs:
                err(FieldError(gbs_field, gbs, f"must be divisible by the global batch size per_device_train_batch_"
                               f"size × processes = {global_bs}."))
        if gbs % g:
            ok = [m for m in range(2, min(gbs, 64) + 1) if gbs % m == 0]
            err(FieldError(gbs_field, shown, f"gives a generation batch of {how} completions, which is not divisible "
                           f"by num_generations ({g}); each prompt needs a full group. Make the batch a multiple of "
                           f"{g}, or use num_generations in {ok}."))
    if eff("auto_find_batch_size"):
        err(FieldError("training.auto_find_batch_size", True, "is not supported by GRPO (it breaks prompt groups); "
                       "set it to false and lower per_device_train_batch_size instead."))
    if eff("log_completions_hub_repo") and not eff("log_completions"):
        err(FieldError("training.log_completions_hub_repo", eff("log_completions_hub_repo"),
                       "needs log_completions: true; enable it or remove log_completions_hub_repo."))
    if eff("sync_ref_model") and not eff("beta"):
        err(FieldError("training.sync_ref_model", True, "needs beta > 0 (no reference model exists at beta=0); "
                       "set beta (e.g. 0.04) or remove sync_ref_model."))
    lo, hi = eff("vllm_importance_sampling_clip_min"), eff("vllm_importance_sampling_clip_max")
    if lo is not None and hi is not None and lo >= hi:
        err(FieldError("training.vllm_importance_sampling_clip_min", lo, f"must be less than "
                       f"vllm_importance_sampling_clip_max ({hi})."))
    evals = str(eff("eval_strategy") or "no") != "no"
    has_eval = bool(spec.dataset.eval_split or spec.dataset.eval_data_files)
    if evals and not has_eval:
        err(FieldError("training.eval_strategy", eff("eval_strategy"), "needs eval data: set dataset.eval_split "
                       "(Hub) or dataset.eval_data_files (local), or set eval_strategy: 'no'."))
    if evals and has_eval:
        eg = eff("num_generations_eval") or g
        ebs = eff("per_device_eval_batch_size")
        if isinstance(eg, int) and isinstance(ebs, int) and (ebs * world) % eg:
            err(FieldError("training.per_device_eval_batch_size", ebs,
                           f"× processes ({world}) = {ebs * world} is not divisible by num_generations_eval/"
                           f"num_generations ({eg}); make it a multiple of {eg}."))
    if has_eval and not evals:
        warn(FieldError("training.eval_strategy", eff("eval_strategy"), "is 'no', so the eval data is never used; "
                        "set eval_strategy: steps and eval_steps to evaluate.", "warning"))
    if eff("use_vllm") and spec.backend.kind == LOCAL and not _has_module("vllm"):
        warn(FieldError("training.use_vllm", True, "vllm is not installed in this environment; the job will fail "
                        "to start unless it runs where vllm is installed.", "warning"))


_BAD = object()


def _coerce_trl(f: trl_fields.TrlField, value: Any) -> Any:
    kinds = f.types
    if value is None:
        return None if type(None) in kinds else _BAD
    if isinstance(value, bool):
        return value if bool in kinds or f.choices and value in f.choices else _BAD
    if isinstance(value, int) and (int in kinds):
        return value
    if isinstance(value, (int, float)) and float in kinds:
        return float(value)
    if isinstance(value, str):
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
                return _BAD
            return parsed if isinstance(parsed, dict) else _BAD
        return _BAD
    if isinstance(value, dict) and dict in kinds:
        return value
    if isinstance(value, list) and list in kinds:
        return value
    return _BAD


def _check_backend(spec: RunSpec, base: Path, err: Any) -> None:
    b = spec.backend
    if b.kind not in BACKENDS:
        err(FieldError("backend.kind", b.kind, f"must be one of {', '.join(BACKENDS)}."))
    if b.stall_timeout_s is not None and not (math.isfinite(b.stall_timeout_s) and b.stall_timeout_s > 0):
        err(FieldError("backend.stall_timeout_s", b.stall_timeout_s,
                       "must be a positive number of seconds (e.g. 1800), or null to never call a silent job hung."))
    if b.num_processes < 1:
        err(FieldError("backend.num_processes", b.num_processes, "must be ≥ 1."))
    elif b.num_processes > 1 and spec.training.get("use_cpu") and b.kind != SLURM:
        err(FieldError("backend.num_processes", b.num_processes,
                       "must be 1 with training.use_cpu: accelerate launches one process per GPU, and a CPU run is a "
                       "single process. Remove use_cpu to train on GPUs, or set num_processes: 1."))
    if b.gpus is not None:
        if any(g < 0 for g in b.gpus) or len(set(b.gpus)) != len(b.gpus):
            err(FieldError("backend.gpus", b.gpus, "must be distinct GPU indices ≥ 0, e.g. [0, 1]."))
        elif b.num_processes > len(b.gpus) and b.gpus:
            err(FieldError("backend.num_processes", b.num_processes,
                           f"is more than the {len(b.gpus)} GPU(s) listed in backend.gpus; use one process per GPU."))
        count = gpu_count() if b.kind == LOCAL else None
        if count is not None and b.gpus and max(b.gpus) >= count:
            err(FieldError("backend.gpus", b.gpus, f"names GPU {max(b.gpus)}, but this machine has {count} GPU(s) "
                           f"(indices 0..{count - 1})." if count else "names GPUs, but this machine has none."))
    if b.accelerate_config and b.accelerate_config not in ACCELERATE_CONFIGS:
        if not _resolve(base, b.accelerate_config).is_file():
            err(FieldError("backend.accelerate_config", b.accelerate_config,
                           f"must be a TRL preset ({', '.join(ACCELERATE_CONFIGS)}) or an existing accelerate "
                           f"config file."))


def _check_hf_jobs(spec: RunSpec, base: Path, err: Any, warn: Any) -> None:
    from grpo_dashboard.checks import hardware

    b, t = spec.backend, spec.training
    flavors = hardware.BUILTIN_FLAVORS
    if not b.namespace or not re.fullmatch(r"[A-Za-z0-9][\w.-]*", b.namespace):
        err(FieldError("backend.namespace", b.namespace, "is required for hf_jobs: your Hugging Face username or an "
                       "organization you can run jobs in (jobs, buckets and bills belong to it)."))
    if b.gpus is not None:
        err(FieldError("backend.gpus", b.gpus, "only applies to local runs; a Jobs container sees all GPUs of its "
                       "flavor. Remove it."))
    flavor = flavors.get(b.flavor or "")
    if flavor is None:
        close = difflib.get_close_matches(str(b.flavor), list(flavors), n=2)
        hint = f" Did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
        err(FieldError("backend.flavor", b.flavor, f"must be a Jobs flavor: {', '.join(flavors)}. "
                       f"`python -m grpo_dashboard hardware SPEC` recommends one.{hint}"))
    elif not flavor.is_gpu:
        warn(FieldError("backend.flavor", b.flavor, "is a CPU flavor: GRPO trains only tiny test models in useful "
                        "time without a GPU.", "warning"))
    elif b.num_processes > flavor.gpus:
        err(FieldError("backend.num_processes", b.num_processes, f"is more than the {flavor.gpus} GPU(s) of "
                       f"{b.flavor}; use at most one process per GPU, or a flavor with more GPUs."))
    try:
        timeout = hardware.parse_timeout(b.timeout)
    except ValueError as exc:
        err(FieldError("backend.timeout", b.timeout, str(exc)))
        timeout = None
    if timeout is not None and timeout < 300:
        err(FieldError("backend.timeout", b.timeout, "is under 5 minutes: installing the job's packages alone takes "
                       "that long. Use e.g. '2h', or leave it unset to derive it from the estimated run time."))
    local = _resolve(base, spec.model.name_or_path)
    if spec.model.name_or_path and not spec.model.build_tiny and local.is_dir():
        err(FieldError("model.name_or_path", spec.model.name_or_path, "is a local directory, which a Jobs container "
                       "cannot see. Push it to the Hub (`hf upload`) and use its repo id."))
    for key in [k for k in t if "token" in k.lower() and t[k]]:
        err(FieldError(f"training.{key}", "***", "must not hold a token: the job gets yours as the HF_TOKEN secret."))
    if t.get("push_to_hub") and not t.get("hub_model_id"):
        err(FieldError("training.hub_model_id", None, "is required with push_to_hub on HF Jobs (the output directory "
                       "is /data/output, so TRL would push to a repo named 'output'). Set e.g. 'you/qwen-grpo'."))
    if t.get("push_to_hub") and not spec.save_model:
        warn(FieldError("save_model", False, "is false, so the final model is never pushed; only checkpoints are "
                        "(hub_strategy).", "warning"))
    if t.get("hub_model_id") and not t.get("push_to_hub"):
        warn(FieldError("training.hub_model_id", t["hub_model_id"], "is set but push_to_hub is not; the model stays "
                        "in the job's bucket folder.", "warning"))
    if flavor is not None and flavor.is_gpu and t.get("use_cpu"):
        warn(FieldError("training.use_cpu", True, f"trains on the CPU of a paid {b.flavor} GPU flavor; remove it.",
                        "warning"))
    if flavor is None:
        return
    report = hardware.estimate_for_spec(spec, base)
    for w in report.warnings:
        if "does not fit" in w or "lacks GPUs" in w or "shorter than" in w or "bf16" in w:
            field = "backend.timeout" if "shorter than" in w else "backend.flavor"
            more = f" Options: {'; '.join(report.suggestions)}." if report.suggestions and "fit" in w else ""
            warn(FieldError(field, b.timeout if "shorter" in w else b.flavor, f"{w}.{more}", "warning"))


def _check_health(spec: RunSpec, err: Any) -> None:
    from grpo_dashboard.health import resolve_thresholds

    h = spec.health
    try:
        resolve_thresholds(h.thresholds)
    except ValueError as exc:
        err(FieldError("health.thresholds", h.thresholds, f"{exc}. Fix the key or value (docs/health.md)."))
    if h.guard_persist < 1:
        err(FieldError("health.guard_persist", h.guard_persist, "must be at least 1 (logged steps); e.g. 3."))
    url = h.webhook_url
    if url is not None and not re.match(r"^(https?://\S+|\$\{?[A-Za-z_]\w*\}?)$", url):
        err(FieldError("health.webhook_url", url, "must be an http(s):// URL or $NAME (read from that environment "
                       "variable in the job), e.g. https://hooks.slack.com/services/..."))


def _check_chat_template(spec: RunSpec, base: Path, sample: DatasetSample, err: Any, warn: Any) -> None:
    d = spec.dataset
    first = sample.rows[0].get(d.prompt_column) if (sample.rows and not d.prompt_template) else None
    chat = d.conversational or bool(d.system_prompt) or is_conversational(first)
    if not chat or (spec.model.build_tiny and not _resolve(base, spec.model.name_or_path).exists()):
        return  # the tiny model is built with a chat template
    template = _chat_template(spec, base)
    if template is False:
        err(FieldError("model.name_or_path", spec.model.name_or_path,
                       "has no chat template, but the prompts are conversational (message lists, or a system_prompt "
                       "is set). Use an instruct/chat model, add a chat_template to its tokenizer, or use plain-text "
                       "prompts."))
    elif template is None:
        warn(FieldError("model.name_or_path", spec.model.name_or_path,
                        "could not be checked for a chat template (not available offline); conversational prompts "
                        "need one.", "warning"))


def _chat_template(spec: RunSpec, base: Path) -> bool | None:
    local = _resolve(base, spec.model.name_or_path)
    if local.is_dir():
        if (local / "chat_template.jinja").is_file() or (local / "chat_template.json").is_file():
            return True
        cfg = local / "tokenizer_config.json"
        if cfg.is_file():
            try:
                return bool(json.loads(cfg.read_text(encoding="utf-8")).get("chat_template"))
            except (OSError, ValueError):
                return False
        return False
    try:
        from huggingface_hub import hf_hub_download

        for name in ("chat_template.jinja", "tokenizer_config.json"):
            try:
                path = hf_hub_download(spec.model.name_or_path, name, revision=spec.model.revision)
            except Exception:  # absent file or offline: try the next source
                continue
            if name.endswith(".jinja"):
                return True
            return bool(json.loads(Path(path).read_text(encoding="utf-8")).get("chat_template"))
    except ImportError:
        return None
    return None


def _has_module(name: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(name) is not None


def _trl_version() -> str:
    try:
        import trl

        return trl.__version__
    except ImportError:
        return "(not installed)"
