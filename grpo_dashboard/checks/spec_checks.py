"""The checks of a spec's name, model, dataset, rewards, health settings and chat template, as named checks.

The dataset checks read a sample of the data (local files, or a Hub dataset's card) and leave it in the facts
(`named.DATASET_SAMPLE`) for the reward, agent and chat-template checks that read its columns and first rows.
"""

from __future__ import annotations

import difflib
import math
import re
import string
from collections.abc import Iterator
from typing import Any

from grpo_dashboard.checks.agents import owns_prompts
from grpo_dashboard.checks.chat_template import model_chat_template
from grpo_dashboard.checks.dataset_files import DatasetFileError, DatasetSample, is_conversational, read_sample
from grpo_dashboard.checks.named import DATASET_SAMPLE, Check, CheckInput, sample_of
from grpo_dashboard.checks.spec_paths import HUB_ID, REWARD_NAME, looks_like_path, resolve
from grpo_dashboard.errors import FieldError
from grpo_dashboard.spec.jobfiles import rewards_module
from grpo_dashboard.spec.run_spec import DTYPES

IMPORT_HINT = " For a spec imported from a TRL recipe that names none: `import-trl RECIPE {opt}` gives it."


def _name(inp: CheckInput) -> Iterator[FieldError]:
    name = inp.spec.name
    if not name or not name.strip():
        yield FieldError("name", name, "must be a non-empty run name, e.g. `name: qwen-gsm8k-lr1e-6`.")
    elif len(name) > 100:
        yield FieldError("name", name, "is longer than 100 characters; use a shorter name.")


def _model_source(inp: CheckInput) -> Iterator[FieldError]:
    m = inp.spec.model
    if not m.name_or_path:
        yield FieldError(
            "model.name_or_path",
            m.name_or_path,
            "is required: a Hub model id (e.g. Qwen/Qwen2.5-0.5B-Instruct) or a local directory."
            + IMPORT_HINT.format(opt="--model ORG/MODEL"),
        )
        return
    local = resolve(inp.base, m.name_or_path)
    if m.build_tiny and not local.exists():
        return  # the job builds it there on first use
    if local.exists():
        if not (local / "config.json").is_file():
            yield FieldError(
                "model.name_or_path",
                m.name_or_path,
                f"is a local path ({local}) without config.json; point it at a directory written by "
                f"save_pretrained, or use a Hub id.",
            )
    elif looks_like_path(m.name_or_path):
        yield FieldError(
            "model.name_or_path",
            m.name_or_path,
            f"looks like a local path but {local} does not exist. Fix the path, or set "
            f"`model.build_tiny: true` to build the tiny offline test model there.",
        )
    elif not HUB_ID.match(m.name_or_path):
        yield FieldError(
            "model.name_or_path",
            m.name_or_path,
            "is neither an existing directory nor a valid Hub id like `owner/model`.",
        )


def _dtype(inp: CheckInput) -> Iterator[FieldError]:
    if inp.spec.model.dtype not in DTYPES:
        yield FieldError("model.dtype", inp.spec.model.dtype, f"must be one of {', '.join(DTYPES)}.")


def _lora_rank(inp: CheckInput) -> Iterator[FieldError]:
    lora = inp.spec.model.lora
    if lora is not None and lora.r < 1:
        yield FieldError("model.lora.r", lora.r, "must be a positive integer rank, e.g. 16.")


def _lora_dropout(inp: CheckInput) -> Iterator[FieldError]:
    lora = inp.spec.model.lora
    if lora is not None and not 0 <= lora.lora_dropout < 1:
        yield FieldError("model.lora.lora_dropout", lora.lora_dropout, "must be in [0, 1).")


def _one_source(inp: CheckInput) -> bool:
    """True when the dataset section is checked here and names exactly one source (a mixture: spec_extras)."""
    d = inp.spec.dataset
    return not owns_prompts(inp.spec) and d.mixture is None and bool(d.path) != bool(d.data_files)


