"""The run spec: one YAML file that describes a GRPO run, the single source of truth for form, CLI and jobs.

GRPOConfig fields live under `training:` with TRL's own names and only the values the user set; TRL's defaults are
never re-typed here (see `trl_fields.py` for the field list, types, defaults and help text).
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from grpo_dashboard.errors import FieldError, SpecError
from grpo_dashboard.launch import kinds as _kinds  # light: the options only (pyproject.toml's exception)
from grpo_dashboard.spec import safe_yaml
from grpo_dashboard.spec.agent_spec import AgentSpec
from grpo_dashboard.spec.jobfiles import job_module

DTYPES = ("auto", "float32", "float16", "bfloat16")
LOCAL, HF_JOBS, SLURM = _kinds.LOCAL, _kinds.HF_JOBS, _kinds.SLURM  # the kinds (launch/backends.py runs each)
BACKENDS = _kinds.KINDS
ACCELERATE_CONFIGS = ("multi_gpu", "single_gpu", "zero1", "zero2", "zero3", "fsdp1", "fsdp2")  # TRL presets


@dataclass
class LoraSpec:
    """LoRA adapter settings: every peft.LoraConfig field TRL's `get_peft_config` passes, by peft's names."""

    r: int = 16
    lora_alpha: int = 32
    lora_dropout: float = 0.05
    target_modules: str | list[str] | None = "all-linear"
    target_parameters: list[str] | None = None
    modules_to_save: list[str] | None = None
    task_type: str = "CAUSAL_LM"
    use_rslora: bool = False
    use_dora: bool = False
    bias: str = "none"


@dataclass
class QuantizationSpec:
    """QLoRA: the base model loaded in 4 or 8 bits through bitsandbytes (a CUDA GPU; needs `model.lora`).

    The fields are TRL's `ModelConfig` ones: `quant_type` is `bnb_4bit_quant_type`, `double_quant`
    `use_bnb_nested_quant`, `quant_storage` `bnb_4bit_quant_storage`; the compute dtype is `model.dtype`.
    """

    bits: int = 4
    quant_type: str = "nf4"
    double_quant: bool = False
    quant_storage: str | None = None


@dataclass
class ModelSpec:
    """The policy model: a Hub id or a local directory."""

    name_or_path: str = ""
    dtype: str = "auto"
    revision: str | None = None
    trust_remote_code: bool = False
    attn_implementation: str | None = None
    build_tiny: bool = False
    lora: LoraSpec | None = None
    quantization: QuantizationSpec | None = None
    chat_template: str | None = None  # a Jinja chat template replacing the tokenizer's own


@dataclass
class DatasetSpec:
    """Training (and optional eval) data: a Hub dataset or local JSON/JSONL/CSV/Parquet files."""

    path: str | None = None
    config: str | None = None
    split: str = "train"
    revision: str | None = None
    data_files: str | list[str] | None = None
    eval_split: str | None = None
    eval_data_files: str | list[str] | None = None
    prompt_column: str = "prompt"
    prompt_template: str | None = None
    system_prompt: str | None = None
    conversational: bool = False
    streaming: bool = False
    mixture: list[dict[str, Any]] | None = None  # TRL's DatasetMixtureConfig `datasets` (path, name, split, ...)
    test_split_size: float | None = None  # with `mixture`: hold out this share as the eval split


@dataclass
class RewardSpec:
    """One reward function: a built-in (by `name` or `builtin`) or user code (`function`), with its weight."""

    name: str = ""
    weight: float = 1.0
    builtin: str | None = None
    function: str | None = None
    params: dict[str, Any] = field(default_factory=dict)
    model: str | None = None  # a reward model (Hub id or local directory) TRL scores completions with


# The fields every backend has; each kind's own fields come from its package's `Options` (launch/kinds.py).
_COMMON_HEAD: list[tuple[str, Any, Any]] = [
    ("kind", str, field(default=LOCAL, metadata={"help": "Where the run executes."})),
]
_COMMON_TAIL: list[tuple[str, Any, Any]] = [
    (
        "env",
        dict[str, str],
        field(
            default_factory=dict,
            metadata={"help": "Plain environment variables of the job (no secrets: values are stored with the run)."},
        ),
    ),
    (
        "secrets",
        list[str],
        field(
            default_factory=list,
            metadata={
                "help": "Names of environment variables (e.g. WANDB_API_KEY) sent to the job from yours; never stored."
            },
        ),
    ),
]


def backend_fields(options: dict[str, type] | None = None) -> list[tuple[str, Any, Any]]:
    """`BackendSpec`'s fields as (name, type, dataclasses.Field): the common ones around the union of every kind's
    `Options` fields, in kind order and then each class's order. A field two kinds declare must agree on its type
    and default (TypeError naming both kinds otherwise)."""
    out = list(_COMMON_HEAD)
    owner: dict[str, tuple[str, Any, Any]] = {name: ("(common)", t, f) for name, t, f in _COMMON_HEAD + _COMMON_TAIL}
    for kind, cls in (_kinds.OPTIONS if options is None else options).items():
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            t = hints[f.name]
            if f.name in owner:
                first, first_t, first_f = owner[f.name]
                same = first_t == t and (first_f.default, first_f.default_factory) == (f.default, f.default_factory)
                if not same:
                    name, first_name = getattr(t, "__name__", str(t)), getattr(first_t, "__name__", str(first_t))
                    raise TypeError(
                        f"backend.{f.name}: {kind}'s Options declares it as {name} = {f.default!r}, "
                        f"{first}'s as {first_name} = {first_f.default!r}; a field two backends share "
                        f"needs one type and default: give them the same, or rename one."
                    )
                continue
            owner[f.name] = (kind, t, f)
            out.append((f.name, t, field(default=f.default, default_factory=f.default_factory, metadata=f.metadata)))
    return out + list(_COMMON_TAIL)


def backend_doc(options: dict[str, type] | None = None) -> str:
    """`BackendSpec`'s docstring: each kind's `Options` docstring, then every field with its help."""
    classes = (_kinds.OPTIONS if options is None else options).values()
    lines = [
        "Where the run executes (`kind`), with the fields of every kind; each kind reads its own. `env` and "
        "`secrets` are every kind's: `secrets` values are read from the launching environment at launch and "
        "handed to the job (a local job's environment; a Jobs secret), never stored."
    ]
    lines += [" ".join((cls.__doc__ or "").split()) for cls in classes]
    lines += [f"`{name}`: {f.metadata.get('help', '')}" for name, _, f in backend_fields(options)]
    return "\n".join(lines)


if typing.TYPE_CHECKING:

    @dataclass
    class BackendSpec(_kinds.AllOptions):
        """Static face of the assembled class below: the common fields plus every kind's (typed)."""

        kind: str = LOCAL
        env: dict[str, str] = field(default_factory=dict)
        secrets: list[str] = field(default_factory=list)
