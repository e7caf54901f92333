"""The launched app driven through gradio_client, one test per named endpoint (real store, real CPU runs)."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from gradio_client import Client

from grpo_dashboard.spec import forms, presets
from grpo_dashboard.store.db import TERMINAL, Store
from grpo_dashboard.ui import build_app
from grpo_dashboard.views import charts, overview

from .conftest import free_port_app, wait_for

EXPECTED_ENDPOINTS = {
    "/load_preset",
    "/form_to_yaml",
    "/yaml_to_form",
    "/validate",
    "/launch",
    "/runs_table",
    "/run_choices",
    "/detail_poll",
    "/detail_render",
    "/detail_step",
    "/cancel_run",
    "/compare",
    "/open_run_by_ref",
    "/inspect_dataset",
    "/check_rewards",
    "/estimate_hardware",
    "/who",
    "/detail_trajectories",
    "/detail_view",
    "/page_state",
    "/rename_run",
    "/note_run",
    "/tag_run",
    "/delete_run",
    "/import_trl",
    "/resume_choices",
    "/resume_run",
    "/export_metrics",
    "/import_run",
    "/forecast_cost",
}
N_GROUPS = len(forms.GROUPS) - 1  # "Run" fields sit above the accordions


@pytest.fixture(scope="module")
def module_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("ui-client-data")


@pytest.fixture(autouse=True)
def data_dir(module_data: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """One data directory for the whole module: the served app's store lives there."""
    monkeypatch.setenv("GRPO_DASHBOARD_DATA_DIR", str(module_data))
    return module_data


@pytest.fixture(scope="module")
def served(module_data: Path) -> Iterator[tuple[Any, Client, Store]]:
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("GRPO_DASHBOARD_DATA_DIR", str(module_data))
        store = Store()
        demo = build_app(store)
        url = free_port_app(demo)
        client = Client(url, verbose=False)
        try:
            yield demo, client, store
        finally:
            from grpo_dashboard.launch import runs

            for run in store.list_runs(status=["queued", "running"]):
                runs.cancel(store, run, wait=True)
            demo.close()
            demo.monitor.stop()


def form_args(demo: Any, values: dict[str, Any]) -> list[Any]:
    """Form values in the endpoint's input order (the reward table as the client's DataFrame payload)."""
    return [
        {"headers": list(forms.REWARD_COLUMNS), "data": values[k]} if k == "rewards" else values[k]
        for k in demo.form_keys
    ]


def smoke_values(**training: Any) -> tuple[dict[str, Any], str]:
    text = presets.preset_yaml(presets.DEFAULT_PRESET)
    values = forms.values_from_yaml(text)
    fields = forms.fields_by_key()
    for k, v in training.items():
        values[f"training.{k}"] = str(v) if fields[f"training.{k}"].number_as_text else v
    return values, text


def field_outputs(demo: Any, outputs: list[Any]) -> dict[str, Any]:
    """The trailing per-field outputs of a form endpoint, keyed by field."""
    return dict(zip(demo.form_keys, outputs[-len(demo.form_keys) :], strict=True))


def trace_len(x: Any) -> int:
    """Length of a trace coordinate as sent to the browser (a list, or plotly's base64 typed array)."""
    if isinstance(x, dict) and "bdata" in x:
        return len(np.frombuffer(base64.b64decode(x["bdata"]), dtype=np.dtype(x["dtype"])))
    return len(x)


def plot_traces(payload: dict[str, Any]) -> list[dict[str, Any]]:
    """The traces of a gr.Plot payload."""
    return json.loads(payload["plot"])["data"]


def plot_points(payload: dict[str, Any]) -> int:
    """Points of the longest logged-metric trace in a gr.Plot payload (the forecast's drawn curves excluded)."""
    return max(
        (trace_len(t["x"]) for t in plot_traces(payload) if "x" in t and t.get("meta") != "forecast"), default=0
    )


def test_every_named_endpoint_is_covered(served: tuple[Any, Client, Store]) -> None:
    _, client, _ = served
    api = client.view_api(return_format="dict", print_info=False)
    assert set(api["named_endpoints"]) == EXPECTED_ENDPOINTS
    assert not api["unnamed_endpoints"]


