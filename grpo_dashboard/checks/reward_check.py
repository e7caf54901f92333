"""The reward contract check: run every reward of a spec on a few real rows before paying for GPUs.

For N rows of the actual dataset each reward gets four completions per row: the reference answer rendered as an
ideal completion (expect the maximum), a correct answer in the wrong format (format and accuracy rewards should
disagree), an empty completion and a garbage completion (expect the minimum); each in both completion formats
(standard strings and conversational message lists). The report gives values, errors, None counts, constant
outputs and time per completion, and flags what would silently ruin a run. Every reward runs in a sandboxed
subprocess (`reward_worker`), so custom reward code never executes in the dashboard process.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from grpo_dashboard.checks.dataset_files import DatasetFileError
from grpo_dashboard.checks.dataset_inspect import load_rows, render_prompt
from grpo_dashboard.checks.sandbox import isolation, reward_paths, run_module, weak_sandbox_warning
from grpo_dashboard.spec.jobfiles import rewards_module
from grpo_dashboard.spec.run_spec import RewardSpec, RunSpec, load_spec

CASES = ("ideal", "wrong_format", "empty", "garbage")
FORMATS = ("standard", "conversational")
IDEAL_TEMPLATE = "<think>\nI work through the problem step by step.\n</think>\n<answer>\n{answer}\n</answer>"
WRONG_FORMAT_TEMPLATE = "The answer is {answer}"
GARBAGE = " ".join(["xyzzy plugh qwerty blorf zork frobnicate"] * 60)
DEFAULT_BUDGET_MS = {"code": 2000.0}
DEFAULT_BUDGET = 50.0
EXPECTING_KINDS = ("format", "accuracy", "code", "structured")
REFERENCE_NAMES = ("solution", "answer", "reference", "ground_truth", "target", "label", "gold", "final_answer")
CODE_NAMES = ("canonical_solution", "reference_solution", "solution", "code")


@dataclass
class Flag:
    """A problem with one reward (severity `error` fails the check; `note` is advice)."""

    reward: str
    code: str
    message: str
    severity: str = "error"

    def __str__(self) -> str:
        return f"{'✗' if self.severity == 'error' else '·'} {self.code}: {self.message}"


@dataclass
class CaseResult:
    """One reward call: one case on all rows, in one completion format."""

    case: str
    format: str
    values: list[float | None] | None
    error: str | None = None
    missing_column: str | None = None
    seconds: float = 0.0

    @property
    def ms_per_completion(self) -> float:
        """Milliseconds per completion in this call."""
        return 1000.0 * self.seconds / max(1, len(self.values or [])) if self.values else 1000.0 * self.seconds


@dataclass
class RewardReport:
    """What one reward did on every case."""

    name: str
    kind: str
    source: str
    columns: list[str] = field(default_factory=list)
    results: list[CaseResult] = field(default_factory=list)
    flags: list[Flag] = field(default_factory=list)
    timed_out: bool = False
    log_tail: str = ""

    def values(self, case: str, fmt: str) -> list[float | None] | None:
        """Values for a case in a format (None when it did not run or raised)."""
        for r in self.results:
            if r.case == case and r.format == fmt:
                return r.values
        return None

    @property
    def ms_per_completion(self) -> float | None:
        """The slowest call's time per completion."""
        times = [r.ms_per_completion for r in self.results if r.values is not None or r.error]
        return max(times) if times else None


