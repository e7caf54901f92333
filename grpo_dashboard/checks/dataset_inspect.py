"""The dataset inspector: what a run's dataset holds and whether GRPO can use it as mapped by the spec.

Reads local JSON/JSONL/CSV/Parquet files (via `dataset_files`) or a Hub dataset (real `datasets` code, streaming
only the first rows), then reports columns, types, row count and sample rows; detects the prompt column and
conversational prompts; suggests the spec mapping (`dataset.prompt_column`, `prompt_template`, `system_prompt`,
`conversational`); checks the chat template; and measures prompt lengths in tokens. Every problem carries its fix.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import string
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from grpo_dashboard.checks.chat_template import model_chat_template
from grpo_dashboard.checks.dataset_files import DatasetFileError, is_conversational, read_sample
from grpo_dashboard.checks.token_count import count_in_child, count_tokens
from grpo_dashboard.spec.jobfiles import job_module
from grpo_dashboard.spec.paths import user_path
from grpo_dashboard.spec.run_spec import DatasetSpec, RunSpec, load_spec

DEFAULT_MAX_PROMPT_TOKENS = 512
PROMPT_NAMES = (
    "prompt",
    "question",
    "problem",
    "query",
    "instruction",
    "input",
    "messages",
    "conversations",
    "text",
    "content",
)
ROLES = ("system", "user", "assistant", "tool", "developer")


@dataclass
class Problem:
    """One finding: severity (error, warning, info), the spec field it concerns, and a message with the fix."""

    severity: str
    field: str
    message: str

    def __str__(self) -> str:
        return f"{self.severity}: {self.field}: {self.message}"


@dataclass
class DatasetReport:
    """Everything the inspector found; `ok` is False when an error would make training fail."""

    source: str
    columns: list[str] = field(default_factory=list)
    types: dict[str, str] = field(default_factory=dict)
    num_rows: int | None = None
    samples: list[dict[str, Any]] = field(default_factory=list)
    prompt_column: str | None = None
    prompt_candidates: list[str] = field(default_factory=list)
    conversational: bool = False
    mapping: dict[str, Any] = field(default_factory=dict)
    rendered_prompt: Any = None
    chat_template: bool | None = None
    prompt_tokens: dict[str, Any] = field(default_factory=dict)
    problems: list[Problem] = field(default_factory=list)
    readable: bool = True

    @property
    def ok(self) -> bool:
        """True when no problem is an error."""
        return not any(p.severity == "error" for p in self.problems)

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly form."""
        d = dataclasses.asdict(self)
        d["ok"] = self.ok
        return json.loads(json.dumps(d, default=str))

    def to_text(self) -> str:
        """Human-readable summary."""
        lines = [f"dataset  {self.source}"]
        if self.readable:
            lines.append(f"rows     {self.num_rows if self.num_rows is not None else 'unknown'}")
            lines.append("columns  " + ", ".join(f"{c} ({self.types.get(c, '?')})" for c in self.columns))
            kind = "conversational (message lists)" if self.conversational else "standard (text)"
            lines.append(f"prompt   column {self.prompt_column!r}, {kind}")
            lines.append("mapping  " + json.dumps(self.mapping))
            if self.rendered_prompt is not None:
                lines.append("first prompt as the trainer sees it:\n  " + _short(self.rendered_prompt, 400))
            if self.chat_template is not None or self.conversational:
                state = {True: "present", False: "MISSING", None: "not checked"}[self.chat_template]
                lines.append(f"chat template  {state}")
            if self.prompt_tokens:
                t = self.prompt_tokens
                approx = " (approximate: ~4 characters per token)" if t.get("approximate") else ""
                lines.append(
                    f"prompt tokens  max {t['max']}, mean {t['mean']:.0f} over {t['rows_measured']} rows, "
                    f"{t['over']} over {t['threshold']}{approx}"
                )
            for i, row in enumerate(self.samples[:3]):
                lines.append(f"row {i}  " + _short(row, 300))
        lines += [f"  - {p}" for p in self.problems] or ["  no problems found"]
        return "\n".join(lines)