def test_poll_handlers_do_not_serialize(served: tuple[Any, Client, Store]) -> None:
    demo, _, _ = served
    fns = {f.api_name: f for f in demo.fns.values()}
    for name in (
        "runs_table",
        "run_choices",
        "detail_poll",
        "detail_render",
        "detail_step",
        "compare",
        "form_to_yaml",
        "yaml_to_form",
        "load_preset",
    ):
        assert fns[name].concurrency_limit is None, name  # not Gradio's default of 1 per event


def test_load_preset(served: tuple[Any, Client, Store]) -> None:
    demo, client, _ = served
    name = "DAPO-style (clip-higher, no KL, on the smoke task)"
    out = client.predict(name, api_name="/load_preset")
    yaml_text, command, summary = out[:3]
    assert "epsilon_high: 0.28" in yaml_text and "mask_truncated_completions: true" in yaml_text
    assert "python -m grpo_dashboard launch run.yaml" in command and "grpo_job.py" in command
    assert name in summary
    fields = field_outputs(demo, out)
    assert fields["training.epsilon_high"]["value"] == "0.28"  # optional numbers are edited as text
    assert fields["training.loss_type"]["value"] == "dapo"
    assert "Upper-bound epsilon" in fields["training.epsilon_high"]["info"]  # TRL's help text


def test_form_to_yaml(served: tuple[Any, Client, Store]) -> None:
    demo, client, _ = served
    values, text = smoke_values(num_generations=4, epsilon_high=0.3)
    yaml_text, command, *_ = client.predict(*form_args(demo, values), text, api_name="/form_to_yaml")
    assert "num_generations: 4" in yaml_text and "epsilon_high: 0.3" in yaml_text
    assert yaml_text in command
    assert "\nname: smoke\n" in yaml_text and yaml_text.startswith("# ")  # the preset's comment line is kept


def test_yaml_to_form(served: tuple[Any, Client, Store]) -> None:
    demo, client, _ = served
    text = presets.preset_yaml(presets.DEFAULT_PRESET).replace("beta: 0.0", "beta: 0.04")
    out = client.predict(text, api_name="/yaml_to_form")
    assert "YAML applied" in out[1]
    assert field_outputs(demo, out)["training.beta"]["value"] == 0.04
    out = client.predict("training: [unclosed\n", api_name="/yaml_to_form")
    assert "(yaml)" in out[1]
    assert field_outputs(demo, out)["training.beta"] == {"__type__": "update"}  # the form is left alone


def test_validate_shows_every_error_next_to_its_field(served: tuple[Any, Client, Store]) -> None:
    demo, client, _ = served
    values, text = smoke_values(beta=-1.0, num_generations=1)
    values["name"] = ""
    values["dataset.prompt_column"] = "question"
    out = client.predict(*form_args(demo, values), text, api_name="/validate")
    summary = out[0]
    assert "problems block the launch" in summary
    for field in ("name", "training.beta", "training.num_generations", "dataset.prompt_column"):
        assert f"**{field}**" in summary
    fields = field_outputs(demo, out)
    assert fields["training.beta"]["info"].startswith("✖")
    assert fields["training.num_generations"]["info"].startswith("✖")
    assert not fields["training.epsilon"]["info"].startswith("✖")
    group_boxes = " ".join(str(x.get("value", "")) for x in out[1 : 1 + N_GROUPS])
    assert "training.beta" in group_boxes and "dataset.prompt_column" in group_boxes

    good, text = smoke_values()
    out = client.predict(*form_args(demo, good), text, api_name="/validate")
    assert "Valid" in out[0]


def test_launch_invalid_spec_starts_nothing(served: tuple[Any, Client, Store]) -> None:
    demo, client, store = served
    before = len(store.list_runs())
    values, text = smoke_values(learning_rate=-1.0)
    out = client.predict(*form_args(demo, values), text, api_name="/launch")
    assert "training.learning_rate" in out[0]
    assert len(store.list_runs()) == before


def launch(demo: Any, client: Client, **training: Any) -> str:
    values, text = smoke_values(**training)
    out = client.predict(*form_args(demo, values), text, api_name="/launch")
    assert "Launched" in out[0], out[0]
    return out[-1]


