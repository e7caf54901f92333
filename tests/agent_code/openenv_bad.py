"""An OpenEnv server whose action has a list field: no tool argument TRL can pass (tests/test_agents_openenv.py)."""

from __future__ import annotations

from typing import Any


def app() -> Any:
    from openenv.core.env_server.http_server import create_app
    from openenv.core.env_server.interfaces import Environment
    from openenv.core.env_server.types import Action, Observation, State

    class PickAction(Action):
        """Pick some items."""

        items: list[str]

    class PickObservation(Observation):
        message: str = ""

    class PickEnvironment(Environment[PickAction, PickObservation, State]):
        def reset(self, seed: Any = None, episode_id: Any = None, **kwargs: Any) -> PickObservation:
            return PickObservation(message="pick")

        def step(self, action: PickAction, timeout_s: Any = None, **kwargs: Any) -> PickObservation:
            return PickObservation(message=",".join(action.items), done=True)

        @property
        def state(self) -> State:
            return State()

    return create_app(PickEnvironment, PickAction, PickObservation)
