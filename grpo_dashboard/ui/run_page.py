"""The light run page, `GET /grpo/run?run=ID`: a run's live charts, status and health without Gradio's frontend.

The full dashboard's run page waits for Gradio to mount every tab's components (the New-run form alone is about a
hundred) before its first chart; this page is plain HTML with plotly.js and the same page script (static/live.js),
following the same stream (`/grpo/live`, which checks who may see the run), so a shared link opens charts first.
The HTML is the same for everyone and echoes nothing from the request: the run id is read by the script from the
URL and sent to the stream, whose answer is the only data the page shows. A sidebar (static/overlay.js) lists the
visitor's runs (`/grpo/runs`); each one ticked there is overlaid on every chart through its own stream, and the
spec fields they differ in from this run are listed (`/grpo/spec_diff`). Below the
charts, folded, one sampled step's completions and trajectories (static/samples.js, from `/grpo/samples`, which
checks the run as the stream does).
"""

from __future__ import annotations

import html
from typing import Any

from grpo_dashboard.views import charts

PATH = "/grpo/run"

_STYLE = """
body { font-family: system-ui, -apple-system, 'Segoe UI', sans-serif; margin: 0; padding: 8px 14px; color: #1f2328; }
header { display: flex; gap: 14px; align-items: baseline; flex-wrap: wrap; margin-bottom: 4px; }
header h1 { font-size: 16px; margin: 0; }
header a { font-size: 13px; }
#live-status { font-size: 13px; }
#live-status p { margin: 0.1em 0; }
details { font-size: 13px; margin: 4px 0; }
/* Charts first: three to a row on a laptop screen (six above the fold at 1440 x 900), one on a phone. A box is as
   tall as its figure (views/charts.py: 340 px with the legend below the plot), so no chart runs under the next. */
.grpo-grid { display: grid; grid-template-columns: repeat(3, minmax(0, 1fr)); gap: 8px; }
.grpo-panel { min-height: 340px; min-width: 0; }
.grpo-panel .js-plotly-plot, .grpo-panel .grpo-gd { height: 340px; }
.grpo-placeholder { border: 1px dashed #c8d4e3; border-radius: 6px; height: 340px; padding: 6px 10px;
  color: #57606a; box-sizing: border-box; font-size: 13px; }
.grpo-placeholder h4 { margin: 0 0 6px 0; font-size: 13px; color: #2a3f5f; }
#plot-other { grid-column: 1 / -1; }
/* The runs sidebar (static/overlay.js) beside the charts; on a phone it comes after them (charts first). */
.grpo-main { display: grid; grid-template-columns: 170px minmax(0, 1fr); gap: 10px; align-items: start; }
#overlay { font-size: 12px; border-right: 1px solid #d0d7de; padding-right: 8px; max-height: 85vh; overflow: auto; }
#overlay h2 { font-size: 13px; margin: 2px 0 4px 0; }
#overlay ul { list-style: none; margin: 0; padding: 0; }
#overlay li { margin: 2px 0; overflow-wrap: anywhere; }
#overlay small { color: #57606a; }
#overlay-note { color: #57606a; margin: 4px 0; }
.grpo-hidden-note { font-size: 12px; color: #57606a; margin: 4px 0; }
.grpo-log { font-family: ui-monospace, monospace; font-size: 12px; white-space: pre-wrap; max-height: 360px;
  overflow: auto; background: #f6f8fa; border: 1px solid #d0d7de; border-radius: 6px; padding: 8px; }
.grpo-samples-bar { display: flex; gap: 12px; flex-wrap: wrap; align-items: center; margin: 4px 0; }
.grpo-samples-note { color: #57606a; }
.grpo-samples-body { max-height: 70vh; overflow: auto; }
.grpo-samples-table { border-collapse: collapse; font-size: 12px; width: 100%; }
.grpo-samples-table th, .grpo-samples-table td { border: 1px solid #d0d7de; padding: 3px 6px; vertical-align: top;
  text-align: left; }
.grpo-samples-table th { background: #f6f8fa; position: sticky; top: 0; }
.grpo-samples-table td.grpo-num { text-align: right; white-space: nowrap; font-variant-numeric: tabular-nums; }
.grpo-samples-table td.grpo-text div { white-space: pre-wrap; overflow-wrap: anywhere; max-height: 12em;
  overflow: auto; min-width: 16em; }
.grpo-traj { border: 1px solid #d0d7de; border-radius: 6px; padding: 6px 10px; margin: 6px 0; }
.grpo-traj h4 { margin: 0; font-size: 13px; }
.grpo-traj-counts { color: #57606a; margin: 2px 0; }
.grpo-turns { margin: 4px 0; padding-left: 20px; }
.grpo-turn { margin: 2px 0; }
.grpo-text { white-space: pre-wrap; overflow-wrap: anywhere; }
.grpo-call code { font-size: 12px; overflow-wrap: anywhere; }
.grpo-failed, .grpo-unreturned .grpo-call-note { color: #b42318; }
.grpo-final { margin: 4px 0 0 0; }
@media (max-width: 1100px) { .grpo-grid { grid-template-columns: repeat(2, minmax(0, 1fr)); } }
@media (max-width: 700px) {
  .grpo-grid { grid-template-columns: minmax(0, 1fr); }
  .grpo-main { grid-template-columns: minmax(0, 1fr); }
  #overlay { order: 2; border-right: none; border-top: 1px solid #d0d7de; max-height: none; }
}
"""