def _source(inp: CheckInput) -> Iterator[FieldError]:
    d = inp.spec.dataset
    if not owns_prompts(inp.spec) and d.mixture is None and bool(d.path) == bool(d.data_files):
        yield FieldError(
            "dataset",
            {"path": d.path, "data_files": d.data_files},
            "needs exactly one source: `path` (a Hub dataset id) or `data_files` (local .json/.jsonl/"
            ".csv/.parquet files)." + (IMPORT_HINT.format(opt="--dataset ORG/DATASET") if not d.data_files else ""),
        )


def _eval_files_local(inp: CheckInput) -> Iterator[FieldError]:
    d = inp.spec.dataset
    if _one_source(inp) and d.eval_data_files and d.path:
        yield FieldError(
            "dataset.eval_data_files",
            d.eval_data_files,
            "can only be used with local `data_files`; for a Hub dataset set `eval_split`.",
        )


def _files(value: str | list[str], inp: CheckInput) -> list[str]:
    return [str(resolve(inp.base, f)) for f in ([value] if isinstance(value, str) else value)]


def _local_sample(inp: CheckInput) -> Iterator[FieldError]:
    d = inp.spec.dataset
    if not (_one_source(inp) and d.data_files):
        return
    try:
        inp.facts[DATASET_SAMPLE] = read_sample(_files(d.data_files, inp))
    except DatasetFileError as exc:
        yield FieldError("dataset.data_files", d.data_files, str(exc))


def _eval_sample(inp: CheckInput) -> Iterator[FieldError]:
    d = inp.spec.dataset
    if not (_one_source(inp) and d.data_files and d.eval_data_files and sample_of(inp) is not None):
        return
    try:
        read_sample(_files(d.eval_data_files, inp), limit=1)
    except DatasetFileError as exc:
        yield FieldError("dataset.eval_data_files", d.eval_data_files, str(exc))


def _hub_sample(inp: CheckInput) -> Iterator[FieldError]:
    d = inp.spec.dataset
    if not (_one_source(inp) and d.path):
        return
    try:
        from datasets import load_dataset_builder

        builder = load_dataset_builder(d.path, d.config, revision=d.revision)
        features = builder.info.features
        if features is None:
            raise ValueError("no features in the dataset card")
        inp.facts[DATASET_SAMPLE] = DatasetSample(list(features), [], None)
    except Exception as exc:  # offline or private: checked again by the job, so only a warning here
        yield FieldError(
            "dataset.path",
            d.path,
            f"could not be inspected here ({type(exc).__name__}: "
            f"{str(exc)[:200]}); its columns will only be checked when the job loads it.",
            "warning",
        )


def _template_columns(template: str) -> set[str] | ValueError:
    """The {column} names a prompt template uses, or why it is not a valid format string."""
    try:
        return {f[1] for f in string.Formatter().parse(template) if f[1]}
    except ValueError as exc:
        return exc


def _prompt_template(inp: CheckInput) -> Iterator[FieldError]:
    d, sample = inp.spec.dataset, sample_of(inp)
    if sample is None or not d.prompt_template:
        return
    names = _template_columns(d.prompt_template)
    if isinstance(names, ValueError):
        yield FieldError(
            "dataset.prompt_template",
            d.prompt_template,
            f"is not a valid format string ({names}); use {{column}} placeholders.",
        )
        return
    missing = sorted(n for n in names if n not in sample.columns)
    if missing:
        yield FieldError(
            "dataset.prompt_template",
            d.prompt_template,
            f"uses column(s) {missing} that the dataset lacks; columns are {sample.columns}.",
        )


def _prompt_column(inp: CheckInput) -> Iterator[FieldError]:
    d, sample = inp.spec.dataset, sample_of(inp)
    if sample is None or d.prompt_template or d.prompt_column in sample.columns:
        return
    close = difflib.get_close_matches(d.prompt_column, sample.columns, n=1)
    hint = f" Did you mean {close[0]!r}?" if close else ""
    yield FieldError(
        "dataset.prompt_column",
        d.prompt_column,
        f"is not a column of the dataset; columns are {sample.columns}. Set `dataset.prompt_column` to "
        f"the column holding the prompts, or `dataset.prompt_template`.{hint}",
    )


