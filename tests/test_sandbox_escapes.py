"""Escape attempts against the reward sandbox, each run the way the app runs custom code: `check_rewards` on a spec
whose inline `python` reward (or reward file, or code-reward dataset row) performs the attack.

Every attack runs twice: `here` (the boundary this machine gives: bubblewrap where user namespaces work) and
`container` (a child process under a container-like seccomp profile that refuses user namespaces, so bubblewrap
cannot start and the Landlock boundary must hold alone). Every attack reports what it got on one `ESCAPE {json}` line
(the worker's prints land in the report's log tail), and every test also checks on the host: a canary that must not
appear in any output, the app tree unchanged, no process left behind, no connection on a loopback server. Where no
boundary can be made they are skipped, or fail with GRPO_DASHBOARD_EXPECT_SANDBOX=1 (see `require_boundary`).
"""

from __future__ import annotations

import json
import os
import secrets
import socket
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from grpo_dashboard.checks import sandbox
from grpo_dashboard.store.db import Store

from .sandbox_attacks import (
    INLINE,
    PRELUDE,
    REPO,
    WHERE,
    canary,
    check,
    no_process_left,
    refused,
    require_boundary,
    run_attack,
    tree_state,
)


@pytest.fixture(params=WHERE)
def where(request: pytest.FixtureRequest) -> str:
    """Each attack against this machine's boundary, and against the one a container without user namespaces gets."""
    return require_boundary(request.param)


def bwrap_here(where: str) -> bool:
    """True when the attack ran under bubblewrap (which hides what Landlock denies: errno 2 rather than 13)."""
    return where == "here" and (sandbox.boundary() or "").startswith("bubblewrap")


@pytest.fixture
def store_canary(data_dir: Path) -> tuple[Path, str]:
    """The dashboard's SQLite store in the test's data dir, holding a secret only the host can read."""
    secret = canary()
    store = Store()
    store.path.parent.mkdir(parents=True, exist_ok=True)
    with sqlite3.connect(store.path) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS canary (value TEXT)")
        conn.execute("INSERT INTO canary VALUES (?)", (secret,))
    with sqlite3.connect(store.path) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    assert secret.encode() in store.path.read_bytes()
    return store.path, secret


@pytest.fixture
def fake_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, str]:
    """A HOME with a Hub token file in it (never the real home)."""
    secret = "hf_" + secrets.token_hex(16)
    home = tmp_path / "home"
    (home / ".cache" / "huggingface").mkdir(parents=True)
    token = home / ".cache" / "huggingface" / "token"
    token.write_text(secret)
    monkeypatch.setenv("HOME", str(home))
    return token, secret


def test_the_sqlite_store_in_the_data_dir_cannot_be_read(
    tmp_path: Path, where: str, store_canary: tuple[Path, str]
) -> None:
    path, secret = store_canary
    body = f"""
def run(result):
    p = {str(path)!r}
    result["hook_off"] = kill_hook()
    result["open"] = attempt(lambda: open(p, "rb").read().decode("latin-1"))
    result["libc"] = attempt(libc_read, p)
    result["wal"] = attempt(libc_read, p + "-wal")
    result["listdir"] = attempt(os.listdir, os.path.dirname(p))
    result["via_proc_root"] = attempt(lambda: open(f"/proc/{os.getpid()}/root" + p, "rb").read().decode("latin-1"))
    result["via_proc_1_root"] = attempt(lambda: open("/proc/1/root" + p, "rb").read().decode("latin-1"))
    import sqlite3
    result["sqlite"] = attempt(lambda: sqlite3.connect(f"file:{{p}}?mode=ro", uri=True).execute(
        "SELECT value FROM canary").fetchall())
"""
    seen, everything, _ = run_attack(tmp_path, where, body)
    assert seen["hook_off"] is True
    assert secret not in everything
    for key in ("open", "libc", "wal", "listdir", "via_proc_root", "via_proc_1_root", "sqlite"):
        assert "Error" in seen[key] or seen[key].startswith("errno"), (key, seen[key])
    if bwrap_here(where):
        assert "FileNotFoundError" in seen["open"] and seen["libc"] == "errno 2"  # not denied: not there at all
    else:
        assert "PermissionError" in seen["open"] and seen["libc"] == "errno 13"  # Landlock: there, but denied


