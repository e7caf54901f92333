"""One backend interface: every backend class implements the `Backend` protocol, and only the table picks one."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest

import grpo_dashboard
from grpo_dashboard.errors import BackendError
from grpo_dashboard.launch import backends, kinds, runs
from grpo_dashboard.launch.interface import Backend
from grpo_dashboard.spec.run_spec import BACKENDS as SPEC_KINDS
from grpo_dashboard.store.db import Run

PACKAGE = Path(grpo_dashboard.__file__).parent
# Where the kind names are written: each backend package's options.py (`KIND`), once.
KIND_NAMES = {(PACKAGE / "launch" / kind / "options.py").resolve() for kind in SPEC_KINDS}
# Strings that happen to equal a kind name but name something else: path -> how many.
NOT_KINDS: dict[str, int] = {
    "launch/hf_jobs/export.py": 1,  # the name of the `hf jobs run` command among export-trl's commands
    "space/access.py": 1,  # a user signed in by the saved login of this machine ("local")
}


def protocol_methods() -> dict[str, inspect.Signature]:
    """The methods the protocol declares, with their signatures."""
    return {
        name: inspect.signature(member)
        for name, member in vars(Backend).items()
        if inspect.isfunction(member) and not name.startswith("_")
    }


def test_the_protocol_declares_the_interface() -> None:
    assert {
        "launch_token",
        "submit",
        "refresh",
        "reap",
        "await_exit",
        "cancel",
        "resume",
        "reattach",
        "job_summary",
        "status_markdown",
        "checkpoints",
        "checkpoint_path",
        "resubmit_fields",
        "command_preview",
        "probe",
        "stop",
    } == set(protocol_methods())
    assert {"KIND", "SPACE", "RESUMABLE", "CHECKS"} <= set(Backend.__annotations__)


@pytest.mark.parametrize("backend_type", backends.BACKEND_TYPES, ids=lambda t: t.KIND)
def test_every_backend_implements_the_protocol(backend_type: type[Backend]) -> None:
    backend = backend_type()
    assert isinstance(backend, Backend)
    checked: Backend = backend  # mypy checks the same statically
    assert checked.KIND in SPEC_KINDS
    for name, wanted in protocol_methods().items():
        method = getattr(backend_type, name)
        got = list(inspect.signature(method).parameters.values())
        params = list(wanted.parameters.values())
        assert [p.name for p in got[: len(params)]] == [p.name for p in params], f"{backend_type.__name__}.{name}"
        for have, want in zip(got, params, strict=False):
            assert (have.default is inspect.Parameter.empty) == (want.default is inspect.Parameter.empty), (
                f"{backend_type.__name__}.{name}({have.name})"
            )
        extra = got[len(params) :]
        assert all(p.default is not inspect.Parameter.empty for p in extra), f"{backend_type.__name__}.{name}"


def test_live_state_is_per_instance() -> None:
    one, two = backends.Backends(), backends.Backends()
    assert one.hf_jobs is not two.hf_jobs and one.hf_jobs._tokens is not two.hf_jobs._tokens
    assert one.local._children is not two.local._children
    assert one.slurm._polled is not two.slurm._polled


def test_the_table_covers_every_kind_a_spec_may_name() -> None:
    assert backends.KINDS == kinds.KINDS == SPEC_KINDS  # the runner table and the light table agree
    table = backends.Backends()
    for kind in SPEC_KINDS:
        assert table.get(kind).KIND == kind and kind in table
    assert set(backends.REMOTE_KINDS) < set(SPEC_KINDS)


def test_each_backend_declares_its_space_policy() -> None:
    assert backends.space_kinds() == ("hf_jobs",)  # the only kind whose jobs leave the Space's own machine
    assert [backends.space_policy(k).on_dashboard_host for k in SPEC_KINDS] == [True, False, True]
    assert backends.space_policy("kubernetes").on_dashboard_host  # unknown: as restricted as the host's own


def test_an_unknown_kind_gets_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(BackendError, match=r"'kubernetes'.*'local', 'hf_jobs', 'slurm'"):
        backends.backend_for("kubernetes")
    run = Run(
        id="r", name="r", spec_yaml="", backend="kubernetes", status="running", created_at=0.0, run_dir=str(tmp_path)
    )
    with pytest.raises(BackendError, match="kubernetes"):
        runs.job_summary(run)


def kind_literals(path: Path) -> list[int]:
    """Lines of `path` holding a string equal to a backend kind name (compared, listed, looked up, passed)."""
    return [
        node.lineno
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.Constant) and node.value in SPEC_KINDS
    ]


def test_no_kind_is_written_out_outside_its_package() -> None:
    assert all(len(kind_literals(path)) == 1 for path in KIND_NAMES)  # its `KIND = "..."`
    found = {
        str(p.relative_to(PACKAGE)): kind_literals(p) for p in PACKAGE.rglob("*.py") if p.resolve() not in KIND_NAMES
    }
    found = {path: lines for path, lines in found.items() if lines}
    assert {path: len(lines) for path, lines in found.items()} == NOT_KINDS, found


KIND_CONSTANTS = ("LOCAL", "HF_JOBS", "SLURM")  # spec/run_spec.py's names of the kinds
# The checks layer's modules that still tell backends apart by kind, and how often: each a test inside a check that
# is otherwise generic (a package installed "here", a GPU "here", the estimator's flavor and cluster rows). This list
# may only shrink; validation, named checks and the backend settings know no kind.
CHECKS_KIND_TESTS: dict[str, int] = {
    "agents_async.py": 1,
    "cluster_checks.py": 1,
    "cluster_estimate.py": 1,
    "hardware.py": 3,
    "spec_extras.py": 6,
}


def kind_constants(path: Path) -> list[int]:
    """Lines of `path` naming a kind constant of spec/run_spec.py."""
    return [
        node.lineno
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.Name) and node.id in KIND_CONSTANTS
    ]


def test_the_checks_layer_knows_no_backend_by_kind() -> None:
    """Backend-specific checks live in launch/<kind>/checks.py; checks/ runs what it is given (kind literals are
    caught by the test above, kind constants here)."""
    found = {p.name: len(kind_constants(p)) for p in (PACKAGE / "checks").glob("*.py")}
    assert {name: n for name, n in found.items() if n} == CHECKS_KIND_TESTS
    for module in ("validation.py", "named.py"):
        assert not kind_constants(PACKAGE / "checks" / module), module


def test_each_backend_previews_its_own_command() -> None:
    from grpo_dashboard.spec.run_spec import RunSpec
    from grpo_dashboard.views import overview

    from .conftest import smoke_dict

    data = smoke_dict(Path("tiny"))
    table = backends.Backends()
    seen = {}
    for kind, extra in (
        ("local", {}),
        ("hf_jobs", {"flavor": "cpu-basic", "namespace": "me"}),
        ("slurm", {"nodes": 1}),
    ):
        spec = RunSpec.from_dict({**data, "backend": {"kind": kind, **extra}})
        preview = overview.command_preview(spec, table)
        assert preview is not None, kind
        seen[kind] = overview.command_text(spec.to_yaml(), preview)
    assert "What the local backend runs" in seen["local"] and "<run_dir>/run.yaml" in seen["local"]
    assert "What the Jobs container runs" in seen["hf_jobs"] and "/data/run.yaml" in seen["hf_jobs"]
    assert "#SBATCH --nodes=1" in seen["slurm"] and "What the local backend runs" not in seen["slurm"]
    unknown = RunSpec.from_dict({**data, "backend": {"kind": "kubernetes"}})
    assert overview.command_preview(unknown, table) is None


def test_the_scan_sees_a_kind_name(tmp_path: Path) -> None:
    source = tmp_path / "x.py"
    source.write_text(
        'if run.backend == "local":\n    pass\nchoices = ["slurm", "hf_jobs"]\nf(kind="slurm")\n', encoding="utf-8"
    )
    assert kind_literals(source) == [1, 3, 3, 4]


def test_no_import_cycle_among_the_launch_modules() -> None:
    """Lazy imports count too: the old `hf_jobs_payload -> local -> hub_client -> hf_jobs_payload` was one."""
    import grimp

    graph = grimp.build_graph("grpo_dashboard", exclude_type_checking_imports=True)
    launch = sorted(m for m in graph.modules if m.startswith("grpo_dashboard.launch."))
    cycles = []
    for importer in launch:
        for imported in graph.find_modules_directly_imported_by(importer):
            if imported.startswith("grpo_dashboard.launch.") and imported != importer:
                back = graph.find_shortest_chain(importer=imported, imported=importer)
                if back:
                    cycles.append((importer, *back))
    assert cycles == []