else:
    BackendSpec = dataclasses.make_dataclass("BackendSpec", backend_fields(), namespace={"__module__": __name__})
    BackendSpec.__doc__ = backend_doc()


@dataclass
class GenerationSpec:
    """vLLM server mode, orchestrated: the backend starts `trl vllm-serve` and trains against it.

    Local runs give `server_gpus` (GPU indices for the server; training uses the others); Slurm runs give
    `server_nodes` (the first node(s) of the allocation serve, the rest train). The server runs
    `tensor_parallel_size` × `data_parallel_size` GPUs (unset data_parallel_size: server GPUs ÷ tensor_parallel_size)
    with `gpu_memory_utilization` of each, on `port`; training waits up to `health_timeout_s` for its /health/
    endpoint. `model`: what the server loads (unset: the policy model).
    """

    server_gpus: list[int] | None = None
    server_nodes: int | None = None
    tensor_parallel_size: int = 1
    data_parallel_size: int | None = None
    gpu_memory_utilization: float = 0.9
    port: int = 8000
    health_timeout_s: float = 600.0
    model: str | None = None


@dataclass
class HealthSpec:
    """Training-health settings: per-run threshold overrides for the doctor's rules, the in-job guard and alerts.

    `guard`: the job evaluates the rules as it trains and, once an error-level finding has persisted `guard_persist`
    logged steps, stops training cleanly and saves a checkpoint; the reason becomes the run's error.
    `webhook_url`: each new warning/error finding is POSTed there as JSON (Slack `text`, Discord `content`, plus the
    finding); `$NAME` reads the URL from that environment variable of the job. `alerts`: send alerts without a
    webhook, e.g. only to trackio. Alerts are mirrored with `trackio.alert` when `report_to` includes trackio.
    """

    thresholds: dict[str, Any] = field(default_factory=dict)
    guard: bool = False
    guard_persist: int = 3
    webhook_url: str | None = None
    alerts: bool = False

    @property
    def in_job(self) -> bool:
        """True when the job itself must evaluate the rules (guard or alerts), so it needs the shipped package.

        The rule is the job's own (`grpo_job.wants_job_health`): the job applies it before the package is loaded.
        """
        return job_module().wants_job_health(dataclasses.asdict(self))