def test_another_runs_job_log_cannot_be_read(tmp_path: Path, where: str, data_dir: Path) -> None:
    secret = canary()
    log = data_dir / "runs" / "someone-else-20260101-000000-abcdef" / "job.log"
    log.parent.mkdir(parents=True)
    log.write_text(f"step 1 loss 0.3 {secret}\n")
    body = f"""
def run(result):
    p = {str(log)!r}
    result["hook_off"] = kill_hook()
    result["open"] = attempt(lambda: open(p).read())
    result["libc"] = attempt(libc_read, p)
    result["runs"] = attempt(os.listdir, os.path.dirname(os.path.dirname(p)))
"""
    seen, everything, _ = run_attack(tmp_path, where, body)
    assert secret not in everything and seen["hook_off"] is True
    assert refused(seen["open"]) and refused(seen["libc"]) and refused(seen["runs"]), seen


def test_the_app_tree_cannot_be_written(tmp_path: Path, where: str) -> None:
    pkg, jobs = REPO / "grpo_dashboard", REPO / "jobs"
    targets = [
        pkg / f"pwned_{secrets.token_hex(4)}.py",
        jobs / f"pwned_{secrets.token_hex(4)}.py",
        REPO / f"pwned_{secrets.token_hex(4)}.txt",
    ]
    before = tree_state(pkg, jobs)
    body = f"""
def run(result):
    targets = {[str(t) for t in targets]!r}
    result["hook_off"] = kill_hook()
    result["open"] = [attempt(lambda t=t: open(t, "x").write("import os")) for t in targets]
    result["libc"] = [attempt(libc_create, t) for t in targets]
    result["sees_package"] = os.path.isfile({str(pkg / "checks" / "sandbox.py")!r})
    result["sees_repo_root"] = attempt(os.listdir, {str(REPO)!r})
"""
    try:
        seen, _, _ = run_attack(tmp_path, where, body)
    finally:
        leftovers = [t for t in targets if t.exists()]
        for t in leftovers:
            t.unlink()
    assert leftovers == [] and tree_state(pkg, jobs) == before
    assert seen["sees_package"] is True  # the worker imports it, so it is there, read-only
    if bwrap_here(where):
        assert all("Read-only file system" in r for r in seen["open"][:2]), seen["open"]
        assert seen["libc"][:2] == ["errno 30", "errno 30"]  # EROFS: the package dirs are bound read-only
        # and nothing else of the repository, but the interpreter's own venv when it was made inside the checkout
        # (`python -m venv .venv`): the worker runs on it, read-only
        prefix = Path(sys.prefix).resolve()
        own = [prefix.relative_to(REPO.resolve()).parts[0]] if prefix.is_relative_to(REPO.resolve()) else []
        assert sorted(seen["sees_repo_root"]) == sorted(["grpo_dashboard", "jobs", *own])
    else:
        assert all("PermissionError" in r for r in seen["open"]), seen["open"]
        assert seen["libc"] == ["errno 13"] * 3  # EACCES: Landlock grants reading there, not writing
        assert "PermissionError" in seen["sees_repo_root"]  # not even the names of the rest


def test_the_hub_token_in_home_cannot_be_read_through_ctypes(
    tmp_path: Path, where: str, fake_home: tuple[Path, str]
) -> None:
    token, secret = fake_home
    body = f"""
def run(result):
    p = {str(token)!r}
    result["libc_with_hook"] = attempt(libc_read, p)
    result["hook_off"] = kill_hook()
    result["libc"] = attempt(libc_read, p)
    result["open"] = attempt(lambda: open(p).read())
    result["home_dir"] = attempt(os.listdir, {str(token.parents[2])!r})
    result["my_home"] = os.environ.get("HOME")
"""
    seen, everything, _ = run_attack(tmp_path, where, body)
    assert secret not in everything and seen["hook_off"] is True
    assert refused(seen["libc_with_hook"]) and refused(seen["libc"]) and refused(seen["open"]), seen
    assert refused(seen["home_dir"])
    assert seen["my_home"] == "/sandbox/work" if bwrap_here(where) else "grpo-sandbox-" in seen["my_home"]


