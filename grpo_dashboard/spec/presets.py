"""Presets of the new-run form: YAML run specs shipped in `examples/` (the smoke test is the default)."""

from __future__ import annotations

from grpo_dashboard.spec.jobfiles import PROJECT_ROOT
from grpo_dashboard.spec.run_spec import RunSpec

EXAMPLES_DIR = PROJECT_ROOT / "examples"  # PROJECT_ROOT: the checkout, or the installed package's copies

PRESETS: dict[str, str] = {
    "smoke (offline CPU test)": "smoke.yaml",
    "math reasoning (Qwen2.5-0.5B-Instruct, GSM8K)": "math.yaml",
    "DAPO-style (clip-higher, no KL, on the smoke task)": "dapo.yaml",
    "agent: calculator tool (offline CPU, warmed tiny model)": "agent_calculator.yaml",
    "agent: guessing-game environment (offline CPU, no dataset)": "agent_guess.yaml",
    "agent: two environments by an `environment` column (offline CPU)": "agent_mixed.yaml",
    "agent: custom multi-turn rollout_func (offline CPU)": "agent_rollout.yaml",
    "agent: OpenEnv server the run starts (offline CPU, no dataset)": "agent_openenv.yaml",
    "agent: calculator + OpenEnv game by an `environment` column (offline CPU)": "agent_openenv_mixed.yaml",
}
BLANK = "blank form"
DEFAULT_PRESET = next(iter(PRESETS))


def preset_names() -> list[str]:
    """Preset names in menu order, the blank form last."""
    return [*PRESETS, BLANK]


def preset_yaml(name: str) -> str:
    """The YAML text of a preset (comments kept), or of a blank spec; KeyError for unknown names."""
    if name == BLANK:
        return RunSpec(name="my-run").to_yaml()
    if name not in PRESETS:
        raise KeyError(f"Unknown preset {name!r}; choose one of {preset_names()}.")
    return (EXAMPLES_DIR / PRESETS[name]).read_text(encoding="utf-8")


def preset_spec(name: str) -> RunSpec:
    """A preset parsed into a RunSpec."""
    return RunSpec.from_yaml(preset_yaml(name))
