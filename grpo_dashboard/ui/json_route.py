"""One way to answer the light run page's JSON reads (`/grpo/samples`, `/grpo/spec_diff`): the read runs in a worker
thread for the request's user, its answer leaves with every text redacted of tokens (and, on a Space, of the server's
paths), and a refusal is an `{"error": ...}` with the status that says which: 400 a wrong parameter (the message names
it), 403 not allowed, 404 no such run among the user's (another user's run answers exactly like a missing one)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from grpo_dashboard.errors import RunNotFound
from grpo_dashboard.space import access


def install(
    app: Any,
    path: str,
    ctx: Any,
    user_of_request: Callable[[Any], access.User],
    read: Callable[[Any, access.User], dict[str, Any]],
) -> None:
    """Add `GET path` to the app (ahead of gradio's routes): `read(query_params, user)` answers it."""
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    def respond(request: Any) -> tuple[int, Any]:
        user = user_of_request(request)
        try:
            body = read(request.query_params, user)
            status = 200
        except ValueError as exc:
            status, body = 400, {"error": str(exc)}
        except access.NotAllowed as exc:
            status, body = 403, {"error": str(exc)}
        except RunNotFound as exc:
            status, body = 404, {"error": str(exc)}
        return status, access.scrubbed(body, user.token, paths=ctx.settings.on_space)

    async def route(request: Any) -> Any:
        status, body = await asyncio.to_thread(respond, request)
        return JSONResponse(body, status_code=status, headers={"Cache-Control": "no-store"})

    app.router.routes.insert(0, Route(path, route, methods=["GET"]))
