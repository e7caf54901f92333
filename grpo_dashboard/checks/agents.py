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
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from grpo_dashboard.checks import worker_memo
from grpo_dashboard.checks.agents_async import ASYNC_CHECKS
from grpo_dashboard.checks.agents_openenv import OPENENV_CHECKS
from grpo_dashboard.checks.dataset_files import DatasetFileError, DatasetSample, read_sample
from grpo_dashboard.checks.named import DATASET_SAMPLE, Check, CheckInput, collected, run_checks, sample_of
from grpo_dashboard.errors import FieldError
from grpo_dashboard.spec.agent_spec import is_file_target, resolve
from grpo_dashboard.spec.jobfiles import agents_module
from grpo_dashboard.spec.run_spec import RunSpec

TOOLS_MIN, ENVIRONMENTS_MIN = "5.0.0", "5.2.0"  # transformers versions TRL 1.16 requires (GRPOTrainer.__init__)
ENV_ROWS = 100_000  # rows read to compare the environment column with the mapping
WORKER_TIMEOUT_S = 120.0
ROLLOUT_PROBE_S = 120.0  # more for a worker that also builds a GRPOTrainer and runs the rollout_func once
ROLLOUT_PROBE_MAX_BYTES = 200_000_000  # a local model up to this size runs the rollout_func during validation


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


def check_agent(
    spec: RunSpec, base: Path, sample: DatasetSample | None, err: Any, warn: Any, run_code: bool = True
) -> None:
    """Append every problem of the agent section to `err` / `warn` (FieldError each); nothing when no agent.

    `run_code=False` skips the sandboxed worker (tools' signatures, the template's tool round trip, environments).
    """
    inp = CheckInput(
        spec, base, {RUN_CODE: run_code} if sample is None else {RUN_CODE: run_code, DATASET_SAMPLE: sample}
    )
    errors, warnings = run_checks(CHECKS, inp)
    for e in errors:
        err(e)
    for w in warnings:
        warn(w)


RUN_CODE = "agent.run_code"  # facts key: False skips the sandboxed worker (default: it runs)
ENVIRONMENTS = "agent.environments"  # facts key: what the worker found of each environment class


def _agent(inp: CheckInput) -> Any:
    return inp.spec.agent


def _trainer(inp: CheckInput) -> Iterator[FieldError]:
    a, agents = _agent(inp), agents_module()
    if a is not None and a.trainer not in agents.TRAINERS:
        yield FieldError("agent.trainer", a.trainer, f"must be one of {', '.join(agents.TRAINERS)}.")


def _tools_transformers(inp: CheckInput) -> Iterator[FieldError]:
    a, tf = _agent(inp), _version("transformers")
    if a is not None and a.tools and _older(tf, TOOLS_MIN):
        yield FieldError("agent.tools", a.tools, f"need transformers ≥ {TOOLS_MIN} (installed {tf}); upgrade it.")


def _environments_transformers(inp: CheckInput) -> Iterator[FieldError]:
    a, tf = _agent(inp), _version("transformers")
    if a is not None and a.environment_factory and _older(tf, ENVIRONMENTS_MIN):
        yield FieldError(
            "agent.environment_factory",
            a.environment_factory,
            f"needs transformers ≥ {ENVIRONMENTS_MIN} (installed {tf}); upgrade it.",
        )


def _targets(inp: CheckInput) -> list[FieldError]:
    a = _agent(inp)
    if a is None:
        return []
    agents = agents_module()

    def body(err: Any, _: Any) -> None:
        for where, target in a.code_targets():
            _check_target(where, target, inp.base, agents, err)

    return collected(body)


def _iterations(inp: CheckInput) -> Iterator[FieldError]:
    a = _agent(inp)
    if a is not None and a.max_tool_calling_iterations is not None and a.max_tool_calling_iterations < 1:
        yield FieldError(
            "agent.max_tool_calling_iterations",
            a.max_tool_calling_iterations,
            "must be ≥ 1 (tool-call rounds per rollout), or null for no limit.",
        )


