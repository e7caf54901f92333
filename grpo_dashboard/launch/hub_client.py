"""The Hugging Face Hub client the backends share: whose token, which endpoint, an API client that gives up on a silent
Hub, and a clear, token-free message for a failed call."""

from __future__ import annotations

import os
import threading
from typing import Any

from grpo_dashboard.errors import BackendError
from grpo_dashboard.redaction import redact

APP = "grpo-dashboard"  # the library name of our Hub calls, and the `app` label of our jobs
TIMEOUT_ENV = "GRPO_DASHBOARD_HF_TIMEOUT_S"
DEFAULT_TIMEOUT_S = 30.0


def hub_timeout() -> float:
    """Seconds a Hub call may wait for an answer (env GRPO_DASHBOARD_HF_TIMEOUT_S, read at call time; default 30).

    Log streams keep huggingface_hub's own longer timeouts (they pass theirs with every request)."""
    try:
        return max(0.1, float(os.environ.get(TIMEOUT_ENV) or DEFAULT_TIMEOUT_S))
    except ValueError:
        return DEFAULT_TIMEOUT_S


def is_timeout(exc: BaseException) -> bool:
    """True when a Hub call gave up waiting for an answer."""
    import httpx2

    return isinstance(exc, (httpx2.TimeoutException, TimeoutError))


def require_token(token: str | None = None) -> str:
    """The caller's token, else the one saved by `hf auth login` (or HF_TOKEN); BackendError when there is none."""
    if token:
        return token
    found = saved_token()
    if not found:
        raise BackendError(
            "Not logged in to Hugging Face: run `hf auth login` (or set HF_TOKEN) for the command "
            "line, or sign in with Hugging Face in the dashboard, then launch again."
        )
    return found


def saved_token() -> str | None:
    """The login saved on this machine; never on a Space, where HF_TOKEN is the Space owner's, not the user's."""
    from huggingface_hub import get_token

    from grpo_dashboard.settings import on_space

    return None if on_space() else get_token()


def endpoint_url(endpoint: str | None = None) -> str:
    """The Hub endpoint: the argument, else HF_ENDPOINT read at call time, else huggingface_hub's default."""
    from huggingface_hub import constants

    return (endpoint or os.environ.get("HF_ENDPOINT") or constants.ENDPOINT).rstrip("/")


def make_api(token: str, endpoint: str | None = None) -> Any:
    """An HfApi bound to this token and endpoint, whose calls give up after `hub_timeout()` seconds of silence."""
    from huggingface_hub import HfApi

    _ensure_client_timeout()
    return HfApi(endpoint=endpoint_url(endpoint), token=token, library_name=APP)


_timeout_installed: float | None = None
_timeout_lock = threading.Lock()  # its own: make_api is called while hf_jobs holds its lock


def _ensure_client_timeout() -> None:
    """Give huggingface_hub's shared HTTP client a default timeout (it has none: a silent Hub would hang a launch
    or a status poll forever). Calls that pass their own timeout (log streams, downloads) keep it. A client factory
    someone else installed is left alone."""
    global _timeout_installed
    from huggingface_hub.utils import _http

    seconds = hub_timeout()
    with _timeout_lock:
        ours = getattr(_http._GLOBAL_CLIENT_FACTORY, "_grpo_dashboard", False)
        if _timeout_installed == seconds and ours:
            return
        if not ours and _http._GLOBAL_CLIENT_FACTORY is not _http.default_client_factory:
            return

        def factory() -> Any:
            import httpx2

            client = _http.default_client_factory()
            client.timeout = httpx2.Timeout(seconds)
            return client

        factory._grpo_dashboard = True  # type: ignore[attr-defined]
        _http.set_client_factory(factory)
        _timeout_installed = seconds


def describe_error(
    exc: BaseException, action: str, namespace: str | None = None, flavor: str | None = None, attempts: int = 1
) -> str:
    """A clear, token-free message for a failed Hub call: what happened, and what to do."""
    from huggingface_hub.errors import HfHubHTTPError, OfflineModeIsEnabled

    tries = f" ({attempts} attempts)" if attempts > 1 else ""
    if isinstance(exc, OfflineModeIsEnabled):
        return f"Cannot {action}: HF_HUB_OFFLINE is set. Unset it to use Hugging Face Jobs."
    if not isinstance(exc, HfHubHTTPError) and is_timeout(exc):
        return (
            f"The Hugging Face Hub did not answer within {hub_timeout():g} s while trying to {action}{tries}. "
            f"It may be overloaded: try again later (GRPO_DASHBOARD_HF_TIMEOUT_S sets the wait)."
        )
    if not isinstance(exc, HfHubHTTPError):
        return redact(
            f"Could not reach the Hugging Face Hub to {action} ({type(exc).__name__}: {exc}). Check the "
            f"network connection and try again."
        )
    status = exc.response.status_code if exc.response is not None else None
    server = redact(getattr(exc, "server_message", None) or "").strip().rstrip(".")
    detail = f" The Hub said: {server}." if server else ""
    ns = f" {namespace!r}" if namespace else ""
    if status == 401:
        text = (
            f"Hugging Face rejected the token (401 Unauthorized) while trying to {action}. Log in again: "
            f"`hf auth login` on the command line, or sign in again in the dashboard. The token needs the "
            f"`jobs` permission (and write access to push the model)."
        )
    elif status == 402:
        text = (
            f"Hugging Face Jobs refused to {action}: no credits (402 Payment Required) on namespace{ns}. Jobs "
            f"need a positive credit balance: add credits at https://huggingface.co/settings/billing (or the "
            f"organization's billing page), then launch again."
        )
    elif status == 403:
        text = (
            f"Not allowed to {action} in namespace{ns} (403 Forbidden). Use your own username or an "
            f"organization where you may run jobs; a fine-grained token needs the `jobs` permission."
        )
    elif status == 404 and action.startswith(("submit", "upload", "create")):
        text = f"Namespace{ns} was not found on the Hub (404) while trying to {action}. Check backend.namespace."
    elif status in (400, 422) and flavor and "flavor" in server.lower():
        text = (
            f"The Hub rejected flavor {flavor!r} while trying to {action}. Choose another backend.flavor "
            f"(`python -m grpo_dashboard hardware SPEC` lists them with prices)."
        )
    elif status == 429:
        text = f"Rate-limited by the Hub (429) while trying to {action}{tries}; wait a minute and try again."
    else:
        text = f"Hugging Face Jobs answered HTTP {status} while trying to {action}."
    return redact(text + detail)


def forbid_implicit_hub_token() -> None:
    """Make huggingface_hub send a token only where one is passed explicitly, for the whole process.

    On a Space the owner's `HF_TOKEN` secret (or a saved login) must never authorise a Hub read made for a visitor:
    every call made for a user passes that user's own token or `token=False`. huggingface_hub reads the constant at
    call time; the environment variable covers libraries and subprocesses that read it at import.
    """
    from huggingface_hub import constants

    os.environ["HF_HUB_DISABLE_IMPLICIT_TOKEN"] = "1"
    constants.HF_HUB_DISABLE_IMPLICIT_TOKEN = True
