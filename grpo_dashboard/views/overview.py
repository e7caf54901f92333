"""What the dashboard shows about runs, without gradio: the runs table, run status text, health badges (cached per
change token), the equivalent command of a spec, and the spec fields that differ between runs.

Everything here only reads the store and run files; ingestion is the Monitor thread's job.
"""

from __future__ import annotations

import functools
import re
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from grpo_dashboard.launch.backends import Backends, shared
from grpo_dashboard.spec import safe_yaml
from grpo_dashboard.spec.run_spec import RunSpec
from grpo_dashboard.store import ingest
from grpo_dashboard.store.db import ACTIVE, TERMINAL, Run, RunStatus, Store, StoreError, token_text
from grpo_dashboard.views import forecast as forecast_view
from grpo_dashboard.views.completions import recent_samples
from grpo_dashboard.views.memo import LruCache, SingleFlight
from grpo_dashboard.views.run_data import metric_frame, run_spec

STATUSES = tuple(s.value for s in RunStatus)
MARKER = ingest.MARKER.strip()  # prefix of the job's protocol lines in job.log
RUN_COLUMNS = (
    "name",
    "differs",
    "note",
    "status",
    "health",
    "progress",
    "elapsed",
    "ETA",
    "reward",
    "forecast",
    "backend",
    "tags",
    "started",
    "id",
)
# Plain glyphs (present in common fonts, unlike emoji on minimal Linux machines).
STATUS_ICON = {"queued": "◌", "running": "▶", "completed": "✔", "failed": "✖", "canceled": "■"}
HEALTH_ICON = {"ok": "●", "info": "ℹ", "warning": "▲", "error": "✖"}
HEALTH_COLOR = {"ok": "#1a7f37", "info": "#0969da", "warning": "#bc4c00", "error": "#b42318"}


def fmt_duration(seconds: float | None) -> str:
    """1h02m, 3m05s, 42s; empty for unknown."""
    if seconds is None or seconds < 0:
        return ""
    s = int(round(seconds))
    if s >= 3600:
        return f"{s // 3600}h{(s % 3600) // 60:02d}m"
    if s >= 60:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s}s"


def elapsed_s(run: Run, now: float | None = None) -> float | None:
    """Seconds the run has been (or was) running."""
    start = run.started_at or run.created_at
    if start is None:
        return None
    end = run.ended_at if run.status in TERMINAL and run.ended_at else (now or time.time())
    return max(0.0, end - start)


def eta_s(run: Run, now: float | None = None, pace: float | None = None) -> float | None:
    """Remaining seconds; None when unknown or ended. `pace` (seconds per step, `recent_pace`) is the recent step
    rate; without it, the pace from the start to the last logged step (which counts model loading as training), but
    not before the third record: at step 1 that pace is mostly the model's loading (an ETA many times too long)."""
    if run.status in TERMINAL or not run.max_steps or not run.last_step or not run.started_at:
        return None
    if pace is None and (run.n_records or 0) < 3:
        return None
    if pace is None:
        last = run.last_time or now or time.time()
        pace = (last - run.started_at) / max(run.last_step, 1)
    return max(0.0, (run.max_steps - run.last_step) * pace)


PACE_WINDOW = 20  # logged steps the recent step rate is measured over