def _not_in_training(name: str) -> Check:
    def run(inp: CheckInput) -> Iterator[FieldError]:
        if _agent(inp) is not None and name in inp.spec.training:
            yield FieldError(
                f"training.{name}",
                inp.spec.training[name],
                f"is set in the agent section; remove it from training (keep agent.{name}).",
            )

    return Check(f"agent.{name}.not_in_training", (f"training.{name}", f"agent.{name}"), run)


def _uses_tools(inp: CheckInput) -> bool:
    a = _agent(inp)
    return a is not None and bool(a.tools or a.environment_factory)


def _conversational_prompts(inp: CheckInput) -> Iterator[FieldError]:
    spec = inp.spec
    if _uses_tools(inp) and not _conversational(spec, sample_of(inp)) and not owns_prompts(spec):
        yield FieldError(
            "dataset.conversational",
            spec.dataset.conversational,
            "must be true (or the prompts message lists) for tools: TRL renders tools only through the "
            "chat template. Set `dataset.conversational: true`.",
        )


def _tiny_warmup(inp: CheckInput) -> Iterator[FieldError]:
    a, tiny = _agent(inp), inp.spec.model.build_tiny
    if a is None:
        return
    if tiny and _uses_tools(inp) and not a.tiny_warmup:
        yield FieldError(
            "agent.tiny_warmup",
            False,
            "must be true to use tools with the tiny model: its plain chat "
            "template cannot render tools and a random model never emits a tool call. Set "
            "`agent.tiny_warmup: true`.",
        )
    if a.tiny_warmup and not tiny:
        yield FieldError("agent.tiny_warmup", True, "only applies with `model.build_tiny: true`; remove it.")


def _worker(inp: CheckInput) -> list[FieldError]:
    if _agent(inp) is None or not inp.facts.get(RUN_CODE, True):
        return []

    def body(err: Any, warn: Any) -> None:
        inp.facts[ENVIRONMENTS] = _run_worker(inp.spec, inp.base, err, warn, sample_of(inp))

    return collected(body)


def _reward_source(inp: CheckInput) -> Iterator[FieldError]:
    a = _agent(inp)
    if a is None or inp.spec.rewards:
        return
    envs: dict[str, Any] = inp.facts.get(ENVIRONMENTS, {})
    owns = [k for k, v in envs.items() if v.get("get_reward")]
    builtin = [t for t in a.environments.values() if t in agents_module().BUILTIN_ENVIRONMENTS]
    if not owns and not builtin and (inp.facts.get(RUN_CODE, True) or not a.environment_factory):
        yield FieldError(
            "rewards",
            [],
            "is empty and no environment defines `get_reward`: TRL needs a reward "
            "source. Add a reward function, or a `get_reward(self) -> float` method to the "
            "environment.",
        )


def _conversational(spec: RunSpec, sample: DatasetSample | None) -> bool:
    d = spec.dataset
    if d.conversational or d.system_prompt:
        return True
    first = sample.rows[0].get(d.prompt_column) if sample is not None and sample.rows else None
    return isinstance(first, list)


def _check_target(where: str, target: str, base: Path, agents: Any, err: Any) -> None:
    builtins = (
        agents.BUILTIN_TOOLS
        if where.startswith("agent.tools")
        else (agents.BUILTIN_ENVIRONMENTS if where.startswith("agent.environment") else {})
    )
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
        err(
            FieldError(
                where,
                target,
                f"is not a built-in ({', '.join(builtins) or 'none'}) and does not look like "
                f"'file.py:name' or 'package.module:name'.{hint}",
            )
        )


def _mapping(inp: CheckInput) -> dict[str, Any] | None:
    a = _agent(inp)
    return a.environment_factory if a is not None and isinstance(a.environment_factory, dict) else None


def _one_environment(inp: CheckInput) -> Iterator[FieldError]:
    mapping = _mapping(inp)
    if mapping and owns_prompts(inp.spec):
        yield FieldError(
            "agent.environment_factory",
            mapping,
            "is a mapping, which needs a dataset with an "
            "`environment` column to route each row; add dataset.data_files (or path), or give one "
            "environment.",
        )


