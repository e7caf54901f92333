"""`POST /grpo/ingest`: the HTTP transport of `DashboardCallback` (store/remote_ingest.py says what a batch is).

Declared in `space/policy.py` ROUTES for signed-in users, so on a Space the gate (`route_gate.py`) answers 401
before this runs unless the request carries a session or an `Authorization: Bearer` token the Hub vouches for; the
run then belongs to that user and only that user's token can write to it. The body is capped before it is read, and
each user has a request budget (`RATE`), answered 429 past it.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import deque
from typing import Any

from grpo_dashboard.space import access
from grpo_dashboard.store import remote_ingest

PATH = "/grpo/ingest"
RATE = (600, 60.0)  # requests per window per user: a callback sends one batch a second at most when healthy


class _Rate:
    def __init__(self) -> None:
        self.calls: dict[str, deque[float]] = {}
        self.lock = threading.Lock()

    def take(self, who: str) -> bool:
        now = time.monotonic()
        with self.lock:
            q = self.calls.setdefault(who, deque())
            while q and q[0] < now - RATE[1]:
                q.popleft()
            if len(q) >= RATE[0]:
                return False
            q.append(now)
            return True


def install(app: Any, ctx: Any, user_of_request: Any) -> None:
    """Add the ingest route to the app (ahead of gradio's routes)."""
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    rate = _Rate()

    def _user(request: Any) -> access.User:
        header = request.headers.get("authorization", "")
        if header.lower().startswith("bearer ") and ctx.settings.on_space:
            return access.current_user(None, header[7:].strip(), ctx.settings)
        return user_of_request(request)

    async def ingest(request: Any) -> Any:
        size = request.headers.get("content-length", "")
        if not size.isdigit():
            return JSONResponse({"error": "send the batch with a Content-Length"}, status_code=411)
        if int(size) > remote_ingest.MAX_BATCH_BYTES:
            return JSONResponse(
                {"error": f"the batch is {int(size):,} bytes, over {remote_ingest.MAX_BATCH_BYTES:,}"}, status_code=413
            )
        try:
            user = await asyncio.to_thread(_user, request)
        except access.NotAllowed as exc:
            return JSONResponse({"error": str(exc)}, status_code=401)
        if ctx.settings.on_space and user.username is None:
            return JSONResponse({"error": f"{PATH}: send your Hugging Face token as 'Authorization: Bearer'"}, 401)
        if not rate.take(user.username or "(this machine)"):
            return JSONResponse({"error": f"over {RATE[0]} batches per {RATE[1]:g} s: wait and resend"}, 429)
        body = await request.body()
        owner = user.username if ctx.settings.on_space else None
        try:
            answer = await asyncio.to_thread(remote_ingest.accept, ctx.store, owner, body)
        except remote_ingest.BatchError as exc:
            return JSONResponse({"error": str(exc), **exc.extra}, status_code=exc.status)
        return JSONResponse(answer)

    app.router.routes.insert(0, Route(PATH, ingest, methods=["POST"]))
