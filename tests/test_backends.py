"""One backend interface: every backend module provides what launch/__init__.py lists, and only the table picks one."""

from __future__ import annotations

import ast
import inspect
import re
from pathlib import Path

import pytest

import grpo_dashboard
from grpo_dashboard import launch
from grpo_dashboard.errors import BackendError
from grpo_dashboard.launch import backends, runs
from grpo_dashboard.spec.run_spec import BACKENDS as SPEC_KINDS
from grpo_dashboard.store.db import Run

PACKAGE = Path(grpo_dashboard.__file__).parent
TABLE = Path(backends.__file__).resolve()
# checks/ sits below launch/ in the layers, so it cannot ask the table: its per-kind spec rules compare to the kind
# names of spec.run_spec (LOCAL, HF_JOBS), never to string literals.
PENDING: dict[str, int] = {}


def interface() -> dict[str, list[tuple[str, bool]]]:
    """The functions launch/__init__.py names, each with its parameters (name, documented with a default)."""
    found = re.findall(r"^- `(\w+)\(([^)]*)\)`", launch.__doc__ or "", re.M)
    return {name: [(p.split("=")[0].strip(), "=" in p) for p in params.split(",") if p.strip()]
            for name, params in found}


def test_the_docstring_names_the_interface() -> None:
    assert {"submit", "refresh", "cancel", "reattach"} <= set(interface())
    assert re.search(r"^- `KIND`", launch.__doc__ or "", re.M)


@pytest.mark.parametrize("kind", sorted(backends.BACKENDS))
def test_every_backend_provides_the_interface(kind: str) -> None:
    module = backends.BACKENDS[kind]
    assert module.KIND == kind
    for name, params in interface().items():
        function = getattr(module, name, None)
        assert callable(function), f"{module.__name__} has no {name}()"
        signature = list(inspect.signature(function).parameters.values())
        assert [p.name for p in signature[:len(params)]] == [p for p, _ in params], f"{module.__name__}.{name}"
        for param, (_, defaulted) in zip(signature[:len(params)], params, strict=True):
            assert (param.default is not inspect.Parameter.empty) == defaulted, f"{module.__name__}.{name}"
        extra = signature[len(params):]
        assert all(p.default is not inspect.Parameter.empty for p in extra), f"{module.__name__}.{name}: {extra}"


def test_the_table_covers_every_kind_a_spec_may_name() -> None:
    assert set(backends.BACKENDS) == set(SPEC_KINDS)
    for kind in SPEC_KINDS:
        assert backends.backend_for(kind) is backends.BACKENDS[kind]


def test_an_unknown_kind_gets_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(BackendError, match=r"'kubernetes'.*'local', 'hf_jobs', 'slurm'"):
        backends.backend_for("kubernetes")
    run = Run(id="r", name="r", spec_yaml="", backend="kubernetes", status="running", created_at=0.0,
              run_dir=str(tmp_path))
    with pytest.raises(BackendError, match="kubernetes"):
        runs.job_summary(run)


def _kind_literal(node: ast.AST) -> bool:
    if isinstance(node, ast.Constant):
        return node.value in SPEC_KINDS
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return any(_kind_literal(e) for e in node.elts)
    return False


def kind_comparisons(path: Path) -> list[int]:
    """Lines of `path` that compare something to a backend kind written out as a string."""
    lines = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Compare) and any(_kind_literal(n) for n in [node.left, *node.comparators]):
            lines.append(node.lineno)
        elif isinstance(node, ast.MatchValue) and _kind_literal(node.value):
            lines.append(node.lineno)
    return lines


def test_no_kind_is_compared_to_a_string_outside_the_table() -> None:
    found = {str(p.relative_to(PACKAGE)): kind_comparisons(p) for p in PACKAGE.rglob("*.py") if p.resolve() != TABLE}
    found = {path: lines for path, lines in found.items() if lines}
    pending = {path: lines for path, lines in found.items() if path in PENDING}
    assert {path: len(lines) for path, lines in pending.items()} == PENDING
    assert {path: lines for path, lines in found.items() if path not in PENDING} == {}


def test_the_scan_sees_a_comparison() -> None:
    assert _kind_literal(ast.parse('"hf_jobs"', mode="eval").body)
    tree = ast.parse('if run.backend == "local":\n    pass\nif kind in ("x", "hf_jobs"):\n    pass\n')
    assert len([n for n in ast.walk(tree) if isinstance(n, ast.Compare)
                and any(_kind_literal(o) for o in [n.left, *n.comparators])]) == 2