def test_fork_through_ctypes_is_refused(tmp_path: Path, where: str) -> None:
    marker = f"grpo-escape-fork-{secrets.token_hex(6)}"
    body = f"""
def run(result):
    result["hook_off"] = kill_hook()
    lib = libc()
    pid = lib.fork()
    if pid == 0:
        os.execv(sys.executable, [sys.executable, "-c", "import time; time.sleep(30)", {marker!r}])
    result["fork"] = [pid, ctypes.get_errno()]
    result["os_fork"] = attempt(os.fork)
"""
    seen, _, _ = run_attack(tmp_path, where, body)
    assert seen["hook_off"] is True
    assert seen["fork"] == [-1, 1]  # EPERM from the seccomp filter
    assert "PermissionError" in seen["os_fork"]
    assert no_process_left(marker)


def test_spawning_through_posixsubprocess_and_popen_is_refused(tmp_path: Path, where: str) -> None:
    marker = f"grpo-escape-spawn-{secrets.token_hex(6)}"
    body = f"""
def run(result):
    import subprocess, _posixsubprocess
    argv = [sys.executable, "-c", "import time; time.sleep(30)", {marker!r}]
    result["popen_with_hook"] = attempt(lambda: subprocess.Popen(argv, start_new_session=True).pid)
    result["hook_off"] = kill_hook()
    result["popen"] = attempt(lambda: subprocess.Popen(argv, start_new_session=True).pid)
    def fork_exec():
        r, w = os.pipe()
        return _posixsubprocess.fork_exec([os.fsencode(a) for a in argv], [os.fsencode(sys.executable)], True, (w,),
                                          None, None, -1, -1, -1, -1, -1, -1, r, w, True, True, -1, None, None,
                                          None, -1, None, True)
    result["fork_exec"] = attempt(fork_exec)
    result["posix_spawn"] = attempt(lambda: os.posix_spawn(sys.executable, argv, {{}}))
"""
    seen, _, _ = run_attack(tmp_path, where, body)
    assert "sandbox: subprocess.Popen is not allowed" in seen["popen_with_hook"]  # the hook, while it is on
    assert seen["hook_off"] is True
    for key in ("popen", "fork_exec", "posix_spawn"):
        assert "Operation not permitted" in str(seen[key]), (key, seen[key])
    assert no_process_left(marker)


def test_the_audit_hook_switched_off_through_gc_guards_nothing_that_matters(
    tmp_path: Path, where: str, fake_home: tuple[Path, str], store_canary: tuple[Path, str]
) -> None:
    token, token_secret = fake_home
    store, store_secret = store_canary
    body = f"""
def run(result):
    result["hook_off"] = kill_hook()
    result["proc_1"] = attempt(lambda: open("/proc/1/status").read().split("\\n")[0])  # the hook's rule, now off
    result["token"] = attempt(libc_read, {str(token)!r})
    result["store"] = attempt(libc_read, {str(store)!r})
    result["caps"] = [line for line in open("/proc/self/status").read().splitlines() if line.startswith("Cap")]
"""
    seen, everything, _ = run_attack(tmp_path, where, body)
    assert seen["hook_off"] is True
    assert token_secret not in everything and store_secret not in everything
    assert refused(seen["token"]) and refused(seen["store"])
    caps = {line.split(":")[0]: int(line.split()[1], 16) for line in seen["caps"]}
    if bwrap_here(where):
        assert seen["proc_1"].startswith("Name:")  # the hook is off indeed: pid 1 is bubblewrap's own init
        assert all(v == 0 for k, v in caps.items() if k != "CapBnd")
    else:
        assert "PermissionError" in seen["proc_1"]  # Landlock: no /proc but its own
        # A root dashboard's child keeps CAP_DAC_READ_SEARCH alone (Landlock still decides what it may read).
        assert all(v & ~(1 << 2) == 0 for v in caps.values()), caps


@pytest.fixture
def loopback_server() -> Iterator[tuple[socket.socket, socket.socket, str]]:
    """A TCP server on 127.0.0.1 and an abstract unix-socket server, both listening and never accepting."""
    tcp = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    tcp.bind(("127.0.0.1", 0))
    tcp.listen(8)
    name = f"grpo-escape-{secrets.token_hex(6)}"
    unix = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    unix.bind("\0" + name)
    unix.listen(8)
    tcp.setblocking(False)
    unix.setblocking(False)
    yield tcp, unix, name
    tcp.close()
    unix.close()


