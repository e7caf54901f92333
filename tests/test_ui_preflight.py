"""The Pre-flight tab through gradio_client: dataset inspector, sandboxed reward check, hardware estimate."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from gradio_client import Client

from grpo_dashboard.checks import sandbox
from grpo_dashboard.spec import presets
from grpo_dashboard.spec.run_spec import RewardSpec, RunSpec

from .conftest import served_client


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Client]:
    with served_client(tmp_path_factory.mktemp("preflight")) as served:
        yield served


def test_inspect_dataset_reports_columns_and_rows(client: Client) -> None:
    text = client.predict(presets.preset_yaml(presets.DEFAULT_PRESET), api_name="/inspect_dataset")
    assert "prompt" in text and "64" in text


def test_reward_check_runs_and_flags_a_constant_reward(client: Client) -> None:
    good = presets.preset_yaml(presets.DEFAULT_PRESET)
    assert "letter_fraction" in client.predict(good, 2, api_name="/check_rewards")
    spec = RunSpec.from_yaml(good)
    spec.rewards.insert(0, RewardSpec(name="flat", builtin="constant"))
    broken = spec.to_yaml()
    report = client.predict(broken, 2, api_name="/check_rewards")
    assert "problems found" in report and "flat" in report


def test_hardware_estimate_and_unreadable_spec(client: Client, tmp_path: Path) -> None:
    text = client.predict(presets.preset_yaml(presets.DEFAULT_PRESET), api_name="/estimate_hardware")
    assert "GB" in text or "GiB" in text
    with pytest.raises(Exception, match="cannot be read"):
        client.predict("name: [oops", api_name="/inspect_dataset")


def test_reward_check_on_a_machine_without_a_boundary_says_so_in_the_page(
    client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The weak fallback's warning reaches the page (it was only in the server's log): with bubblewrap and Landlock
    both unavailable the report names the fallback and says to run only trusted code; with a boundary it says none."""
    good = presets.preset_yaml(presets.DEFAULT_PRESET)
    if sandbox.boundary() is not None:
        assert "without an isolation boundary" not in client.predict(good, 2, api_name="/check_rewards")
    monkeypatch.setenv("GRPO_SANDBOX_NO_BWRAP", "1")  # the served app runs in this process: it sees the change
    monkeypatch.setenv("GRPO_SANDBOX_NO_LANDLOCK", "1")
    report = client.predict(good, 2, api_name="/check_rewards")
    assert "WARNING: Custom code runs here without an isolation boundary" in report
    assert "GRPO_SANDBOX_NO_BWRAP is set" in report and "run only reward and tool code you trust" in report
    assert "letter_fraction" in report  # the check still ran, on the fallback
