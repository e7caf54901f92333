"""Pre-launch checks of a spec's `agent:` section: everything TRL would only find when the trainer is built or the
first rollout runs. Custom tools, environments and rollout functions are imported only in the sandbox
(`agent_worker.py`), never in this process.

Each problem names the field, the value, what is allowed and the fix: tools need type hints and a Google-style
docstring, the chat template must render tools and the tokenizer parse a tool call back, transformers must be new
enough (tools ≥ 5.0, environments ≥ 5.2), environments define `reset`, `environment` column values match the mapping,
a reward source exists (`rewards` or an environment's `get_reward`), async runs have picklable code, a vLLM server
URL and FSDP2 (or one process).
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import json
import re
from pathlib import Path
from typing import Any

from grpo_dashboard.checks.dataset_files import DatasetFileError, DatasetSample, read_sample
from grpo_dashboard.errors import FieldError
from grpo_dashboard.spec import trl_fields
from grpo_dashboard.spec.agent_spec import is_file_target, resolve
from grpo_dashboard.spec.jobfiles import agents_module
from grpo_dashboard.spec.run_spec import LOCAL, RunSpec

TOOLS_MIN, ENVIRONMENTS_MIN = "5.0.0", "5.2.0"  # transformers versions TRL 1.16 requires (GRPOTrainer.__init__)
ENV_ROWS = 100_000  # rows read to compare the environment column with the mapping
ASYNC_ACCELERATE = (None, "fsdp2")
WORKER_TIMEOUT_S = 120.0


def owns_prompts(spec: RunSpec) -> bool:
    """True for a run whose environment owns the prompts: an environment and no dataset source."""
    a = spec.agent
    return a is not None and bool(a.environment_factory) and not (spec.dataset.path or spec.dataset.data_files)


def _version(name: str) -> str | None:
    try:
        import importlib.metadata

        return importlib.metadata.version(name)
    except Exception:
        return None


def _older(version: str | None, minimum: str) -> bool:
    if version is None:
        return False
    from packaging.version import Version

    return Version(version) < Version(minimum)


@functools.cache
def async_fields() -> dict[str, trl_fields.TrlField]:
    """AsyncGRPOConfig's fields in the installed TRL (None when the experimental module is missing)."""
    import os
    import typing

    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    from trl.experimental.async_grpo import AsyncGRPOConfig

    hints = typing.get_type_hints(AsyncGRPOConfig)
    out = {}
    for f in dataclasses.fields(AsyncGRPOConfig):
        if not f.init:
            continue
        default = f.default if f.default is not dataclasses.MISSING else (
            f.default_factory() if f.default_factory is not dataclasses.MISSING else None)
        out[f.name] = trl_fields.TrlField(f.name, trl_fields._flatten(hints.get(f.name, f.type)), default,
                                          str(f.metadata.get("help", "")).strip(), None)
    return out