def _rows(inp: CheckInput) -> Iterator[FieldError]:
    d, sample = inp.spec.dataset, sample_of(inp)
    if sample is None or (d.prompt_template and isinstance(_template_columns(d.prompt_template), ValueError)):
        return  # a broken template is the problem to fix first
    if sample.num_rows == 0:
        yield FieldError("dataset.data_files", d.data_files, "holds no rows.")


def _rewards_present(inp: CheckInput) -> Iterator[FieldError]:
    if not inp.spec.rewards and inp.spec.agent is None:  # an environment's get_reward may be the source (agents)
        yield FieldError(
            "rewards",
            [],
            f"needs at least one reward function; built-ins: {sorted(rewards_module().REWARDS)}."
            + IMPORT_HINT.format(opt="--reward NAME"),
        )


def _reward_function(where: str, r: Any, inp: CheckInput) -> Iterator[FieldError]:
    if r.builtin:
        yield FieldError(f"{where}.builtin", r.builtin, "cannot be combined with `function`; keep one.")
    target = r.function.rsplit(":", 1)[0] if ":" in r.function else ""
    if target.endswith(".py") and not resolve(inp.base, target).is_file():
        yield FieldError(
            f"{where}.function",
            r.function,
            f"points at {resolve(inp.base, target)}, which does not exist. Give 'path/to/file.py:func'.",
        )
    elif not target and "." not in r.function:
        yield FieldError(f"{where}.function", r.function, "must look like 'file.py:func' or 'package.module:func'.")


def _reward_builtin(where: str, r: Any, inp: CheckInput) -> Iterator[FieldError]:
    rewards = rewards_module()
    key = r.builtin or r.name
    if key not in rewards.REWARDS:
        close = difflib.get_close_matches(key, list(rewards.REWARDS), n=1)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        yield FieldError(
            f"{where}.{'builtin' if r.builtin else 'name'}",
            key,
            f"is not a built-in reward; choose one of {sorted(rewards.REWARDS)}, or set `function` to "
            f"your own 'file.py:func'.{hint}",
        )
        return
    rdef = rewards.REWARDS[key]
    unknown = [p for p in r.params if p not in rdef.params]
    for p in unknown:
        yield FieldError(
            f"{where}.params.{p}",
            r.params[p],
            f"is not a parameter of {key}; allowed: {sorted(rdef.params) or 'none'}.",
        )
    if unknown:
        return
    try:
        rdef.factory(**r.params)
    except (ValueError, TypeError) as exc:
        yield FieldError(f"{where}.params", r.params, str(exc))
    sample = sample_of(inp)
    if sample is None:
        return
    for col in rewards.required_columns(key, r.params):
        if col not in sample.columns:
            yield FieldError(
                f"{where}",
                r.name,
                f"reward {key!r} reads dataset column {col!r}, which the dataset "
                f"lacks (columns: {sample.columns}). Add the column or choose another reward.",
            )


def _reward_entries(inp: CheckInput) -> Iterator[FieldError]:
    seen: set[str] = set()
    for i, r in enumerate(inp.spec.rewards):
        where = f"rewards[{i}]"
        if not r.name or not REWARD_NAME.match(r.name):
            yield FieldError(
                f"{where}.name",
                r.name,
                "must be a name of letters, digits, _ . - (it becomes the metric key rewards/<name>/mean).",
            )
        elif r.name in seen:
            yield FieldError(
                f"{where}.name",
                r.name,
                "is used twice; TRL logs rewards by name, so give each a "
                "unique `name` (use `builtin:` to reuse one built-in with other params).",
            )
        seen.add(r.name)
        if not isinstance(r.weight, float) or not math.isfinite(r.weight):
            yield FieldError(f"{where}.weight", r.weight, "must be a finite number, e.g. 1.0.")
        if r.model:
            continue  # a reward model (spec_extras)
        yield from (_reward_function if r.function else _reward_builtin)(where, r, inp)


