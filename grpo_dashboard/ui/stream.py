"""The live Run detail stream: server-sent events on the app's own HTTP server, outside Gradio's queue.

`GET /grpo/live?run=<id>&smoothing=<w>&xaxis=<step|wall time|relative time|num_tokens|epoch>&log_y=<0|1>[&cursor=<c>]`
`text/event-stream`. The first event is a `snapshot` (every panel's figure, the status, findings and log) unless the
cursor (the `cursor` parameter, or the `Last-Event-ID` header the browser's EventSource sends when it reconnects)
is one the feed still knows; then `delta` events, each one published version of the run (new points per series,
status, findings, log tail, samples file size), in order. A comment line every KEEPALIVE_S keeps proxies from
closing an idle stream.

Each user may hold `Settings.max_streams` streams at once (`GRPO_DASHBOARD_MAX_STREAMS`; 8 on a Space, no cap
locally). One more gets a single `refused` event (`{"error": ...}` naming the cap and what to do) and the stream
ends: a refusal the browser's EventSource can read, which an HTTP status is not.

One `Channel` per feed (run and smoothing) advances it in a worker thread every TICK_S while anyone watches, and
wakes every viewer of it when a version is published: the work is done once per run state, not once per viewer.
Access is decided as for every other read: the request's user (`serving.request_user`) must be allowed to see the run
(`access.get_run`); on a Space another user's run answers 404 like a missing one.
"""

from __future__ import annotations

import asyncio
import functools
import json
from collections import Counter
from collections.abc import AsyncIterator, Callable
from typing import Any

from grpo_dashboard.errors import RunNotFound
from grpo_dashboard.space import access
from grpo_dashboard.ui.context import UiContext
from grpo_dashboard.views import charts
from grpo_dashboard.views.live import Feed, Feeds

PATH = "/grpo/live"
TICK_S = 0.1
KEEPALIVE_S = 15.0
IDLE_DROP_S = 30.0  # a channel nobody watches is dropped after this long
IDLE_PER_RUN = 2  # idle channels (other smoothings) a run keeps for viewers who come back; more are dropped at once
GONE = '{"reason": "the run no longer exists"}'


class Channel:
    """One feed's driver and its viewers: `wait(after)` returns when a version newer than `after` is published."""

    def __init__(self, feed: Feed, on_idle: Callable[[Channel], None]) -> None:
        self.feed = feed
        self.viewers = 0
        self._changed = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._on_idle = on_idle
        self.error: str | None = None

    def join(self) -> None:
        """A viewer arrives; starts the driver if needed."""
        self.viewers += 1
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._drive())

    def leave(self) -> None:
        """A viewer leaves."""
        self.viewers -= 1

    def close(self) -> None:
        """Stop the driver and forget the feed now (nobody watches)."""
        if self._task is not None and not self._task.done():
            self._task.cancel()
        self._on_idle(self)

    async def wait(self, version: int, timeout: float) -> None:
        """Until the feed's version passes `version` or `timeout` seconds pass."""
        while self.feed.version <= version:
            event = self._changed
            try:
                await asyncio.wait_for(event.wait(), timeout)
            except asyncio.TimeoutError:
                return

    async def _drive(self) -> None:
        idle_since: float | None = None
        loop = asyncio.get_running_loop()
        while True:
            if self.viewers <= 0:
                idle_since = idle_since or loop.time()
                if loop.time() - idle_since > IDLE_DROP_S:
                    self._on_idle(self)
                    return
            else:
                idle_since = None
                try:
                    changed = await asyncio.to_thread(self.feed.advance)
                    self.error = None
                except RunNotFound:  # deleted while watched
                    self._on_idle(self)
                    self._wake()
                    return
                except Exception as exc:  # the stream keeps going; the next tick retries
                    self.error, changed = f"{type(exc).__name__}: {exc}", False
                if changed:
                    self._wake()
            await asyncio.sleep(TICK_S)

    def _wake(self) -> None:
        event, self._changed = self._changed, asyncio.Event()
        event.set()


class LiveHub:
    """Channels by feed; one per app."""

    def __init__(self, ctx: UiContext) -> None:
        self.ctx = ctx
        self.feeds = Feeds(functools.partial(Feed, backends=ctx.backends))  # the app's backends' status lines
        self.channels: dict[int, Channel] = {}
        self.open_by_user: Counter[str] = Counter()

    def channel(self, run_id: str, smoothing: float) -> Channel:
        """The channel of this run's feed at this smoothing."""
        feed = self.feeds.get(self.ctx.store, run_id, smoothing)
        chan = self.channels.get(id(feed))
        if chan is None or chan.feed is not feed:
            chan = self.channels[id(feed)] = Channel(feed, self._drop)
            # Every smoothing value is its own feed: without this, a viewer stepping through values (or a client
            # sending many) would keep a feed's memory per value for IDLE_DROP_S.
            idle = [c for c in self.channels.values() if c is not chan and c.viewers <= 0 and c.feed.run_id == run_id]
            for old in idle[: max(0, len(idle) - IDLE_PER_RUN)]:
                old.close()
        return chan

    def _drop(self, chan: Channel) -> None:
        self.feeds.drop(chan.feed)
        if self.channels.get(id(chan.feed)) is chan:
            del self.channels[id(chan.feed)]

    @property
    def viewers(self) -> int:
        """Open streams."""
        return sum(c.viewers for c in self.channels.values())