def check_agent(spec: RunSpec, base: Path, sample: DatasetSample | None, err: Any, warn: Any,
                run_code: bool = True) -> None:
    """Append every problem of the agent section to `err` / `warn` (FieldError each); nothing when no agent."""
    a = spec.agent
    if a is None:
        return
    agents = agents_module()
    if a.trainer not in agents.TRAINERS:
        err(FieldError("agent.trainer", a.trainer, f"must be one of {', '.join(agents.TRAINERS)}."))
    has_tools, has_env = bool(a.tools), bool(a.environment_factory)
    tf = _version("transformers")
    if has_tools and _older(tf, TOOLS_MIN):
        err(FieldError("agent.tools", a.tools, f"need transformers ≥ {TOOLS_MIN} (installed {tf}); upgrade it."))
    if has_env and _older(tf, ENVIRONMENTS_MIN):
        err(FieldError("agent.environment_factory", a.environment_factory,
                       f"needs transformers ≥ {ENVIRONMENTS_MIN} (installed {tf}); upgrade it."))
    for where, target in a.code_targets():
        _check_target(where, target, base, agents, err)
    if a.max_tool_calling_iterations is not None and a.max_tool_calling_iterations < 1:
        err(FieldError("agent.max_tool_calling_iterations", a.max_tool_calling_iterations,
                       "must be ≥ 1 (tool-call rounds per rollout), or null for no limit."))
    for name in ("max_tool_calling_iterations", "chat_template_kwargs"):
        if name in spec.training:
            err(FieldError(f"training.{name}", spec.training[name], f"is set in the agent section; remove it from "
                           f"training (keep agent.{name})."))
    if (has_tools or has_env) and not _conversational(spec, sample) and not owns_prompts(spec):
        err(FieldError("dataset.conversational", spec.dataset.conversational,
                       "must be true (or the prompts message lists) for tools: TRL renders tools only through the "
                       "chat template. Set `dataset.conversational: true`."))
    if spec.model.build_tiny and (has_tools or has_env) and not a.tiny_warmup:
        err(FieldError("agent.tiny_warmup", False, "must be true to use tools with the tiny model: its plain chat "
                       "template cannot render tools and a random model never emits a tool call. Set "
                       "`agent.tiny_warmup: true`."))
    if a.tiny_warmup and not spec.model.build_tiny:
        err(FieldError("agent.tiny_warmup", True, "only applies with `model.build_tiny: true`; remove it."))
    _check_dataset_use(spec, sample, base, err)
    envs: dict[str, Any] = {}
    if run_code:
        envs = _run_worker(spec, base, err, warn)
    if not spec.rewards:
        owns = [k for k, v in envs.items() if v.get("get_reward")]
        builtin = [t for t in a.environments.values() if t in agents.BUILTIN_ENVIRONMENTS]
        if not owns and not builtin and (run_code or not has_env):
            err(FieldError("rewards", [], "is empty and no environment defines `get_reward`: TRL needs a reward "
                           "source. Add a reward function, or a `get_reward(self) -> float` method to the "
                           "environment."))
    if a.trainer == "async_grpo":
        _check_async(spec, err, warn)


def _conversational(spec: RunSpec, sample: DatasetSample | None) -> bool:
    d = spec.dataset
    if d.conversational or d.system_prompt:
        return True
    first = sample.rows[0].get(d.prompt_column) if sample is not None and sample.rows else None
    return isinstance(first, list)


def _check_target(where: str, target: str, base: Path, agents: Any, err: Any) -> None:
    builtins = agents.BUILTIN_TOOLS if where.startswith("agent.tools") else (
        agents.BUILTIN_ENVIRONMENTS if where.startswith("agent.environment") else {})
    if target in builtins:
        return
    if is_file_target(target):
        path = resolve(base, target.rsplit(":", 1)[0])
        if not path.is_file():
            err(FieldError(where, target, f"points at {path}, which does not exist. Give 'path/to/file.py:name'."))
        return
    if ":" not in target and "." not in target:
        close = difflib.get_close_matches(target, list(builtins), n=1)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        err(FieldError(where, target, f"is not a built-in ({', '.join(builtins) or 'none'}) and does not look like "
                       f"'file.py:name' or 'package.module:name'.{hint}"))


