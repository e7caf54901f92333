"""Serving many viewers from one process, and the one module that touches gradio's internals.

What it relies on beyond gradio's public API (tests/test_library_edges.py fails loudly when an installed gradio
changes any of it):
- `gr.Blocks.postprocess_data(block_fn, predictions, state)`, a private coroutine, overridden by DashboardBlocks:
  gradio post-processes a skipped output like any other update, building a fresh copy of the component and its config
  for the session, and the run-detail timer returns many skips per tick for every viewer. A pure skip needs none of
  that: the browser gets `{"__type__": "update"}`, exactly what gradio itself would send for it.
- `gradio.data_classes.GradioModel` / `GradioRootModel` and `gradio.utils.is_prop_update`, to post-process outputs
  in the handler's own thread (`postprocessed`).
- `gradio.components.plot.PlotData`, the payload of a gr.Plot built from ready plotly JSON (`plot_data`).
- `sys.modules` entries for optional plotting libraries gradio tries to import on every event
  (`short_circuit_missing_optional_imports`).
- `Blocks.launch` assigning `self.server_app` the app it created before it starts the server: on a Space,
  DashboardBlocks' setter adds the same-origin check (`origin.SameOrigin`) then, outermost, where it can refuse CORS
  preflights and strip the CORS headers gradio's `CustomCORSMiddleware` adds (middleware given through
  `app_kwargs["middleware"]`, like `BodyLimit`, lands inside gradio's CORS and session middleware).
- The page (`GET /`) embeds its config as `window.gradio_config = {...};` with each component's `props`
  (`OpeningTab` sets the main tabs' `selected` there, so a link to a run opens on Run detail without mounting the
  New run form first: a gr.Tab renders its children only once selected).
- `Blocks.server_app` (the FastAPI app `launch` serves), `Blocks.block_thread()`, and the session's `oauth_info`
  (`gradio.oauth._get_valid_oauth_info_from_session`) for the dashboard's own routes: the live stream
  (`stream.py`) and the page's static files (`request_user`, `DashboardBlocks.launch`).
"""

from __future__ import annotations

import copy
import ctypes
import importlib.util
import os
import sys
from pathlib import Path
from typing import Any

import gradio as gr

from grpo_dashboard.ui import guard
from grpo_dashboard.ui.route_gate import RouteGate

_SKIP = {"__type__": "update"}


def postprocessed(answer: dict[Any, Any]) -> dict[Any, Any]:
    """An answer keyed by component as Gradio's own postprocessing would send it, computed in the calling thread.

    For events registered with `preprocess=False, postprocess=False`: Gradio otherwise hands every input and every
    output to a worker thread of its own (~30 thread switches per run-detail tick); under load each switch waits for
    the GIL, which made up most of a busy page's latency. Updates (gr.update / gr.skip) and State values are left to
    Gradio, which treats them the same either way.
    """
    from gradio.data_classes import GradioModel, GradioRootModel
    from gradio.utils import is_prop_update

    out = {}
    for component, value in answer.items():
        if component.stateful or is_prop_update(value):
            out[component] = value
            continue
        result = component.postprocess(value)
        out[component] = result.model_dump() if isinstance(result, (GradioModel, GradioRootModel)) else result
    return out


MAX_BODY_BYTES = 2 * 2**20  # a request carries a spec and form values: kilobytes
MAX_UPLOAD = "1mb"  # on a Space gradio's upload route is open to every signed-in visitor: keep it small
UPLOAD_ROUTE = "/gradio_api/upload"
MULTIPART_SLACK = 64 * 1024  # an upload's form framing around the file


def upload_limit(on_space: bool) -> int | str:
    """The largest file the page may upload: MAX_UPLOAD on a Space; locally the largest run log the CLI's
    `import-run` reads (`import_guard.LIMITS.max_bytes`: every upload the page takes is a run log or a smaller
    TRL config)."""
    from grpo_dashboard.store.import_guard import LIMITS

    return MAX_UPLOAD if on_space else LIMITS.max_bytes


UPLOAD_CACHE = (600, 600)  # every 10 minutes, delete uploads older than 10 minutes


