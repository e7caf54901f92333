"""Alerts for health findings: a JSON POST to a webhook (Slack- and Discord-compatible) and a trackio mirror.

Posting never breaks training: requests go out from one background thread with a timeout, and a failure is only
written to stderr. Standard library only (``urllib``); trackio is imported lazily and is optional.

With ``GRPO_DASHBOARD_WEBHOOK_BLOCK_PRIVATE=1`` in the job's environment (the dashboard sets it for local jobs it
starts on a Space, which run on the Space's host) a webhook may only reach a public address: no loopback, private,
link-local or cloud-metadata address, checked on the address actually connected to, without proxies or redirects
(``webhook_url_problem`` is the same rule for the URL as written).
"""

from __future__ import annotations

import http.client
import ipaddress
import json
import os
import queue
import socket
import sys
import threading
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from typing import Any

from .findings import ERROR, Finding, is_rule_failure

TIMEOUT_S = 5.0
_ICON = {"warning": "⚠️", "error": "🛑"}
_RESOLVED_ICON = "✅"
_DISCORD_LIMIT = 2000  # Discord rejects a `content` longer than this
BLOCK_PRIVATE_ENV = "GRPO_DASHBOARD_WEBHOOK_BLOCK_PRIVATE"
# Names that only resolve inside a network (or to this host): `metadata`, `metadata.google.internal`, `*.local`, ...
_INTERNAL_SUFFIXES = (".localhost", ".internal", ".local", ".localdomain", ".home.arpa")
_NAT64 = ipaddress.ip_network("64:ff9b::/96")  # embeds an IPv4 address that a NAT64 gateway would connect to