def test_a_loopback_server_gets_no_connection(
    tmp_path: Path, where: str, loopback_server: tuple[socket.socket, socket.socket, str]
) -> None:
    tcp, unix, name = loopback_server
    port = tcp.getsockname()[1]
    body = f"""
def run(result):
    import socket
    result["hook_off"] = kill_hook()
    result["tcp"] = attempt(lambda: socket.create_connection(("127.0.0.1", {port}), timeout=2).getpeername())
    result["tcp6"] = attempt(lambda: socket.create_connection(("::1", {port}), timeout=2).getpeername())
    result["libc_socket"] = [libc().socket(socket.AF_INET, socket.SOCK_STREAM, 0), ctypes.get_errno()]
    def unix():
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect("\\0" + {name!r})
        return "connected"
    result["abstract_unix"] = attempt(unix)
"""
    seen, _, _ = run_attack(tmp_path, where, body)
    assert seen["hook_off"] is True
    assert "Address family not supported" in seen["tcp"] and "Address family not supported" in seen["tcp6"]
    assert seen["libc_socket"] == [-1, 97]  # EAFNOSUPPORT from the seccomp filter
    if bwrap_here(where):
        assert "ConnectionRefusedError" in seen["abstract_unix"]  # its own network namespace: another abstract space
    else:
        assert "Address family not supported" in seen["abstract_unix"]  # no socket() at all without a namespace
    for server in (tcp, unix):
        with pytest.raises(BlockingIOError):
            server.accept()


def test_the_dashboards_environment_cannot_be_read(
    tmp_path: Path, where: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = "oauth-" + secrets.token_hex(12)
    monkeypatch.setenv("OAUTH_CLIENT_SECRET", secret)
    # A setenv does not change this process's /proc/<pid>/environ, so a helper started with the secret in its
    # environment stands for a dashboard process whose environment holds it.
    helper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], env={**os.environ})
    try:
        environ = Path(f"/proc/{helper.pid}/environ")
        deadline = time.monotonic() + 10
        while secret.encode() not in environ.read_bytes() and time.monotonic() < deadline:  # until it has exec'd
            time.sleep(0.02)
        assert secret.encode() in environ.read_bytes()  # readable from the host
        body = f"""
def run(result):
    result["hook_off"] = kill_hook()
    for pid in ({os.getpid()}, {helper.pid}, os.getppid(), 1):
        result[f"environ_{{pid}}"] = attempt(libc_read, f"/proc/{{pid}}/environ")
        result[f"open_{{pid}}"] = attempt(lambda: open(f"/proc/{{pid}}/environ", "rb").read().decode("latin-1"))
    result["pids"] = attempt(lambda: sorted(int(p) for p in os.listdir("/proc") if p.isdigit()))
    result["env"] = dict(os.environ)
"""
        seen, everything, _ = run_attack(tmp_path, where, body)
    finally:
        helper.kill()
        helper.wait()
    assert secret not in everything and seen["hook_off"] is True
    assert "OAUTH_CLIENT_SECRET" not in seen["env"]
    if bwrap_here(where):
        assert seen[f"environ_{helper.pid}"] == "errno 2" or helper.pid in (1, 2)
        assert seen[f"environ_{os.getpid()}"] == "errno 2" or os.getpid() in (1, 2)
        assert seen["pids"] == [1, 2]  # its own pid namespace: bwrap's init and the worker, nothing of the host
    else:
        assert seen[f"environ_{helper.pid}"] == "errno 13" and seen[f"environ_{os.getpid()}"] == "errno 13"
        assert "PermissionError" in seen["pids"]