def _health_thresholds(inp: CheckInput) -> Iterator[FieldError]:
    from grpo_dashboard.health import resolve_thresholds  # the doctor's rules load only when a spec is checked

    h = inp.spec.health
    try:
        resolve_thresholds(h.thresholds)
    except ValueError as exc:
        yield FieldError("health.thresholds", h.thresholds, f"{exc}. Fix the key or value (docs/health.md).")


def _guard_persist(inp: CheckInput) -> Iterator[FieldError]:
    if inp.spec.health.guard_persist < 1:
        yield FieldError(
            "health.guard_persist", inp.spec.health.guard_persist, "must be at least 1 (logged steps); e.g. 3."
        )


def _webhook(inp: CheckInput) -> Iterator[FieldError]:
    url = inp.spec.health.webhook_url
    if url is not None and not re.match(r"^(https?://\S+|\$\{?[A-Za-z_]\w*\}?)$", url):
        yield FieldError(
            "health.webhook_url",
            url,
            "must be an http(s):// URL or $NAME (read from that environment "
            "variable in the job), e.g. https://hooks.slack.com/services/...",
        )


def _chat_template(inp: CheckInput) -> Iterator[FieldError]:
    spec, sample = inp.spec, sample_of(inp)
    if sample is None:
        return
    d = spec.dataset
    first = sample.rows[0].get(d.prompt_column) if (sample.rows and not d.prompt_template) else None
    chat = d.conversational or bool(d.system_prompt) or is_conversational(first)
    if not chat or (spec.model.build_tiny and not resolve(inp.base, spec.model.name_or_path).exists()):
        return  # the tiny model is built with a chat template
    template = model_chat_template(spec, inp.base)
    if template is False:
        yield FieldError(
            "model.name_or_path",
            spec.model.name_or_path,
            "has no chat template, but the prompts are conversational (message lists, or a "
            "system_prompt is set). Use an instruct/chat model, add a chat_template to its tokenizer, "
            "or use plain-text prompts.",
        )
    elif template is None:
        yield FieldError(
            "model.name_or_path",
            spec.model.name_or_path,
            "could not be checked for a chat template (not available offline); conversational prompts need one.",
            "warning",
        )


NAME = [Check("name.valid", ("name",), _name)]
MODEL = [
    Check("model.source", ("model.name_or_path",), _model_source),
    Check("model.dtype", ("model.dtype",), _dtype),
    Check("model.lora.rank", ("model.lora.r",), _lora_rank),
    Check("model.lora.dropout", ("model.lora.lora_dropout",), _lora_dropout),
]
DATASET_CHECKS = [
    Check("dataset.one_source", ("dataset.path", "dataset.data_files"), _source),
    Check("dataset.eval_files_local", ("dataset.eval_data_files", "dataset.path"), _eval_files_local),
    Check("dataset.files", ("dataset.data_files",), _local_sample),
    Check("dataset.eval_files", ("dataset.eval_data_files",), _eval_sample),
    Check("dataset.hub", ("dataset.path", "dataset.config", "dataset.revision"), _hub_sample),
    Check("dataset.prompt_template", ("dataset.prompt_template",), _prompt_template),
    Check("dataset.prompt_column", ("dataset.prompt_column", "dataset.prompt_template"), _prompt_column),
    Check("dataset.rows", ("dataset.data_files",), _rows),
]
REWARDS = [
    Check("rewards.present", ("rewards",), _rewards_present),
    Check("rewards.entries", ("rewards",), _reward_entries),
]
HEALTH = [
    Check("health.thresholds", ("health.thresholds",), _health_thresholds),
    Check("health.guard_persist", ("health.guard_persist",), _guard_persist),
    Check("health.webhook_url", ("health.webhook_url",), _webhook),
]
CHAT_TEMPLATE = [
    Check(
        "model.chat_template.present",
        ("model.name_or_path", "dataset.conversational", "dataset.system_prompt"),
        _chat_template,
    )
]