def _short(value: Any, n: int) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    text = text.replace("\n", "\\n")
    return text if len(text) <= n else text[:n] + "..."


def _resolve(base: Path, value: str) -> Path:
    p = user_path(value)
    return p if p.is_absolute() else base / p


def load_rows(
    dataset: DatasetSpec, base: Path, limit: int, token: str | bool | None = None
) -> tuple[list[str], list[dict[str, Any]], int | None, dict[str, str]]:
    """Columns, the first `limit` rows, the row count (None if unknown) and declared types of the spec's dataset.

    `token` is the Hub token for a Hub dataset (False: none at all; None: the saved login).

    Raises DatasetFileError (local files) or RuntimeError (Hub) with the reason and the fix.
    """
    if dataset.data_files:
        files = [dataset.data_files] if isinstance(dataset.data_files, str) else list(dataset.data_files)
        sample = read_sample([str(_resolve(base, f)) for f in files], limit=limit)
        return sample.columns, sample.rows, sample.num_rows, {}
    if not dataset.path:
        raise DatasetFileError(
            "the spec names no dataset; set `dataset.data_files` (local files) or `dataset.path` (a Hub dataset id)."
        )
    try:
        import itertools

        from datasets import load_dataset

        path = str(_resolve(base, dataset.path)) if _resolve(base, dataset.path).exists() else dataset.path
        ds = load_dataset(
            path, dataset.config, split=dataset.split, revision=dataset.revision, streaming=True, token=token
        )
        rows = [dict(r) for r in itertools.islice(iter(ds), limit)]
        features = ds.features or {}
        splits = getattr(ds.info, "splits", None) or {}
        total = splits[dataset.split].num_examples if dataset.split in splits else None
    except Exception as exc:  # any loader failure becomes one clear message
        raise RuntimeError(
            f"the Hub dataset {dataset.path!r} (config {dataset.config!r}, split {dataset.split!r}) "
            f"cannot be loaded: {type(exc).__name__}: {str(exc)[:300]}. Check the id, config and "
            f"split on the Hub, log in for private datasets, or go online."
        ) from exc
    columns = list(features) if features else list(dict.fromkeys(k for r in rows for k in r))
    types = {k: _feature_type(v) for k, v in features.items()} if features else {}
    return columns, rows, total, types


def _feature_type(feature: Any) -> str:
    dtype = getattr(feature, "dtype", None)
    if dtype and dtype != "list":
        return str(dtype)
    if isinstance(feature, (list, tuple)) or type(feature).__name__ in ("List", "Sequence", "LargeList"):
        return "list"
    return type(feature).__name__


def value_type(value: Any) -> str:
    """A short type name for one cell: string, int, float, bool, null, messages, list[...], dict."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, (int, float, str)):
        return {int: "int", float: "float", str: "string"}[type(value)]
    if is_conversational(value):
        return "messages"
    if isinstance(value, list):
        inner = sorted({value_type(v) for v in value[:20]})
        return f"list[{'|'.join(inner)}]" if inner else "list"
    if isinstance(value, dict):
        return "dict"
    return type(value).__name__


def column_types(columns: list[str], rows: list[dict[str, Any]]) -> dict[str, str]:
    """The types seen in each column of the sample rows (`a|b` when mixed, `?` suffix when some are null)."""
    out: dict[str, str] = {}
    for c in columns:
        seen = [value_type(r.get(c)) for r in rows]
        kinds = sorted({t for t in seen if t != "null"})
        out[c] = ("|".join(kinds) or "null") + ("?" if kinds and "null" in seen else "")
    return out


def render_prompt(row: dict[str, Any], dataset: DatasetSpec) -> str | list[dict[str, Any]]:
    """The prompt the trainer gets for one row: the job's own mapping (`grpo_job.prompt_renderer`, which its
    `map_prompts` applies), given the spec's dataset section as run.yaml carries it."""
    return job_module().prompt_renderer(dataclasses.asdict(dataset))(row)