@dataclass
class CheckReport:
    """The whole check: per-reward reports plus what was run."""

    rows: int
    columns: list[str]
    conversational: bool
    reference_column: str | None
    completions: dict[str, list[str]]
    rewards: list[RewardReport]
    budget_ms: float | None
    isolation: str
    sandbox_warning: str = ""  # the weak fallback's warning (no isolation boundary here), else ""

    @property
    def flags(self) -> list[Flag]:
        """Every error-level flag."""
        return [f for r in self.rewards for f in r.flags if f.severity == "error"]

    @property
    def ok(self) -> bool:
        """True when no reward is flagged."""
        return not self.flags

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly form."""
        d = asdict(self)
        d["ok"] = self.ok
        for rd, r in zip(d["rewards"], self.rewards, strict=True):
            rd["ms_per_completion"] = r.ms_per_completion
        return d

    def to_text(self) -> str:
        """Human-readable report."""
        fmt = "conversational" if self.conversational else "standard"
        ref = (
            f"reference answers from column {self.reference_column!r}"
            if self.reference_column
            else "no reference answer column (ideal and wrong-format cases skipped)"
        )
        lines = [f"Reward contract check on {self.rows} rows ({fmt} prompts); {ref}; sandbox: {self.isolation}."]
        if self.sandbox_warning:
            lines.append(f"WARNING: {self.sandbox_warning}")
        for case, texts in self.completions.items():
            lines.append(f"  {case:<13} e.g. {_short(texts[0] if texts else '', 90)}")
        for r in self.rewards:
            ms = r.ms_per_completion
            timing = f", {ms:.1f} ms/completion" if ms is not None else ""
            lines.append(f"\n{r.name} ({r.kind}, {r.source}){timing}")
            for case in CASES:
                vals = r.values(case, fmt)
                if vals is not None:
                    nones = sum(v is None for v in vals)
                    lines.append(f"  {case:<13} {_fmt_values(vals)}" + (f"  ({nones} None)" if nones else ""))
            lines += [f"  {f}" for f in r.flags] or ["  ✓ no problems"]
        flags = self.flags
        lines.append(
            f"\n{'OK' if not flags else f'{len(flags)} problem(s)'}: "
            f"{'every reward passed' if not flags else ', '.join(sorted({f.reward for f in flags}))}"
        )
        return "\n".join(lines)


def _short(text: str, n: int) -> str:
    text = text.replace("\n", "\\n")
    return repr(text if len(text) <= n else text[:n] + "...")


def _fmt_values(values: list[float | None], n: int = 10) -> str:
    shown = ["None" if v is None else f"{v:.3g}" for v in values[:n]]
    return " ".join(shown) + (" ..." if len(values) > n else "")


def _looks_like_code(text: str) -> bool:
    return "\n" in text.strip() and any(k in text for k in ("def ", "return", "print(", "import "))


def _is_json(text: str) -> bool:
    try:
        return isinstance(json.loads(text), (dict, list))
    except ValueError:
        return False


def pick_reference_column(spec: RunSpec, columns: list[str], rows: list[dict[str, Any]]) -> str | None:
    """The column holding reference answers: one an accuracy/code reward reads, else a conventional name."""
    rewards = rewards_module()
    code = any(
        rewards.REWARDS.get(r.builtin or r.name) and rewards.REWARDS[r.builtin or r.name].kind == "code"
        for r in spec.rewards
        if not r.function
    )
    if code:
        for c in CODE_NAMES:
            if c in columns and any(_looks_like_code(str(r.get(c) or "")) for r in rows):
                return c
    for r in spec.rewards:
        rdef = None if r.function else rewards.REWARDS.get(r.builtin or r.name)
        if rdef is not None and rdef.kind in ("accuracy", "structured"):
            for col in rewards.required_columns(rdef.name, r.params):
                if col in columns:
                    return col
    return next((c for c in REFERENCE_NAMES if c in columns), None)


def render_cases(
    rows: list[dict[str, Any]], reference_column: str | None, ideal_template: str = IDEAL_TEMPLATE
) -> dict[str, list[str]]:
    """The completion texts for every case, one per row."""
    rewards = rewards_module()
    cases: dict[str, list[str]] = {"ideal": [], "wrong_format": []}
    for row in rows:
        if reference_column is None:
            break
        raw = row.get(reference_column)
        text = raw if isinstance(raw, str) else json.dumps(raw)
        if _looks_like_code(text) and not _is_json(text):
            body, bare = f"```python\n{text.strip()}\n```", text.strip()
        elif _is_json(text):
            body = bare = text.strip()
        else:
            answer = rewards.gold_answer(text)
            body, bare = f"\\boxed{{{answer}}}", answer
        cases["ideal"].append(ideal_template.replace("{answer}", body))
        cases["wrong_format"].append(WRONG_FORMAT_TEMPLATE.replace("{answer}", bare))
    if reference_column is None:
        cases = {}
    cases["empty"] = [""] * len(rows)
    cases["garbage"] = [GARBAGE] * len(rows)
    return cases


def _run_reward(
    r: RewardSpec, kind: str, batches: list[dict[str, Any]], base: Path, timeout_s: float, memory_mb: int
) -> tuple[list[dict[str, Any]], bool, str]:
    request = {"reward": asdict(r), "base_dir": str(base), "batches": batches}
    res = run_module(
        "grpo_dashboard.checks.reward_worker",
        json.dumps(request, default=str),
        timeout_s=timeout_s,
        memory_mb=memory_mb,
        allow_subprocess=kind == "code",
        extra_path=[str(base)],
        read_only=reward_paths(r.function, base),
        report=True,
    )
    records = _report_records(res.report)
    if not records and not res.timed_out and not res.ok:
        why = "ran out of memory" if res.memory_exceeded else f"exited with status {res.returncode}"
        records = [{"build_error": f"the sandboxed worker {why}: {res.stderr.strip()[-600:]}"}]
    return records, res.timed_out, res.stderr[-2000:]


def _report_records(text: str) -> list[dict[str, Any]]:
    """The worker's results: one JSON object per line of its report channel (stdout is only the reward's log)."""
    records = []
    for line in text.splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict):
            records.append(record)
    return records


def check_rewards(
    source: str | Path | dict[str, Any] | RunSpec,
    n_rows: int = 8,
    budget_ms: float | None = None,
    base_dir: str | Path | None = None,
    timeout_s: float = 120.0,
    memory_mb: int = 4096,
    reference_column: str | None = None,
    ideal_template: str = IDEAL_TEMPLATE,
    token: str | bool | None = None,
) -> CheckReport:
    """Run the contract check on the first `n_rows` rows of the spec's dataset.

    Args:
        source: a RunSpec, mapping, YAML path or YAML text (SpecError when unparseable).
        n_rows: dataset rows to use.
        budget_ms: flag rewards slower than this per completion (default 50 ms; 2000 ms for code rewards).
        base_dir: directory relative paths are resolved against (default: the current directory).
        timeout_s: wall-clock limit for each reward's sandboxed worker.
        memory_mb: memory limit for each worker.
        reference_column: column with the reference answers (default: the column an accuracy reward reads).
        ideal_template: how a reference answer becomes an ideal completion (`{answer}` is replaced).
        token: Hub token for reading a Hub dataset (False: none; None: the saved login).

    Raises DatasetFileError or RuntimeError when the dataset cannot be read, ValueError for a bad reference column.
    """
    spec = load_spec(source)
    base = Path(base_dir) if base_dir else Path.cwd()
    columns, rows, _, _ = load_rows(spec.dataset, base, max(1, n_rows), token)
    if not rows:
        raise DatasetFileError("the dataset holds no rows; the check needs at least one.")
    if reference_column is not None and reference_column not in columns:
        raise ValueError(f"reference column {reference_column!r} is not a dataset column; columns: {columns}.")
    prompts: list[Any] = []
    for row in rows:
        try:
            prompts.append(render_prompt(row, spec.dataset))
        except (KeyError, IndexError, ValueError, AttributeError):
            prompts.append("")
    conversational = any(isinstance(p, list) for p in prompts)
    ref = reference_column or pick_reference_column(spec, columns, rows)
    texts = render_cases(rows, ref, ideal_template)
    reward_columns = {c: [row.get(c) for row in rows] for c in columns if c != "prompt"}
    batches = [
        {
            "case": case,
            "format": fmt,
            "prompts": prompts,
            "columns": reward_columns,
            "completions": ts if fmt == "standard" else [[{"role": "assistant", "content": t}] for t in ts],
        }
        for case, ts in texts.items()
        for fmt in FORMATS
    ]
    registry = rewards_module()
    reports: list[RewardReport] = []
    jobs: list[tuple[RewardReport, RewardSpec]] = []
    for r in spec.rewards:
        key = r.builtin or r.name
        rdef = None if r.function else registry.REWARDS.get(key)
        kind = rdef.kind if rdef is not None else "custom"
        rep = RewardReport(r.name, kind, r.function or f"builtin {key}")
        reports.append(rep)
        if rdef is None and not r.function:
            rep.flags.append(
                Flag(
                    r.name,
                    "unknown",
                    f"{key!r} is not a built-in reward; choose one of {sorted(registry.REWARDS)} or set `function`.",
                )
            )
            continue
        if rdef is not None and all(p in rdef.params for p in r.params):
            rep.columns = registry.required_columns(key, r.params)
            missing = [c for c in rep.columns if c not in columns]
            if missing:
                rep.flags.append(
                    Flag(
                        r.name,
                        "missing_column",
                        f"reads column(s) {missing}, which the dataset "
                        f"lacks (columns: {columns}). Add the column, or set the reward's *_column "
                        f"parameter to an existing one.",
                    )
                )
                continue
        jobs.append((rep, r))
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, min(4, len(jobs)))) as pool:
        futures = {pool.submit(_run_reward, r, rep.kind, batches, base, timeout_s, memory_mb): rep for rep, r in jobs}
        for fut, rep in futures.items():
            records, rep.timed_out, rep.log_tail = fut.result()
            _analyse(rep, records, conversational, columns, budget_ms, timeout_s, ref)
    _cross_check(reports, "conversational" if conversational else "standard")
    return CheckReport(
        len(rows), columns, conversational, ref, texts, reports, budget_ms, isolation(), weak_sandbox_warning()
    )


def _analyse(
    rep: RewardReport,
    records: list[dict[str, Any]],
    conversational: bool,
    columns: list[str],
    budget_ms: float | None,
    timeout_s: float,
    ref: str | None,
) -> None:
    add = lambda code, msg, sev="error": rep.flags.append(Flag(rep.name, code, msg, sev))  # noqa: E731
    build = next((r["build_error"] for r in records if "build_error" in r), None)
    if build:
        add("error", f"cannot be built or loaded: {build}. Fix the reward's code or params.")
        return
    rep.results = [
        CaseResult(r["case"], r["format"], r["values"], r["error"], r["missing_column"], r["seconds"]) for r in records
    ]
    train, other = ("conversational", "standard") if conversational else ("standard", "conversational")
    if rep.timed_out:
        add(
            "slow",
            f"did not finish the check within {timeout_s:.0f} s and was killed; a reward this slow stalls "
            f"every training step. Make it faster or lower its own time limits.",
        )
    missing = sorted({r.missing_column for r in rep.results if r.missing_column})
    if missing:
        add(
            "missing_column",
            f"reads column(s) {missing}, which the dataset lacks (columns: {columns}). Add the "
            f"column, or change which column the reward reads.",
        )
    errs = [r for r in rep.results if r.error and not r.missing_column]
    in_train = [r for r in errs if r.format == train]
    if in_train:
        cases = sorted({r.case for r in in_train})
        add(
            "error",
            f"raises on the {', '.join(cases)} completion(s): {in_train[0].error}. A reward must return a "
            f"float or None per completion and never raise (return None when it cannot judge one).",
        )
    elif errs:
        add(
            "format_crash",
            f"works on {train} completions but raises on {other} ones ({errs[0].error}). Read the "
            f"text with `c if isinstance(c, str) else c[-1]['content']` so it works for both.",
            "note",
        )
    values = [r.values for r in rep.results if r.format == train and r.values is not None]
    flat = [v for vs in values for v in vs]
    real = [v for v in flat if v is not None]
    if flat and not real:
        add(
            "all_none",
            "returned None for every completion, so TRL ignores it (NaN) on every sample. Check the "
            "column it compares with (None usually means an unparseable or empty reference).",
        )
    if len(real) >= 2 and len(set(real)) == 1:
        add(
            "constant",
            f"returned {real[0]:g} for every completion (ideal, wrong-format, empty and garbage): it "
            f"gives no learning signal. Check that it reads the completion and the right column.",
            "note" if rep.kind == "length" else "error",
        )
    budget = budget_ms if budget_ms is not None else DEFAULT_BUDGET_MS.get(rep.kind, DEFAULT_BUDGET)
    ms = rep.ms_per_completion
    if ms is not None and ms > budget and not rep.timed_out:
        add(
            "slow",
            f"takes {ms:.0f} ms per completion (budget {budget:.0f} ms): at 256 completions per step that "
            f"is {ms * 256 / 1000:.0f} s of reward time per step. Cache, vectorise or batch the work.",
        )
    if ref and rep.kind != "length" and real and len(set(real)) > 1:
        _expectations(rep, train, ref, "error" if rep.kind in EXPECTING_KINDS else "note")


def _expectations(rep: RewardReport, fmt: str, ref: str, severity: str) -> None:
    by_case = {case: rep.values(case, fmt) for case in CASES}
    n = len(next(v for v in by_case.values() if v is not None))
    ideal_low: list[tuple[int, float, str, float]] = []
    empty_high: list[tuple[int, float, float]] = []
    garbage_high: list[tuple[int, float, float]] = []
    for i in range(n):
        row: dict[str, float] = {c: x for c, v in by_case.items() if v is not None and (x := v[i]) is not None}
        if "ideal" not in row or len(row) < 2:
            continue
        top, bottom = max(row.values()), min(row.values())
        if row["ideal"] < top:
            beaten = max((c for c in row if c != "ideal"), key=lambda c: row[c])
            ideal_low.append((i, row["ideal"], beaten, row[beaten]))
        for case, bucket in (("empty", empty_high), ("garbage", garbage_high)):
            if case in row and row[case] > bottom:
                bucket.append((i, row[case], bottom))
    if ideal_low:
        i, v, case, w = ideal_low[0]
        rep.flags.append(
            Flag(
                rep.name,
                "ideal_not_max",
                f"the ideal completion (reference answer from {ref!r}) "
                f"scores {v:g} on {len(ideal_low)} row(s) (first: row {i}), below the {case} "
                f"completion's {w:g}. Check how it extracts the answer and which column it compares "
                f"with (or pass --ideal-template if your format differs).",
                severity,
            )
        )
    for case, bucket in (("empty", empty_high), ("garbage", garbage_high)):
        if bucket:
            i, v, low = bucket[0]
            rep.flags.append(
                Flag(
                    rep.name,
                    f"{case}_not_min",
                    f"the {case} completion scores {v:g} on "
                    f"{len(bucket)} row(s) (first: row {i}), above the minimum {low:g}: it pays for "
                    f"a useless completion.",
                    severity,
                )
            )


def _cross_check(reports: list[RewardReport], fmt: str) -> None:
    """Format rewards must penalise a correct answer in the wrong format; accuracy rewards need not."""
    fmt_rewards = [r for r in reports if r.kind == "format"]
    for r in reports:
        ideal, wrong = r.values("ideal", fmt), r.values("wrong_format", fmt)
        if ideal is None or wrong is None:
            continue
        pairs = [(a, b) for a, b in zip(ideal, wrong, strict=True) if a is not None and b is not None]
        if not pairs:
            continue
        if r.kind == "format" and all(b >= a for a, b in pairs):
            r.flags.append(
                Flag(
                    r.name,
                    "format_blind",
                    f"scores a correct answer without the expected format "
                    f"({pairs[0][1]:g}) as high as the ideal completion ({pairs[0][0]:g}): it does not "
                    f"check the format, so it cannot disagree with the accuracy reward.",
                )
            )
        elif r.kind == "accuracy" and fmt_rewards and all(b < a for a, b in pairs):
            r.flags.append(
                Flag(
                    r.name,
                    "needs_format",
                    f"also requires the format (a correct bare answer scores "
                    f"{pairs[0][1]:g}, the ideal {pairs[0][0]:g}), so the format is rewarded twice "
                    f"(here and in {fmt_rewards[0].name}). Fine if intended.",
                    "note",
                )
            )


def check_rewards_main(argv: list[str] | None = None) -> int:
    """`check-rewards SPEC [--rows N] [--json]`: exit 0 all good, 1 a reward is flagged, 2 unreadable input."""
    from grpo_dashboard.errors import SpecError

    p = argparse.ArgumentParser(
        prog="python -m grpo_dashboard check-rewards",
        description="Run every reward of a spec on real rows: ideal, wrong-format, empty and "
        "garbage completions, in a sandbox.",
    )
    p.add_argument("spec", help="Run spec YAML file.")
    p.add_argument("--rows", type=int, default=8, help="Dataset rows to use (default 8).")
    p.add_argument("--json", action="store_true", help="Print the report as JSON.")
    p.add_argument(
        "--budget-ms",
        type=float,
        default=None,
        help=f"Time budget per completion (default {DEFAULT_BUDGET:g} ms; code rewards 2000 ms).",
    )
    p.add_argument("--timeout", type=float, default=120.0, help="Seconds allowed per reward (default 120).")
    p.add_argument("--reference-column", default=None, help="Column with the reference answers.")
    p.add_argument("--ideal-template", default=IDEAL_TEMPLATE, help="Ideal completion; {answer} is replaced.")
    args = p.parse_args(argv)
    if not Path(args.spec).is_file():
        print(f"Spec file {args.spec!r} does not exist.", file=sys.stderr)
        return 2
    try:
        report = check_rewards(
            args.spec,
            n_rows=args.rows,
            budget_ms=args.budget_ms,
            timeout_s=args.timeout,
            reference_column=args.reference_column,
            ideal_template=args.ideal_template,
        )
    except SpecError as exc:
        print(str(exc), file=sys.stderr)
        return 2
    except (DatasetFileError, RuntimeError, ValueError) as exc:
        print(f"Cannot run the reward check: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(report.to_dict(), indent=2, default=str) if args.json else report.to_text())
    return 0 if report.ok else 1
