"""`GET /grpo/samples`: one sampled step of a run, as the light run page's Completions and Trajectories show it.

`?run=<id>&view=<completions|trajectories>[&step=<n>][&sort=<key>][&desc=<0|1>][&filter=<column=value,...>]`
answers JSON: the run's sampled steps, the step shown (the nearest sampled one at or before `step`; the latest when it
is empty), the sort keys this view offers, and either the completions table (`columns`, `rows`: the full app's
Completions table, `views/completions.samples_frame`) or the trajectories (`views/trajectories.trajectory`: turns,
tool calls with their outcome, failures, scores), at most MAX_ROWS of them, each text cut at MAX_TEXT characters.

Declared in `space/policy.py` ROUTES for signed-in users: on a Space the gate (`route_gate.py`) answers 401 to
anyone else before this runs, and the run is resolved by `access.get_run` for the request's user (another user's run
answers 404 like a missing one). Texts are redacted of tokens (and, on a Space, of server paths) as the live stream's
are. Another site's page cannot read it (`origin.py`: `/grpo` is a data path). A wrong parameter gets 400 naming it,
its value and what is allowed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from grpo_dashboard.space import access
from grpo_dashboard.ui import json_route
from grpo_dashboard.views import completions, overview, trajectories

PATH = "/grpo/samples"
VIEWS = ("completions", "trajectories")
MAX_ROWS = 64  # samples answered per step (a step holds num_generations x prompts of them)
MAX_TEXT = 4000  # characters kept of each text; the rest is named, not sent


@dataclass
class Query:
    """What the page asks for (see the module docstring)."""

    run_id: str
    view: str = VIEWS[0]
    step: int | None = None
    sort: str = ""
    descending: bool = True
    filters: dict[str, str] = field(default_factory=dict)


def parse(params: Any) -> Query:
    """The query from request parameters; ValueError naming the parameter, its value and what is allowed."""
    run_id = (params.get("run") or "").strip()
    if not run_id:
        raise ValueError("run: missing; pass ?run=<run id>")
    view = params.get("view") or VIEWS[0]
    if view not in VIEWS:
        raise ValueError(f"view: {view!r} is not one of {', '.join(VIEWS)}")
    raw = (params.get("step") or "").strip()
    try:
        step = int(raw) if raw else None
    except ValueError:
        raise ValueError(
            f"step: {raw!r} is not a whole number; pass a sampled step, or leave it out for the latest"
        ) from None
    desc = params.get("desc", "1")
    if desc not in ("0", "1"):
        raise ValueError(f"desc: {desc!r} is not 0 or 1 (1: highest first)")
    filters: dict[str, str] = {}
    for part in (params.get("filter") or "").split(","):
        if not part.strip():
            continue
        if "=" not in part:
            raise ValueError(f"filter: {part.strip()!r} is not column=value; e.g. filter=environment=calc")
        key, value = part.split("=", 1)
        filters[key.strip()] = value.strip()
    return Query(run_id, view, step, (params.get("sort") or "").strip(), desc == "1", filters)


def _clip(text: str) -> str:
    if len(text) <= MAX_TEXT:
        return text
    return text[:MAX_TEXT] + f"… ({len(text) - MAX_TEXT} more characters; the full text is in the run's samples)"


def clean(value: Any) -> Any:
    """`value` as strict JSON (non-finite numbers as null, other objects as text), each text clipped."""
    if isinstance(value, str):
        return _clip(value)
    if isinstance(value, bool) or value is None or isinstance(value, int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [clean(v) for v in value]
    if hasattr(value, "item") and not hasattr(value, "__len__"):  # a numpy scalar
        return clean(value.item())
    return _clip(str(value))


def _weights(run: Any) -> dict[str, float]:
    spec = overview.run_spec(run)
    return {r.name: r.weight for r in spec.rewards} if spec is not None else {}


def answer(run: Any, query: Query) -> dict[str, Any]:
    """The answer for `run` (already authorized); ValueError for a sort key or filter column this step lacks."""
    steps = completions.sample_steps(run.run_dir, run.output_dir)
    chosen = completions.nearest_step(steps, query.step)
    rows = completions.read_step(run.run_dir, chosen, run.output_dir) if chosen is not None else []
    out: dict[str, Any] = {"run": run.id, "view": query.view, "steps": steps, "step": chosen, "count": len(rows)}
    weights = _weights(run)
    if query.view == "completions":
        rewards = list(dict.fromkeys(n for r in rows for n in r.get("rewards") or {}))
        sorts = [*completions.SORTS[:-1], *rewards, completions.SORTS[-1]]
        sort = query.sort or sorts[0]
        if sort not in sorts:
            raise ValueError(f"sort: {sort!r} is not one of {', '.join(sorts)} for this step")
        frame = completions.samples_frame(rows, weights, sort, query.descending)
        out |= {
            "sorts": sorts,
            "sort": sort,
            "columns": list(frame.columns),
            "rows": frame.head(MAX_ROWS).values.tolist(),
        }
    else:
        sorts = list(trajectories.SORTS)
        sort = query.sort or sorts[0]
        if sort not in sorts:
            raise ValueError(f"sort: {sort!r} is not one of {', '.join(sorts)}")
        columns = trajectories.filter_values(rows)
        unknown = [k for k in query.filters if k not in columns]
        if unknown:
            named = ", ".join(columns) or "none (this step's samples carry no extra columns)"
            raise ValueError(f"filter: column {unknown[0]!r} is not in this step's samples; its columns: {named}")
        trajs = trajectories.trajectories(rows, weights, query.filters, sort, query.descending)
        out |= {
            "sorts": sorts,
            "sort": sort,
            "filters": columns,
            "matched": len(trajs),
            "trajectories": trajs[:MAX_ROWS],
        }
    out["descending"] = query.descending
    return out


def install(app: Any, ctx: Any, user_of_request: Any) -> None:
    """Add the route to the app (ahead of gradio's routes)."""

    def read(params: Any, user: access.User) -> dict[str, Any]:
        query = parse(params)
        return clean(answer(access.get_run(ctx.store, query.run_id, user, ctx.settings), query))

    json_route.install(app, PATH, ctx, user_of_request, read)
