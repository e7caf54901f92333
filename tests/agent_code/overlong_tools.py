"""A calculator whose results sometimes exceed any small max_completion_length: by the expression's character sum,
a short result, a failure with a long message, or a long result (TRL runs the call, counts it, and drops
the result)."""

from __future__ import annotations

LONG = 400  # characters: far past the test's completion budget in tokens


def kind(expression: str) -> int:
    """0: short result, 1: long failure, 2: long result."""
    return sum(map(ord, expression)) % 3


def calculator(expression: str) -> str:
    """Evaluate an arithmetic expression.

    Args:
        expression: The expression to evaluate.
    """
    k = kind(expression)
    if k == 1:
        raise RuntimeError("calculator overloaded, retry later: " + "x" * LONG)
    if k == 2:
        return "9" * LONG
    return str(len(expression))  # short; its value does not matter here