def _check_dataset_use(spec: RunSpec, sample: DatasetSample | None, base: Path, err: Any) -> None:
    a = spec.agent
    assert a is not None
    mapping = a.environment_factory if isinstance(a.environment_factory, dict) else None
    if owns_prompts(spec):
        if mapping:
            err(FieldError("agent.environment_factory", mapping, "is a mapping, which needs a dataset with an "
                           "`environment` column to route each row; add dataset.data_files (or path), or give one "
                           "environment."))
        steps = spec.training.get("max_steps")
        if not isinstance(steps, int) or steps <= 0:
            err(FieldError("training.max_steps", steps, "must be a positive number of steps: without a dataset the "
                           "environment owns the prompts and TRL needs max_steps to know the run's length."))
        return
    if sample is None:
        return
    missing = [c for c in a.log_columns if c not in sample.columns]
    if missing:
        err(FieldError("agent.log_columns", a.log_columns, f"names column(s) {missing} the dataset lacks (columns: "
                       f"{sample.columns})."))
    if not mapping:
        return
    if "environment" not in sample.columns:
        err(FieldError("dataset", spec.dataset.data_files or spec.dataset.path,
                       f"has no `environment` column, which the environment mapping ({sorted(mapping)}) needs to "
                       f"choose each row's environment; columns are {sample.columns}."))
        return
    names = _column_values(spec, base, sample, "environment")
    unknown = sorted({str(n) for n in names} - set(mapping))
    if unknown:
        err(FieldError("agent.environment_factory", mapping, f"has no class for the `environment` value(s) "
                       f"{unknown} found in the dataset; names are {sorted(mapping)}. Add them to the mapping or fix "
                       "the rows."))


def _column_values(spec: RunSpec, base: Path, sample: DatasetSample, column: str) -> list[Any]:
    files = spec.dataset.data_files
    if files:
        paths = [files] if isinstance(files, str) else list(files)
        try:
            sample = read_sample([str(resolve(base, f)) for f in paths], limit=ENV_ROWS)
        except DatasetFileError:
            pass
    return [r.get(column) for r in sample.rows]


def _template_mode(spec: RunSpec, base: Path) -> tuple[str | None, str | None]:
    local = resolve(base, spec.model.name_or_path) if spec.model.name_or_path else None
    if local is not None and (local / "config.json").is_file():
        return "model", str(local)
    if spec.model.build_tiny:
        return ("agent", None) if spec.agent and spec.agent.tiny_warmup else (None, None)
    return ("model", spec.model.name_or_path) if spec.model.name_or_path else (None, None)


def _run_worker(spec: RunSpec, base: Path, err: Any, warn: Any) -> dict[str, Any]:
    from grpo_dashboard.checks.sandbox import reward_paths, run_module

    a = spec.agent
    assert a is not None
    template, model = _template_mode(spec, base)
    is_async = a.trainer == "async_grpo"
    custom = [t for _, t in a.code_targets() if t not in agents_module().BUILTIN_TOOLS
              and t not in agents_module().BUILTIN_ENVIRONMENTS]
    if not custom and not template and not is_async and not a.environment_factory:
        return {}
    # What the worker sees of the host: each file.py target alone, a package.module target's package under base.
    visible = sorted({p for t in custom for p in reward_paths(t, base)})
    if template == "model" and model and Path(model).is_dir():
        visible.append(model)
    if is_async:
        visible += [p for r in spec.rewards for p in reward_paths(r.function, base)]
    request = {"agent": dataclasses.asdict(a), "base_dir": str(base), "model": model, "template": template,
               "async": is_async, "rewards": [dataclasses.asdict(r) for r in spec.rewards]}
    res = run_module("grpo_dashboard.checks.agent_worker", json.dumps(request, default=str),
                     # transformers and trl load native libraries (ctypes.dlopen), which the default policy refuses
                     timeout_s=WORKER_TIMEOUT_S, allow_subprocess=True, extra_path=[str(base)],
                     read_only=[p for p in visible if Path(p).exists()], report=True)
    lines = [line for line in (res.report or "").splitlines() if line.strip()]
    if not lines:
        why = "timed out" if res.timed_out else f"exited with status {res.returncode}"
        warn(FieldError("agent", None, f"could not be checked: the sandboxed worker {why} "
                        f"({res.stderr.strip()[-300:]}); the job checks it when it starts.", "warning"))
        return {}
    result = json.loads(lines[-1])
    for p in result.get("problems", []):
        sink = err if p.get("severity") == "error" else warn
        sink(FieldError(p["field"], p.get("value"), p["message"], p.get("severity", "error")))
    return dict(result.get("environments") or {})