@pytest.fixture(scope="module")
def finished_run(served: tuple[Any, Client, Store]) -> str:
    """A 20-step smoke run launched through the form endpoint and followed to its end."""
    demo, client, store = served
    run_id = launch(demo, client, max_steps=20)
    run = wait_for(lambda: (r := store.get_run(run_id)).status in TERMINAL and r, timeout=300)
    assert run.status == "completed", run.error
    return run_id


def test_launch_runs_to_completion(served: tuple[Any, Client, Store], finished_run: str) -> None:
    _, _, store = served
    run = store.get_run(finished_run)
    assert run.last_step == 20 and run.max_steps == 20
    assert len(store.series(run.id, "reward")) == 20


def test_runs_table(served: tuple[Any, Client, Store], finished_run: str) -> None:
    _, client, _ = served
    table = client.predict([], api_name="/runs_table")
    row = next(r for r in table["data"] if r[-1] == finished_run)
    cols = dict(zip(table["headers"], row, strict=True))
    assert cols["status"].endswith("completed") and cols["progress"].endswith("20/20")
    assert cols["reward"] and cols["elapsed"] and cols["health"]
    only_failed = client.predict(["failed"], api_name="/runs_table")
    assert all(r[-1] != finished_run for r in only_failed["data"])


def test_run_choices(served: tuple[Any, Client, Store], finished_run: str) -> None:
    _, client, _ = served
    detail_choices, compare_choices = client.predict(api_name="/run_choices")
    for update in (detail_choices, compare_choices):
        if update.get("choices") is not None:
            assert finished_run in [c[1] for c in update["choices"]]


def test_detail_render_then_poll_redraws_only_on_change(served: tuple[Any, Client, Store], finished_run: str) -> None:
    _, client, _ = served
    args = (finished_run, 0.6, False, "step", True, None, "total reward", True)
    out = client.predict(*args, api_name="/detail_render")
    status, findings, *rest = out  # the Cancel button's interactivity is not part of the API
    plots = rest[: len(charts.PANELS)]
    spec_yaml, log, step_dd, table, note = rest[len(charts.PANELS) :]
    assert "completed" in status and finished_run in status
    assert findings
    points = {p.id: plot_points(pl) for p, pl in zip(charts.PANELS, plots, strict=True)}
    assert points["reward"] == 20 and points["entropy"] == 20 and points["length"] == 20
    assert any(t.get("meta") == "forecast" for t in plot_traces(plots[0]))  # the fit drawn over the reward
    assert "KL not logged: beta is 0" in plots[2]["plot"]
    assert spec_yaml.startswith("name: smoke") and "@@GRPO_DASHBOARD@@" not in log
    assert step_dd["value"] == 20 and "Step 20" in note
    totals = [r[table["headers"].index("total reward")] for r in table["data"]]
    assert totals == sorted(totals, reverse=True) and len(totals) == 16

    # Same session, nothing changed: the tick only refreshes the status line.
    status, *rest = client.predict(*args, api_name="/detail_poll")
    assert finished_run in status
    assert all(x == {"__type__": "update"} for x in rest)
    # A control changed: charts are redrawn, the rest still skipped.
    status, findings, *rest = client.predict(
        finished_run, 0.0, True, "step", True, None, "total reward", True, api_name="/detail_poll"
    )
    assert plot_points(rest[0]) == 20
    assert json.loads(rest[0]["plot"])["layout"]["yaxis"]["type"] == "log"
    assert rest[len(charts.PANELS)] == {"__type__": "update"}  # spec unchanged


def test_detail_step_picks_a_step_and_stops_following(served: tuple[Any, Client, Store], finished_run: str) -> None:
    _, client, _ = served
    out = client.predict(finished_run, 0.6, False, "step", True, 5, "advantage", False, api_name="/detail_step")
    follow, rest = out[0], out[1:]
    assert follow is False
    step_dd, table, note = rest[-3:]
    assert step_dd["value"] == 5 and "Step 5" in note
    adv = [r[table["headers"].index("advantage")] for r in table["data"]]
    assert adv == sorted(adv)


