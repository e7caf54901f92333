"""Where the dashboard runs (a Hugging Face Space or a local machine) and what the Space owner allows.

Every setting is read from the environment at call time (Space Variables reach Python as environment variables):

| variable | on a Space | locally |
|---|---|---|
| `GRPO_DASHBOARD_ALLOW_LOCAL_BACKEND` | off: runs go to Hugging Face Jobs only | on |
| `GRPO_DASHBOARD_ALLOW_CUSTOM_CODE` | off: no `function:` rewards, no `python` reward | on |
| `GRPO_DASHBOARD_MAX_ACTIVE_RUNS` | 2 queued or running runs per user | no cap |
| `GRPO_DASHBOARD_LAUNCH_LIMIT` / `GRPO_DASHBOARD_LAUNCH_WINDOW_S` | 5 launches per user per 600 s | no limit |
| `GRPO_DASHBOARD_MAX_STREAMS` | 8 open live streams (Run detail pages) per user | no cap |
| `GRPO_DASHBOARD_ALLOWED_ORIGINS` | origins allowed besides `https://` + each host of `SPACE_HOST` | unused |

A cap or limit of `0` (or `none`) means "no limit". `GRPO_DASHBOARD_DATA_DIR` (store.py) sets where the store and run
directories live; on a Space, point it into a mounted Storage Bucket volume so runs survive restarts.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from urllib.parse import urlsplit

MOCK_OAUTH_TOKEN = "mock-oauth-token-for-local-dev"  # what gradio 6.31's local (mocked) sign-in puts in the session
ALLOW_LOCAL_ENV = "GRPO_DASHBOARD_ALLOW_LOCAL_BACKEND"
ALLOW_CODE_ENV = "GRPO_DASHBOARD_ALLOW_CUSTOM_CODE"
MAX_ACTIVE_ENV = "GRPO_DASHBOARD_MAX_ACTIVE_RUNS"
LAUNCH_LIMIT_ENV = "GRPO_DASHBOARD_LAUNCH_LIMIT"
LAUNCH_WINDOW_ENV = "GRPO_DASHBOARD_LAUNCH_WINDOW_S"
MAX_STREAMS_ENV = "GRPO_DASHBOARD_MAX_STREAMS"
ALLOWED_ORIGINS_ENV = "GRPO_DASHBOARD_ALLOWED_ORIGINS"
SPACE_DEFAULTS = {MAX_ACTIVE_ENV: 2, LAUNCH_LIMIT_ENV: 5, LAUNCH_WINDOW_ENV: 600, MAX_STREAMS_ENV: 8}
_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off", "")


def on_space() -> bool:
    """True on a Hugging Face Space: `SPACE_ID` is set (the Spaces runtime also sets `SYSTEM=spaces`)."""
    return bool(os.environ.get("SPACE_ID")) or os.environ.get("SYSTEM") == "spaces"


def space_hosts() -> list[str]:
    """The Space's host names from `SPACE_HOST` (set by Hugging Face: `owner-name.hf.space`, followed by the custom
    domain, comma-separated, when the Space has one); empty when not set."""
    return [h.strip().lower() for h in os.environ.get("SPACE_HOST", "").split(",") if h.strip()]


def origin_of(text: str) -> str | None:
    """`text` as a serialised web origin (`https://host[:port]`, lower case, no default port), or None when it is not
    one (`null`, a path, no host)."""
    parts = urlsplit(text.strip())
    try:
        port = parts.port
    except ValueError:
        return None
    if (
        parts.scheme not in ("http", "https")
        or not parts.hostname
        or parts.username
        or parts.password
        or parts.path not in ("", "/")
        or parts.query
        or parts.fragment
    ):
        return None
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    default = {"http": 80, "https": 443}[parts.scheme]
    return f"{parts.scheme}://{host}" + (f":{port}" if port not in (None, default) else "")


def allowed_origins() -> tuple[str, ...]:
    """The origins whose pages may call this Space: `https://` + each of `space_hosts()`, then each origin of
    `GRPO_DASHBOARD_ALLOWED_ORIGINS` (comma-separated; a bare host name means https)."""
    found = [origin_of("https://" + host) for host in space_hosts()]
    for raw in os.environ.get(ALLOWED_ORIGINS_ENV, "").split(","):
        if not raw.strip():
            continue
        origin = origin_of(raw if "://" in raw else "https://" + raw.strip())
        if origin is None:
            raise ValueError(
                f"{ALLOWED_ORIGINS_ENV} has {raw.strip()!r}, which is not an origin; use "
                "comma-separated origins like https://grpo.example.com (scheme, host, optional port)."
            )
        found.append(origin)
    return tuple(dict.fromkeys(o for o in found if o))


def _flag(name: str, default: bool) -> bool:
    raw = os.environ.get(name)
    if raw is None:
        return default
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ValueError(f"{name}={raw!r} is not a yes/no value; use 1 or 0.")


def _limit(name: str, default: float | None) -> float | None:
    raw = os.environ.get(name)
    if raw is None or not raw.strip():
        return default
    if raw.strip().lower() == "none":
        return None
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"{name}={raw!r} is not a number; use a positive number, or 0 for no limit.") from None
    if value < 0:
        raise ValueError(f"{name}={raw!r} is negative; use a positive number, or 0 for no limit.")
    return value or None


@dataclass(frozen=True)
class Settings:
    """What this dashboard instance allows; `Settings.from_env()` reads it."""

    on_space: bool
    space_id: str | None = None
    allow_local_backend: bool = True
    allow_custom_code: bool = True
    max_active_runs: int | None = None
    launch_limit: int | None = None
    launch_window_s: float = 600.0
    max_streams: int | None = None

    @classmethod
    def from_env(cls) -> Settings:
        """The settings now (Space detection and every variable of the module docstring)."""
        space = on_space()

        def default(name: str) -> float | None:
            return SPACE_DEFAULTS[name] if space else None

        max_active = _limit(MAX_ACTIVE_ENV, default(MAX_ACTIVE_ENV))
        launches = _limit(LAUNCH_LIMIT_ENV, default(LAUNCH_LIMIT_ENV))
        window = _limit(LAUNCH_WINDOW_ENV, SPACE_DEFAULTS[LAUNCH_WINDOW_ENV])
        streams = _limit(MAX_STREAMS_ENV, default(MAX_STREAMS_ENV))
        return cls(
            on_space=space,
            space_id=os.environ.get("SPACE_ID"),
            allow_local_backend=_flag(ALLOW_LOCAL_ENV, not space),
            allow_custom_code=_flag(ALLOW_CODE_ENV, not space),
            max_active_runs=int(max_active) if max_active else None,
            launch_limit=int(launches) if launches else None,
            launch_window_s=float(window or SPACE_DEFAULTS[LAUNCH_WINDOW_ENV]),
            max_streams=int(streams) if streams else None,
        )

    def describe(self) -> str:
        """One line for the UI: the mode and what is allowed."""
        if not self.on_space:
            return "Local mode: runs use your saved Hugging Face login (`hf auth login`); every run here is visible."
        parts = [
            "Hugging Face Jobs only" if not self.allow_local_backend else "local backend enabled",
            "custom reward code " + ("enabled" if self.allow_custom_code else "disabled"),
        ]
        if self.max_active_runs:
            parts.append(f"at most {self.max_active_runs} active runs per user")
        if self.launch_limit:
            parts.append(f"{self.launch_limit} launches per {self.launch_window_s:g} s")
        return (
            "Space mode: sign in with Hugging Face to launch; runs go to your own account and only you see "
            "them (" + ", ".join(parts) + ")."
        )
