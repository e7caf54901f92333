"""Benchmark: how much one user's load delays another user's call on a Space (the fair worker pools of ui/guard.py).

The app runs in Space mode in its own process (the tests' fake Hub and OpenID provider, users alice and bob signed
in through gradio's real OAuth routes). bob calls `/yaml_to_form` with the smoke preset once a second: first alone
(the peer figure), then while alice keeps `--flood` concurrent `/yaml_to_form` calls with a ~117 KiB YAML text going
for `--duration` seconds. Reported: bob's latency alone and under alice's load (p50, max), their ratio, and how many
of alice's calls were answered and how many were told "busy".

    python benchmarks/two_user_stall.py [--flood 20] [--duration 20] [--repo PATH] [--json]

`STALL_SWITCH_S=0.001` sets the served process's GIL switch interval (an experiment; the app keeps Python's 5 ms).
`--repo` serves another checkout of the project (e.g. the commit before the pools) with the same clients, so the
two figures come from one machine in one session.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
if "--serve" not in sys.argv:  # the served checkout comes from PYTHONPATH (--repo)
    sys.path.insert(0, str(HERE.parent))


def big_yaml(kib: int = 117) -> str:
    """A spec whose dataset lists enough local files to make a text of about `kib` KiB."""
    head = "name: big\nmodel: {name_or_path: Qwen/Qwen2.5-0.5B-Instruct}\ndataset:\n  data_files:\n"
    lines, size = [], len(head)
    i = 0
    while size < kib * 1024:
        line = f"  - data/shard-{i:06d}-of-lots-of-shards-with-long-names.jsonl\n"
        lines.append(line)
        size += len(line)
        i += 1
    return head + "".join(lines)


def serve(data: str, hub: str) -> None:
    """Serve the app in Space mode until stdin closes; prints its URL on the first line."""
    from tests.space_harness import serve_space

    if os.environ.get("STALL_SWITCH_S"):  # to try another GIL switch interval in the served process
        sys.setswitchinterval(float(os.environ["STALL_SWITCH_S"]))

    with serve_space(Path(data), Path(hub)) as app:
        print("\n" + app["url"], flush=True)
        sys.stdin.read()


def session(url: str, api_name: str, cookie: str) -> Any:
    """A live_app.HttpSession carrying a signed-in session cookie (imported here: live_app puts this checkout on
    sys.path, which the served one must not see)."""
    import live_app

    http = live_app.HttpSession(url, api_name)
    http.http.headers["Cookie"] = cookie
    return http


def timed(client: Any, *args: Any) -> tuple[float, str]:
    """(seconds, "ok" | "busy" | "error: ...") of one call."""
    start = time.perf_counter()
    try:
        client.call(*args)
        outcome = "ok"
    except RuntimeError as exc:
        text = str(exc)
        outcome = (
            "busy" if ("busy" in text or "still running" in text) and "YAML" not in text else f"error: {text[:160]}"
        )
    return time.perf_counter() - start, outcome


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--flood", type=int, default=20)
    parser.add_argument("--duration", type=float, default=20.0)
    parser.add_argument("--repo", default=str(HERE.parent))
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--serve", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(*args.serve)
        return
    from tests.space_harness import sign_in

    repo = Path(args.repo).resolve()
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "PYTHONPATH": str(repo), "HF_HUB_OFFLINE": "1", "HF_HUB_DISABLE_TELEMETRY": "1"}
        server = subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve()), "--serve", f"{tmp}/data", f"{tmp}/hub"],
            cwd=repo,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        try:
            url = ""
            for line in server.stdout or []:  # the app may print before its URL
                if line.startswith("http"):
                    url = line.strip()
                    break
            if not url:
                raise SystemExit("the app did not start")
            cookies = {user: sign_in(url, user) for user in ("alice", "bob")}
            smoke = (repo / "examples" / "smoke.yaml").read_text()
            bob = session(url, "yaml_to_form", cookies["bob"])
            timed(bob, smoke)
            alone = [timed(bob, smoke)[0] for _ in range(5)]
            text = big_yaml()
            stop = time.monotonic() + args.duration
            alice_outcomes: list[str] = []
            lock = threading.Lock()

            def flood() -> None:
                client = session(url, "yaml_to_form", cookies["alice"])
                while time.monotonic() < stop:
                    _, outcome = timed(client, text)
                    with lock:
                        alice_outcomes.append(outcome)

            threads = [threading.Thread(target=flood, daemon=True) for _ in range(args.flood)]
            for t in threads:
                t.start()
            time.sleep(1.0)
            loaded: list[float] = []
            bob_outcomes: list[str] = []
            while time.monotonic() < stop:
                seconds, outcome = timed(bob, smoke)
                loaded.append(seconds)
                bob_outcomes.append(outcome)
                time.sleep(max(0.0, 1.0 - seconds))
            for t in threads:
                t.join(timeout=180)
        finally:
            if server.stdin:
                server.stdin.close()
            server.wait(timeout=60)
    figures = {
        "repo": str(repo),
        "flood": args.flood,
        "yaml_kib": round(len(text) / 1024, 1),
        "bob_alone_p50_s": round(statistics.median(alone), 3),
        "bob_alone_max_s": round(max(alone), 3),
        "bob_loaded_p50_s": round(statistics.median(loaded), 3),
        "bob_loaded_max_s": round(max(loaded), 3),
        "bob_calls": len(loaded),
        "bob_not_ok": sum(o != "ok" for o in bob_outcomes),
        "ratio_p50": round(statistics.median(loaded) / statistics.median(alone), 1),
        "ratio_max": round(max(loaded) / statistics.median(alone), 1),
        "alice_answered": alice_outcomes.count("ok"),
        "alice_busy": alice_outcomes.count("busy"),
        "alice_errors": sum(o.startswith("error") for o in alice_outcomes),
        "alice_error_kinds": sorted({o[:160] for o in alice_outcomes if o.startswith("error")})[:3],
        "load_1min": round(os.getloadavg()[0], 2),
    }
    if args.json:
        print(json.dumps(figures))
        return
    print(f"repo {figures['repo']}  (load average {figures['load_1min']})")
    print(f"bob alone:          p50 {figures['bob_alone_p50_s']:.3f} s   max {figures['bob_alone_max_s']:.3f} s")
    print(
        f"bob, alice flooding ({args.flood} x {figures['yaml_kib']} KiB): p50 {figures['bob_loaded_p50_s']:.3f} s   "
        f"max {figures['bob_loaded_max_s']:.3f} s   ({figures['bob_calls']} calls, {figures['bob_not_ok']} not ok)"
    )
    print(f"ratio to alone:     p50 {figures['ratio_p50']}x   max {figures['ratio_max']}x")
    print(
        f"alice: {figures['alice_answered']} answered, {figures['alice_busy']} told busy, "
        f"{figures['alice_errors']} errors {figures['alice_error_kinds']}"
    )


if __name__ == "__main__":
    main()