def _event(kind: str, data: str, cursor: str | None = None) -> bytes:
    head = f"id: {cursor}\n" if cursor else ""
    return f"{head}event: {kind}\ndata: {data}\n\n".encode()


def parse_options(params: Any) -> tuple[str, float, str, bool]:
    """(run id, smoothing, x axis, log y) from query parameters; ValueError naming what is wrong."""
    run_id = (params.get("run") or "").strip()
    if not run_id:
        raise ValueError("run: missing; pass ?run=<run id>")
    try:
        smoothing = float(params.get("smoothing", 0.6))
    except ValueError:
        raise ValueError(f"smoothing: {params.get('smoothing')!r} is not a number; pass 0 to 0.99") from None
    if not 0.0 <= smoothing < 1.0:
        raise ValueError(f"smoothing: {smoothing} is outside 0 to 0.99")
    xaxis = params.get("xaxis", "step")
    if xaxis not in charts.XAXES:
        raise ValueError(f"xaxis: {xaxis!r} is not one of {', '.join(charts.XAXES)}")
    return run_id, smoothing, xaxis, params.get("log_y", "0") in ("1", "true", "True")


def _refusal(user: access.User, cap: int) -> str:
    who = user.username or user.source
    return json.dumps(
        {
            "error": f"too many live streams: {who} already has {cap} open, the most this dashboard "
            f"allows per user (GRPO_DASHBOARD_MAX_STREAMS={cap}). Close other Run detail tabs "
            f"or windows; this page tries again in a while."
        }
    )


async def events(
    hub: LiveHub,
    run_id: str,
    smoothing: float,
    cursor: str | None,
    xaxis: str,
    log_y: bool,
    user: access.User,
    disconnected: Callable[[], Any],
) -> AsyncIterator[bytes]:
    """The event stream of one viewer (see the module docstring)."""
    on_space = hub.ctx.settings.on_space
    cap = hub.ctx.settings.max_streams
    who = user.username or user.source

    def private(text: str) -> str:
        text = access.redact(text, user.token)
        return access.scrub_paths(text) if on_space else text

    # Counted here, once the body runs: its `finally` then always gives the place back (a response whose body never
    # started holds none).
    if cap and hub.open_by_user[who] >= cap:
        yield _event("refused", _refusal(user, cap))
        return
    try:
        chan = hub.channel(run_id, smoothing)
    except RunNotFound:  # deleted since the request was let in
        yield _event("gone", GONE)
        return
    hub.open_by_user[who] += 1
    chan.join()
    try:
        if chan.feed.version == 0:
            await chan.wait(0, 10.0)
        while True:
            versions = chan.feed.since(cursor)
            if versions and xaxis in charts.METRIC_XAXES:
                versions = None  # deltas carry steps; on a logged metric's axis the page redraws from a snapshot
            if versions is None:
                snap, cursor = await asyncio.to_thread(chan.feed.snapshot_and_cursor, xaxis, log_y)
                yield _event("snapshot", private(snap), cursor)
            else:
                for v in versions:
                    cursor = f"{chan.feed.epoch}:{v.number}"
                    yield _event("delta", private(v.text), cursor)
            if await disconnected():
                return
            before = chan.feed.version
            await chan.wait(before, KEEPALIVE_S)
            if chan.feed.version == before:
                yield b": keepalive\n\n"
            if chan.feed not in hub.feeds:  # dropped (the run was deleted)
                yield _event("gone", GONE)
                return
    finally:
        chan.leave()
        hub.open_by_user[who] -= 1
        if hub.open_by_user[who] <= 0:
            del hub.open_by_user[who]


def install(app: Any, ctx: UiContext, user_of_request: Callable[[Any], access.User]) -> LiveHub:
    """Add the stream route to a Starlette/FastAPI `app` (first, ahead of Gradio's routes); returns its hub."""
    from starlette.responses import JSONResponse, StreamingResponse
    from starlette.routing import Route

    hub = LiveHub(ctx)

    async def live(request: Any) -> Any:
        try:
            run_id, smoothing, xaxis, log_y = parse_options(request.query_params)
        except ValueError as exc:
            return JSONResponse({"error": str(exc)}, status_code=400)
        try:
            user = user_of_request(request)
            run = await asyncio.to_thread(access.get_run, ctx.store, run_id, user, ctx.settings)
        except access.NotAllowed as exc:
            return JSONResponse({"error": str(exc)}, status_code=403)
        except RunNotFound as exc:
            return JSONResponse({"error": str(exc)}, status_code=404)
        cursor = request.query_params.get("cursor") or request.headers.get("last-event-id")
        body = events(hub, run.id, smoothing, cursor, xaxis, log_y, user, request.is_disconnected)
        return StreamingResponse(
            body, media_type="text/event-stream", headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
        )

    app.router.routes.insert(0, Route(PATH, live, methods=["GET"]))
    return hub