@dataclass
class RunSpec:
    """A whole GRPO run."""

    name: str = ""
    model: ModelSpec = field(default_factory=ModelSpec)
    dataset: DatasetSpec = field(default_factory=DatasetSpec)
    rewards: list[RewardSpec] = field(default_factory=list)
    training: dict[str, Any] = field(default_factory=dict)
    backend: BackendSpec = field(default_factory=BackendSpec)
    output_dir: str | None = None
    save_model: bool = True
    description: str | None = None
    health: HealthSpec = field(default_factory=HealthSpec)
    generation: GenerationSpec | None = None
    tags: list[str] = field(default_factory=list)
    group: str | None = None
    agent: AgentSpec | None = None

    def to_dict(self) -> dict[str, Any]:
        """Plain dict in field order, leaving out values equal to their defaults (so YAML stays short)."""
        return _to_dict(self)

    def to_yaml(self) -> str:
        """Canonical YAML text; `RunSpec.from_yaml(s.to_yaml()) == s`."""
        return _dump(self.to_dict())

    def to_job_dict(self) -> dict[str, Any]:
        """Every field with its resolved value, defaults included: what the job reads, as required keys.

        `training` stays as the user set it, so TRL's own defaults apply to the rest (they are never re-typed).
        """
        return _to_dict(self, keep_defaults=True)

    def to_job_yaml(self) -> str:
        """The run.yaml a job gets (`to_job_dict`); `RunSpec.from_yaml(s.to_job_yaml()) == s`."""
        return _dump(self.to_job_dict())

    @classmethod
    def from_dict(cls, data: Any) -> RunSpec:
        """Parse a mapping, raising SpecError with every structural problem (unknown keys, wrong types)."""
        errors: list[FieldError] = []
        spec = _from_dict(cls, data, "", errors)
        if errors:
            flat = _flat_trl_keys(data)
            if flat:
                shown = ", ".join(flat[:4]) + (", ..." if len(flat) > 4 else "")
                raise SpecError(
                    [
                        FieldError(
                            "(file)",
                            f"{len(flat)} TRL keys ({shown})",
                            "is a flat TRL config (`trl grpo --config` style), not a run spec. Import "
                            "it with `python -m grpo_dashboard import-trl FILE -o spec.yaml`: it maps "
                            "every key to the spec and prints what was mapped, converted or "
                            "dropped.",
                        )
                    ]
                )
            raise SpecError(errors)
        return spec

    @classmethod
    def from_dict_partial(cls, data: Any) -> tuple[RunSpec, list[FieldError]]:
        """The spec built from every well-formed part of `data`, and the structural problems of the rest (so the
        other checks can still run on what is there)."""
        errors: list[FieldError] = []
        return _from_dict(cls, data, "", errors), errors

    @classmethod
    def from_yaml(cls, text: str) -> RunSpec:
        """Parse YAML text into a spec (through `safe_yaml.load`: no aliases, bounded size and depth)."""
        data = safe_yaml.load(text)
        if data is None:
            data = {}
        return cls.from_dict(data)

    @classmethod
    def from_file(cls, path: str | Path) -> RunSpec:
        """Read a spec from a YAML file."""
        return cls.from_yaml(safe_yaml.read_text(path))

    @property
    def reward_weights(self) -> list[float]:
        """Weights in reward order, as TRL's `reward_weights` expects."""
        return [r.weight for r in self.rewards]


