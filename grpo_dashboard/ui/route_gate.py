"""The gate of every HTTP route: an ASGI middleware that serves only what `space/policy.py` ROUTES allows.

A route the table does not list, or lists as DENIED, is answered 404 exactly like a path that does not exist (default
deny: a route a gradio upgrade adds stays unreachable until it is declared). On a Space, a route for signed-in users
answers 401 to anyone else before gradio reads the request: the visitor's user comes from gradio's session cookie,
or from an `Authorization: Bearer hf_...` header that the Hub vouches for (API clients). Uploads also spend the
user's upload quota (files and bytes per window), so one client cannot fill the disk.
"""

from __future__ import annotations

import json
from typing import Any

import anyio

from grpo_dashboard.space import access
from grpo_dashboard.space.policy import DENIED, SIGNED_IN, route_for
from grpo_dashboard.ui.guard import budgets

UPLOAD_PATH = "/gradio_api/upload"


def _session_user(scope: dict[str, Any]) -> str | None:
    from gradio import oauth

    session = scope.get("session") if "session" in scope else None
    info = oauth._get_valid_oauth_info_from_session(session) if session is not None else None
    if not info:
        return None
    name = (info.get("userinfo") or {}).get("preferred_username")
    return str(name) if name else None


def _bearer(headers: dict[bytes, bytes]) -> str | None:
    value = headers.get(b"authorization", b"").decode("latin-1").strip()
    if value.lower().startswith("bearer "):
        token = value[7:].strip()
        return token or None
    return None


async def _answer(send: Any, status: int, message: str) -> None:
    body = json.dumps({"error": message}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": body})


class RouteGate:
    """ASGI middleware: ROUTES' policy for every HTTP request (see the module docstring)."""

    def __init__(self, app: Any, ctx: Any = None) -> None:
        self.app, self.ctx = app, ctx

    def _on_space(self) -> bool:
        settings = getattr(self.ctx, "settings", None)
        return bool(settings.on_space) if settings is not None else False

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        path = scope.get("path", "/")
        root = scope.get("root_path") or ""
        if root and path.startswith(root):
            path = path[len(root) :] or "/"
        found = route_for(path, scope.get("method", "GET"))
        if found is None or found[1].who == DENIED:
            return await _answer(send, 404, "Not Found")
        declared, route = found
        if not self._on_space() or route.who != SIGNED_IN:
            return await self.app(scope, receive, send)
        headers = dict(scope.get("headers") or [])
        user = await self._user(scope, headers)
        if user is None:
            return await _answer(
                send,
                401,
                f"{declared}: sign in with Hugging Face first (on this Space it is for "
                f"signed-in users only), or send your token as 'Authorization: Bearer'.",
            )
        if declared == UPLOAD_PATH:
            size = headers.get(b"content-length", b"0")
            refusal = budgets(self.ctx).uploads.take(user, int(size) if size.isdigit() else 0)
            if refusal:
                return await _answer(send, 429, f"{declared}: {refusal}")
        return await self.app(scope, receive, send)

    async def _user(self, scope: dict[str, Any], headers: dict[bytes, bytes]) -> str | None:
        name = _session_user(scope)
        if name:
            return name
        token = _bearer(headers)
        if not token:
            return None
        try:
            return await anyio.to_thread.run_sync(access.whoami_name, token)
        except access.NotAllowed:
            return None


def declared_routes(app: Any) -> list[tuple[str, str]]:
    """(path, method) of every HTTP route the app serves, gradio's included routers walked."""
    out: list[tuple[str, str]] = []

    def walk(routes: list[Any]) -> None:
        for route in routes:
            inner = getattr(route, "original_router", None)
            if inner is not None:
                walk(list(inner.routes))
                continue
            path = getattr(route, "path", None)
            for method in sorted(getattr(route, "methods", None) or []):
                out.append((str(path), method))

    walk(list(app.routes))
    return out
