"""The project's own OpenEnv environment: the guessing game of `grpo_agents.GuessNumberEnv` served as an OpenEnv
server (Action / Observation / Environment of openenv-core, `create_app`), so an offline run trains against a real
OpenEnv server (examples/agent_openenv.yaml: `environment_factory: openenv:grpo_openenv_guess:app`).

`app()` builds the FastAPI app; openenv-core is imported only there (light at import).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from grpo_agents import GuessNumberEnv


def app() -> Any:
    """The OpenEnv FastAPI app serving the guessing game (one game per WebSocket session)."""
    from openenv.core.env_server.http_server import create_app
    from openenv.core.env_server.interfaces import Environment
    from openenv.core.env_server.types import Action, Observation, State
    from pydantic import Field

    class GuessAction(Action):
        """Guess the secret number."""

        number: int = Field(description=f"The guessed number, from 1 to {GuessNumberEnv.high}.")

    class GuessObservation(Observation):
        message: str = Field(default="", description="higher, lower or correct (the rules after a reset)")

    class GuessEnvironment(Environment[GuessAction, GuessObservation, State]):
        SUPPORTS_CONCURRENT_SESSIONS = True

        def __init__(self) -> None:
            super().__init__()
            self.game = GuessNumberEnv()
            self._state = State(episode_id="", step_count=0)

        def reset(self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any) -> GuessObservation:
            self._state = State(episode_id=episode_id or "", step_count=0)
            return GuessObservation(message=self.game.reset(**kwargs), reward=0.0)

        def step(self, action: GuessAction, timeout_s: float | None = None, **kwargs: Any) -> GuessObservation:
            self._state.step_count += 1
            result = self.game.guess(action.number)
            return GuessObservation(message=result, reward=self.game.get_reward(), done=self.game.solved)

        @property
        def state(self) -> State:
            return self._state

    return create_app(
        GuessEnvironment, GuessAction, GuessObservation, env_name="guess_number", max_concurrent_envs=256
    )
