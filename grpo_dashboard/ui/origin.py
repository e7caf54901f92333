"""Same-origin only on a Space: an ASGI middleware that refuses what another site's page asks of the app.

A visitor's browser sends the Space's session cookie (`SameSite=None`, so that the Space works inside huggingface.co's
iframe) with every request to the Space, whichever site's page makes it; and gradio's CORS middleware restricts
origins only when the Host is localhost, so behind `<owner>-<space>.hf.space` it grants any `Origin` with credentials.
Any web page could then call the API as the signed-in visitor and read the answers. `SameOrigin` decides from the
headers the browser itself sets (a page cannot forge `Origin` or `Sec-Fetch-*`), in this order:

1. a GET or HEAD navigation (`Sec-Fetch-Mode: navigate`) outside the data routes (`DATA_PATHS`) passes from anywhere:
   links to the Space, the OAuth provider's redirect to `/login/callback`, huggingface.co's iframe. The page that
   started it cannot read the answer;
2. a request with an `Origin` passes only when that origin is one of `allowed` (`https://$SPACE_HOST`, then
   `GRPO_DASHBOARD_ALLOWED_ORIGINS`); any other gets 403, CORS preflights included, so gradio never answers it;
3. a request without `Origin` but `Sec-Fetch-Site: cross-site` or `same-site` (another page's `<img>`, `<script>`,
   form GET, or a navigation into a data route) gets 403. `same-site` counts as foreign: other Spaces on `hf.space`
   may share our site;
4. anything else passes: same-origin requests, URLs the user typed (`Sec-Fetch-Site: none`), and clients that are not
   browsers (no Fetch metadata: gradio_client with a Bearer token carries no ambient credential, so no forgery).

No response leaving it grants a foreign origin: an `Access-Control-Allow-Origin` naming another origin (or `*`) is
removed with its `Access-Control-Allow-Credentials`. DashboardBlocks (serving.py) installs it on a Space only, outside
gradio's own middleware; locally the app is unchanged.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from typing import Any

from grpo_dashboard import settings

DATA_PATHS = ("/gradio_api", "/grpo", "/config")
_FOREIGN_SITES = (b"cross-site", b"same-site")
_CORS_GRANTS = (b"access-control-allow-origin", b"access-control-allow-credentials")

log = logging.getLogger(__name__)


def is_data_path(path: str) -> bool:
    """Whether `path` is one of the routes that read or change a user's state (gradio's API, files, queue and config;
    the dashboard's live stream and static files), not a page a link may open."""
    return any(path == p or path.startswith(p + "/") for p in DATA_PATHS)


def refusal(headers: dict[bytes, bytes], method: str, path: str, allowed: Sequence[str]) -> str | None:
    """Why a request with these (lower-cased) headers is refused on a Space, or None when it may pass (the rule of the
    module docstring)."""
    mode, site = headers.get(b"sec-fetch-mode"), headers.get(b"sec-fetch-site")
    if mode == b"navigate" and method in ("GET", "HEAD") and not is_data_path(path):
        return None
    own = " or ".join(allowed) if allowed else "its own origin (none is known: SPACE_HOST is not set)"
    raw = headers.get(b"origin")
    if raw is not None:
        origin = raw.decode("latin-1")
        if settings.origin_of(origin) in allowed:
            return None
        return f"Origin {origin} may not call this Space: only {own} may."
    if site in _FOREIGN_SITES:
        return f"A {site.decode()} request may not call this Space: only pages on {own} may."
    return None


class SameOrigin:
    """ASGI middleware: HTTP and WebSocket requests that another site's page makes get 403 with the reason (`refusal`);
    `allowed` defaults to `settings.allowed_origins()`, read when the server builds its middleware."""

    def __init__(self, app: Any, allowed: Sequence[str] | None = None) -> None:
        self.app = app
        self.allowed = tuple(settings.allowed_origins() if allowed is None else allowed)
        if not self.allowed:
            log.warning(
                "SPACE_HOST is not set: every browser request that names an origin will be refused. Set "
                "%s to the Space's address.",
                settings.ALLOWED_ORIGINS_ENV,
            )

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] not in ("http", "websocket"):
            return await self.app(scope, receive, send)
        headers = {k.lower(): v for k, v in scope.get("headers") or []}
        method = scope.get("method", "GET")
        reason = refusal(headers, method, scope.get("path", ""), self.allowed)
        if reason is not None:
            log.info("refused %s %s: %s", method, scope.get("path"), reason)
            if scope["type"] == "websocket":
                return await send({"type": "websocket.close", "code": 1008, "reason": reason[:120]})
            return await _forbidden(send, reason)
        if b"origin" not in headers:
            return await self.app(scope, receive, send)

        async def scrubbed(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = self.scrub(list(message.get("headers") or []))
            await send(message)

        return await self.app(scope, receive, scrubbed)

    def scrub(self, headers: list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
        """`headers` of a response without a CORS grant to any origin but the allowed ones."""
        granted = [v for k, v in headers if k.lower() == _CORS_GRANTS[0]]
        if all(settings.origin_of(v.decode("latin-1")) in self.allowed for v in granted):
            return headers
        return [(k, v) for k, v in headers if k.lower() not in _CORS_GRANTS]


async def _forbidden(send: Any, reason: str) -> None:
    body = json.dumps({"error": reason}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": 403,
            "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": body})
