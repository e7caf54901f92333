"""gr.Blocks with a cheap path for outputs a handler leaves unchanged (gr.skip()).

Gradio 6 post-processes a skipped output like any other update: it builds a fresh copy of the component and its
config for the session (~1-3 ms each). The run-detail timer returns up to ~15 skips per tick, for every viewer, once
a second or so; with many viewers that alone kept the server busy. A pure skip needs none of that: the browser gets
`{"__type__": "update"}`, exactly what Gradio itself would send for it.
"""

from __future__ import annotations

import copy
from typing import Any

import gradio as gr

_SKIP = {"__type__": "update"}


class DashboardBlocks(gr.Blocks):
    """gr.Blocks whose handlers' gr.skip() outputs cost nothing to post-process."""

    async def postprocess_data(self, block_fn: Any, predictions: Any, state: Any) -> list[Any]:  # noqa: D102
        outputs = list(block_fn.outputs)
        if block_fn.batch or not isinstance(predictions, (list, tuple)) or len(outputs) < 2 \
                or len(predictions) != len(outputs):
            return await super().postprocess_data(block_fn, predictions, state)
        skipped = {i for i, (block, p) in enumerate(zip(outputs, predictions, strict=True))
                   if not block.stateful and isinstance(p, dict) and p == _SKIP}
        rest = [i for i in range(len(outputs)) if i not in skipped]
        if not skipped or len(rest) < 2:  # Gradio unwraps a single remaining output: leave those cases to it
            return await super().postprocess_data(block_fn, predictions, state)
        narrowed = copy.copy(block_fn)
        narrowed.outputs = [outputs[i] for i in rest]
        done = await super().postprocess_data(narrowed, [predictions[i] for i in rest], state)
        merged: list[Any] = [dict(_SKIP) for _ in outputs]
        for i, value in zip(rest, done, strict=True):
            merged[i] = value
        return merged