class _NoAliasDumper(yaml.SafeDumper):
    """Writes a value shared by two fields out twice: safe_yaml refuses the anchors and aliases it would get."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def _dump(data: dict[str, Any]) -> str:
    return yaml.dump(data, Dumper=_NoAliasDumper, sort_keys=False, allow_unicode=True, default_flow_style=False)


def changed_fields(section: Any) -> dict[str, Any]:
    """A spec section (LoraSpec, GenerationSpec, ...) as the settings it changes from its defaults, as spec YAML
    writes them: what a message quotes for a whole section."""
    out = _to_dict(section)
    return out if isinstance(out, dict) else {}


def _to_dict(obj: Any, keep_defaults: bool = False) -> Any:
    if dataclasses.is_dataclass(obj):
        out: dict[str, Any] = {}
        for f in dataclasses.fields(obj):
            value = getattr(obj, f.name)
            default = (
                f.default
                if f.default is not dataclasses.MISSING
                else (f.default_factory() if f.default_factory is not dataclasses.MISSING else dataclasses.MISSING)
            )
            if not keep_defaults and value == default and f.name not in ("name",):
                continue
            out[f.name] = _to_dict(value, keep_defaults)
        return out
    if isinstance(obj, list):
        return [_to_dict(v, keep_defaults) for v in obj]
    if isinstance(obj, dict):
        return {k: _to_dict(v, keep_defaults) for k, v in obj.items()}
    return obj


def _allowed_types(annotation: Any) -> list[Any]:
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        out: list[Any] = []
        for arg in typing.get_args(annotation):
            out.extend(_allowed_types(arg))
        return out
    return [annotation]


def _type_name(t: Any) -> str:
    if t is type(None):
        return "null"
    origin = typing.get_origin(t)
    if origin is list:
        return f"list of {_type_name(typing.get_args(t)[0])}"
    if origin is dict:
        return "mapping"
    return getattr(t, "__name__", str(t))


def _coerce(value: Any, annotation: Any, path: str, errors: list[FieldError]) -> Any:
    allowed = _allowed_types(annotation)
    for t in allowed:
        if t is type(None) and value is None:
            return None
    for t in allowed:
        if dataclasses.is_dataclass(t) and isinstance(value, dict):
            return _from_dict(t, value, path, errors)
        origin = typing.get_origin(t)
        if origin is list and isinstance(value, list):
            (item_t,) = typing.get_args(t)
            return [_coerce(v, item_t, f"{path}[{i}]", errors) for i, v in enumerate(value)]
        if origin is dict and isinstance(value, dict):
            return dict(value)
        if t is bool and isinstance(value, bool):
            return value
        if t is int and isinstance(value, int) and not isinstance(value, bool):
            return value
        if t is float and isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        if t is str and isinstance(value, str):
            return value
    for t in allowed:
        # YAML 1.1 reads `1e-3` as a string; accept numeric strings for numeric fields.
        if t in (int, float) and isinstance(value, str):
            try:
                num = float(value)
            except ValueError:
                continue
            if t is int and num.is_integer():
                return int(num)
            if t is float:
                return num
    expected = " or ".join(_type_name(t) for t in allowed)
    errors.append(FieldError(path, value, f"must be {expected}, not {type(value).__name__}. Change the value's type."))
    return None


def _from_dict(cls: Any, data: Any, prefix: str, errors: list[FieldError]) -> Any:
    where = prefix or "(top level)"
    if not isinstance(data, dict):
        got = type(data).__name__
        errors.append(FieldError(where, data, f"must be a mapping of {cls.__name__} fields, got {got}."))
        return cls()
    hints, names = _fields_of(cls)
    kwargs: dict[str, Any] = {}
    for key, value in data.items():
        shown = key if isinstance(key, str) and key.strip() else repr(key)
        path = f"{prefix}.{shown}" if prefix else shown
        if key not in names:
            trl_hint = _trl_hint(str(key))
            close = difflib.get_close_matches(str(key), names, n=1)
            hint = (
                f" {trl_hint[0].upper()}{trl_hint[1:]}."
                if trl_hint
                else (f" Did you mean {close[0]!r}?" if close else "")
            )
            errors.append(FieldError(path, value, f"is not a field of {where}; allowed: {', '.join(names)}.{hint}"))
            continue
        kwargs[key] = _coerce(value, hints[key], path, errors)
    try:
        return cls(**{k: v for k, v in kwargs.items() if v is not None or _allows_none(hints[k])})
    except TypeError as exc:
        errors.append(FieldError(where, data, f"cannot be built: {exc}."))
        return cls()


@functools.cache
def _fields_of(cls: Any) -> tuple[dict[str, Any], tuple[str, ...]]:
    """A spec dataclass's resolved type hints and field names: resolving the hints is most of a parse's cost, and a
    class's hints never change (the runs table parses hundreds of distinct specs)."""
    return typing.get_type_hints(cls), tuple(f.name for f in dataclasses.fields(cls))


