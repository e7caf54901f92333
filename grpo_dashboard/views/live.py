"""What a live Run detail page is sent, without any web framework: one `Feed` per (run, smoothing), advanced once
per run state and shared by every viewer of it.

A feed keeps, for each drawn series, the steps of the display points it has already published. When the run's change
token moves, `advance` reads the display series (`display.run_series`, itself incremental) and publishes a new
version: per series, how many of the published points stay (`keep`: the display reduction only ever rewrites its
tail) and the points after them, with the status line, the findings and the log tail when they changed. A viewer
holding version v gets the versions after v (`since`); one without a usable cursor, or after a change of the charts'
make-up (a new series, new finding markers), gets a snapshot: every panel's full figure, built once per version and
chart options.
"""

from __future__ import annotations

import html
import json
import secrets
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from grpo_dashboard.launch.backends import Backends
from grpo_dashboard.store.db import Run, Store
from grpo_dashboard.store.series import SYSTEM_SPLIT
from grpo_dashboard.views import charts, completions, display, overview

KEEP_VERSIONS = 64  # versions a feed remembers: a viewer further behind gets a snapshot
STATUS_EVERY_S = 2.0  # an active run's status line (elapsed, ETA) is republished at least this often
LOG_LINES = 200


def common_prefix(old: np.ndarray | None, new: np.ndarray) -> int:
    """How many leading entries of `old` and `new` are equal (vectorised)."""
    if old is None:
        return 0
    n = min(len(old), len(new))
    differ = np.flatnonzero(old[:n] != new[:n])
    return int(differ[0]) if differ.size else n


def series_delta(points: Any, keep: int) -> dict[str, Any]:
    """The points of a display series after its first `keep` (arrays; non-finite values become JSON nulls: gaps)."""
    tail = slice(keep, None)
    smooth = points.smooth if points.smooth is not None else points.values

    def c(a: np.ndarray) -> np.ndarray:
        return np.array(a, copy=True)  # a copy: a view would keep the whole display array alive in the version log

    out = {
        "keep": keep,
        "step": c(points.steps[tail]),
        "time": c(points.times[tail]),
        "value": c(points.values[tail]),
        "smooth": c(smooth[tail]),
    }
    if points.band is not None:
        out["band"] = c(points.band[tail])
    return out


def drawn_series(groups: dict[str, list[str]]) -> set[tuple[str, str]]:
    """The (split, key) series the panels draw: their train keys and eval twins, and the system samples."""
    out: set[tuple[str, str]] = set()
    for pid, keys in groups.items():
        if pid == "system":
            out.update((SYSTEM_SPLIT, key) for key in keys)
            continue
        for key in keys[:12] if pid == "other" else keys:
            out.add(("train", key))
            out.add(("eval", f"eval_{key}"))
    return out


@dataclass
class Version:
    """One published state: its number and what changed since the one before."""

    number: int
    series: dict[str, dict[str, Any]] = field(default_factory=dict)
    reset: bool = False  # the charts' make-up changed: viewers need a snapshot
    status: dict[str, Any] | None = None
    findings: str | None = None
    log: str | None = None
    samples: int | None = None  # the samples file's size, when it grew
    text: str = ""  # the JSON every viewer gets (version_json), made once


