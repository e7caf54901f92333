"""Handlers answer by component, never by position (ui/guard.py check_named), so reordering an event's outputs
cannot mis-wire an answer: the real app's handlers, called as gradio calls them, answer with dicts whose keys are
among their event's outputs, and the gate refuses a positional answer or a stray key."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import gradio as gr
import pytest

from grpo_dashboard.spec import forms, presets
from grpo_dashboard.store.db import Store
from grpo_dashboard.store.ingest import ingest_file
from grpo_dashboard.ui import build_app, guard
from grpo_dashboard.ui.context import UiContext

from .store_helpers import append_log, new_run

SMOKE = presets.preset_yaml(presets.DEFAULT_PRESET)


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """The dashboard on a real store holding one run with 30 logged steps."""
    root = tmp_path_factory.mktemp("named")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("GRPO_DASHBOARD_DATA_DIR", str(root / "data"))
        store = Store(root / "d.db")
        log = new_run(store, root)
        append_log(log, range(1, 31), reward=lambda s: s / 30, kl=0.01, grad_norm=1.0)
        ingest_file(store, "r1", log)
        yield build_app(store, monitor=False)


def block_fn(demo: Any, api_name: str) -> Any:
    return next(f for f in demo.fns.values() if f.api_name == api_name)


def by_elem(outputs: list[Any], elem_id: str) -> Any:
    return next(c for c in outputs if getattr(c, "elem_id", None) == elem_id)


def form_args(demo: Any) -> list[Any]:
    values = forms.values_from_yaml(SMOKE)
    return [values[key] for key in demo.form_keys]


def detail_args(run_id: str) -> list[Any]:
    return [run_id, 0.6, False, "step", True, None, "reward", True, {}]


def test_the_gate_knows_every_event_s_outputs(app: Any) -> None:
    several = [f for f in app.fns.values() if f.fn is not None and len(f.outputs) > 1]
    assert len(several) >= 15
    for f in several:
        assert getattr(f.fn, guard.OUTPUTS_ATTR) == frozenset(b._id for b in f.outputs), f.api_name


CALLS: dict[str, Any] = {
    "load_preset": lambda demo: [presets.DEFAULT_PRESET],
    "form_to_yaml": lambda demo: [*form_args(demo), SMOKE],
    "yaml_to_form": lambda demo: [SMOKE],
    "validate": lambda demo: [*form_args(demo), SMOKE],
    "detail_render": lambda demo: detail_args("r1"),
    "detail_step": lambda demo: detail_args("r1"),
    "compare": lambda demo: [["r1"], None, 0.6, False, "step"],
    "run_choices": lambda demo: [None],
    "page_state": lambda demo: ["?run=r1"],
    "open_run_by_ref": lambda demo: ["r1"],
    "resume_choices": lambda demo: ["r1"],
    "rename_run": lambda demo: ["r1", "renamed"],
    "detail_trajectories": lambda demo: ["r1", None, "", "reward", True],
}


@pytest.mark.parametrize("api_name", sorted(CALLS))
def test_handlers_answer_by_their_own_outputs(app: Any, api_name: str) -> None:
    f = block_fn(app, api_name)
    answer = f.fn(None, None, *CALLS[api_name](app))
    assert isinstance(answer, dict) and answer, api_name
    assert all(isinstance(key, gr.blocks.Block) for key in answer), api_name
    assert {key._id for key in answer} <= {b._id for b in f.outputs}, api_name
    sent = asyncio.run(app.postprocess_data(f, answer, None))  # gradio's own placing, as a request gets it
    assert len(sent) == len(f.outputs)


def test_a_value_lands_on_its_named_output(app: Any) -> None:
    f = block_fn(app, "load_preset")
    answer = f.fn(None, None, presets.DEFAULT_PRESET)
    sent = asyncio.run(app.postprocess_data(f, answer, None))
    yaml_at = f.outputs.index(by_elem(f.outputs, "spec-yaml"))
    summary_at = f.outputs.index(by_elem(f.outputs, "new-run-summary"))
    assert sent[yaml_at] == SMOKE.strip() and "Loaded preset" in str(sent[summary_at])  # gr.Code strips it
    f = block_fn(app, "detail_render")
    answer = f.fn(None, None, *detail_args("no-such-run"))
    sent = asyncio.run(app.postprocess_data(f, answer, None))
    assert "No run 'no-such-run'" in str(sent[0])  # the status, first of the outputs API clients get
    assert all(s == {"__type__": "update"} for s in sent[1:-1])


@pytest.fixture()
def tiny(tmp_path: Path) -> tuple[gr.Blocks, list[Any], dict[str, Any]]:
    """An app of one gated event with outputs [a, b] (and c, which is not an output), answering `reply["value"]`."""
    ctx = UiContext(Store(tmp_path / "d.db"), presets.PROJECT_ROOT)
    reply: dict[str, Any] = {}
    with gr.Blocks() as demo:
        a, b, c = gr.Textbox(), gr.Textbox(), gr.Textbox()
        gr.Button().click(guard.gate(ctx, "compare", lambda text: reply["value"]), [a], [a, b], api_name="compare")
    guard.seal(demo, ctx)
    return demo, [a, b, c], reply


def test_the_gate_refuses_a_positional_answer(tiny: tuple[gr.Blocks, list[Any], dict[str, Any]]) -> None:
    demo, (a, b, c), reply = tiny
    fn = block_fn(demo, "compare").fn
    reply["value"] = ["x", "y"]
    with pytest.raises(TypeError, match="compare answered with a list of 2 values .* by position"):
        fn(None, None, "")
    reply["value"] = {a: "x", c: "y"}
    with pytest.raises(TypeError, match="not among its outputs"):
        fn(None, None, "")
    for fine in ({b: "y"}, {b: "y", a: "x"}, gr.skip()):
        reply["value"] = fine
        assert fn(None, None, "") == fine
