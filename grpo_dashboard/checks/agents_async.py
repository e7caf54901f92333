"""The checks of an agent run on `trainer: async_grpo` (TRL's AsyncGRPOTrainer): only AsyncGRPOConfig fields, a vLLM
server URL to stream rollouts from, FSDP2 or one process, unweighted rewards, no eval data, no rollout_func, a GPU."""

from __future__ import annotations

import dataclasses
import difflib
import re
from collections.abc import Iterator
from typing import Any

from grpo_dashboard.checks.named import Check, CheckInput
from grpo_dashboard.errors import FieldError
from grpo_dashboard.spec import trl_fields
from grpo_dashboard.spec.agent_spec import AgentSpec
from grpo_dashboard.spec.run_spec import LOCAL

ASYNC_ACCELERATE = (None, "fsdp2")


def async_fields() -> dict[str, trl_fields.TrlField]:
    """AsyncGRPOConfig's fields in the installed TRL, from its schema (ImportError when this TRL lacks the
    experimental async_grpo trainer)."""
    return trl_fields.async_fields()


def _agent(inp: CheckInput) -> AgentSpec:
    """The agent section of a spec `_fields` accepted (it is never None there)."""
    assert inp.spec.agent is not None
    return inp.spec.agent


def _fields(inp: CheckInput) -> dict[str, trl_fields.TrlField] | None:
    """AsyncGRPOConfig's fields for an async_grpo run whose TRL has them; None otherwise (nothing to check)."""
    a = inp.spec.agent
    if a is None or a.trainer != "async_grpo":
        return None
    try:
        return async_fields()
    except ImportError:
        return None


def _vllm_version() -> str | None:
    try:
        import importlib.metadata

        return importlib.metadata.version("vllm")
    except Exception:
        return None


def _available(inp: CheckInput) -> Iterator[FieldError]:
    a = inp.spec.agent
    if a is None or a.trainer != "async_grpo":
        return
    try:
        async_fields()
    except ImportError as exc:
        yield FieldError(
            "agent.trainer", a.trainer, f"needs trl.experimental.async_grpo, which this TRL lacks ({exc})."
        )


def _training_fields(inp: CheckInput) -> Iterator[FieldError]:
    fields = _fields(inp)
    if fields is None:
        return
    for key in inp.spec.training:
        if key not in fields and key not in trl_fields.RESERVED:
            yield FieldError(
                f"training.{key}",
                inp.spec.training[key],
                "is not a field of AsyncGRPOConfig, which async_grpo trains with; remove it.",
            )


def _async_config(inp: CheckInput) -> Iterator[FieldError]:
    fields = _fields(inp)
    if fields is None:
        return
    grpo = trl_fields.grpo_fields()
    for key, value in _agent(inp).async_config.items():
        if key not in fields:
            close = difflib.get_close_matches(str(key), list(fields), n=1)
            hint = f" Did you mean {close[0]!r}?" if close else ""
            yield FieldError(f"agent.async_config.{key}", value, f"is not an AsyncGRPOConfig field.{hint}")
        elif key in grpo:
            yield FieldError(
                f"agent.async_config.{key}",
                value,
                f"is a field GRPOConfig shares; set it under training.{key} instead.",
            )


def _merged(inp: CheckInput) -> dict[str, Any]:
    return {**inp.spec.training, **_agent(inp).async_config}


def _server_url(inp: CheckInput) -> Iterator[FieldError]:
    fields = _fields(inp)
    if fields is None:
        return
    default = fields["vllm_server_base_url"].default if "vllm_server_base_url" in fields else None
    url = _merged(inp).get("vllm_server_base_url", default)
    if not isinstance(url, str) or not re.match(r"^https?://[\w.-]+(:\d+)?(/\S*)?$", url):
        yield FieldError(
            "training.vllm_server_base_url",
            url,
            "must be the http(s):// URL of the vLLM server async "
            "GRPO streams rollouts from (`trl vllm-serve`), e.g. http://localhost:8000.",
        )


def _staleness(inp: CheckInput) -> Iterator[FieldError]:
    if _fields(inp) is None:
        return
    merged = _merged(inp)
    for key, low in (("max_staleness", 0), ("weight_sync_steps", 1)):
        v = merged.get(key)
        if v is not None and (not isinstance(v, int) or v < low):
            yield FieldError(f"agent.async_config.{key}", v, f"must be an integer ≥ {low}.")