def _owned_prompts_steps(inp: CheckInput) -> Iterator[FieldError]:
    if not owns_prompts(inp.spec):
        return
    steps = inp.spec.training.get("max_steps")
    if not isinstance(steps, int) or steps <= 0:
        yield FieldError(
            "training.max_steps",
            steps,
            "must be a positive number of steps: without a dataset the "
            "environment owns the prompts and TRL needs max_steps to know the run's length.",
        )


def _log_columns(inp: CheckInput) -> Iterator[FieldError]:
    a, sample = _agent(inp), sample_of(inp)
    if a is None or owns_prompts(inp.spec) or sample is None:
        return
    missing = [c for c in a.log_columns if c not in sample.columns]
    if missing:
        yield FieldError(
            "agent.log_columns",
            a.log_columns,
            f"names column(s) {missing} the dataset lacks (columns: {sample.columns}).",
        )


def _environment_column(inp: CheckInput) -> Iterator[FieldError]:
    spec, sample, mapping = inp.spec, sample_of(inp), _mapping(inp)
    if not mapping or owns_prompts(spec) or sample is None:
        return
    if "environment" not in sample.columns:
        yield FieldError(
            "dataset",
            spec.dataset.data_files or spec.dataset.path,
            f"has no `environment` column, which the environment mapping ({sorted(mapping)}) needs to "
            f"choose each row's environment; columns are {sample.columns}.",
        )
        return
    names = _column_values(spec, inp.base, sample, "environment")
    unknown = sorted({str(n) for n in names} - set(mapping))
    if unknown:
        yield FieldError(
            "agent.environment_factory",
            mapping,
            f"has no class for the `environment` value(s) "
            f"{unknown} found in the dataset; names are {sorted(mapping)}. Add them to the mapping or "
            "fix the rows.",
        )


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


def _rollout_model(spec: RunSpec, base: Path) -> Path | None:
    """A local model small enough to run a rollout_func on during validation: the spec's model directory, or the
    warmed tiny agent model (its cached copy, else the one the package ships)."""
    local = resolve(base, spec.model.name_or_path) if spec.model.name_or_path else None
    if local is not None and (local / "config.json").is_file():
        size = sum(f.stat().st_size for f in local.glob("*.safetensors"))
        return local if size <= ROLLOUT_PROBE_MAX_BYTES else None
    if spec.model.build_tiny and spec.agent is not None and spec.agent.tiny_warmup:
        from grpo_dashboard.spec.jobfiles import job_module

        packaged: Path = job_module().grpo_agent_model.PACKAGED  # the job script imports it (light at import)
        return packaged if (packaged / "config.json").is_file() else None
    return None