def test_inside_it_is_uid_65534_without_capabilities_under_seccomp(tmp_path: Path, where: str) -> None:
    body = """
def run(result):
    status = dict(line.split(":", 1) for line in open("/proc/self/status").read().splitlines() if ":" in line)
    result.update({k: status[k].strip() for k in ("Uid", "Gid", "CapEff", "CapPrm", "CapInh", "CapAmb", "CapBnd",
                                                  "NoNewPrivs", "Seccomp", "Seccomp_filters")})
    result["uid_map"] = open("/proc/self/uid_map").read().split()
    result["proc_sys_write"] = attempt(lambda: os.close(os.open("/proc/sys/kernel/core_pattern", os.O_WRONLY)))
"""
    seen, _, report = run_attack(tmp_path, where, body)
    assert seen["NoNewPrivs"] == "1" and seen["Seccomp"] == "2"
    assert refused(seen["proc_sys_write"]), seen["proc_sys_write"]
    assert report.isolation == (sandbox.boundary() if where == "here" else report.isolation)
    if bwrap_here(where):
        assert seen["Uid"].split() == ["65534"] * 4 and seen["Gid"].split() == ["65534"] * 4
        for cap in ("CapEff", "CapPrm", "CapInh", "CapAmb", "CapBnd"):
            assert int(seen[cap], 16) == 0, (cap, seen[cap])
        assert seen["uid_map"][0] == "65534" and seen["uid_map"][2] == "1"  # one uid mapped: the dashboard's own
        assert "Read-only file system" in seen["proc_sys_write"] and "uid 65534" in report.isolation
        assert int(seen["Seccomp_filters"]) == 2  # bubblewrap's and the guard's
    else:
        uid = int(seen["Uid"].split()[0])
        assert len(set(seen["Uid"].split())) == 1 and (uid != 0 if os.geteuid() == 0 else uid == os.getuid())
        for cap in ("CapEff", "CapPrm", "CapInh", "CapAmb", "CapBnd"):
            assert int(seen[cap], 16) & ~(1 << 2) == 0, (cap, seen[cap])


def test_threads_work_but_the_kernels_attack_surface_is_refused(tmp_path: Path, where: str) -> None:
    body = """
def run(result):
    import concurrent.futures, threading
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        result["threads"] = sorted(pool.map(lambda i: i * i, range(8)))
    result["thread_count"] = threading.active_count()
    lib = libc()
    def call(nr, *args):
        return [lib.syscall(ctypes.c_long(nr), *[ctypes.c_long(a) for a in args]), ctypes.get_errno()]
    result["unshare_user"] = call(272, 0x10000000)
    result["clone3"] = call(435, 0, 0)
    result["ptrace"] = call(101, 16, 1, 0, 0)
    result["bpf"] = call(321, 0, 0, 0)
    result["io_uring_setup"] = call(425, 8, 0)
    result["keyctl"] = call(250, 0, 0)
    result["mount"] = call(165, 0, 0, 0, 0, 0)
    result["x32_getpid"] = call(0x40000000 + 39)
    result["getpid"] = call(39)
"""
    seen, _, _ = run_attack(tmp_path, where, body)
    assert seen["threads"] == [i * i for i in range(8)]
    for name in ("unshare_user", "ptrace", "bpf", "io_uring_setup", "keyctl", "mount", "x32_getpid"):
        assert seen[name] == [-1, 1], (name, seen[name])  # EPERM
    assert seen["clone3"] == [-1, 38]  # ENOSYS, so glibc makes its threads with clone
    if bwrap_here(where):
        assert seen["getpid"][0] == 2  # the worker is pid 2 in its own pid namespace


def test_a_reward_file_sees_itself_but_not_its_directory(
    tmp_path: Path, where: str, store_canary: tuple[Path, str]
) -> None:
    store, store_secret = store_canary
    rewards = tmp_path / "rewards"
    rewards.mkdir()
    secret = canary()
    (rewards / "notes.txt").write_text(secret)
    body = f"""
def run(result):
    here = os.path.dirname(os.path.abspath(__file__))
    result["file"] = __file__
    result["hook_off"] = kill_hook()
    result["sibling"] = attempt(libc_read, os.path.join(here, "notes.txt"))
    result["listdir"] = attempt(os.listdir, here)
    result["store"] = attempt(libc_read, {str(store)!r})
"""
    (rewards / "attack.py").write_text(INLINE + body)
    seen, everything, _ = run_attack(tmp_path, where, "", name="attack", function=f"{rewards / 'attack.py'}:attack")
    assert seen["file"] == str(rewards / "attack.py") and seen["hook_off"] is True
    assert secret not in everything and store_secret not in everything
    assert refused(seen["sibling"]) and refused(seen["store"])
    if bwrap_here(where):
        assert seen["listdir"] == ["attack.py"]
    else:
        assert "PermissionError" in seen["listdir"]