def _samples_section(view: str, title: str, filtered: bool = False) -> str:
    """A folded section static/samples.js fills from `/grpo/samples` when it is opened."""
    filt = '<label hidden>Filter <select data-k="filter"></select></label>' if filtered else ""
    return (
        f'<details id="samples-{view}"><summary>{title}</summary><div class="grpo-samples-bar">'
        '<label>Step <select data-k="step"></select></label>'
        '<label>Sort by <select data-k="sort"></select></label>'
        '<label><input type="checkbox" data-k="desc" checked> highest first</label>'
        f'{filt}<span class="grpo-samples-note" aria-live="polite">Loading…</span></div>'
        '<div class="grpo-samples-body"></div></details>'
    )


def page_html(static_path: str) -> str:
    """The page: header (links to the full dashboard), status, the runs sidebar beside the charts' grid (ticked runs
    are overlaid on every chart), then health, and folded: the spec fields the ticked runs differ in, a sampled
    step's completions and trajectories, the job log. `static_path`: where plotly.js and the page's scripts are
    served."""
    boxes = []
    for p in charts.PANELS:
        title = html.escape(p.title)
        boxes.append(
            f'<div class="grpo-panel" id="plot-{p.id}" data-title="{title}" role="figure" aria-label="{title}">'
            f'<div class="grpo-placeholder"><h4>{title}</h4><p>Loading…</p></div></div>'
        )
    return (
        "<!doctype html><html lang=en><head><meta charset=utf-8>"
        '<meta name=viewport content="width=device-width, initial-scale=1">'
        "<title>GRPO Dashboard · run</title>"
        f"<style>{_STYLE}</style>"
        # plotly.js (the largest file, and most of the time to a first chart) is compiled while the stream's first
        # answer is on its way: it loads async, and live.js runs as soon as the page's boxes exist (end of body).
        f'<script src="{static_path}/plotly-basic.min.js" async></script>'
        f'<script src="{static_path}/overlay.js" defer></script>'
        f'<script src="{static_path}/samples.js" defer></script>'
        "</head><body>"
        '<header><h1>GRPO Dashboard · run</h1><a id="full-link" href="/">Open in the full dashboard</a></header>'
        '<div id="live-status" role="status" aria-live="polite"></div>'
        '<div class="grpo-main"><nav id="overlay" aria-label="Runs to overlay"><h2>Overlay runs</h2>'
        '<ul id="overlay-runs"></ul><p id="overlay-note" aria-live="polite"></p></nav>'
        '<div id="live-charts" class="grpo-grid">' + "".join(boxes) + "</div></div>"
        '<details open><summary>Health</summary><div id="live-findings"></div></details>'
        '<details id="spec-diff"><summary>Spec differences with the ticked runs</summary>'
        '<p class="grpo-samples-note" aria-live="polite"></p><div class="grpo-samples-body"></div></details>'
        + _samples_section("completions", "Completions")
        + _samples_section("trajectories", "Trajectories", filtered=True)
        + '<details><summary>Job log</summary><pre id="live-log" class="grpo-log" tabindex="0"></pre></details>'
        # The full dashboard's link names the same run (read from this page's URL, never from the server).
        "<script>(function(){var r=new URLSearchParams(location.search).get('run');"
        "if(r){document.getElementById('full-link').href='/?run='+encodeURIComponent(r)+'&tab=detail';}})();"
        "</script>"
        f'<script src="{static_path}/live.js"></script>'
        "</body></html>"
    )


def install(app: Any, static_path: str) -> None:
    """Add the page's route to a Starlette/FastAPI `app` (first, ahead of Gradio's)."""
    from starlette.responses import HTMLResponse
    from starlette.routing import Route

    body = page_html(static_path)

    async def page(request: Any) -> Any:
        return HTMLResponse(body, headers={"Cache-Control": "no-cache"})

    app.router.routes.insert(0, Route(PATH, page, methods=["GET"]))