class Feed:
    """The shared live state of one run at one smoothing weight (see the module docstring). Thread-safe."""

    def __init__(
        self,
        store: Store,
        run_id: str,
        smoothing: float,
        max_points: int = display.MAX_POINTS,
        backends: Backends | None = None,
    ) -> None:
        self.store, self.run_id = store, run_id
        self.backends = backends  # the app's (None: the process's), for the backend's status lines
        self.smoothing, self.max_points = float(smoothing), int(max_points)
        self.epoch = secrets.token_hex(4)  # a cursor of another feed (or a restarted server) is not ours
        self.version = 0
        self.versions: deque[Version] = deque(maxlen=KEEP_VERSIONS)
        self._token: tuple[Any, ...] | None = None
        self._sent: dict[tuple[str, str], np.ndarray] = {}
        self._frames: dict[tuple[str, str], Any] = {}
        self._groups: dict[str, list[str]] = {}
        self._marks: charts.Marks = {}
        self._t0: float | None = None
        self._run: Run | None = None
        self._status: dict[str, Any] | None = None
        self._status_at = 0.0
        self._pace: float | None = None
        self._found: list[Any] = []
        self._findings: str | None = None
        self._log_size: int | None = None
        self._log = ""
        self._samples_size: int | None = None
        self._snapshots: dict[tuple[int, str, bool], str] = {}
        self._lock = threading.RLock()  # snapshot_and_cursor holds it around snapshot

    # --- advancing ---------------------------------------------------------------------------------------------
    def advance(self, now: float | None = None, findings: bool = True) -> bool:
        """Publish a new version if anything the page shows changed; True when one was published. With `findings`
        False the doctor's findings are not brought up to date (the ones last read stay)."""
        now = time.time() if now is None else now
        with self._lock:
            token = self.store.change_token(self.run_id)
            log, samples = _size(self._log_path()), _size(self._samples_path())
            stale_status = self._run is not None and self._run.is_active and now - self._status_at >= STATUS_EVERY_S
            if token == self._token and log == self._log_size and samples == self._samples_size and not stale_status:
                return False
            run = self.store.get_run(self.run_id)
            version = Version(self.version + 1)
            if token != self._token:
                self._advance_series(run, version, findings)
            if token != self._token:
                self._pace = overview.recent_pace(self.store, run)
            status = status_parts(run, now, self._pace, self.store, self.backends)
            if status != self._status:
                version.status = self._status = status
            self._status_at = now
            if log != self._log_size:
                self._log_size = log
                self._log = overview.log_text(self._log_path_of(run), LOG_LINES) or "(no output yet)"
                version.log = self._log
            if samples != self._samples_size and samples is not None:
                version.samples = samples
            self._samples_size = samples
            self._token, self._run = token, run
            if not (
                version.series
                or version.reset
                or version.status
                or version.findings is not None
                or version.log is not None
                or version.samples is not None
            ):
                return False
            self.version = version.number
            version.text = version_json(self, version)
            self.versions.append(version)
            self._snapshots.clear()
            return True

    def _advance_series(self, run: Run, version: Version, with_findings: bool) -> None:
        frames = display.run_series(self.store, self.run_id, self.smoothing, self.max_points)
        groups = charts.group_metrics(frames.keys())
        found = overview.findings(self.store, run) if with_findings else self._found
        self._found = found
        marks = charts.finding_marks(found, groups)
        t0 = charts.run_t0(frames, run.started_at)
        findings = findings_html(self.store, run, found)
        if findings != self._findings:
            version.findings = self._findings = findings
        if groups != self._groups or marks != self._marks or t0 != self._t0:
            version.reset = True
        drawn = drawn_series(groups)
        for ident in drawn & frames.keys():
            points = frames[ident]
            old = self._sent.get(ident)
            keep = common_prefix(old, points.steps)
            if old is not None and keep == len(old) == len(points):
                continue
            version.series[charts.series_id(ident)] = series_delta(points, keep)
            self._sent[ident] = points.steps
        self._frames, self._groups, self._marks, self._t0 = frames, groups, marks, t0

    def _log_path(self) -> Path | None:
        return self._log_path_of(self._run) if self._run is not None else None

    @staticmethod
    def _log_path_of(run: Run) -> Path:
        from grpo_dashboard.launch.runs import log_path

        return Path(log_path(run))

    def _samples_path(self) -> Path | None:
        return completions.samples_path(self._run.run_dir) if self._run is not None else None

    # --- reading -----------------------------------------------------------------------------------------------
    def cursor(self) -> str:
        """The cursor of the newest version (`epoch:version`)."""
        return f"{self.epoch}:{self.version}"

    def since(self, cursor: str | None) -> list[Version] | None:
        """The versions after `cursor` in order ([] when up to date), or None when the viewer needs a snapshot."""
        with self._lock:
            epoch, _, number = (cursor or "").partition(":")
            if epoch != self.epoch or not number.isdigit() or self.version == 0:
                return None
            have = int(number)
            if have == self.version:
                return []
            newer = [v for v in self.versions if v.number > have]
            if not newer or newer[0].number != have + 1 or any(v.reset for v in newer):
                return None
            return newer

    def snapshot_and_cursor(self, xaxis: str = "step", log_y: bool = False) -> tuple[str, str]:
        """`snapshot` and the cursor of the version it shows, read together: a version published in between would
        otherwise be counted as sent and never reach the viewer (a page left stale until the next change)."""
        with self._lock:
            return self.snapshot(xaxis, log_y), self.cursor()

    def snapshot(self, xaxis: str = "step", log_y: bool = False) -> str:
        """Every panel's full figure and the page's live parts at the newest version, as JSON (built once per
        version and options)."""
        with self._lock:
            key = (self.version, xaxis, bool(log_y))
            cached = self._snapshots.get(key)
            if cached is not None:
                return cached
            run = self._run
            opts = charts.ChartOptions(
                smoothing=self.smoothing, log_y=bool(log_y), xaxis=xaxis, max_points=self.max_points
            )
            settings = overview.spec_settings(run) if run is not None else {}
            frames, marks = self._frames, self._marks
            note = charts.axis_note(frames, xaxis)
            if xaxis in charts.METRIC_XAXES:
                mapped = charts.on_metric(frames, self.store.arrays(self.run_id, xaxis))
                frames, marks = (mapped if mapped is not None else {}), {}  # findings mark steps, not this axis
                note = None if mapped is not None else charts.metric_axis_note(xaxis)
            specs = (
                charts.noted_specs(note)
                if note is not None
                else charts.specs_of(
                    frames, opts, settings.get("beta"), settings.get("max_completion_length"), self._t0, marks
                )
            )
            from plotly.io.json import to_json_plotly

            from grpo_dashboard.views import forecast

            panels = {
                pid: to_json_plotly({"data": data, "layout": {"template": charts._TEMPLATE, **layout}})
                for pid, (data, layout) in specs.items()
            }  # plain lists: the page appends to them
            if run is not None:
                panels = forecast.overlay_plots(panels, self.store, run, xaxis)  # the fit, as the polled page has it
            rest = to_json_plotly(
                {
                    "cursor": self.cursor(),
                    "t0": self._t0,
                    "xaxis": xaxis,
                    "log_y": bool(log_y),
                    "status": self._status,
                    "findings": self._findings,
                    "log": self._log,
                    "samples": self._samples_size,
                }
            )
            body = ",".join(f"{json.dumps(pid)}:{text}" for pid, text in panels.items())
            text = rest[:-1] + ',"panels":{' + body + "}}"
            self._snapshots[key] = text
            return text