def detect_prompt_column(columns: list[str], rows: list[dict[str, Any]]) -> list[str]:
    """Columns that could hold the prompts, best first: conversational or known names, then the longest text."""

    def score(c: str) -> tuple[int, int, float]:
        values = [r.get(c) for r in rows]
        chat = any(is_conversational(v) for v in values)
        text = [v for v in values if isinstance(v, str)]
        named = len(PROMPT_NAMES) - PROMPT_NAMES.index(c.lower()) if c.lower() in PROMPT_NAMES else 0
        return (named, int(chat), sum(len(t) for t in text) / max(1, len(text)))

    usable = [c for c in columns if any(isinstance(r.get(c), str) or is_conversational(r.get(c)) for r in rows)]
    return sorted(usable, key=score, reverse=True)


def apply_mapping(spec: RunSpec, mapping: dict[str, Any]) -> RunSpec:
    """A copy of `spec` with the dataset mapping (prompt_column, prompt_template, system_prompt, conversational)."""
    allowed = {"prompt_column", "prompt_template", "system_prompt", "conversational"}
    unknown = sorted(set(mapping) - allowed)
    if unknown:
        raise ValueError(f"mapping keys {unknown} are not dataset mapping fields; allowed: {sorted(allowed)}.")
    return dataclasses.replace(spec, dataset=dataclasses.replace(spec.dataset, **mapping))


def chat_template_state(spec: RunSpec, base: Path) -> bool | None:
    """True/False when the model's tokenizer has/lacks a chat template; None when it cannot be checked offline."""
    if spec.model.build_tiny:
        return True  # the tiny model builder always writes one
    return model_chat_template(spec, base)