def _rollout_batch(spec: RunSpec, base: Path, sample: DatasetSample | None, warn: Any) -> dict[str, Any] | None:
    """One real batch for the rollout_func (the dataset's first rows, each repeated num_generations times and
    rendered as the job renders them), the model and the training fields that shape a rollout; None (with a
    warning) when it cannot be run here."""
    a = spec.agent
    if a is None or not a.rollout_func:
        return None
    model = _rollout_model(spec, base)
    why = None if model is not None else "the model is not a small local one"
    if sample is None or not sample.rows:
        why = why or "no local dataset rows to build a batch from"
    if why or sample is None:
        warn(
            FieldError(
                "agent.rollout_func",
                a.rollout_func,
                f"was not run on a real batch here ({why}); the job checks its first output against TRL's "
                "contract (prompt_ids, completion_ids, logprobs).",
                "warning",
            )
        )
        return None
    from grpo_dashboard.spec.jobfiles import job_module

    t = dict(spec.training)
    g = int(t.get("num_generations") or 8)
    rows = max(1, int(t.get("per_device_train_batch_size") or 8) // g)
    job_dataset = spec.to_job_dict()["dataset"]
    render = job_module().prompt_renderer(job_dataset)
    prompts = [render(r) for r in sample.rows[:rows] for _ in range(g)]
    keep = ("num_generations", "max_completion_length", "temperature", "seed", "chat_template_kwargs")
    return {"prompts": prompts, "model": str(model), "training": {k: t[k] for k in keep if t.get(k) is not None}}


def _run_worker(spec: RunSpec, base: Path, err: Any, warn: Any, sample: DatasetSample | None = None) -> dict[str, Any]:
    from grpo_dashboard.checks.sandbox import reward_paths, run_module

    a = spec.agent
    assert a is not None
    template, model = _template_mode(spec, base)
    batch = _rollout_batch(spec, base, sample, warn)
    is_async = a.trainer == "async_grpo"
    custom = [
        t
        for _, t in a.code_targets()
        if t not in agents_module().BUILTIN_TOOLS and t not in agents_module().BUILTIN_ENVIRONMENTS
    ]
    if not custom and not template and not is_async and not a.environment_factory:
        return {}
    # What the worker sees of the host: each file.py target alone, a package.module target's package under base.
    visible = sorted({p for t in custom for p in reward_paths(t, base)})
    if template == "model" and model and Path(model).is_dir():
        visible.append(model)
    if is_async:
        visible += [p for r in spec.rewards for p in reward_paths(r.function, base)]
    request = {
        "agent": dataclasses.asdict(a),
        "base_dir": str(base),
        "model": model,
        "template": template,
        "async": is_async,
        "rewards": [dataclasses.asdict(r) for r in spec.rewards],
        "rollout_batch": batch,
    }
    if batch is not None:
        visible.append(batch["model"])
    timeout_s = WORKER_TIMEOUT_S + (ROLLOUT_PROBE_S if batch is not None else 0)
    memo_key = worker_memo.key(request, visible)
    result = worker_memo.get(memo_key)
    if result is None:
        res = run_module(
            "grpo_dashboard.checks.agent_worker",
            json.dumps(request, default=str),
            # transformers and trl load native libraries (ctypes.dlopen), which the default policy refuses
            timeout_s=timeout_s,
            allow_subprocess=True,
            extra_path=[str(base)],
            read_only=[p for p in visible if Path(p).exists()],
            report=True,
        )
        result = _worker_answer(res, warn)
        if result is None:
            return {}
        worker_memo.put(memo_key, result)
    for p in result.get("problems", []):
        sink = err if p.get("severity") == "error" else warn
        sink(FieldError(p["field"], p.get("value"), p["message"], p.get("severity", "error")))
    return dict(result.get("environments") or {})


def _worker_answer(res: Any, warn: Any) -> dict[str, Any] | None:
    """The worker's answer from its report channel, or None after warning that it gave none."""
    lines = [line for line in (res.report or "").splitlines() if line.strip()]
    if not lines:
        why = "timed out" if res.timed_out else f"exited with status {res.returncode}"
        warn(
            FieldError(
                "agent",
                None,
                f"could not be checked: the sandboxed worker {why} "
                f"({res.stderr.strip()[-300:]}); the job checks it when it starts.",
                "warning",
            )
        )
        return None
    return dict(json.loads(lines[-1]))


CHECKS = [
    Check("agent.trainer", ("agent.trainer",), _trainer),
    Check("agent.tools.transformers", ("agent.tools",), _tools_transformers),
    Check("agent.environment_factory.transformers", ("agent.environment_factory",), _environments_transformers),
    Check("agent.code_targets", ("agent",), _targets),
    Check("agent.max_tool_calling_iterations", ("agent.max_tool_calling_iterations",), _iterations),
    _not_in_training("max_tool_calling_iterations"),
    _not_in_training("chat_template_kwargs"),
    Check(
        "agent.conversational_prompts",
        ("dataset.conversational", "agent.tools", "agent.environment_factory"),
        _conversational_prompts,
    ),
    Check("agent.tiny_warmup", ("agent.tiny_warmup", "model.build_tiny"), _tiny_warmup),
    Check(
        "agent.owned_prompts.one_environment", ("agent.environment_factory", "dataset.data_files"), _one_environment
    ),
    Check("agent.owned_prompts.max_steps", ("training.max_steps",), _owned_prompts_steps),
    Check("agent.log_columns", ("agent.log_columns",), _log_columns),
    Check("agent.environment_column", ("agent.environment_factory", "dataset.data_files"), _environment_column),
    Check("agent.sandboxed_worker", ("agent",), _worker),
    *OPENENV_CHECKS,
    Check("agent.reward_source", ("rewards", "agent.environment_factory"), _reward_source),
    *ASYNC_CHECKS,
]