def test_trajectories_tab_shows_a_step_as_conversations(served: tuple[Any, Client, Store], finished_run: str) -> None:
    _, client, _ = served
    step_dd, table, body = client.predict(finished_run, "5", "", "advantage", True, api_name="/detail_trajectories")
    assert step_dd["value"] == "5" and body.startswith("Step 5: 16 of 16 samples")
    adv = [r[table["headers"].index("advantage")] for r in table["data"]]
    assert adv == sorted(adv, reverse=True) and "**final answer:**" in body


@pytest.mark.training
def test_agent_preset_launched_from_the_form_shows_tool_calls_in_trajectories(
    served: tuple[Any, Client, Store], agent_model: Path
) -> None:
    demo, client, store = served
    text = presets.preset_yaml("agent: calculator tool (offline CPU, warmed tiny model)")
    values = forms.values_from_yaml(text)
    values["model.name_or_path"], values["training.max_steps"] = str(agent_model), 4
    out = client.predict(*form_args(demo, values), text, api_name="/launch")
    assert "Launched" in out[0], out[0]
    run = wait_for(lambda: (r := store.get_run(out[-1])).status in TERMINAL and r, timeout=600)
    assert run.status == "completed", run.error
    _, table, body = client.predict(run.id, "", "", "tool calls", True, api_name="/detail_trajectories")
    assert "→ call `calculator(" in body and "🔧 tool →" in body
    assert table["data"][0][table["headers"].index("tool calls")] >= 1


def test_tag_run_sets_the_runs_tags_shown_in_runs(served: tuple[Any, Client, Store], finished_run: str) -> None:
    _, client, store = served
    message = client.predict(finished_run, "lr-sweep, baseline, lr-sweep", api_name="/tag_run")
    assert "`lr-sweep`, `baseline`" in message
    frame = overview.runs_frame(store).set_index("id")
    assert frame.loc[finished_run, "tags"].split(", ")[-2:] == ["lr-sweep", "baseline"]
    assert overview.runs_frame(store, tag="baseline")["id"].tolist() == [finished_run]
    with pytest.raises(Exception, match=r"tag 'x{40}' is not usable: give 1 to 64 characters"):
        client.predict(finished_run, "ok, " + "x" * 65, api_name="/tag_run")
    assert "baseline" in overview.runs_frame(store).set_index("id").loc[finished_run, "tags"]  # nothing half-done
    assert "Tags of" in client.predict(finished_run, "", api_name="/tag_run")
    assert "baseline" not in overview.runs_frame(store).set_index("id").loc[finished_run, "tags"]


def test_open_run_by_ref(served: tuple[Any, Client, Store], finished_run: str) -> None:
    _, client, _ = served
    dropdown = client.predict(finished_run[:12], api_name="/open_run_by_ref")  # (the tab switch is not API data)
    assert dropdown["value"] == finished_run
    with pytest.raises(Exception, match="No run matches"):
        client.predict("no-such-run", api_name="/open_run_by_ref")


def test_cancel_and_compare(served: tuple[Any, Client, Store], finished_run: str) -> None:
    demo, client, store = served
    run_id = launch(demo, client, max_steps=400, learning_rate=0.002)
    wait_for(lambda: store.get_run(run_id).n_records >= 2, timeout=300)
    status = client.predict(run_id, api_name="/cancel_run")
    assert run_id in status
    run = wait_for(lambda: (r := store.get_run(run_id)).status in TERMINAL and r, timeout=60)
    assert run.status == "canceled" and run.last_step < 400

    metric, fig, diff = client.predict([finished_run, run_id], "reward", 0.0, False, "step", api_name="/compare")
    assert metric["value"] == "reward" and "entropy" in str(metric["choices"])
    traces = plot_traces(fig)
    names = [t["name"] for t in traces]
    assert [n.split(":")[0] for n in names] == [f"smoke ({finished_run[-6:]}", f"smoke ({run_id[-6:]}"]
    assert all("max_steps=" in n for n in names)  # same-name runs are told apart by what differs
    diff_rows = {r[0]: r[1:] for r in diff["data"]}
    assert diff_rows["training.max_steps"] == ["20", "400"]
    assert diff_rows["training.learning_rate"] == ["0.001", "0.002"]
    assert "name" not in diff_rows