def inspect_dataset(
    source: str | Path | dict[str, Any] | RunSpec,
    base_dir: str | Path | None = None,
    n_samples: int = 5,
    n_measure: int = 200,
    max_prompt_tokens: int | None = None,
    tokenizer: Any = None,
    token: str | bool | None = None,
    load_tokenizers: bool = True,
) -> DatasetReport:
    """Inspect the spec's dataset as the trainer will see it; never raises for a bad dataset (see `problems`).

    Args:
        source: a RunSpec, a mapping, a YAML file path or YAML text (SpecError if it cannot be parsed).
        base_dir: directory that relative paths are resolved against (default: the current directory).
        n_samples: rows returned in `samples`; n_measure: rows whose prompts are measured in tokens.
        max_prompt_tokens: warn about prompts longer than this (default 512).
        tokenizer: a tokenizer to count with (default: the model's, when on disk; else ~4 characters per token).
        token: Hub token for a Hub dataset (False: none; None: the saved login).
        load_tokenizers: False counts ~4 characters per token instead of loading the model's tokenizer (a Space
            loads no tokenizer of a stranger's spec in its own process).
    """
    spec = load_spec(source)
    base = Path(base_dir) if base_dir else Path.cwd()
    d = spec.dataset
    where = "dataset.data_files" if d.data_files else "dataset.path"
    report = DatasetReport(source=str(d.data_files or f"{d.path} ({d.config or 'default'}, {d.split})"))
    add = lambda sev, fld, msg: report.problems.append(Problem(sev, fld, msg))  # noqa: E731
    try:
        columns, rows, total, declared = load_rows(d, base, max(n_samples, n_measure, 1), token)
    except (DatasetFileError, RuntimeError) as exc:
        report.readable = False
        add("error", where, str(exc))
        return report
    report.columns, report.num_rows = columns, total
    report.types = {**column_types(columns, rows), **declared}
    report.samples = [{k: _clip(v) for k, v in r.items()} for r in rows[:n_samples]]
    if not rows:
        add("error", where, "holds no rows. Point the spec at a file or split with data.")
        return report
    report.prompt_candidates = detect_prompt_column(columns, rows)
    mapping: dict[str, Any] = {
        "prompt_column": d.prompt_column,
        "prompt_template": d.prompt_template,
        "system_prompt": d.system_prompt,
        "conversational": d.conversational,
    }
    if d.prompt_template:
        try:
            names = {f[1] for f in string.Formatter().parse(d.prompt_template) if f[1]}
        except ValueError as exc:
            add(
                "error",
                "dataset.prompt_template",
                f"is not a valid format string ({exc}). Use {{column}} "
                "placeholders and double literal braces ({{{{ }}}}).",
            )
            names = None
        missing = sorted(n for n in names or () if n not in columns)
        if missing:
            add(
                "error",
                "dataset.prompt_template",
                f"uses column(s) {missing} that the dataset lacks (columns: {columns}). Fix the placeholders.",
            )
        if names is None or missing:
            report.mapping = mapping
            return report
    elif d.prompt_column not in columns:
        best = report.prompt_candidates[0] if report.prompt_candidates else None
        fix = (
            f"Set `dataset.prompt_column: {best}` (it looks like the prompts), or write a "
            f"`dataset.prompt_template` such as '{{{best}}}'."
            if best
            else "Add a prompt column, or write a `dataset.prompt_template` from the existing columns."
        )
        add(
            "error",
            "dataset.prompt_column",
            f"{d.prompt_column!r} is not a column (columns: {columns}); the "
            f"trainer would fail at the first step with KeyError: 'prompt'. {fix}",
        )
        if best is None:
            report.mapping = mapping
            return report
        mapping["prompt_column"] = best
    report.prompt_column = None if d.prompt_template else mapping["prompt_column"]
    if report.prompt_column:
        _check_prompt_values(report.prompt_column, [r.get(report.prompt_column) for r in rows], add)
    for col in ("completion", "completion_ids"):
        if col in columns:
            add(
                "warning",
                "dataset",
                f"has a {col!r} column; TRL reserves that name and does not pass it to reward "
                f"functions. Rename it (e.g. 'reference_{col}') if a reward needs it.",
            )
    mapped = dataclasses.replace(d, **mapping)
    try:
        rendered = [
            render_prompt(r, mapped)
            for r in rows
            if r.get(report.prompt_column or "") not in (None, "") or report.prompt_column is None
        ]
    except (KeyError, IndexError, ValueError, AttributeError) as exc:
        add(
            "error",
            "dataset.prompt_template",
            f"cannot be filled from a row ({type(exc).__name__}: {exc}). Use "
            f"{{column}} placeholders that exist in every row.",
        )
        rendered = []
    report.mapping = mapping
    if not rendered:
        return report
    report.rendered_prompt = rendered[0]
    report.conversational = any(isinstance(p, list) for p in rendered)
    report.chat_template = chat_template_state(spec, base)
    if report.conversational and report.chat_template is False:
        add(
            "error",
            "model.name_or_path",
            f"{spec.model.name_or_path!r} has no chat template, but the prompts are "
            f"conversational; the trainer fails with 'Cannot use chat template functions'. Use an instruct/chat "
            f"model, add a chat_template to its tokenizer, or use plain-text prompts (no system_prompt, "
            f"conversational: false, a text prompt column).",
        )
    elif report.conversational and report.chat_template is None:
        add(
            "warning",
            "model.name_or_path",
            f"could not check {spec.model.name_or_path!r} for a chat template "
            f"offline; conversational prompts need one. Check the model card or go online.",
        )
    elif not report.conversational and report.chat_template:
        add(
            "info",
            "dataset.conversational",
            "prompts are plain text but the model has a chat template; instruct "
            "models usually do better with chat prompts: set `dataset.conversational: true` (or a system_prompt).",
        )
    if tokenizer is None and not load_tokenizers:
        add(
            "info",
            "model.name_or_path",
            "token counts are approximate (~4 characters per token): tokenizers are not "
            "loaded on this Space. Run `python -m grpo_dashboard inspect-dataset SPEC` locally for exact counts.",
        )
    _measure(
        report, rendered, spec, base, max_prompt_tokens or DEFAULT_MAX_PROMPT_TOKENS, tokenizer, add, load_tokenizers
    )
    return report


def _clip(value: Any, n: int = 500) -> Any:
    if isinstance(value, str) and len(value) > n:
        return value[:n] + "..."
    return value