def _check_async(spec: RunSpec, err: Any, warn: Any) -> None:
    a = spec.agent
    assert a is not None
    try:
        fields = async_fields()
    except ImportError as exc:
        err(FieldError("agent.trainer", a.trainer, f"needs trl.experimental.async_grpo, which this TRL lacks "
                       f"({exc})."))
        return
    grpo = trl_fields.grpo_fields()
    for key in spec.training:
        if key not in fields and key not in trl_fields.RESERVED:
            err(FieldError(f"training.{key}", spec.training[key], "is not a field of AsyncGRPOConfig, which "
                           "async_grpo trains with; remove it."))
    for key, value in a.async_config.items():
        if key not in fields:
            close = difflib.get_close_matches(str(key), list(fields), n=1)
            hint = f" Did you mean {close[0]!r}?" if close else ""
            err(FieldError(f"agent.async_config.{key}", value, f"is not an AsyncGRPOConfig field.{hint}"))
        elif key in grpo:
            err(FieldError(f"agent.async_config.{key}", value, f"is a field GRPOConfig shares; set it under "
                           f"training.{key} instead."))
    merged = {**spec.training, **a.async_config}
    url = merged.get("vllm_server_base_url", fields["vllm_server_base_url"].default if
                     "vllm_server_base_url" in fields else None)
    if not isinstance(url, str) or not re.match(r"^https?://[\w.-]+(:\d+)?(/\S*)?$", url):
        err(FieldError("training.vllm_server_base_url", url, "must be the http(s):// URL of the vLLM server async "
                       "GRPO streams rollouts from (`trl vllm-serve`), e.g. http://localhost:8000."))
    for key in ("max_staleness", "weight_sync_steps"):
        v = merged.get(key)
        if v is not None and (not isinstance(v, int) or v < (0 if key == "max_staleness" else 1)):
            low = 0 if key == "max_staleness" else 1
            err(FieldError(f"agent.async_config.{key}", v, f"must be an integer ≥ {low}."))
    if spec.backend.accelerate_config not in ASYNC_ACCELERATE:
        err(FieldError("backend.accelerate_config", spec.backend.accelerate_config,
                       "must be fsdp2 (or unset for one process): async GRPO supports FSDP2 only, not DeepSpeed or "
                       "FSDP1."))
    if any(r.weight != 1.0 for r in spec.rewards):
        err(FieldError("rewards", [r.weight for r in spec.rewards], "must all weigh 1.0 with async_grpo: "
                       "AsyncGRPOConfig has no reward_weights (rewards are summed). Scale inside the functions."))
    if spec.dataset.eval_split or spec.dataset.eval_data_files:
        err(FieldError("dataset.eval_split", spec.dataset.eval_split or spec.dataset.eval_data_files,
                       "is not supported by AsyncGRPOTrainer (no eval_dataset); remove the eval data."))
    if a.rollout_func:
        err(FieldError("agent.rollout_func", a.rollout_func, "is not supported by AsyncGRPOTrainer (it streams "
                       "rollouts from vLLM); remove it or use trainer: grpo."))
    if spec.training.get("use_cpu"):
        err(FieldError("training.use_cpu", True, "cannot be used with async_grpo: it needs a GPU (weights go to the "
                       "vLLM server over NCCL). Remove use_cpu and run on a GPU machine."))
    if _version("vllm") is None and spec.backend.kind == LOCAL:
        warn(FieldError("agent.trainer", a.trainer, "vllm is not installed here; async GRPO needs a running vLLM "
                        "server (vllm ≥ 0.22) reachable at vllm_server_base_url.", "warning"))
    if spec.model.lora is not None:
        warn(FieldError("model.lora", dataclasses.asdict(spec.model.lora), "with async GRPO the vLLM server must be "
                        "started with LoRA enabled (TRL checks its rank and slots at startup).", "warning"))