def test_a_code_reward_datasets_solution_leaks_nothing_and_leaves_no_process(
    tmp_path: Path, where: str, store_canary: tuple[Path, str], data_dir: Path
) -> None:
    """The code reward runs completions' code (here: the dataset's reference solution) in a sandbox nested in the
    worker's (which allows subprocesses): the nested one refuses them itself, nothing is readable and nothing
    outlives the check."""
    store, store_secret = store_canary
    log = data_dir / "runs" / "other" / "job.log"
    log.parent.mkdir(parents=True)
    log.write_text(canary())
    marker = f"grpo-escape-code-{secrets.token_hex(6)}"
    solution = (
        PRELUDE
        + f"""
import subprocess
HOOK_OFF = kill_hook()
LEAKS = [r for r in (libc_read({str(store)!r}), libc_read({str(log)!r})) if not r.startswith("errno")]
CHILD = attempt(lambda: subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)", {marker!r}],
                                          start_new_session=True).pid)
def add(a, b):
    return a + b
"""
    )
    tests = json.dumps(
        [
            "assert HOOK_OFF",
            "assert LEAKS == []",
            "assert 'Operation not permitted' in str(CHILD)",
            "assert add(2, 3) == 5",
        ]
    )
    data = tmp_path / "code.jsonl"
    data.write_text(json.dumps({"question": "Write add(a, b).", "canonical_solution": solution, "tests": tests}))
    spec = {
        "name": "escape",
        "model": {"name_or_path": "tiny", "build_tiny": True},
        "dataset": {"data_files": str(data), "prompt_column": "question"},
        "rewards": [{"name": "code", "builtin": "code_tests"}],
    }
    report = check(spec, tmp_path, where)
    assert report.rewards[0].values("ideal", "standard") == [1.0], report.to_text()  # every attack ran and failed
    assert store_secret not in json.dumps(report.to_dict()) and log.read_text() not in json.dumps(report.to_dict())
    assert no_process_left(marker)
    assert "isolation boundary" not in report.rewards[0].log_tail  # the nested run knows it is inside the boundary


def test_the_fallback_reports_no_boundary_and_warns_once(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    module = sandbox.sandbox_module()
    monkeypatch.setenv("GRPO_SANDBOX_NO_BWRAP", "1")
    monkeypatch.setenv("GRPO_SANDBOX_NO_LANDLOCK", "1")
    module._warn_fallback.cache_clear()
    assert sandbox.boundary() is None
    assert not sandbox.isolation().startswith(("bubblewrap", "landlock"))
    assert "GRPO_SANDBOX_NO_BWRAP is set" in module.no_boundary_reason()
    first, second = sandbox.run_sandboxed("print('ran')"), sandbox.run_sandboxed("print('ran')")
    assert first.ok and second.ok and first.isolation == sandbox.isolation()
    err = capsys.readouterr().err
    assert err.count("custom code runs without an isolation boundary") == 1
    assert "GRPO_SANDBOX_NO_LANDLOCK is set" in err  # the warning says why
    monkeypatch.delenv("GRPO_SANDBOX_NO_BWRAP")
    monkeypatch.delenv("GRPO_SANDBOX_NO_LANDLOCK")
    module._warn_fallback.cache_clear()
    if module.bwrap_boundary() is not None:
        assert sandbox.boundary() is not None and sandbox.run_sandboxed("pass").isolation == sandbox.boundary()
        assert "isolation boundary" not in capsys.readouterr().err


def test_a_bwrap_that_cannot_create_the_sandbox_means_landlock_or_the_fallback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    fake = tmp_path / "bin" / "bwrap"
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\necho 'bwrap: No permissions to creating new namespace' >&2\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake.parent}{os.pathsep}{os.environ['PATH']}")
    module = sandbox.sandbox_module()
    module._warn_fallback.cache_clear()
    res = sandbox.run_sandboxed("print('ran')")
    assert res.ok and res.stdout == "ran\n" and not res.isolation.startswith("bubblewrap")
    if module.grpo_confine.landlock_abi() >= 6:
        assert sandbox.boundary() == res.isolation and res.isolation.startswith("landlock (")
        assert "isolation boundary" not in capsys.readouterr().err
    monkeypatch.setenv("GRPO_SANDBOX_NO_LANDLOCK", "1")
    assert sandbox.boundary() is None
    res = sandbox.run_sandboxed("print('ran')")
    assert res.ok and not res.isolation.startswith(("bubblewrap", "landlock"))
    err = capsys.readouterr().err
    assert "custom code runs without an isolation boundary" in err and "No permissions to creating new" in err
