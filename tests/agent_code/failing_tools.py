"""Agent code for the tests: a calculator that always fails (a tool raising during training), and bad inputs."""

from __future__ import annotations


def calculator(expression: str) -> str:
    """Evaluate an arithmetic expression.

    Args:
        expression: The expression to evaluate.
    """
    raise RuntimeError("calculator service is down")


def undocumented(expression: str) -> str:
    return expression


def closure_tool():
    """Build a tool (a closure: not picklable)."""

    def calculator(expression: str) -> str:
        """Evaluate an arithmetic expression.

        Args:
            expression: The expression to evaluate.
        """
        return expression

    return calculator


lambda_tool = lambda expression: expression  # noqa: E731 - a lambda, refused for async runs


class NoReset:
    """An environment without reset."""

    def guess(self, number: int) -> str:
        """Guess.

        Args:
            number: The guess.
        """
        return "lower"


def answer_reward(completions: list, answer: list, **kwargs: object) -> list[float]:
    """A top-level (picklable) reward: 1.0 when the final message equals the answer column."""
    return [float(c[-1]["content"].strip() == a) for c, a in zip(completions, answer, strict=True)]
