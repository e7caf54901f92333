"""Alerts for health findings: a JSON POST to a webhook (Slack- and Discord-compatible) and a trackio mirror.

Posting never breaks training: requests go out from one background thread with a timeout, and a failure is only
written to stderr. Standard library only (``urllib``); trackio is imported lazily and is optional.
"""

from __future__ import annotations

import json
import queue
import sys
import threading
import urllib.error
import urllib.request
from collections.abc import Mapping
from typing import Any

from .findings import ERROR, Finding

TIMEOUT_S = 5.0
_ICON = {"warning": "⚠️", "error": "🛑"}
_DISCORD_LIMIT = 2000  # Discord rejects a `content` longer than this


def alert_text(finding: Finding, run_name: str | None = None, stopped: bool = False) -> str:
    """One human-readable message: run, what happened, rule, onset step, what is wrong and the remedy."""
    run = f"GRPO run {run_name!r}" if run_name else "GRPO run"
    what = "stopped by the health guard on" if stopped else finding.severity
    return (
        f"{_ICON.get(finding.severity, '')} {run}: {what} {finding.rule} (since step {finding.step}).\n"
        f"{finding.message}\nRemedy: {finding.remedy}"
    ).strip()


def alert_payload(finding: Finding, run_name: str | None = None, stopped: bool = False) -> dict[str, Any]:
    """The JSON body: ``text`` (Slack), ``content`` (Discord) and the structured finding for other receivers."""
    text = alert_text(finding, run_name, stopped)
    content = text if len(text) <= _DISCORD_LIMIT else text[: _DISCORD_LIMIT - 1] + "…"
    return {
        "text": text,
        "content": content,
        "source": "grpo-dashboard",
        "run": run_name,
        "event": "guard_stop" if stopped else "finding",
        "finding": finding.to_dict(),
    }


def post_json(url: str, payload: Mapping[str, Any], timeout: float = TIMEOUT_S) -> str | None:
    """POST ``payload`` as JSON; returns None on a 2xx answer, else a one-line reason (never raises)."""
    try:
        body = json.dumps(payload, allow_nan=False, default=str).encode("utf-8")
        headers = {"Content-Type": "application/json", "User-Agent": "grpo-dashboard"}
        request = urllib.request.Request(url, data=body, method="POST", headers=headers)
        with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310 - the user's own URL
            status = getattr(response, "status", 200)
            return None if 200 <= status < 300 else f"HTTP {status}"
    except urllib.error.HTTPError as exc:
        return f"HTTP {exc.code} {exc.reason}"
    except Exception as exc:  # noqa: BLE001 - URLError, timeouts, bad URLs: report, never raise
        return f"{type(exc).__name__}: {exc}"


def trackio_alert(finding: Finding, run_name: str | None = None, stopped: bool = False) -> str | None:
    """Mirror a finding with ``trackio.alert`` on the current trackio run; the reason when it cannot (never raises)."""
    try:
        import trackio
    except ImportError:
        return "trackio is not installed"
    try:
        level = trackio.AlertLevel.ERROR if finding.severity == ERROR else trackio.AlertLevel.WARN
        title = f"{'guard stop' if stopped else finding.severity}: {finding.rule} (step {finding.step})"
        trackio.alert(title=title, text=alert_text(finding, run_name, stopped), level=level)
    except Exception as exc:  # noqa: BLE001 - no active trackio run, an older trackio, ...
        return f"{type(exc).__name__}: {exc}"
    return None


class AlertSender:
    """Sends alerts from one daemon thread so a slow or dead webhook never stalls a training step.

    Args:
        webhook_url: where to POST (None: no webhook).
        trackio: also mirror every alert with ``trackio.alert`` (call from the training thread: trackio keeps its
            current run per process, and ``send`` mirrors synchronously, which is cheap and local).
        run_name: shown in every message.
        timeout: seconds per POST.
    """

    def __init__(
        self, webhook_url: str | None, trackio: bool = False, run_name: str | None = None, timeout: float = TIMEOUT_S
    ) -> None:
        self.webhook_url, self.trackio, self.run_name, self.timeout = webhook_url, trackio, run_name, timeout
        self.sent: list[dict[str, Any]] = []
        self.failures: list[str] = []
        self._queue: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self._thread: threading.Thread | None = None
        if webhook_url:
            self._thread = threading.Thread(target=self._loop, name="grpo-health-alerts", daemon=True)
            self._thread.start()

    def send(self, finding: Finding, stopped: bool = False) -> None:
        """Queue one alert for the webhook and mirror it to trackio."""
        if self.trackio:
            reason = trackio_alert(finding, self.run_name, stopped)
            if reason:
                self._failed(f"trackio.alert: {reason}")
        if self._thread is not None:
            self._queue.put(alert_payload(finding, self.run_name, stopped))

    def close(self, timeout: float | None = None) -> None:
        """Deliver what is queued (waiting at most ``timeout`` seconds, default one POST timeout + 1) and stop."""
        if self._thread is None:
            return
        self._queue.put(None)
        self._thread.join(self.timeout + 1.0 if timeout is None else timeout)
        self._thread = None

    def _loop(self) -> None:
        while True:
            payload = self._queue.get()
            if payload is None:
                return
            assert self.webhook_url is not None
            reason = post_json(self.webhook_url, payload, self.timeout)
            if reason:
                self._failed(f"webhook POST for {payload['finding']['rule']} failed: {reason}")
            else:
                self.sent.append(payload)

    def _failed(self, reason: str) -> None:
        self.failures.append(reason)
        sys.stderr.write(f"[grpo health alerts] {reason}\n")
        sys.stderr.flush()
