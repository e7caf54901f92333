"""What the dashboard relies on in gradio's and huggingface_hub's internals still holds in the installed versions.

Each touch of a private API lives in one module (ui/serving.py for gradio, launch's Hub client module for
huggingface_hub); these tests fail loudly, naming what changed, when an upgrade moves any of it.
"""

from __future__ import annotations

import inspect
import sys

import gradio as gr
import pytest

from grpo_dashboard.ui import serving


def test_gradio_is_the_major_version_we_were_written_for() -> None:
    assert gr.__version__.split(".")[0] == "6", f"gradio {gr.__version__}: re-check ui/serving.py's internals"


def test_blocks_postprocess_data_is_the_private_coroutine_we_override() -> None:
    method = getattr(gr.Blocks, "postprocess_data", None)
    assert method is not None, "gr.Blocks.postprocess_data is gone: DashboardBlocks overrides it"
    assert inspect.iscoroutinefunction(method)
    assert list(inspect.signature(method).parameters) == ["self", "block_fn", "predictions", "state"]
    assert serving.DashboardBlocks.postprocess_data is not method  # ours is the one called


def test_postprocessing_helpers_exist() -> None:
    from gradio.data_classes import GradioModel, GradioRootModel
    from gradio.utils import is_prop_update

    assert isinstance(GradioModel, type) and isinstance(GradioRootModel, type)
    assert is_prop_update(gr.update(value=1)) and is_prop_update(gr.skip())
    assert not is_prop_update({"a": 1})


def test_plot_data_carries_ready_plotly_json() -> None:
    value = serving.plot_data('{"data": [], "layout": {}}')
    assert value.type == "plotly" and value.plot == '{"data": [], "layout": {}}'
    assert gr.Plot().postprocess(value) is value  # gr.Plot passes it through as is


def test_missing_optional_imports_fail_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    name = "matplotlib"
    if importlib.util.find_spec(name) is not None:
        pytest.skip("matplotlib is installed: nothing to short-circuit")
    monkeypatch.delitem(sys.modules, name, raising=False)
    serving.short_circuit_missing_optional_imports()
    assert sys.modules[name] is None
    with pytest.raises(ImportError):
        __import__(name)


def test_huggingface_hub_client_factory_hook_exists() -> None:
    """launch/hub_client.py gives the shared HTTP client a timeout through this private hook."""
    from huggingface_hub.utils import _http

    assert hasattr(_http, "_GLOBAL_CLIENT_FACTORY"), "huggingface_hub.utils._http._GLOBAL_CLIENT_FACTORY is gone"
    assert callable(_http.default_client_factory) and callable(_http.set_client_factory)
    client = _http.default_client_factory()
    assert hasattr(client, "timeout")
    client.close()


def test_implicit_token_switch_is_read_at_call_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """A Space turns implicit tokens off (launch/hub_client.forbid_implicit_hub_token): the owner's secret is never
    sent for a visitor. huggingface_hub must read the switch when it builds headers, not at import."""
    from huggingface_hub import constants
    from huggingface_hub.utils import get_token_to_send

    monkeypatch.setenv("HF_TOKEN", "hf_OwnerSecretForTheEdgeTest0123")
    monkeypatch.setattr(constants, "HF_HUB_DISABLE_IMPLICIT_TOKEN", False)
    assert get_token_to_send(None) == "hf_OwnerSecretForTheEdgeTest0123"
    monkeypatch.setattr(constants, "HF_HUB_DISABLE_IMPLICIT_TOKEN", True)
    assert get_token_to_send(None) is None
    assert get_token_to_send("hf_theUsersOwn0123456789") == "hf_theUsersOwn0123456789"


def test_the_page_embeds_its_config_with_the_main_tabs_and_a_tab_renders_its_children_once_selected() -> None:
    """OpeningTab edits the config the page embeds (`window.gradio_config = {...};`, each component's props) and
    relies on a gr.Tab mounting its children only once it is selected."""
    from gradio.routes import templates

    source = (templates.env.loader.get_source(templates.env, "frontend/index.html"))[0]  # type: ignore[union-attr]
    assert "window.gradio_config = {{ config | toorjson }};" in source, "the page no longer embeds its config so"
    assert inspect.signature(gr.Tab.__init__).parameters["render_children"].default is False


def test_opening_tab_selects_the_linked_tab_in_the_embedded_config() -> None:
    """The tab a link opens on, and the page's config edited to it: nothing else changes, and a value that could close
    the <script> element stays escaped as gradio escapes it."""
    import json

    ids = ("new", "preflight", "runs", "detail", "compare")
    assert serving.opening_tab("run=abc", ids) == "detail"
    assert serving.opening_tab("tab=compare&run=abc", ids) == "compare"
    assert serving.opening_tab("tab=new&run=abc", ids) is None and serving.opening_tab("tab=evil", ids) is None
    assert serving.opening_tab("", ids) is None
    config = {
        "components": [
            {"id": 1, "type": "tabs", "props": {"elem_id": "main-tabs", "selected": "new"}},
            {"id": 2, "type": "markdown", "props": {"value": "</script><script>alert(1)</script> & 'x'"}},
        ]
    }
    page = f"<html><script>window.gradio_config = {json.dumps(config)};</script><p>after</p></html>"
    edited = serving.with_selected_tab(page, "main-tabs", "detail")
    assert "</script><script>alert" not in edited and edited.endswith(";</script><p>after</p></html>")
    start = edited.index("window.gradio_config = ") + len("window.gradio_config = ")
    got, _ = json.JSONDecoder().raw_decode(edited, start)
    assert got["components"][0]["props"]["selected"] == "detail"
    assert got["components"][1] == config["components"][1]
    assert serving.with_selected_tab("<html>no config</html>", "main-tabs", "detail") == "<html>no config</html>"