def address_problem(ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> str | None:
    """Why a webhook must not reach this address (loopback, private, link-local/metadata, ...); None if public."""
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            ip = ip.ipv4_mapped
        elif ip in _NAT64:
            ip = ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    for kind, flag in (
        ("a loopback", ip.is_loopback),
        ("a link-local (cloud metadata range)", ip.is_link_local),
        ("an unspecified", ip.is_unspecified),
        ("a multicast", ip.is_multicast),
        ("a private", ip.is_private),
        ("a non-public", not ip.is_global),
    ):
        if flag:
            return f"{ip} is {kind} address"
    return None


def _literal_ip(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        pass
    try:  # the forms the resolver also takes as an IPv4 address: 2130706433, 0x7f.1, 127.1, ...
        return ipaddress.IPv4Address(socket.inet_aton(host))
    except (OSError, ValueError):
        return None


def webhook_url_problem(url: str) -> str | None:
    """Why a webhook URL must not be posted to from a shared host (None: fine).

    Refused: schemes other than http(s), a missing host, ``localhost`` and names that only resolve inside a network
    (single-label names, ``*.internal``, ``*.local``, ...), and literal loopback, private, link-local (cloud metadata)
    and other non-public IP addresses in any spelling. A public name may still resolve to a private address: the job
    also checks the address it connects to (``post_json`` with ``block_private``). The message names the host only,
    never the URL's path, which often is the webhook's secret.
    """
    if not isinstance(url, str) or any(c.isspace() or c == "\\" or ord(c) < 32 for c in url):
        return "the webhook URL must be a plain http(s):// URL (no spaces, backslashes or control characters)"
    try:
        parts = urllib.parse.urlsplit(url)
        host = parts.hostname
        parts.port  # noqa: B018 - raises ValueError for a bad port
    except ValueError as exc:
        return f"the webhook URL does not parse: {exc}"
    if parts.scheme.lower() not in ("http", "https"):
        scheme = f", not {parts.scheme}:" if parts.scheme else ""
        return f"the webhook URL must start with http:// or https://{scheme}"
    if not host:
        return "the webhook URL has no host"
    name = host.rstrip(".").lower()
    ip = _literal_ip(name.split("%", 1)[0])
    if ip is not None:
        problem = address_problem(ip)
        return f"the webhook host {problem}; it must be a public address" if problem else None
    if name == "localhost" or name.endswith(_INTERNAL_SUFFIXES) or "." not in name:
        return f"the webhook host {host} is a local or internal name; it must be a public host name"
    return None


def block_private() -> bool:
    """True when ``GRPO_DASHBOARD_WEBHOOK_BLOCK_PRIVATE`` tells this process to refuse non-public webhook addresses."""
    return os.environ.get(BLOCK_PRIVATE_ENV, "").strip().lower() in ("1", "true", "yes", "on")


def _connect_public(
    address: tuple[str, int], timeout: Any = None, source_address: Any = None, *args: Any
) -> socket.socket:
    """``socket.create_connection`` that only connects to public addresses (the very address checked is used)."""
    host, port = address
    error: OSError | None = None
    for family, kind, proto, _, sockaddr in socket.getaddrinfo(host, port, 0, socket.SOCK_STREAM):
        problem = address_problem(ipaddress.ip_address(str(sockaddr[0]).split("%", 1)[0]))
        if problem:
            error = OSError(f"refused to connect to {host}: {problem} (private addresses are blocked)")
            continue
        sock = socket.socket(family, kind, proto)
        try:
            if isinstance(timeout, (int, float)):
                sock.settimeout(timeout)
            if source_address:
                sock.bind(source_address)
            sock.connect(sockaddr)
            return sock
        except OSError as exc:
            error = exc
            sock.close()
    raise error or OSError(f"{host} has no address")


class _PublicHTTPConnection(http.client.HTTPConnection):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._create_connection = _connect_public


class _PublicHTTPSConnection(http.client.HTTPSConnection):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._create_connection = _connect_public


class _PublicHTTPHandler(urllib.request.HTTPHandler):
    def http_open(self, req: urllib.request.Request) -> Any:
        return self.do_open(_PublicHTTPConnection, req)


class _PublicHTTPSHandler(urllib.request.HTTPSHandler):
    def https_open(self, req: urllib.request.Request) -> Any:
        return self.do_open(_PublicHTTPSConnection, req, context=getattr(self, "_context", None))


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, req: Any, fp: Any, code: int, msg: str, headers: Any, newurl: str) -> None:
        raise urllib.error.HTTPError(
            req.full_url, code, f"{msg}; redirects are refused (private addresses are blocked)", headers, fp
        )


def _public_opener() -> urllib.request.OpenerDirector:
    # No proxy: the address checked must be the one connected to. No redirect: a public URL must not bounce there.
    return urllib.request.build_opener(
        urllib.request.ProxyHandler({}), _NoRedirect(), _PublicHTTPHandler(), _PublicHTTPSHandler()
    )


def alert_text(finding: Finding, run_name: str | None = None, stopped: bool = False) -> str:
    """One human-readable message: run, what happened, rule, first onset, what is wrong and the remedy (for a
    finding that resolved: since when it held and when it resolved)."""
    run = f"GRPO run {run_name!r}" if run_name else "GRPO run"
    if finding.status == "resolved" and not stopped:
        return (
            f"{_RESOLVED_ICON} {run}: resolved {finding.severity} {finding.rule} (from step {finding.step}, "
            f"resolved at step {finding.resolved_step}).\n{finding.message}"
        ).strip()
    what = finding.severity if not is_rule_failure(finding) else "rule failed"
    what = "stopped by the health guard on" if stopped else what
    return (
        f"{_ICON.get(finding.severity, '')} {run}: {what} {finding.rule} (since step {finding.step}).\n"
        f"{finding.message}\nRemedy: {finding.remedy}"
    ).strip()


def alert_event(finding: Finding, stopped: bool = False) -> str:
    """The payload's ``event``: ``guard_stop``, ``resolved`` (an alerted finding no longer holds) or ``finding``."""
    if stopped:
        return "guard_stop"
    return "resolved" if finding.status == "resolved" else "finding"


def alert_payload(finding: Finding, run_name: str | None = None, stopped: bool = False) -> dict[str, Any]:
    """The JSON body: ``text`` (Slack), ``content`` (Discord) and the structured finding for other receivers."""
    text = alert_text(finding, run_name, stopped)
    content = text if len(text) <= _DISCORD_LIMIT else text[: _DISCORD_LIMIT - 1] + "…"
    return {
        "text": text,
        "content": content,
        "source": "grpo-dashboard",
        "run": run_name,
        "event": alert_event(finding, stopped),
        "finding": finding.to_dict(),
    }


def post_json(
    url: str, payload: Mapping[str, Any], timeout: float = TIMEOUT_S, block: bool | None = None
) -> str | None:
    """POST ``payload`` as JSON; returns None on a 2xx answer, else a one-line reason (never raises).

    ``block`` (default: ``block_private()``): refuse non-public addresses (``webhook_url_problem``, then the
    address connected to), without proxies or redirects.
    """
    blocking = block_private() if block is None else block
    if blocking and (problem := webhook_url_problem(url)):
        return f"refused: {problem}"
    try:
        body = json.dumps(payload, allow_nan=False, default=str).encode("utf-8")
        headers = {"Content-Type": "application/json", "User-Agent": "grpo-dashboard"}
        request = urllib.request.Request(url, data=body, method="POST", headers=headers)
        opened = _public_opener().open if blocking else urllib.request.urlopen
        with opened(request, timeout=timeout) as response:  # the user's own URL
            status = getattr(response, "status", 200)
            return None if 200 <= status < 300 else f"HTTP {status}"
    except urllib.error.HTTPError as exc:
        return f"HTTP {exc.code} {exc.reason}"
    except Exception as exc:  # URLError, timeouts, bad URLs: report, never raise
        return f"{type(exc).__name__}: {exc}"


def trackio_alert(finding: Finding, run_name: str | None = None, stopped: bool = False) -> str | None:
    """Mirror a finding with ``trackio.alert`` on the current trackio run; the reason when it cannot (never raises)."""
    try:
        import trackio
    except ImportError:
        return "trackio is not installed"
    try:
        event = alert_event(finding, stopped)
        if event == "resolved":
            level = trackio.AlertLevel.INFO
            title = f"resolved: {finding.rule} (step {finding.step} to {finding.resolved_step})"
        else:
            level = trackio.AlertLevel.ERROR if finding.severity == ERROR else trackio.AlertLevel.WARN
            title = f"{'guard stop' if stopped else finding.severity}: {finding.rule} (step {finding.step})"
        trackio.alert(title=title, text=alert_text(finding, run_name, stopped), level=level)
    except Exception as exc:  # no active trackio run, an older trackio, ...
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
        self.block = block_private()
        if webhook_url and self.block and (problem := webhook_url_problem(webhook_url)):
            self._failed(f"webhook refused, no alerts will be posted: {problem}")
            self.webhook_url = webhook_url = None
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
            reason = post_json(self.webhook_url, payload, self.timeout, self.block)
            if reason:
                self._failed(f"webhook POST for {payload['finding']['rule']} failed: {reason}")
            else:
                self.sent.append(payload)

    def _failed(self, reason: str) -> None:
        self.failures.append(reason)
        sys.stderr.write(f"[grpo health alerts] {reason}\n")
        sys.stderr.flush()