def version_json(feed: Feed, v: Version) -> str:
    """One version as the JSON a viewer gets (the same text for every viewer); `at`: when it was published."""
    return orjson.dumps(
        {
            "cursor": f"{feed.epoch}:{v.number}",
            "at": time.time(),
            "series": v.series,
            "status": v.status,
            "findings": v.findings,
            "log": v.log,
            "samples": v.samples,
        },
        option=orjson.OPT_SERIALIZE_NUMPY,
    ).decode()


def _size(path: Path | None) -> int | None:
    if path is None:
        return None
    try:
        return path.stat().st_size
    except OSError:
        return None


# --- the page's live text ------------------------------------------------------------------------------------------
def status_parts(
    run: Run,
    now: float | None = None,
    pace: float | None = None,
    store: Store | None = None,
    backends: Backends | None = None,
) -> dict[str, Any]:
    """The status block as data: its HTML (escaped), whether the run is active and whether a cancel is pending."""
    from grpo_dashboard.views import remote_status

    text = overview.status_markdown(run, now, pace, overview.preparing_message(store, run) if store else None)
    remote = remote_status.remote_markdown(run, store, backends)
    if remote:
        text += f"\n\n{remote}"
    return {
        "html": markdown_html(text),
        "active": run.is_active,
        "status": run.status,
        "cancel_requested": bool(run.cancel_requested_at) and run.is_active,
    }


