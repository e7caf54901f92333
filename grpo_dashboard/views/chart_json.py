"""The charts of a run as the plotly JSON the browser gets, built once per run state and shared by its viewers.

A live run changes every few seconds and may have many viewers: the JSON of its panels is built once per change
(the store's change token) and options, by whichever viewer asks first; viewers asking while it is being built get
the newest finished charts instead of waiting (`live_plots`). The JSON is made straight from the panels' plain dicts,
without building plotly figures, and is identical to plotly's own `Figure.to_json()` of them.
"""

from __future__ import annotations

import base64
import dataclasses
import threading
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

import numpy as np

from grpo_dashboard.views.charts import _TEMPLATE, ChartOptions, Spec, run_specs
from grpo_dashboard.views.memo import SingleFlight

_TYPED = {
    "int8": "i1",
    "uint8": "u1",
    "int16": "i2",
    "uint16": "u2",
    "int32": "i4",
    "uint32": "u4",
    "float32": "f4",
    "float64": "f8",
}


def _typed_array(v: np.ndarray) -> Any:
    """plotly.js's typed-array spec of a numeric array, as plotly's own `to_typed_array_spec` makes it (int64 narrowed
    to the smallest int type that holds it) but without its per-array dataframe-library probing."""
    if v.size == 0 or v.dtype.kind not in "iuf":
        return v
    if v.dtype == np.int64:
        lo, hi = int(v.min()), int(v.max())
        for small in (np.int8, np.int16, np.int32):
            if np.iinfo(small).min <= lo and hi <= np.iinfo(small).max:
                v = v.astype(small)
                break
        else:
            return v
    short = _TYPED.get(str(v.dtype))
    if short is None:
        return v
    data = np.ascontiguousarray(v)
    return {"dtype": short, "bdata": base64.b64encode(data).decode("ascii")}  # type: ignore[arg-type]  # a buffer


def _source_json(data: list[dict[str, Any]], layout: dict[str, Any]) -> str:
    """What plotly's to_json makes of an unvalidated figure built from these dicts (to_dict deep-copies them, turns
    numpy arrays into typed-array specs and serialises), without the copies: arrays only sit at a trace's top level
    here, so only those are converted, in a copy of each trace dict."""
    from plotly.io.json import to_json_plotly

    traces = [{k: _typed_array(v) if isinstance(v, np.ndarray) else v for k, v in trace.items()} for trace in data]
    return to_json_plotly({"data": traces, "layout": layout})


def spec_json(spec: Spec) -> str:
    """What `charts._figure(*spec).to_json()` returns, without building the figure."""
    data, layout = spec
    return _source_json(data, {"template": _TEMPLATE, **layout})


def run_plots(
    store: Any,
    run_id: str,
    opts: ChartOptions,
    *,
    beta: float | None = None,
    max_completion_length: int | None = None,
    started_at: float | None = None,
    findings: Sequence[Any] = (),
) -> dict[str, str]:
    """`run_figures` as the plotly JSON the browser gets (what gr.Plot sends), in PANELS order.

    Shared between callers asking for the same run state (the store's change token) with the same options: many
    viewers of one live run cost one build per change, not one per viewer.
    """
    found = live_plots(
        store,
        run_id,
        opts,
        beta=beta,
        max_completion_length=max_completion_length,
        started_at=started_at,
        findings=findings,
        wait=True,
    )
    assert found is not None  # waiting always yields the current state's plots
    return found[1]


def live_plots(
    store: Any,
    run_id: str,
    opts: ChartOptions,
    *,
    beta: float | None = None,
    max_completion_length: int | None = None,
    started_at: float | None = None,
    findings: Sequence[Any] = (),
    wait: bool = False,
) -> tuple[tuple[Any, ...], dict[str, str]] | None:
    """(change token, plots) of a run for a live page: the current state's plots when they are built or nobody is
    building them (then this caller builds them); while another caller builds them, with `wait` False, the latest
    finished plots of this run and options (an older state, which the page shows until its next tick) or None.

    A viewer thus never queues behind another viewer's build, and never builds what someone else is building.
    """
    token = store.change_token(run_id)
    family = (str(store.path), run_id, dataclasses.astuple(opts), beta, max_completion_length, started_at)
    key = (*family, token, tuple((f.metric, int(f.step), f.rule, f.severity) for f in findings))

    def build() -> dict[str, str]:
        with _PLOTS_LOCK:
            cached = _PLOTS.get(key)
        if cached is not None:
            return cached
        specs = run_specs(store, run_id, opts, beta, max_completion_length, started_at, findings)
        plots = {pid: spec_json(spec) for pid, spec in specs.items()}
        with _PLOTS_LOCK:
            _PLOTS[key] = plots
            _LATEST.pop(family, None)  # re-inserted: the most recently built family is evicted last
            _LATEST[family] = (token, plots)
            while len(_PLOTS) > PLOT_CACHE_ENTRIES:
                _PLOTS.popitem(last=False)
            while len(_LATEST) > PLOT_CACHE_ENTRIES:
                _LATEST.pop(next(iter(_LATEST)))
        return plots

    with _PLOTS_LOCK:
        cached = _PLOTS.get(key)
        if cached is not None:
            _PLOTS.move_to_end(key)
            return token, dict(cached)
        if not wait and _BUILDS.busy(key):
            latest = _LATEST.get(family)
            return None if latest is None else (latest[0], dict(latest[1]))
    return token, dict(_BUILDS.do(key, build))


PLOT_CACHE_ENTRIES = 32
_PLOTS: OrderedDict[tuple[Any, ...], dict[str, str]] = OrderedDict()
_LATEST: dict[tuple[Any, ...], tuple[tuple[Any, ...], dict[str, str]]] = {}  # per run and options: newest built
_PLOTS_LOCK = threading.Lock()
_BUILDS = SingleFlight()  # one build per key: viewers asking while it runs wait for it
