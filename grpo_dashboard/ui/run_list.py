"""`GET /grpo/runs`: the runs the visitor may see (id, name, status), newest first, for the light run page's sidebar
(ticked runs are overlaid on every chart, each through its own `/grpo/live` stream, which checks that run again).

Declared in `space/policy.py` ROUTES for signed-in users: on a Space the gate (`route_gate.py`) answers 401 to
anyone else before this runs, and the list is the request user's own runs only (`access.visible_runs`); locally it is
every run. Another site's page cannot read it (`origin.py`: `/grpo` is a data path). The answer is an object, not a
bare array, and names nothing but the runs.
"""

from __future__ import annotations

import asyncio
from typing import Any

from grpo_dashboard.space import access

PATH = "/grpo/runs"
LIMIT = 100  # newest runs listed; older ones are opened by their link


def listing(runs: list[Any]) -> dict[str, Any]:
    """The answer for these runs (newest first): at most LIMIT of them, and whether more exist."""
    return {
        "runs": [{"id": r.id, "name": r.name, "status": str(r.status)} for r in runs[:LIMIT]],
        "more": len(runs) > LIMIT,
    }


def install(app: Any, ctx: Any, user_of_request: Any) -> None:
    """Add the route to the app (ahead of gradio's routes)."""
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    async def runs(request: Any) -> Any:
        user = user_of_request(request)
        found = await asyncio.to_thread(access.visible_runs, ctx.store, user, None, ctx.settings)
        return JSONResponse(listing(found), headers={"Cache-Control": "no-store"})

    app.router.routes.insert(0, Route(PATH, runs, methods=["GET"]))