def markdown_html(text: str) -> str:
    """The small markdown subset the status text uses (bold, code, paragraphs) as HTML; everything else escaped."""
    import re

    out = []
    for para in text.split("\n\n"):
        esc = html.escape(para)
        esc = re.sub(r"\*\*(.+?)\*\*", r"<strong>\1</strong>", esc)
        esc = re.sub(r"`([^`]+)`", r"<code>\1</code>", esc)
        out.append(f"<p>{esc.replace(chr(10), '<br>')}</p>")
    return "".join(out)


def findings_html(store: Store, run: Run, found: list[Any] | None = None) -> str:
    """The health panel as HTML: the findings (all text escaped), then the forecast panel."""
    from grpo_dashboard.views import forecast

    panel = forecast.panel_markdown(store, run)
    return _findings_html(store, run, found) + (markdown_to_html(panel) if panel else "")


def markdown_to_html(text: str) -> str:
    """Markdown (tables included) as HTML, with any raw HTML in it escaped."""
    from markdown_it import MarkdownIt

    return MarkdownIt("commonmark", {"html": False}).enable("table").enable("strikethrough").render(text)


def _findings_html(store: Store, run: Run, found: list[Any] | None = None) -> str:
    """The findings as HTML: one entry per finding with its step, message and remedy (all text escaped)."""
    if not overview.health_available():
        return f"<p>Health checks unavailable; status: <strong>{html.escape(run.status)}</strong>.</p>"
    if not run.n_records:
        return "<p>No metrics logged yet: health checks start with the first log record.</p>"
    found = overview.findings(store, run) if found is None else found
    if not found:
        return f"<p>{_badge('ok')}: no health problems found in {run.n_records} log records.</p>"
    items = []
    for f in found:
        metric = f" (<code>{html.escape(str(f.metric))}</code>)" if f.metric else ""
        if getattr(f, "status", None) == "resolved":
            items.append(
                f"<li><s>{html.escape(str(f.severity))}</s> resolved <strong>{html.escape(str(f.rule))}"
                f"</strong>{metric} from step {int(f.step)} to step {f.resolved_step}: "
                f"{html.escape(str(f.message))}</li>"
            )
            continue
        items.append(
            f"<li>{_badge(f.severity)} <strong>{html.escape(str(f.rule))}</strong>{metric} from step "
            f"{int(f.step)}: {html.escape(str(f.message))}<br><em>Remedy:</em> {html.escape(str(f.remedy))}"
            f"</li>"
        )
    return "<ul>" + "".join(items) + "</ul>"


def _badge(severity: str) -> str:
    color = overview.HEALTH_COLOR.get(severity, "#57606a")
    icon = overview.HEALTH_ICON.get(severity, "•")
    return f'<span style="color:{color};font-weight:600">{icon} {html.escape(severity)}</span>'


class Feeds:
    """Feeds by (store, run, smoothing), created on first use; `drop` forgets one."""

    def __init__(self, factory: Callable[..., Feed] = Feed) -> None:
        self._feeds: dict[tuple[str, str, float], Feed] = {}
        self._lock = threading.Lock()
        self.factory = factory

    def get(self, store: Store, run_id: str, smoothing: float) -> Feed:
        """The feed of this run and smoothing (RunNotFound when the run does not exist)."""
        key = (str(store.path), run_id, round(float(smoothing), 3))
        with self._lock:
            feed = self._feeds.get(key)
            if feed is None:
                store.get_run(run_id)  # raises RunNotFound
                feed = self._feeds[key] = self.factory(store, run_id, key[2])
            return feed

    def drop(self, feed: Feed) -> None:
        """Forget a feed (its viewers are gone)."""
        with self._lock:
            for key, value in list(self._feeds.items()):
                if value is feed:
                    del self._feeds[key]

    def __len__(self) -> int:
        with self._lock:
            return len(self._feeds)

    def __contains__(self, feed: object) -> bool:
        with self._lock:
            return any(f is feed for f in self._feeds.values())
