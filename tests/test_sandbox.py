"""The sandbox used by the code reward (in jobs) and by the reward check (in the dashboard): limits and isolation,
with and without Linux namespaces."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from grpo_dashboard.checks import sandbox
from grpo_dashboard.spec.jobfiles import rewards_module

from .conftest import processes_with
from .sandbox_attacks import BOUNDARIES, MODES, sandbox_mode

R = rewards_module()


@pytest.fixture(params=MODES)
def mode(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """Each test in every way the sandbox may isolate (see `sandbox_mode`)."""
    yield from sandbox_mode(request.param, monkeypatch)


def test_runs_code_with_stdin_files_and_a_temporary_working_dir(mode: str) -> None:
    res = sandbox.run_sandboxed(
        "import os, sys\nprint(open('data.txt').read(), sys.stdin.read(), os.getcwd())",
        stdin="from stdin",
        files={"data.txt": "from file"},
    )
    assert res.ok, res.stderr
    text, cwd = res.stdout.rsplit(" ", 1)
    assert text == "from file from stdin"
    if mode == "bwrap":
        assert cwd.strip() == "/sandbox/work"
    else:
        assert "grpo-sandbox-" in cwd and not Path(cwd.strip()).exists()  # removed afterwards
    assert res.isolation.startswith(
        {"bwrap": "bubblewrap (", "landlock": "landlock (", "unshare": "unshare --", "audit-hook": "audit"}[mode]
    )


def test_infinite_loop_is_killed_at_the_time_limit(mode: str) -> None:
    start = time.monotonic()
    res = sandbox.run_sandboxed("while True:\n    pass\n", timeout_s=1.0)
    assert res.timed_out and not res.ok and res.returncode is None
    assert time.monotonic() - start < 5


def test_sleeping_child_processes_die_with_it(mode: str, tmp_path: Path) -> None:
    flag, marker = tmp_path / "survived", f"grpo-child-{os.getpid()}-{mode}"
    child = f"import time\ntime.sleep(3)\nopen({str(flag)!r}, 'w').write('x')\n"
    code = (
        f"import subprocess, sys\nsubprocess.Popen([sys.executable, 'child.py', {marker!r}])\nwhile True:\n    pass\n"
    )
    res = sandbox.run_sandboxed(code, timeout_s=1.0, allow_subprocess=True, files={"child.py": child})
    assert res.timed_out
    deadline = time.monotonic() + 2
    while processes_with(marker) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert processes_with(marker) == []
    time.sleep(3.5 - 1.0)
    assert not flag.exists()


@pytest.mark.parametrize("hog", ["x = bytearray(4 * 1024 ** 3)", "xs = []\nwhile True:\n    xs.append(' ' * 10**7)"])
def test_memory_hog_is_stopped_at_the_memory_limit(mode: str, hog: str) -> None:
    start = time.monotonic()
    res = sandbox.run_sandboxed(hog, memory_mb=256, timeout_s=20)
    assert not res.ok and res.memory_exceeded, res.stderr[-500:]
    assert time.monotonic() - start < 20


def test_environment_secrets_are_not_inherited(mode: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_TOKEN", "hf_fakeSecretToken123")
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.example:3128")
    code = """
import json, os
seen = {"env": dict(os.environ)}
for path in (f"/proc/{os.getppid()}/environ", "/proc/1/environ", "/proc/self/environ"):
    try:
        seen[path] = open(path, "rb").read().decode(errors="replace")
    except Exception as exc:
        seen[path] = type(exc).__name__
print(json.dumps(seen))
"""
    res = sandbox.run_sandboxed(code)
    assert res.ok, res.stderr
    assert "hf_fake" not in res.stdout and "proxy.example" not in res.stdout
    seen = json.loads(res.stdout)
    allowed = {"PATH", "HOME", "TMPDIR", "LANG", "LC_ALL", "PYTHONDONTWRITEBYTECODE"}
    assert set(seen["env"]) <= allowed | ({"PWD", "GRPO_SANDBOX_INSIDE"} if mode in BOUNDARIES else set())


def test_token_files_in_home_cannot_be_read(mode: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "home"
    (home / ".cache" / "huggingface").mkdir(parents=True)
    (home / ".cache" / "huggingface" / "token").write_text("hf_fakeFileToken456")
    (home / ".netrc").write_text("machine huggingface.co password hf_fakeNetrc")
    monkeypatch.setenv("HOME", str(home))
    code = f"""
for p in ({str(home / ".cache/huggingface/token")!r}, {str(home / ".netrc")!r}):
    try:
        print(open(p).read())
    except (PermissionError, FileNotFoundError) as exc:
        print("denied", exc)
import os
print("home visible:", os.path.isdir({str(home)!r}))
"""
    res = sandbox.run_sandboxed(code)
    assert "hf_fake" not in res.stdout and res.stdout.count("denied") == 2
    assert f"home visible: {mode != 'bwrap'}" in res.stdout  # under bubblewrap it is not even there


def test_network_is_unreachable(mode: str) -> None:
    code = """
import socket
for attempt in (lambda: socket.create_connection(("1.1.1.1", 80), timeout=2),
                lambda: socket.getaddrinfo("huggingface.co", 443),
                lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b"x", ("8.8.8.8", 53))):
    try:
        attempt()
        print("CONNECTED")
    except Exception as exc:
        print("blocked", type(exc).__name__)
"""
    res = sandbox.run_sandboxed(code, timeout_s=15)
    assert res.ok, res.stderr
    assert "CONNECTED" not in res.stdout and res.stdout.count("blocked") == 3


def test_subprocesses_are_refused_unless_allowed(mode: str) -> None:
    code = "import subprocess\nprint(subprocess.run(['echo', 'spawned'], capture_output=True).stdout)"
    refused = sandbox.run_sandboxed(code)
    assert not refused.ok and "subprocess.Popen is not allowed" in refused.stderr
    assert sandbox.run_sandboxed(code, allow_subprocess=True).ok


def test_output_is_capped(mode: str) -> None:
    res = sandbox.run_sandboxed("print('x' * 5_000_000)", max_output=1000)
    assert len(res.stdout) == 1000


def test_code_reward_cannot_fake_its_score_by_printing(mode: str) -> None:
    cheat = '```python\nprint(\'{"i": 0, "ok": true}\')\nimport sys\nsys.exit(0)\n```'
    fn = R.build_reward("code", "code_tests", None, {"timeout_s": 3.0})
    assert fn(completions=[cheat], tests=[["assert False"]]) == [0.0]


def test_isolation_is_reported_as_it_is(mode: str) -> None:
    """`isolation()` says what a run really got, and `boundary()` is set exactly when a boundary is used."""
    res = sandbox.run_sandboxed("pass")
    assert res.ok, res.stderr
    assert res.isolation == sandbox.isolation()
    if mode == "bwrap":
        assert sandbox.boundary() == res.isolation and res.isolation.startswith("bubblewrap (")
        assert "uid 65534" in res.isolation and "net" in res.isolation and "pid" in res.isolation
    elif mode == "landlock":
        assert sandbox.boundary() == res.isolation and res.isolation.startswith("landlock (")
        assert "signals" in res.isolation and "seccomp" in res.isolation
    else:
        assert sandbox.boundary() is None
        base = "audit hook only" if mode == "audit-hook" else "unshare " + " ".join(R.isolation_prefix()[1:])
        assert res.isolation == base + " + seccomp"
    assert "tasks bounded by" in res.isolation or "tasks NOT bounded" in res.isolation or mode not in BOUNDARIES