def _accelerate(inp: CheckInput) -> Iterator[FieldError]:
    acc = inp.spec.backend.accelerate_config
    if _fields(inp) is not None and acc not in ASYNC_ACCELERATE:
        yield FieldError(
            "backend.accelerate_config",
            acc,
            "must be fsdp2 (or unset for one process): async GRPO supports FSDP2 only, not DeepSpeed or FSDP1.",
        )


def _weights(inp: CheckInput) -> Iterator[FieldError]:
    rewards = inp.spec.rewards
    if _fields(inp) is not None and any(r.weight != 1.0 for r in rewards):
        yield FieldError(
            "rewards",
            [r.weight for r in rewards],
            "must all weigh 1.0 with async_grpo: "
            "AsyncGRPOConfig has no reward_weights (rewards are summed). Scale inside the functions.",
        )


def _eval(inp: CheckInput) -> Iterator[FieldError]:
    d = inp.spec.dataset
    if _fields(inp) is not None and (d.eval_split or d.eval_data_files):
        yield FieldError(
            "dataset.eval_split",
            d.eval_split or d.eval_data_files,
            "is not supported by AsyncGRPOTrainer (no eval_dataset); remove the eval data.",
        )


def _hooks(inp: CheckInput) -> Iterator[FieldError]:
    a = inp.spec.agent
    if a is None or a.trainer == "async_grpo":
        return
    for key in ("rollout_worker", "weight_transfer"):
        value = getattr(a, key, None)
        if value:
            yield FieldError(
                f"agent.{key}",
                value,
                "applies only to `agent.trainer: async_grpo` (AsyncGRPOTrainer's own argument); remove it or set "
                "the trainer.",
            )


def _rollout_func(inp: CheckInput) -> Iterator[FieldError]:
    if _fields(inp) is not None and _agent(inp).rollout_func:
        yield FieldError(
            "agent.rollout_func",
            _agent(inp).rollout_func,
            "is not supported by AsyncGRPOTrainer (it streams rollouts from vLLM); remove it or use trainer: grpo.",
        )


def _gpu(inp: CheckInput) -> Iterator[FieldError]:
    if _fields(inp) is not None and inp.spec.training.get("use_cpu"):
        yield FieldError(
            "training.use_cpu",
            True,
            "cannot be used with async_grpo: it needs a GPU (weights go to "
            "the vLLM server over NCCL). Remove use_cpu and run on a GPU machine.",
        )


def _vllm_here(inp: CheckInput) -> Iterator[FieldError]:
    if _fields(inp) is not None and _vllm_version() is None and inp.spec.backend.kind == LOCAL:
        yield FieldError(
            "agent.trainer",
            _agent(inp).trainer,
            "vllm is not installed here; async GRPO needs a "
            "running vLLM server (vllm ≥ 0.22) reachable at vllm_server_base_url.",
            "warning",
        )


def _lora_server(inp: CheckInput) -> Iterator[FieldError]:
    lora = inp.spec.model.lora
    if _fields(inp) is not None and lora is not None:
        yield FieldError(
            "model.lora",
            dataclasses.asdict(lora),
            "with async GRPO the vLLM server must be started "
            "with LoRA enabled (TRL checks its rank and slots at startup).",
            "warning",
        )


ASYNC_CHECKS = [
    Check("agent.async_grpo.available", ("agent.trainer",), _available),
    Check("agent.async_grpo.training_fields", ("agent.trainer",), _training_fields),
    Check("agent.async_grpo.async_config", ("agent.trainer",), _async_config),
    Check("agent.async_grpo.server_url", ("agent.trainer", "training.vllm_server_base_url"), _server_url),
    Check("agent.async_grpo.staleness", ("agent.trainer",), _staleness),
    Check("agent.async_grpo.accelerate", ("agent.trainer", "backend.accelerate_config"), _accelerate),
    Check("agent.async_grpo.reward_weights", ("agent.trainer", "rewards"), _weights),
    Check("agent.async_grpo.no_eval", ("agent.trainer", "dataset.eval_split", "dataset.eval_data_files"), _eval),
    Check("agent.async_grpo.hooks", ("agent.rollout_worker", "agent.weight_transfer"), _hooks),
    Check("agent.async_grpo.no_rollout_func", ("agent.trainer", "agent.rollout_func"), _rollout_func),
    Check("agent.async_grpo.gpu", ("agent.trainer", "training.use_cpu"), _gpu),
    Check("agent.async_grpo.vllm_installed", ("agent.trainer",), _vllm_here),
    Check("agent.async_grpo.lora_server", ("agent.trainer", "model.lora"), _lora_server),
]