class BodyLimit:
    """ASGI middleware: HTTP requests whose body is over `limit` bytes get 413 before anything reads them whole;
    uploads (UPLOAD_ROUTE) over `upload` bytes plus their form framing, where `upload` is larger (locally: a run
    log; gradio's `max_file_size` then checks the file itself)."""

    def __init__(self, app: Any, limit: int = MAX_BODY_BYTES, upload: int = 0) -> None:
        self.app, self.limit, self.upload = app, limit, upload

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        limit = self.limit
        if self.upload and str(scope.get("path", "")).endswith(UPLOAD_ROUTE):
            limit = max(limit, self.upload + MULTIPART_SLACK)
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            return await _too_large(send, limit)
        seen = 0

        async def limited() -> dict[str, Any]:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > limit:
                    raise ValueError(f"request body over {limit} bytes")
            return message

        return await self.app(scope, limited, send)


async def _too_large(send: Any, limit: int) -> None:
    body = f'{{"error": "request body over the limit of {limit} bytes"}}'.encode()
    await send(
        {
            "type": "http.response.start",
            "status": 413,
            "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": body})


STATIC_PATH = "/grpo/static"
STATIC_DIR = Path(__file__).resolve().parent / "static"


def static_files() -> dict[str, tuple[Path, str]]:
    """The page's own static files: name -> (path, media type)."""
    return {
        "live.js": (STATIC_DIR / "live.js", "text/javascript"),
        "overlay.js": (STATIC_DIR / "overlay.js", "text/javascript"),
        "samples.js": (STATIC_DIR / "samples.js", "text/javascript"),
        # plotly.js's basic bundle (scatter, bar, pie; 1.2 MB against the full bundle's 4.8 MB, a quarter of the
        # compile time before a first chart): views/charts.py draws scatter traces only (tests/test_charts.py checks).
        "plotly-basic.min.js": (STATIC_DIR / "plotly-basic.min.js", "text/javascript"),
    }


def page_head() -> str:
    """The `<head>` additions of the page: plotly.js and the live-page script (both served by `install_routes`)."""
    return (
        f'<script src="{STATIC_PATH}/plotly-basic.min.js" defer></script>\n'
        f'<script src="{STATIC_PATH}/live.js" defer></script>'
    )


def request_user(ctx: Any, request: Any) -> Any:
    """The user of a plain HTTP request to one of the dashboard's own routes, from Gradio's session cookie exactly
    as a Gradio handler gets it (`gr.OAuthProfile` / `gr.OAuthToken`), through `access.current_user`."""
    from gradio import oauth

    from grpo_dashboard.space import access

    session = request.scope.get("session") if "session" in request.scope else None
    info = oauth._get_valid_oauth_info_from_session(session) if session is not None else None
    profile = gr.OAuthProfile(info["userinfo"]) if info else None
    token = (
        gr.OAuthToken(token=info["access_token"], scope=info["scope"], expires_at=info["expires_at"]) if info else None
    )
    return access.current_user(profile, token, ctx.settings)


def install_routes(app: Any, ctx: Any) -> Any:
    """The dashboard's own routes on the app Gradio serves, ahead of Gradio's: the live stream and static files.
    Returns the stream's hub."""
    from starlette.responses import FileResponse, PlainTextResponse
    from starlette.routing import Route

    from grpo_dashboard.ui import ingest_route, stream

    files = static_files()

    async def static(request: Any) -> Any:
        found = files.get(request.path_params["name"])
        if found is None or not found[0].is_file():
            return PlainTextResponse("not found", status_code=404)
        return FileResponse(found[0], media_type=found[1], headers={"Cache-Control": "public, max-age=3600"})

    app.router.routes.insert(0, Route(STATIC_PATH + "/{name}", static, methods=["GET"]))
    from grpo_dashboard.ui import run_list, run_page, samples_route, spec_diff_route

    run_page.install(app, STATIC_PATH)  # the light run page: static HTML on the same stream
    run_list.install(app, ctx, lambda request: request_user(ctx, request))  # its sidebar's runs
    samples_route.install(app, ctx, lambda request: request_user(ctx, request))  # its completions, trajectories
    spec_diff_route.install(app, ctx, lambda request: request_user(ctx, request))  # how its ticked runs differ
    ingest_route.install(app, ctx, lambda request: request_user(ctx, request))
    return stream.install(app, ctx, lambda request: request_user(ctx, request))


_CONFIG_MARK = "window.gradio_config = "


def opening_tab(query: str, tab_ids: tuple[str, ...]) -> str | None:
    """The tab a page link opens on (`?tab=`, else Run detail for `?run=`), when it is not the first tab."""
    import urllib.parse

    params = dict(urllib.parse.parse_qsl(query))
    tab = params.get("tab") if params.get("tab") in tab_ids else ("detail" if params.get("run") else None)
    return tab if tab and tab != tab_ids[0] else None