def _check_prompt_values(column: str, values: list[Any], add: Any) -> None:
    empty = sum(v is None or v == "" or v == [] for v in values)
    if empty:
        add(
            "warning",
            "dataset.prompt_column",
            f"{empty} of {len(values)} sampled rows have an empty {column!r}; "
            f"filter them out before training (an empty prompt still costs a generation group).",
        )
    bad = [v for v in values if v not in (None, "", []) and not isinstance(v, str) and not is_conversational(v)]
    if bad:
        add(
            "error",
            "dataset.prompt_column",
            f"{column!r} holds {value_type(bad[0])} values such as "
            f"{_short(bad[0], 80)}; prompts must be text or a list of {{role, content}} messages. Choose another "
            f"column or build the text with `dataset.prompt_template`.",
        )
    chats = [v for v in values if is_conversational(v)]
    roles = sorted({str(m.get("role")) for v in chats for m in v} - set(ROLES))
    if roles:
        add(
            "error",
            "dataset.prompt_column",
            f"{column!r} has messages with unknown role(s) {roles}; use "
            f"{list(ROLES)} (convert e.g. ShareGPT 'from: human/gpt' to 'role: user/assistant').",
        )
    ends = sum(1 for v in chats if v[-1].get("role") == "assistant")
    if ends:
        add(
            "warning",
            "dataset.prompt_column",
            f"{ends} of {len(chats)} sampled conversations end with an "
            f"assistant message; GRPO generates after the prompt, so the answer would be in the prompt. Drop the "
            f"final assistant turn from the prompt and keep it in a separate column for the reward.",
        )


def _measure(
    report: DatasetReport,
    rendered: list[Any],
    spec: RunSpec,
    base: Path,
    threshold: int,
    tokenizer: Any,
    add: Any,
    load_tokenizers: bool = True,
) -> None:
    counted: list[int] | None = None
    if tokenizer is not None:
        counted = [count_tokens(p, tokenizer) for p in rendered]
    elif load_tokenizers:  # the model's tokenizer, loaded in a child: its library imports torch, this process never
        counted = count_in_child(spec, base, rendered)
    approximate = counted is None
    lengths = counted if counted is not None else [count_tokens(p, None) for p in rendered]
    over = [n for n in lengths if n > threshold]
    report.prompt_tokens = {
        "max": max(lengths),
        "mean": sum(lengths) / len(lengths),
        "over": len(over),
        "threshold": threshold,
        "rows_measured": len(lengths),
        "approximate": approximate,
    }
    if over:
        add(
            "warning",
            "dataset",
            f"{len(over)} of {len(lengths)} sampled prompts are longer than {threshold} tokens "
            f"(longest {max(lengths)}{', approximate' if approximate else ''}). TRL does not truncate prompts, so "
            f"they slow generation and use memory (and vLLM rejects prompts over its max_model_len). Filter or "
            f"shorten them, shorten the system prompt/template, or raise the threshold.",
        )


def inspect_main(argv: list[str] | None = None) -> int:
    """`inspect-dataset SPEC [--json]`: exit 0 when usable, 1 with problems, 2 when the spec or data is unreadable."""
    from grpo_dashboard.errors import SpecError

    p = argparse.ArgumentParser(
        prog="python -m grpo_dashboard inspect-dataset",
        description="Inspect a run spec's dataset: columns, prompts, chat template, lengths.",
    )
    p.add_argument("spec", help="Run spec YAML file.")
    p.add_argument("--json", action="store_true", help="Print the report as JSON.")
    p.add_argument("--rows", type=int, default=5, help="Sample rows to show (default 5).")
    p.add_argument(
        "--max-prompt-tokens",
        type=int,
        default=DEFAULT_MAX_PROMPT_TOKENS,
        help=f"Warn about prompts longer than this (default {DEFAULT_MAX_PROMPT_TOKENS}).",
    )
    args = p.parse_args(argv)
    if not Path(args.spec).is_file():
        print(f"Spec file {args.spec!r} does not exist.", file=sys.stderr)
        return 2
    try:
        report = inspect_dataset(args.spec, n_samples=args.rows, max_prompt_tokens=args.max_prompt_tokens)
    except SpecError as exc:
        print(str(exc), file=sys.stderr)
        return 2
    print(json.dumps(report.to_dict(), indent=2, ensure_ascii=False) if args.json else report.to_text())
    if not report.readable:
        return 2
    return 0 if report.ok else 1
