"""The one declaration of what every endpoint of the dashboard allows: who may call it, how much it may send, how long
it may run, which worker pool it shares and how often one user may call it (no gradio here).

`ENDPOINTS` covers every event handler of the app (public, undocumented and private alike: the page calls private
ones by index, so they are reachable too), `ROUTES` every HTTP route of the server (gradio's and the dashboard's own).
Both are default deny: `ui/guard.py` refuses to build an app with a handler that has no entry here, and the gate
middleware answers 404 for any route not listed as allowed. `tests/test_endpoint_policy.py` enumerates the running
app's endpoints and routes against these tables, and SECURITY.md's table is `markdown_table()`'s output.

A policy's limits apply on a Space; locally (one trusted user) only the size caps and time limits hold. On a Space
every route is also same-origin only, whatever its policy here (`ui/origin.py`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

ANYONE = "anyone"
SIGNED_IN = "signed in"
DENIED = "nobody"
MAX_TEXT_CHARS = 256 * 1024  # a spec is a few kilobytes; YAML texts are cut at 128 KiB by safe_yaml as well


@dataclass(frozen=True)
class Pool:
    """A bounded set of workers shared by some endpoints; `per_user` of them at most for one user at a time, and
    with `busy_s`, at most that many seconds of work per user in any `window_s` (a share of the CPU: a user who keeps
    a worker busy back to back is told to wait)."""

    workers: int
    per_user: int
    purpose: str
    busy_s: float | None = None
    window_s: float = 20.0


@dataclass(frozen=True)
class Policy:
    """What one event handler allows.

    Args:
        who: ANYONE or SIGNED_IN (on a Space; locally everyone is the machine's user).
        pool: the POOLS entry it runs in, under `limit_s`; None: it runs in gradio's thread (bounded, cheap work).
        limit_s: wall-clock limit for pooled work.
        max_text: the longest text input accepted, in characters.
        rate: (calls, window in seconds) one user may make, or None.
        purpose: what it does, for the table.
        gradio_own: a handler gradio registers itself (gated when the app is sealed, not at registration).
    """

    who: str
    purpose: str
    pool: str | None = None
    limit_s: float | None = None
    max_text: int = MAX_TEXT_CHARS
    rate: tuple[int, float] | None = None
    gradio_own: bool = False


@dataclass(frozen=True)
class Route:
    """What one HTTP route allows: `who` (DENIED: answered 404, as a route that does not exist)."""

    who: str
    purpose: str
    methods: tuple[str, ...] = ("GET", "HEAD")


POOLS: dict[str, Pool] = {
    "edit": Pool(2, 1, "the YAML editor: parse and rewrite a spec", busy_s=4.0),
    "validate": Pool(3, 1, "validation, launch and resume (may read the Hub)"),
    "check": Pool(4, 2, "pre-flight checks (Hub reads, the sandboxed reward check)"),
    "import": Pool(2, 1, "imports of TRL recipes and runs (TRL's checks in a subprocess)"),
    "export": Pool(2, 1, "metrics exports"),
}

_CHEAP = "cheap: reads the store or a preset, answered in gradio's thread"
ENDPOINTS: dict[str, Policy] = {
    # New run
    "load_preset": Policy(ANYONE, "fill the form with a built-in preset", max_text=200),
    "form_to_yaml": Policy(SIGNED_IN, "form edits into the YAML view", "edit", 20.0),
    "yaml_to_form": Policy(SIGNED_IN, "YAML edits into the form", "edit", 20.0),
    "validate": Policy(SIGNED_IN, "validate the spec", "validate", 120.0),
    "launch": Policy(SIGNED_IN, "validate and launch a run (active-run cap, launch rate)", "validate", 120.0),
    "import_trl": Policy(SIGNED_IN, "import a TRL recipe", "import", 120.0, rate=(20, 600.0)),
    # Pre-flight
    "inspect_dataset": Policy(SIGNED_IN, "inspect the spec's dataset", "check", 120.0, rate=(30, 600.0)),
    "check_rewards": Policy(
        SIGNED_IN, "run the rewards on dataset rows (sandboxed)", "check", 300.0, rate=(20, 600.0)
    ),
    "estimate_hardware": Policy(SIGNED_IN, "memory, flavor, time and cost estimate", "check", 60.0, rate=(60, 600.0)),
    # Runs
    "runs_table": Policy(ANYONE, "the user's runs (an anonymous visitor's: none); " + _CHEAP),
    "import_run": Policy(
        SIGNED_IN,
        "import a run made elsewhere from an upload (not on a Space: also a path, followed while it is written)",
        "import",
        60.0,
        rate=(20, 600.0),
    ),
    "open_run": Policy(ANYONE, "open a row of the runs table (the user's own runs only)"),
    "open_run_by_ref": Policy(ANYONE, "open a run by id, prefix or name (the user's own runs only)", max_text=400),
    "run_choices": Policy(ANYONE, "the run pickers' choices (the user's own runs); " + _CHEAP),
    "forecast_cost": Policy(ANYONE, "the forecast's cost at a typed price (the user's own runs only)"),
    "compare_choices": Policy(ANYONE, "Compare's run choices when opened (the user's own runs; private)"),
    "page_state": Policy(ANYONE, "the page's run and tab from its URL", max_text=2000),
    "who": Policy(ANYONE, "the sign-in line"),
    "_check_login_status": Policy(
        ANYONE, "gradio's sign-in button: whether the session is signed in", gradio_own=True
    ),
    "tab_timer": Policy(ANYONE, "start or stop the runs table's timer with its tab (private)"),
    # Run detail
    "detail_poll": Policy(ANYONE, "the run page's timer (the user's own runs only); " + _CHEAP),
    "detail_render": Policy(ANYONE, "render the run page (the user's own runs only)"),
    "detail_view": Policy(ANYONE, "redraw the run page on a control change (the user's own runs only)"),
    "detail_step": Policy(ANYONE, "show the completions of one step (the user's own runs only)"),
    "detail_trajectories": Policy(ANYONE, "agent trajectories of a step (the user's own runs only)"),
    "sort_choices": Policy(ANYONE, "the completions' sort choices (private)"),
    "manage_fill": Policy(ANYONE, "fill the rename box with the run's name (private)"),
    "resume_choices": Policy(ANYONE, "a run's checkpoints (the user's own runs only)"),
    "resume_run": Policy(SIGNED_IN, "resume a run (active-run cap, launch rate)", "validate", 120.0),
    "export_metrics": Policy(SIGNED_IN, "download a run's metrics", "export", 60.0, rate=(30, 600.0)),
    "cancel_run": Policy(SIGNED_IN, "cancel one of the user's runs"),
    "rename_run": Policy(SIGNED_IN, "rename one of the user's runs", max_text=400, rate=(120, 600.0)),
    "note_run": Policy(SIGNED_IN, "annotate one of the user's runs", max_text=20_000, rate=(120, 600.0)),
    "tag_run": Policy(SIGNED_IN, "edit the tags of one of the user's runs", max_text=4000, rate=(120, 600.0)),
    "delete_run": Policy(SIGNED_IN, "delete one of the user's ended runs", rate=(120, 600.0)),
    # Compare
    "compare": Policy(ANYONE, "overlay the user's runs"),
}

_EVENT = "runs an event handler, which applies its own policy (ENDPOINTS)"
_STATIC = "the page's own files"
ROUTES: dict[str, Route] = {
    "/": Route(ANYONE, "the page"),
    "/config": Route(ANYONE, "the page's layout"),
    "/config/": Route(ANYONE, "the page's layout"),
    "/gradio_api/info": Route(ANYONE, "the API's description (for gradio_client)"),
    "/gradio_api/info/": Route(ANYONE, "the API's description (for gradio_client)"),
    "/svelte/{path:path}": Route(ANYONE, _STATIC),
    "/static/{path:path}": Route(ANYONE, _STATIC),
    "/assets/{path:path}": Route(ANYONE, _STATIC),
    "/favicon.ico": Route(ANYONE, _STATIC),
    "/theme.css": Route(ANYONE, _STATIC),
    "/gradio_api/theme.css": Route(ANYONE, _STATIC),
    "/robots.txt": Route(ANYONE, _STATIC),
    "/pwa_icon": Route(ANYONE, _STATIC),
    "/pwa_icon/{size}": Route(ANYONE, _STATIC),
    "/manifest.json": Route(ANYONE, _STATIC),
    "/grpo/static/{name}": Route(ANYONE, "plotly.js and the live page's script"),
    "/grpo/live": Route(ANYONE, "a run's live stream (the user's own runs only; streams capped per user)"),
    "/grpo/run": Route(ANYONE, "the light run page (the same static HTML for everyone; its data is /grpo/live's)"),
    "/grpo/runs": Route(SIGNED_IN, "the user's own runs (id, name, status) for the light page's sidebar"),
    "/grpo/samples": Route(SIGNED_IN, "one sampled step of the user's own run (the light page's completions)"),
    "/grpo/spec_diff": Route(SIGNED_IN, "the spec fields that differ between the user's own runs (the light page)"),
    "/grpo/ingest": Route(
        SIGNED_IN,
        "DashboardCallback's batches (body capped, per-user rate, a run writable by its owner's token only)",
        ("POST",),
    ),
    "/login/huggingface": Route(ANYONE, "start the Hugging Face sign-in"),
    "/login/callback": Route(ANYONE, "finish the Hugging Face sign-in"),
    "/logout": Route(ANYONE, "sign out"),
    "/gradio_api/user": Route(ANYONE, "the signed-in user's name"),
    "/gradio_api/user/": Route(ANYONE, "the signed-in user's name"),
    "/gradio_api/login_check": Route(ANYONE, "whether the visitor is signed in"),
    "/gradio_api/login_check/": Route(ANYONE, "whether the visitor is signed in"),
    "/gradio_api/app_id": Route(ANYONE, "the app's id"),
    "/gradio_api/app_id/": Route(ANYONE, "the app's id"),
    "/gradio_api/queue/join": Route(ANYONE, _EVENT, ("POST",)),
    "/gradio_api/queue/data": Route(ANYONE, "the visitor's own event results"),
    "/gradio_api/queue/status": Route(ANYONE, "the queue's length"),
    "/gradio_api/cancel": Route(ANYONE, "cancel the visitor's own event", ("POST",)),
    "/gradio_api/reset": Route(ANYONE, "reset the visitor's own event", ("POST",)),
    "/gradio_api/reset/": Route(ANYONE, "reset the visitor's own event", ("POST",)),
    "/gradio_api/heartbeat/{session_hash}": Route(ANYONE, "keep the visitor's own session"),
    "/gradio_api/run/{api_name}": Route(ANYONE, _EVENT, ("POST",)),
    "/gradio_api/run/{api_name}/": Route(ANYONE, _EVENT, ("POST",)),
    "/gradio_api/api/{api_name}": Route(ANYONE, _EVENT, ("POST",)),
    "/gradio_api/api/{api_name}/": Route(ANYONE, _EVENT, ("POST",)),
    "/gradio_api/call/{api_name}": Route(ANYONE, _EVENT, ("POST",)),
    "/gradio_api/call/{api_name}/": Route(ANYONE, _EVENT, ("POST",)),
    "/gradio_api/call/{api_name}/{event_id}": Route(ANYONE, "the caller's own event result"),
    "/gradio_api/call/v2/{api_name}": Route(ANYONE, _EVENT, ("POST",)),
    "/gradio_api/call/v2/{api_name}/": Route(ANYONE, _EVENT, ("POST",)),
    "/gradio_api/call/v2/{api_name}/{event_id}": Route(ANYONE, "the caller's own event result"),
    "/gradio_api/startup-events": Route(ANYONE, "the page's load events (each applies its own policy)"),
    "/gradio_api/upload": Route(
        SIGNED_IN, "upload a file (size capped, per-user quota, deleted after its lifetime)", ("POST",)
    ),
    "/gradio_api/upload_progress": Route(SIGNED_IN, "the progress of the visitor's own upload"),
    "/gradio_api/file={path_or_url:path}": Route(SIGNED_IN, "a file gradio serves from its cache (exports)"),
    "/gradio_api/file/{path:path}": Route(SIGNED_IN, "a file gradio serves from its cache (exports)"),
    # gradio features the dashboard does not use: unreachable
    "/login": Route(DENIED, "password sign-in (not used)", ("POST",)),
    "/login/": Route(DENIED, "password sign-in (not used)", ("POST",)),
    "/openapi.json": Route(DENIED, "FastAPI's schema (gradio_client reads /gradio_api/info)"),
    "/gradio_api/openapi.json": Route(DENIED, "FastAPI's schema (gradio_client reads /gradio_api/info)"),
    "/gradio_api/token": Route(DENIED, "password sign-in tokens (not used)"),
    "/gradio_api/token/": Route(DENIED, "password sign-in tokens (not used)"),
    "/gradio_api/deep_link": Route(DENIED, "deep links (not used)"),
    "/gradio_api/dev/reload": Route(DENIED, "hot reload (development only)"),
    "/gradio_api/runs": Route(DENIED, "gradio's run history (not used)"),
    "/gradio_api/runs/": Route(DENIED, "gradio's run history (not used)"),
    "/gradio_api/run-history/connect": Route(DENIED, "gradio's run history (not used)", ("POST",)),
    "/gradio_api/run-history/buckets": Route(DENIED, "gradio's run history (not used)"),
    "/gradio_api/run-history/records": Route(DENIED, "gradio's run history (not used)"),
    "/gradio_api/run-history/records/{endpoint}/{record_id}/assets/{asset_id}": Route(
        DENIED, "gradio's run history (not used)"
    ),
    "/gradio_api/custom_component/{id}/{environment}/{type}/{file_name}": Route(DENIED, "custom components (none)"),
    "/gradio_api/proxy={url_path:path}": Route(DENIED, "proxying other Spaces (not used)"),
    "/gradio_api/stream/{event_id}": Route(DENIED, "media streaming (not used)", ("POST",)),
    "/gradio_api/stream/{event_id}/close": Route(DENIED, "media streaming (not used)", ("POST",)),
    "/gradio_api/stream/{session_hash}/{run}/{component_id}/playlist.m3u8": Route(DENIED, "media streaming"),
    "/gradio_api/stream/{session_hash}/{run}/{component_id}/{segment_id}.{ext}": Route(DENIED, "media streaming"),
    "/gradio_api/stream/{session_hash}/{run}/{component_id}/playlist-file": Route(DENIED, "media streaming"),
    "/gradio_api/component_server": Route(DENIED, "component servers (none)", ("POST",)),
    "/gradio_api/component_server/": Route(DENIED, "component servers (none)", ("POST",)),
    "/gradio_api/process_recording": Route(DENIED, "media recording (not used)", ("POST",)),
    "/gradio_api/vibe-edit": Route(DENIED, "vibe editing (not used)", ("POST",)),
    "/gradio_api/vibe-edit/": Route(DENIED, "vibe editing (not used)", ("POST",)),
    "/gradio_api/undo-vibe-edit": Route(DENIED, "vibe editing (not used)", ("POST",)),
    "/gradio_api/undo-vibe-edit/": Route(DENIED, "vibe editing (not used)", ("POST",)),
    "/gradio_api/vibe-code": Route(DENIED, "vibe editing (not used)", ("GET", "HEAD", "POST")),
    "/gradio_api/vibe-code/": Route(DENIED, "vibe editing (not used)", ("GET", "HEAD", "POST")),
    "/gradio_api/vibe-starter-queries": Route(DENIED, "vibe editing (not used)", ("POST",)),
    "/gradio_api/vibe-starter-queries/": Route(DENIED, "vibe editing (not used)", ("POST",)),
    "/monitoring": Route(DENIED, "gradio's analytics page (not used)"),
    "/monitoring/summary": Route(DENIED, "gradio's analytics page (not used)"),
    "/monitoring/{key}": Route(DENIED, "gradio's analytics page (not used)"),
}


def _pattern(path: str) -> re.Pattern[str]:
    out, pos = [], 0
    for match in re.finditer(r"\{([a-z_]+)(:path)?\}", path):
        out.append(re.escape(path[pos : match.start()]))
        out.append(".*" if match.group(2) else "[^/]+")
        pos = match.end()
    out.append(re.escape(path[pos:]))
    return re.compile("^" + "".join(out) + "$")


@lru_cache(maxsize=1)
def _compiled() -> list[tuple[re.Pattern[str], str, Route]]:
    # Literal paths first, so `/gradio_api/call/{api_name}` never shadows `/gradio_api/call/v2/...`'s own entry.
    items = sorted(ROUTES.items(), key=lambda kv: (kv[0].count("{"), -len(kv[0])))
    return [(_pattern(path), path, route) for path, route in items]


def route_for(path: str, method: str) -> tuple[str, Route] | None:
    """(declared path, policy) of the route serving `method path`, or None when nothing allows it."""
    method = method.upper()
    for pattern, declared, route in _compiled():
        if pattern.match(path) and method in route.methods:
            return declared, route
    return None


def markdown_table() -> str:
    """SECURITY.md's tables of every endpoint and route with its policy (kept in step by a test)."""
    lines = [
        "| endpoint | who (on a Space) | pool (workers, per user[, work per user]) | time limit | text cap "
        "| per-user rate | what |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, p in ENDPOINTS.items():
        pool = "inline"
        if p.pool:
            spec = POOLS[p.pool]
            share = f", {spec.busy_s:g} s per {spec.window_s:g} s" if spec.busy_s else ""
            pool = f"{p.pool} ({spec.workers}, {spec.per_user}{share})"
        limit = f"{p.limit_s:g} s" if p.limit_s else "—"
        rate = f"{p.rate[0]} per {p.rate[1]:g} s" if p.rate else "—"
        lines.append(f"| `{name}` | {p.who} | {pool} | {limit} | {p.max_text:,} | {rate} | {p.purpose} |")
    lines += ["", "| route | methods | who (on a Space) | what |", "|---|---|---|---|"]
    for path, r in ROUTES.items():
        lines.append(f"| `{path}` | {', '.join(r.methods)} | {r.who} | {r.purpose} |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(markdown_table())