def _trl_hint(key: str) -> str | None:
    """Where a TRL key belongs in a spec (trl_keys); GRPOConfig fields are looked up only for unknown keys."""
    from grpo_dashboard.spec import trl_fields, trl_keys

    hint = trl_keys.spec_hint(key)
    if hint is None and key.isidentifier():
        try:
            hint = trl_keys.spec_hint(key, trl_fields.grpo_fields())
        except ImportError:
            return None
    return hint


def _flat_trl_keys(data: Any) -> list[str]:
    """The top-level keys of `data` that are flat TRL config keys, when they outnumber the spec's own (else [])."""
    if not isinstance(data, dict):
        return []
    names = {f.name for f in dataclasses.fields(RunSpec)}
    unknown = [str(k) for k in data if k not in names]
    if len(unknown) < 3:
        return []
    flat = [k for k in unknown if _trl_hint(k)]
    return flat if len(flat) >= max(3, len(data) // 2) else []


def _allows_none(annotation: Any) -> bool:
    return type(None) in _allowed_types(annotation)


def processes_per_node(spec: RunSpec) -> int:
    """Training processes on each training node: one per GPU (`gpus_per_node`), or one on CPU-only Slurm nodes."""
    b = spec.backend
    if b.kind == SLURM:
        return max(1, b.gpus_per_node or 1)
    return max(1, b.num_processes)


def server_nodes(spec: RunSpec) -> int:
    """Slurm nodes that serve vLLM (0 without a generation section or off Slurm)."""
    g = spec.generation
    if spec.backend.kind != SLURM or g is None:
        return 0
    return g.server_nodes if g.server_nodes is not None else 1


def training_nodes(spec: RunSpec) -> int:
    """Nodes that run training processes (Slurm: the allocation less the server nodes; otherwise 1)."""
    if spec.backend.kind != SLURM:
        return 1
    return max(1, spec.backend.nodes - server_nodes(spec))


def world_size(spec: RunSpec) -> int:
    """Training processes across every node: what TRL's batch divisibility rules count."""
    return training_nodes(spec) * processes_per_node(spec)


def load_spec(source: str | Path | dict[str, Any] | RunSpec) -> RunSpec:
    """Accept a spec object, a mapping, a YAML file path, or YAML text."""
    if isinstance(source, RunSpec):
        return source
    if isinstance(source, dict):
        return RunSpec.from_dict(source)
    text = str(source)
    if "\n" not in text and Path(text).suffix in (".yaml", ".yml"):
        return RunSpec.from_file(text)
    return RunSpec.from_yaml(text)
