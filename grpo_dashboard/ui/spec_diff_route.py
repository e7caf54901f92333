"""`GET /grpo/spec_diff?runs=<id>,<id>[,...]`: the spec fields that differ between runs, for the light run page's
sidebar (this run and the runs ticked there), as the full dashboard's Compare lists them (`overview.spec_diff`).

Answers `{"columns": ["field", "<name> (<id tail>)", ...], "rows": [[field, value, ...], ...], "runs": [ids]}`; at
most MAX_RUNS runs. Declared in `space/policy.py` ROUTES for signed-in users: on a Space the gate (`route_gate.py`)
answers 401 to anyone else before this runs, and every run is resolved by `access.get_run` for the request's user
(one that is another user's answers 404 like a missing one, and nothing of the others). Texts are redacted of tokens
(and, on a Space, of server paths). Another site's page cannot read it (`origin.py`: `/grpo` is a data path).
"""

from __future__ import annotations

from typing import Any

from grpo_dashboard.space import access
from grpo_dashboard.ui import json_route
from grpo_dashboard.views import overview

PATH = "/grpo/spec_diff"
MAX_RUNS = 5  # the page's run and the 4 it may overlay


def parse(params: Any) -> list[str]:
    """The run ids asked for (in order, without repeats); ValueError naming what is wrong."""
    raw = params.get("runs") or ""
    ids = list(dict.fromkeys(r.strip() for r in raw.split(",") if r.strip()))
    if len(ids) < 2:
        raise ValueError(f"runs: {raw!r} names {len(ids)} run(s); pass two to {MAX_RUNS} run ids, comma-separated")
    if len(ids) > MAX_RUNS:
        raise ValueError(f"runs: {len(ids)} runs named; at most {MAX_RUNS} are compared at once")
    return ids


def answer(runs: list[Any]) -> dict[str, Any]:
    """The answer for these (already authorized) runs."""
    frame = overview.spec_diff(runs)
    rows = [[str(v) for v in row] for row in frame.values.tolist()]
    return {"runs": [r.id for r in runs], "columns": list(frame.columns), "rows": rows}


def install(app: Any, ctx: Any, user_of_request: Any) -> None:
    """Add the route to the app (ahead of gradio's routes)."""

    def read(params: Any, user: access.User) -> dict[str, Any]:
        return answer([access.get_run(ctx.store, run_id, user, ctx.settings) for run_id in parse(params)])

    json_route.install(app, PATH, ctx, user_of_request, read)