def recent_pace(store: Store, run: Run, window: int = PACE_WINDOW) -> float | None:
    """Seconds per step over the run's last `window` logged train records, leaving out the first record (its time
    includes loading the model and the first generation: warm-up); None until two records past it exist."""
    if not run.is_active or not run.n_records or run.n_records < 3:
        return None
    heads = store.series_heads(run.id)
    key = next(
        (k for k in (("train", "loss"), ("train", "reward")) if k in heads),
        next((k for k in heads if k[0] == "train"), None),
    )
    if key is None:
        return None
    n, last = heads[key]
    whole = n <= 4 * window + 1  # short: read it all (the first record is left out below)
    a = store.arrays(run.id, key[1], key[0], None if whole else max(0, last - 4 * window * max(1, last // n)))
    steps, times = (a.steps[1:], a.times[1:]) if whole else (a.steps, a.times)
    steps, times = steps[-window:], times[-window:]
    ok = np.isfinite(times)
    steps, times = steps[ok], times[ok]
    if len(steps) < 2 or steps[-1] <= steps[0]:
        return None
    return float((times[-1] - times[0]) / (steps[-1] - steps[0]))


def progress_text(run: Run, width: int = 10) -> str:
    """`▰▰▰▱▱▱▱▱▱▱ 30/100` style bar; just the step when max_steps is unknown."""
    if run.progress is None:
        return f"step {run.last_step}" if run.last_step is not None else ""
    filled = int(round(run.progress * width))
    return f"{'▰' * filled}{'▱' * (width - filled)} {run.last_step}/{run.max_steps}"


def fmt_value(value: float | None, digits: int = 4) -> str:
    """A metric value for tables: 4 significant digits, blank for None."""
    if value is None:
        return ""
    return f"{value:.{digits}g}"


# --- health --------------------------------------------------------------------------------------------------
HEALTH_MIN_INTERVAL_S = 5.0  # a live run's findings are recomputed at most this often (diagnose reads every record)
HEALTH_CACHE_RUNS = 512  # findings kept in memory (by store and run); a finished run's badge is in the store anyway


class FindingsCache:
    """The doctor's latest findings per (store, run) with the change token they were computed at, at most `size` runs;
    concurrent requests for one run share one computation (SingleFlight). `replays` keeps each run's history replay
    (`health.HistoryReplay`) between computations, so a live run's growing log replays only the cut points it passed
    since (not every one from the start, each time); `badges` holds badges of live runs judged from the latest
    evaluation alone (the runs table), with when."""

    def __init__(self, size: int = HEALTH_CACHE_RUNS) -> None:
        self.entries: LruCache[tuple[str, str], tuple[tuple[Any, ...], float, list[Any]]] = LruCache(size)
        self.replays: LruCache[tuple[str, str], tuple[tuple[Any, ...], Any]] = LruCache(size)
        self.badges: LruCache[tuple[str, str], tuple[tuple[Any, ...], float, str]] = LruCache(size)
        self.flight = SingleFlight()


FINDINGS = FindingsCache()


def health_available() -> bool:
    """True when the health doctor can be imported."""
    try:
        from grpo_dashboard.health import diagnose  # noqa: F401
    except ImportError:
        return False
    return True


def run_config(run: Run) -> tuple[dict[str, Any], dict[str, Any]]:
    """(config for the doctor, threshold overrides) from the run's spec YAML."""
    spec = run_spec(run)
    if spec is None:
        return {}, {}
    config = {**spec.training, "reward_names": [r.name for r in spec.rewards], "reward_weights": spec.reward_weights}
    return config, dict(spec.health.thresholds)


def findings(store: Store, run: Run) -> list[Any]:
    """The doctor's findings for a run, recomputed only when its change token moves (and for an active run at
    most every HEALTH_MIN_INTERVAL_S seconds); [] without the doctor. Concurrent callers share one computation; while
    it runs, callers that have earlier findings of the run get those."""
    token = store.change_token(run.id)
    key = (str(store.path), run.id)

    def fresh() -> list[Any] | None:
        cached = FINDINGS.entries.get(key)
        if cached is not None and (
            cached[0] == token or (run.is_active and time.monotonic() - cached[1] < HEALTH_MIN_INTERVAL_S)
        ):
            return cached[2]
        return None

    def compute() -> list[Any]:
        result = fresh()  # another caller may have finished it while this one queued
        if result is not None:
            return result
        try:
            from grpo_dashboard.health import Finding, ThresholdError
        except ImportError:
            return []
        try:
            # The run's record: every finding that fired keeps its first onset (and is shown resolved, with when,
            # once it stops firing), the same replay `doctor` does on the run's metrics.jsonl.
            frame = metric_frame(store, run.id, token)
            replay = _replay(store, run, key, frame, Finding)
            result = list(replay.update(frame, recent_samples(run.run_dir, output_dir=run.output_dir)))
        except ThresholdError as exc:  # bad threshold overrides in the spec
            result = [_BadThresholds(str(exc))]
        else:
            try:
                store.save_findings(run.id, [f.to_dict() for f in result])
            except StoreError:  # a read-only data directory: the history is only replayed next time
                pass
        FINDINGS.entries.put(key, (token, time.monotonic(), result))
        return result

    cached = fresh()
    if cached is not None:
        return cached
    stale = FINDINGS.entries.get(key)
    if stale is not None and FINDINGS.flight.busy(key):
        return stale[2]  # being recomputed by another caller: the previous findings rather than a wait
    return FINDINGS.flight.do(key, compute)


def _replay(store: Store, run: Run, key: tuple[str, str], frame: Any, finding: Any) -> Any:
    """The run's history replay, continued from the last computation while the log only grew (a run whose log was
    cut, resumed from earlier or re-imported starts over from its saved record, as `finding_history` does)."""
    from grpo_dashboard.health.history import HistoryReplay

    origin = (run.spec_yaml, run.started_at)
    kept = FINDINGS.replays.get(key)
    if kept is not None and kept[0] == origin and kept[1].committed is not None:
        segment, step = kept[1].committed  # the (run within the log, step) replayed last
        segments = frame.segments
        if segment < len(segments) and any(np.any(c.steps == step) for c in segments[segment].columns.values()):
            return kept[1]
    config, thresholds = run_config(run)
    saved = store.findings(run.id)
    previous = [finding(**{k: v for k, v in f.items() if k in _FINDING_FIELDS}) for f in saved]
    replay = HistoryReplay(config, thresholds or None, previous)
    FINDINGS.replays.put(key, (origin, replay))
    return replay


_FINDING_FIELDS = ("rule", "severity", "step", "message", "remedy", "metric", "evidence", "status", "resolved_step")


class _BadThresholds:
    """A finding-like object for a spec whose health thresholds the doctor rejects."""

    def __init__(self, message: str) -> None:
        self.rule, self.severity, self.step, self.metric = "health.thresholds", "warning", 0, None
        self.message, self.remedy = message, "Fix `health.thresholds` in the run spec."
        self.status, self.resolved_step = "active", None


def health_badge(store: Store, run: Run, saved: dict[str, tuple[str, str]] | None = None) -> str:
    """`🟢 ok`, `🟠 2 warnings`, `🔴 1 error`; `—` when the doctor is unavailable or nothing is logged.

    The badge is saved in the store with the run's change token, so a runs table of hundreds of finished runs is
    read, not re-diagnosed, in a freshly started dashboard; `saved`: `store.health_badges()` read once by the caller.
    """
    if not health_available() or not run.n_records:
        return "—"
    token = store.change_token(run.id)
    known = (saved if saved is not None else store.health_badges()).get(run.id)
    if known is not None and known[0] == token_text(token):
        return known[1]
    badge = _judged_badge(store, run, token)
    if run.status in TERMINAL:  # a live run's badge moves with every record: kept in memory only (findings cache)
        try:
            store.save_health_badge(run.id, token, badge)
        except StoreError:  # a read-only data directory: the badge is only recomputed next time
            pass
    return badge


def _judged_badge(store: Store, run: Run, token: tuple[Any, ...]) -> str:
    """The badge of the run's active findings. Those are exactly what the doctor finds on the log as it is now (the
    history replay only adds resolved entries and earlier onsets), so the badge needs one evaluation, not the replay
    of every cut point: a table of hundreds of never-seen runs is judged in one pass. Findings already in memory
    (a run page was open) are used as they are; a rule that fails leaves its earlier findings standing in the
    history, so then the history decides."""
    key = (str(store.path), run.id)
    cached = FINDINGS.entries.get(key)
    if cached is not None and cached[0] == token:
        return badge_text([f for f in cached[2] if f.status == "active"])
    kept = FINDINGS.badges.get(key)
    if kept is not None and (
        kept[0] == token or (run.is_active and time.monotonic() - kept[1] < HEALTH_MIN_INTERVAL_S)
    ):
        return kept[2]
    from grpo_dashboard.health import ThresholdError, diagnose
    from grpo_dashboard.health.findings import is_rule_failure

    config, thresholds = run_config(run)
    try:
        now = diagnose(
            metric_frame(store, run.id, token),
            config,
            thresholds or None,
            recent_samples(run.run_dir, output_dir=run.output_dir),
        )
    except ThresholdError:  # bad threshold overrides: findings() reports them
        now = None
    if now is None or any(map(is_rule_failure, now)):
        badge = badge_text([f for f in findings(store, run) if f.status == "active"])
    else:
        badge = badge_text(now)
    FINDINGS.badges.put(key, (token, time.monotonic(), badge))
    return badge


def badge_text(active: list[Any]) -> str:
    """The badge of a run's active findings; a rule that crashed adds `⚠ N rule failed`, so an unchecked run never
    reads `ok`."""
    from grpo_dashboard.health.findings import is_rule_failure

    failed = sum(map(is_rule_failure, active))
    found = [f for f in active if not is_rule_failure(f)]
    if not found:
        badge = f"{HEALTH_ICON['ok']} ok"
    else:
        worst = max(found, key=lambda f: {"info": 0, "warning": 1, "error": 2}.get(f.severity, 0))
        n = sum(1 for f in found if f.severity == worst.severity)
        badge = f"{HEALTH_ICON.get(worst.severity, '•')} {n} {worst.severity}{'s' if n != 1 else ''}"
    if failed:
        failure = f"⚠ {failed} rule{'s' if failed != 1 else ''} failed"
        badge = f"{badge} · {failure}" if found else failure
    return badge


def findings_markdown(store: Store, run: Run) -> str:
    """The findings panel: one entry per finding with its step, message and remedy."""
    if not health_available():
        return f"Health checks unavailable; status: **{run.status}**."
    if not run.n_records:
        return "No metrics logged yet: health checks start with the first log record."
    found = findings(store, run)
    if not found:
        return f"{_badge('ok')}: no health problems found in {run.n_records} log records."
    lines = []
    for f in found:
        metric = f" (`{f.metric}`)" if f.metric else ""
        if f.status == "resolved":
            lines.append(
                f"- ~~{f.severity}~~ resolved **{f.rule}**{metric} from step {f.step} to step "
                f"{f.resolved_step}: {f.message}"
            )
            continue
        lines.append(
            f"- {_badge(f.severity)} **{f.rule}**{metric} from step {f.step}: {f.message}<br>*Remedy:* {f.remedy}"
        )
    return "\n".join(lines)


def _badge(severity: str) -> str:
    color = HEALTH_COLOR.get(severity, "#57606a")
    return f'<span style="color:{color};font-weight:600">{HEALTH_ICON.get(severity, "•")} {severity}</span>'


# --- runs table ----------------------------------------------------------------------------------------------
_MAY_TAG = re.compile(r"\b(tags|group)\b")


def run_tags(run: Run) -> list[str]:
    """The run's tags and, as `group:NAME`, its group (from its spec; an imported run is tagged `imported`)."""
    if not _MAY_TAG.search(run.spec_yaml):  # neither key anywhere in the text: no spec to parse (a fresh dashboard)
        return []
    spec = run_spec(run)
    if spec is None:
        return []
    return [*spec.tags, *([f"group:{spec.group}"] if spec.group else [])]


def runs_frame(
    store: Store,
    statuses: list[str] | None = None,
    now: float | None = None,
    runs: list[Run] | None = None,
    tag: str | None = None,
) -> pd.DataFrame:
    """The runs table, newest first, optionally filtered by status and by a tag or `group:NAME`; `runs`: only
    these (a user's own)."""
    now = now or time.time()
    rows = []
    if runs is None:
        runs = store.list_runs(status=list(statuses) if statuses else None)
    if tag and tag.strip():
        runs = [r for r in runs if tag.strip() in run_tags(r)]
    saved = store.health_badges() if runs else {}
    differs = differences(runs)
    notes = store.notes() if runs else {}
    cells = store.forecast_cells() if runs else {}
    for run in runs:
        latest = store.latest_metrics(run.id) if run.n_records else {}
        rows.append(
            {
                "name": run.name,
                "differs": differs.get(run.id, ""),
                "note": _short(notes.get(run.id, "")),
                "status": f"{STATUS_ICON.get(run.status, '')} {run.status}",
                "health": health_badge(store, run, saved),
                "progress": progress_text(run),
                "elapsed": fmt_duration(elapsed_s(run, now)),
                "ETA": fmt_duration(eta_s(run, now, recent_pace(store, run))),
                "reward": fmt_value(latest.get("reward")),
                "forecast": forecast_view.forecast_cell(store, run, cells),
                "backend": run.backend,
                "tags": ", ".join(run_tags(run)),
                "started": time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(run.started_at or run.created_at)),
                "id": run.id,
            }
        )
    return pd.DataFrame(rows, columns=list(RUN_COLUMNS))


def _short(text: str, n: int = 60) -> str:
    text = " ".join(text.split())
    return text if len(text) <= n else text[: n - 1] + "…"


def run_label(run: Run, differs: str = "") -> str:
    """Dropdown label of a run (no status: a selected label is not refreshed when the status moves), with what sets
    it apart from runs of the same name."""
    return f"{run.name} · {run.id}" + (f" · {differs}" if differs else "")


def run_choices(store: Store, runs: list[Run] | None = None) -> list[tuple[str, str]]:
    """(label, id) pairs of every run (or of `runs`), newest first."""
    runs = store.list_runs() if runs is None else runs
    differs = differences(runs)
    return [(run_label(r, differs.get(r.id, "")), r.id) for r in runs]


def preparing_message(store: Store, run: Run) -> str | None:
    """What an active run that has logged no step yet reports it is doing (its latest `preparing` event: the
    agent model's warm-up), or None."""
    if not run.is_active or run.last_step is not None:
        return None
    event = store.latest_event(run.id, "preparing")
    return str(event.get("message") or "") or None if event else None


def status_markdown(
    run: Run, now: float | None = None, pace: float | None = None, preparing: str | None = None
) -> str:
    """Status block of the run detail page; `pace`: the recent seconds per step (`recent_pace`); `preparing`: the
    job's own report of its work before the first step (`preparing_message`)."""
    now = now or time.time()
    parts = [f"**{STATUS_ICON.get(run.status, '')} {run.status}** · `{run.id}` · backend {run.backend}"]
    prog = progress_text(run)
    if prog:
        parts.append(f"progress {prog}")
    parts.append(f"elapsed {fmt_duration(elapsed_s(run, now)) or '—'}")
    eta = eta_s(run, now, pace)
    if eta is not None:
        parts.append(f"ETA {fmt_duration(eta)}")
    text = " · ".join(parts)
    if run.status in ACTIVE and run.cancel_requested_at:
        text += (
            f"\n\n**Cancel requested** at {time.strftime('%H:%M:%S', time.localtime(run.cancel_requested_at))}: "
            f"waiting for the job to stop…"
        )
    elif run.status in ACTIVE and preparing:
        text += f"\n\nPreparing: {preparing}"
    elif run.status in ACTIVE and not run.n_records:
        text += "\n\nWaiting for the first log record (model loading / first steps)…"
    if run.error:
        text += f"\n\n**Error:** {run.error}"
    if run.n_skipped:
        text += f"\n\n{run.n_skipped} malformed or conflicting values were skipped during ingestion."
    return text


def spec_settings(run: Run) -> dict[str, Any]:
    """beta and max_completion_length the charts need (TRL defaults when the spec leaves them unset)."""
    from grpo_dashboard.spec import trl_fields

    spec = run_spec(run)
    if spec is None:
        return {"beta": None, "max_completion_length": None}
    return {
        "beta": trl_fields.effective(spec.training, "beta"),
        "max_completion_length": trl_fields.effective(spec.training, "max_completion_length"),
    }


# --- command view and compare ----------------------------------------------------------------------------------
def log_text(path: Path, n: int = 200) -> str:
    """The job log's last lines for people: protocol records (behind the marker) dropped, progress bars kept."""
    from grpo_dashboard.launch.logs import tail

    lines = []
    for line in tail(path, n * 3).splitlines():
        if MARKER in line:
            line = line.split(MARKER, 1)[0].rstrip()
        if line.strip():
            lines.append(line)
    return "\n".join(lines[-n:])


def command_text(spec_yaml: str, preview: tuple[str, str] | None = None) -> str:
    """The shell commands that launch this spec from the CLI, and what its backend runs when known (`preview`:
    (what it is, the text), from `command_preview`)."""
    lines = [
        "# Save the spec, then launch and follow it:",
        "cat > run.yaml <<'EOF'",
        spec_yaml.rstrip("\n"),
        "EOF",
        "python -m grpo_dashboard launch run.yaml --wait",
    ]
    if preview:
        what, text = preview
        lines += ["", f"# {what}", text.rstrip("\n")]
    return "\n".join(lines)


def command_preview(spec: RunSpec, backends: Backends | None = None) -> tuple[str, str] | None:
    """What the spec's backend would run (its `command_preview`); None for a kind no backend here runs."""
    table = backends or shared()
    return table.get(spec.backend.kind).command_preview(spec) if spec.backend.kind in table else None


def flatten(data: Any, prefix: str = "") -> dict[str, Any]:
    """Nested dicts (and lists of dicts) as dotted keys: rewards[0].weight, training.beta, ..."""
    out: dict[str, Any] = {}
    if isinstance(data, dict):
        for k, v in data.items():
            out.update(flatten(v, f"{prefix}.{k}" if prefix else str(k)))
    elif isinstance(data, list) and any(isinstance(v, dict) for v in data):
        for i, v in enumerate(data):
            out.update(flatten(v, f"{prefix}[{i}]"))
    else:
        out[prefix] = data
    return out


def _spec_dict(run: Run) -> dict[str, Any]:
    data = safe_yaml.load(run.spec_yaml) or {}
    for path_key in ("output_dir",):
        data.pop(path_key, None)
    return flatten(data)


DIFFERS_SHOWN = 3  # differing fields named per run in the table and the pickers


@functools.lru_cache(maxsize=1024)
def _flat_spec(spec_yaml: str) -> tuple[tuple[str, str], ...]:
    try:
        data = safe_yaml.load(spec_yaml) or {}
    except Exception:  # an unreadable stored spec only loses its differences
        return ()
    data.pop("output_dir", None)
    return tuple((k, repr(v)) for k, v in flatten(data).items() if k != "name")


def differences(runs: list[Run]) -> dict[str, str]:
    """Run id -> the spec fields in which it differs from the other runs of the same name (`training.beta=0.04,
    max_steps=300`, short keys, at most DIFFERS_SHOWN), for names used by more than one run."""
    by_name: dict[str, list[Run]] = {}
    for r in runs:
        by_name.setdefault(r.name, []).append(r)
    out: dict[str, str] = {}
    for group in by_name.values():
        if len(group) < 2:
            continue
        flats = [dict(_flat_spec(r.spec_yaml)) for r in group]
        keys = sorted({k for f in flats for k in f})
        varying = [k for k in keys if len({f.get(k) for f in flats}) > 1]
        for r, flat in zip(group, flats, strict=True):
            parts = [f"{k.removeprefix('training.')}={flat.get(k, '—').strip(chr(39))}" for k in varying]
            text = ", ".join(parts[:DIFFERS_SHOWN]) + (
                f" +{len(parts) - DIFFERS_SHOWN}" if len(parts) > DIFFERS_SHOWN else ""
            )
            out[r.id] = text or "same spec"
    return out


def spec_diff(runs: list[Run]) -> pd.DataFrame:
    """The spec fields whose values differ between runs (one column per run); run-specific paths are left out."""
    flats = [_spec_dict(r) for r in runs]
    keys: list[str] = []
    for f in flats:
        keys.extend(k for k in f if k not in keys)
    headers = [f"{r.name} ({r.id[-6:]})" for r in runs]
    rows = []
    for k in keys:
        values = [f.get(k, "—") for f in flats]
        if len({repr(v) for v in values}) > 1:
            rows.append([k, *[str(v) for v in values]])
    return pd.DataFrame(rows, columns=["field", *headers])