def with_selected_tab(page: str, tabs_elem_id: str, tab: str) -> str:
    """The page's HTML with the tabs `tabs_elem_id` opening on `tab` (unchanged when its config is not found)."""
    import json

    start = page.find(_CONFIG_MARK)
    if start < 0:
        return page
    start += len(_CONFIG_MARK)
    try:
        config, end = json.JSONDecoder().raw_decode(page, start)
    except ValueError:
        return page
    tabs = [c for c in config.get("components", []) if (c.get("props") or {}).get("elem_id") == tabs_elem_id]
    if len(tabs) != 1:
        return page
    tabs[0]["props"]["selected"] = tab
    # As gradio's own `toorjson` embeds it: nothing in it can close the <script> element.
    text = json.dumps(config, separators=(",", ":"), ensure_ascii=False)
    for char, escaped in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026"), ("'", "\\u0027")):
        text = text.replace(char, escaped)
    return page[:start] + text + page[end:]


class OpeningTab:
    """ASGI middleware: the page opens on the tab its link names (`opening_tab`), chosen in the config it embeds.

    Gradio mounts a tab's components only once it is selected, and the page's own load event selects the linked tab
    only after the first tab has been mounted: a run's link waited for the hundred components of the New run form
    before its first chart. Only `GET /` answered 200 with uncompressed HTML is read (gradio compresses outside this
    middleware); anything else passes untouched.
    """

    def __init__(self, app: Any, tabs_elem_id: str = "main-tabs", tab_ids: tuple[str, ...] = ()) -> None:
        self.app, self.tabs_elem_id, self.tab_ids = app, tabs_elem_id, tab_ids

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        path = scope.get("path", "/")
        root = scope.get("root_path") or ""
        if root and path.startswith(root):
            path = path[len(root) :] or "/"
        tab = (
            opening_tab(scope.get("query_string", b"").decode("latin-1"), self.tab_ids)
            if scope["type"] == "http" and scope.get("method") == "GET" and path == "/" and self.tab_ids
            else None
        )
        if tab is None:
            return await self.app(scope, receive, send)
        start: dict[str, Any] = {}
        body: list[bytes] = []

        async def held(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                start.update(message)
                return
            if message["type"] != "http.response.body":
                return await send(message)
            body.append(message.get("body", b""))
            if message.get("more_body"):
                return
            headers = dict(start.get("headers") or [])
            page = b"".join(body)
            html = headers.get(b"content-type", b"").startswith(b"text/html")
            if start.get("status") == 200 and html and b"content-encoding" not in headers:
                page = with_selected_tab(page.decode("utf-8"), self.tabs_elem_id, tab).encode("utf-8")
            start["headers"] = [(k, v) for k, v in start.get("headers") or [] if k != b"content-length"] + [
                (b"content-length", str(len(page)).encode())
            ]
            await send(start)
            await send({"type": "http.response.body", "body": page})

        await self.app(scope, receive, held)


class DashboardBlocks(gr.Blocks):
    """gr.Blocks whose handlers' gr.skip() outputs cost nothing to post-process, with bounded uploads and bodies,
    serving the dashboard's own routes (`install_routes`) beside Gradio's, same-origin only on a Space (origin.py).

    `monitor`: the ingestion Monitor the app started (None without one); `form_keys`: the spec keys of the New run
    form's inputs, in the order the form endpoints take them; `ctx`: the UiContext its routes use; `live`: the live
    stream's hub once launched; `tab_ids`: the main tabs (`elem_id` main-tabs) a page link may open on.
    """

    monitor: Any = None
    form_keys: list[str]
    ctx: Any = None
    live: Any = None
    tab_ids: tuple[str, ...] = ()  # the main tabs' ids, the first one the default (OpeningTab)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("delete_cache", UPLOAD_CACHE)
        super().__init__(*args, **kwargs)
        self.form_keys = []

    @property
    def server_app(self) -> Any:
        """The app gradio serves, once `launch` created it (None before)."""
        return getattr(self, "_server_app", None)

    @server_app.setter
    def server_app(self, app: Any) -> None:
        from grpo_dashboard import settings
        from grpo_dashboard.ui.origin import SameOrigin

        if app is not None and settings.on_space() and not any(m.cls is SameOrigin for m in app.user_middleware):
            # origins read here, so that a bad GRPO_DASHBOARD_ALLOWED_ORIGINS stops launch() with its message;
            # add_middleware raises once the app has started: better no server than an open one
            app.add_middleware(SameOrigin, allowed=settings.allowed_origins())
        self._server_app = app

    def launch(self, *args: Any, **kwargs: Any) -> Any:
        """gr.Blocks.launch behind the route gate (route_gate.py), with an upload size limit and a request body limit
        unless the caller sets its own, every handler gated (guard.seal), and the dashboard's routes installed before
        the call returns or blocks."""
        from starlette.middleware import Middleware

        if self.ctx is not None:
            guard.seal(self, self.ctx)
        from grpo_dashboard import settings

        kwargs.setdefault("max_file_size", upload_limit(settings.on_space()))
        files = kwargs["max_file_size"]
        app_kwargs = dict(kwargs.get("app_kwargs") or {})
        app_kwargs.setdefault(
            "middleware",
            [
                Middleware(RouteGate, ctx=self.ctx),
                Middleware(BodyLimit, upload=files if isinstance(files, int) else 0),
                Middleware(OpeningTab, tab_ids=self.tab_ids),
            ],
        )
        kwargs["app_kwargs"] = app_kwargs
        block = not kwargs.get("prevent_thread_lock", False) and not bool(getattr(sys, "ps1", sys.flags.interactive))
        kwargs["prevent_thread_lock"] = True
        result = super().launch(*args, **kwargs)
        if self.ctx is not None:
            self.live = install_routes(self.server_app, self.ctx)
        if block:
            self.block_thread()
        return result

    async def postprocess_data(self, block_fn: Any, predictions: Any, state: Any) -> list[Any]:
        outputs = list(block_fn.outputs)
        if (
            isinstance(predictions, dict)
            and predictions
            and len(outputs) > 1
            and all(isinstance(key, gr.blocks.Block) for key in predictions)
        ):
            # An answer keyed by component, as handlers give them (guard.check_named): in the outputs' order, with
            # gr.skip() for those it leaves out, so that the skipped ones are narrowed away below too.
            predictions = gr.blocks.convert_component_dict_to_list(outputs, predictions)
        if (
            block_fn.batch
            or not isinstance(predictions, (list, tuple))
            or len(outputs) < 2
            or len(predictions) != len(outputs)
        ):
            return await super().postprocess_data(block_fn, predictions, state)
        skipped = {
            i
            for i, (block, p) in enumerate(zip(outputs, predictions, strict=True))
            if not block.stateful and isinstance(p, dict) and p == _SKIP
        }
        rest = [i for i in range(len(outputs)) if i not in skipped]
        if not skipped or len(rest) < 2:  # Gradio unwraps a single remaining output: leave those cases to it
            return await super().postprocess_data(block_fn, predictions, state)  # type: ignore[arg-type]  # a tuple too
        narrowed = copy.copy(block_fn)
        narrowed.outputs = [outputs[i] for i in rest]
        done = await super().postprocess_data(narrowed, [predictions[i] for i in rest], state)
        merged: list[Any] = [dict(_SKIP) for _ in outputs]
        for i, value in zip(rest, done, strict=True):
            merged[i] = value
        return merged


def plot_data(figure_json: Any) -> Any:
    """A gr.Plot value from a plotly figure already serialised to JSON (no figure object is rebuilt)."""
    from gradio.components.plot import PlotData

    return PlotData(type="plotly", plot=figure_json)


def short_circuit_missing_optional_imports() -> None:
    """Gradio imports matplotlib (twice) on every event and bokeh for every Plot config; when they are not installed
    each failed import scans sys.path. A None entry in sys.modules makes such an import fail at once, the same way."""
    for name in ("matplotlib", "bokeh"):
        if name not in sys.modules and importlib.util.find_spec(name) is None:
            sys.modules[name] = None  # type: ignore[assignment]


M_ARENA_MAX = -8  # glibc's mallopt parameter number


def limit_malloc_arenas(arenas: int = 2) -> bool:
    """Cap glibc's malloc arenas (as MALLOC_ARENA_MAX would) unless the environment sets them; returns whether it did.

    glibc gives busy threads their own arenas (up to 8 per core) and rarely returns their memory to the system:
    gradio's many worker threads, each handling large chart payloads, grew a dashboard watched by many viewers
    without bound (benchmarks/viewers.py measures it); with two arenas the growth levels off, at the same latency.
    Call it before the server starts its threads.
    """
    if os.environ.get("MALLOC_ARENA_MAX") or not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:  # not glibc (e.g. musl): nothing to tune
        return False
    return bool(libc.mallopt(M_ARENA_MAX, arenas))
