"""A fake Hugging Face Hub on 127.0.0.1 for the Jobs backend tests, driven by the real `huggingface_hub` client.

Routes (from `../shared/reference/hf_jobs_spaces.md` §2 and the client's source): whoami, the Jobs API (create,
list with labels, inspect with stage transitions, SSE logs replayed in full on every connection, SSE metrics,
cancel, hardware list), the bucket upload that the backend uses (create bucket, Xet write token, batch), bucket
info and tree listing (what `hf buckets sync` reads before it uploads), and what
`deploy-space` and Space sign-in need (fake_hub_spaces.py: Space repos, an OpenID Connect provider). The Xet
storage itself is `hf_xet`'s own `local://` CAS in a temporary directory, so uploads go through the real client and
the real `hf_xet` upload, and the fake reads the files back with `hf_xet`.

A job either replays scripted stdout lines (`Plan(lines=...)`) or, by default, really runs what was submitted: it
materialises the bucket folder mounted at /data in a work directory, maps the container paths /data and /tmp
into it (in the command and in the uploaded YAML: the fake's mount namespace), and runs the
uploaded job script with this Python. Every request is recorded; faults can be injected per route
(`FakeHub.faults[route]`, one consumed per request): an HTTP status (int), a status with headers
(`(429, {"Retry-After": "1"})`), "slow:S" (answer only after S seconds; a slow submission creates nothing and is
dropped), "slow-after:S" (submission only: create the job, then answer after S seconds), "drop", "drop-after",
"drop:N" (logs: cut after N lines).

Several users: `add_user(token, name)`; whoami answers the token's own user, and a token may only act on jobs and
buckets of its own namespace (403 otherwise), as on the Hub.
"""

from __future__ import annotations

import collections
import json
import os
import re
import secrets
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

from . import fake_hub_buckets, fake_hub_spaces

TERMINAL = ("COMPLETED", "CANCELED", "ERROR", "DELETED")
HARDWARE = [
    {
        "name": "cpu-basic",
        "prettyName": "CPU Basic",
        "cpu": "2 vCPU",
        "ram": "16 GB",
        "accelerator": None,
        "unitCostMicroUSD": 167,
        "unitCostUSD": 0.000167,
        "unitLabel": "minute",
    },
    {
        "name": "l4x1",
        "prettyName": "Nvidia L4",
        "cpu": "8 vCPU",
        "ram": "30 GB",
        "accelerator": {"type": "gpu", "model": "L4", "quantity": "1", "vram": "24 GB", "manufacturer": "Nvidia"},
        "unitCostMicroUSD": 15000,
        "unitCostUSD": 0.015,
        "unitLabel": "minute",
    },
    {
        "name": "a100-large",
        "prettyName": "Nvidia A100 - large",
        "cpu": "12 vCPU",
        "ram": "142 GB",
        "accelerator": {"type": "gpu", "model": "A100", "quantity": "1", "vram": "80 GB", "manufacturer": "Nvidia"},
        "unitCostMicroUSD": 40000,
        "unitCostUSD": 0.04,
        "unitLabel": "minute",
    },
]


def _now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


@dataclass
class Plan:
    """How the next fake job behaves: scripted `lines` (None: run the submitted command for real)."""

    lines: list[str] | None = None
    interval: float = 0.005
    final: str = "COMPLETED"
    message: str | None = None
    hold_at: int | None = None  # wait for `FakeJob.release` before emitting line number hold_at
    schedule_s: float = 0.2


@dataclass
class Recorded:
    """One request as the server saw it."""

    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: bytes


@dataclass
class FakeJob:
    """A job's state and its stdout lines (timestamp, text)."""

    id: str
    namespace: str
    spec: dict[str, Any]
    plan: Plan
    stage: str = "SCHEDULING"
    message: str | None = None
    created: str = field(default_factory=_now)
    started: str | None = None
    finished: str | None = None
    lines: list[tuple[str, str]] = field(default_factory=list)
    cond: threading.Condition = field(default_factory=threading.Condition)
    release: threading.Event = field(default_factory=threading.Event)
    proc: subprocess.Popen | None = None
    workdir: Path | None = None

    def info(self) -> dict[str, Any]:
        """The JobInfo JSON the Hub returns."""
        out: dict[str, Any] = {
            "id": self.id,
            "createdAt": self.created,
            "dockerImage": self.spec.get("dockerImage"),
            "command": self.spec.get("command"),
            "arguments": self.spec.get("arguments", []),
            "environment": self.spec.get("environment", {}),
            "secrets": sorted(self.spec.get("secrets") or {}),
            "flavor": self.spec.get("flavor"),
            "labels": self.spec.get("labels") or {},
            "volumes": self.spec.get("volumes"),
            "status": {"stage": self.stage, "message": self.message},
            "owner": {"id": "u-" + self.namespace, "name": self.namespace, "type": "user"},
        }
        if self.started:
            out["startedAt"] = self.started
        if self.finished:
            out["finishedAt"] = self.finished
        return out

    def emit(self, text: str) -> None:
        with self.cond:
            self.lines.append((_now(), text))
            self.cond.notify_all()

    def finish(self, stage: str, message: str | None = None) -> None:
        with self.cond:
            if self.stage in TERMINAL:
                return
            self.stage, self.message, self.finished = stage, message, _now()
            self.cond.notify_all()

    @property
    def printed(self) -> list[str]:
        """Everything the job wrote, in order."""
        with self.cond:
            return [text for _, text in self.lines]


class FakeHub:
    """The server, its state, and the knobs tests turn."""

    def __init__(self, workdir: Path, token: str, namespace: str = "alice") -> None:
        self.workdir = Path(workdir)
        self.cas = self.workdir / "cas"
        self.cas.mkdir(parents=True, exist_ok=True)
        self.valid_tokens = {token}
        self.namespaces = {namespace}
        self.users = {token: namespace}
        self.repos: dict[str, dict[str, Any]] = {}
        self.oidc = fake_hub_spaces.OidcState()
        self.no_credits = False
        self.no_buckets = False  # a Hub without the Storage Buckets API: every /api/buckets route answers 404
        self.plans: collections.deque[Plan] = collections.deque()
        self.faults: dict[str, list[Any]] = collections.defaultdict(list)
        self.requests: list[Recorded] = []
        self.jobs: dict[str, FakeJob] = {}
        self.buckets: dict[str, dict[str, str]] = {}
        self.bucket_meta: dict[str, dict[str, dict[str, Any]]] = {}  # bucket -> path -> the addFile operation
        self.lock = threading.Lock()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_port}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def start(self) -> FakeHub:
        """Serve in a background thread."""
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and end every job."""
        for job in list(self.jobs.values()):
            job.release.set()
            job.finish("CANCELED", "fake hub stopped")
            if job.proc is not None and job.proc.poll() is None:
                job.proc.kill()
        self.server.shutdown()
        self.server.server_close()

    # --- helpers for tests --------------------------------------------------------------------------------------
    def add_user(self, token: str, name: str) -> None:
        """Another account: its token is valid and acts as `name` (whoami, its own namespace only)."""
        self.valid_tokens.add(token)
        self.namespaces.add(name)
        self.users[token] = name

    def only_job(self) -> FakeJob:
        """The single job submitted so far."""
        assert len(self.jobs) == 1, f"expected one job, got {len(self.jobs)}"
        return next(iter(self.jobs.values()))

    def requests_to(self, method: str, prefix: str) -> list[Recorded]:
        """Recorded requests of a method whose path starts with prefix."""
        return [r for r in self.requests if r.method == method and r.path.startswith(prefix)]

    def bucket_file(self, bucket: str, path: str) -> bytes:
        """Read an uploaded bucket file back from the Xet CAS."""
        import hf_xet

        xet_hash = self.buckets[bucket][path]
        target = self.workdir / "downloads" / secrets.token_hex(4)
        target.parent.mkdir(parents=True, exist_ok=True)
        session = hf_xet.XetSession()
        with session.new_file_download_group(endpoint=f"local://{self.cas}") as group:
            group.start_download_file(hf_xet.XetFileInfo(xet_hash, None), str(target))
        return target.read_bytes()

    # --- running jobs -------------------------------------------------------------------------------------------
    def create_job(self, namespace: str, spec: dict[str, Any]) -> FakeJob:
        job = FakeJob(secrets.token_hex(12), namespace, spec, self.plans.popleft() if self.plans else Plan())
        with self.lock:
            self.jobs[job.id] = job
        threading.Thread(target=self._run, args=(job,), daemon=True).start()
        return job

    def _run(self, job: FakeJob) -> None:
        time.sleep(job.plan.schedule_s)
        with job.cond:
            if job.stage != "SCHEDULING":
                return
            job.stage, job.started = "RUNNING", _now()
            job.cond.notify_all()
        try:
            if job.plan.lines is None:
                self._execute(job)
            else:
                self._script(job)
        except Exception as exc:  # a fake-side problem shows up as a failed job
            job.finish("ERROR", f"fake hub: {type(exc).__name__}: {exc}")

    def _script(self, job: FakeJob) -> None:
        for i, line in enumerate(job.plan.lines or []):
            if job.plan.hold_at == i:
                job.release.wait()
            if job.stage in TERMINAL:
                return
            job.emit(line)
            time.sleep(job.plan.interval)
        job.finish(job.plan.final, job.plan.message)

    def _execute(self, job: FakeJob) -> None:
        command = list(job.spec["command"])
        if command[:2] != ["uv", "run"] or "accelerate" in command:
            job.finish("ERROR", f"fake hub cannot run {command[:4]}")
            return
        i = 2
        while command[i] == "--with":
            i += 2
        workdir = self.workdir / "jobs" / job.id
        # A read-write bucket mount keeps what a job writes: the next job of the same folder sees it (resume).
        mount = next((v for v in job.spec.get("volumes") or [] if v["mountPath"] == "/data"), None)
        data = (
            self.workdir / "volumes" / re.sub(r"\W+", "_", f"{mount['source']}/{mount.get('path', '')}")
            if mount
            else workdir / "data"
        )
        data.mkdir(parents=True, exist_ok=True)
        workdir.mkdir(parents=True)
        if mount:
            (workdir / "data").symlink_to(data, target_is_directory=True)
        job.workdir = workdir
        (workdir / "tmp").mkdir()
        mapping = {"/data/": f"{data}/", "/tmp/": f"{workdir / 'tmp'}/"}

        pattern = re.compile("|".join(re.escape(k) for k in mapping))

        def mapped(text: str) -> str:
            return pattern.sub(lambda m: mapping[m.group(0)], text)  # one pass: mapped paths are not re-mapped

        for volume in job.spec.get("volumes") or []:
            if volume["mountPath"] != "/data":
                continue
            prefix = f"{volume.get('path', '')}/" if volume.get("path") else ""
            for path in list(self.buckets.get(volume["source"], {})):
                if path.startswith(prefix):
                    target = data / path[len(prefix) :]
                    target.parent.mkdir(parents=True, exist_ok=True)
                    content = self.bucket_file(volume["source"], path)
                    if target.suffix in (".yaml", ".yml"):
                        content = mapped(content.decode("utf-8")).encode("utf-8")
                    target.write_bytes(content)
        env = {k: v for k, v in os.environ.items() if not k.startswith("HF_ENDPOINT")}
        env.update({k: str(v) for k, v in (job.spec.get("environment") or {}).items()})
        env.update({k: str(v) for k, v in (job.spec.get("secrets") or {}).items()})
        env["HF_HUB_OFFLINE"] = "1"
        argv = [sys.executable, *[mapped(a) for a in command[i:]]]
        job.proc = subprocess.Popen(
            argv, cwd=workdir, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1
        )
        assert job.proc.stdout is not None
        for line in job.proc.stdout:
            job.emit(line.rstrip("\n"))
        code = job.proc.wait()
        job.finish("COMPLETED" if code == 0 else "ERROR", None if code == 0 else f"Job failed with exit code: {code}")

    def cancel(self, job: FakeJob) -> None:
        job.finish("CANCELED", "Job canceled by user")
        job.release.set()
        if job.proc is not None and job.proc.poll() is None:
            job.proc.kill()


def _handler(hub: FakeHub) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.0"

        def log_message(self, *args: Any) -> None:
            pass

        # --- plumbing -------------------------------------------------------------------------------------------
        def _record(self) -> tuple[list[str], dict[str, list[str]], bytes]:
            url = urlparse(self.path)
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            query = parse_qs(url.query)
            hub.requests.append(Recorded(self.command, url.path, query, dict(self.headers.items()), body))
            return [p for p in url.path.split("/") if p], query, body

        def _json(self, status: int, obj: Any, headers: dict[str, str] | None = None) -> None:
            data = json.dumps(obj).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(data)

        def _error(self, status: int, message: str) -> None:
            self._json(status, {"error": message})

        def _drop(self) -> None:
            try:
                self.connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            self.close_connection = True

        def _fault(self, kind: str) -> Any:
            with hub.lock:
                return hub.faults[kind].pop(0) if hub.faults.get(kind) else None

        def _injected(self, fault: Any) -> bool:
            """Answer an injected HTTP error (a status, or a status with headers); True when answered."""
            if isinstance(fault, int):
                self._error(fault, "injected")
                return True
            if isinstance(fault, tuple):
                status, headers = fault
                self._json(status, {"error": "injected"}, headers)
                return True
            return False

        def _slow(self, fault: Any, prefix: str = "slow:") -> bool:
            """Sleep for a "slow:S" fault; True when it was one."""
            if isinstance(fault, str) and fault.startswith(prefix):
                time.sleep(float(fault[len(prefix) :]))
                return True
            return False

        def _authorized(self) -> bool:
            auth = self.headers.get("Authorization", "")
            if auth.startswith("Bearer ") and auth[7:] in hub.valid_tokens:
                return True
            self._error(401, "Invalid credentials in Authorization header")
            return False

        def _user(self) -> str:
            return hub.users.get(self.headers.get("Authorization", "")[7:], next(iter(hub.namespaces)))

        def _forbidden(self, ns: str) -> bool:
            if ns in hub.namespaces and ns != self._user():
                self._error(403, f"You don't have the rights to act in namespace {ns}")
                return True
            return False

        def _job(self, ns: str, job_id: str) -> FakeJob | None:
            job = hub.jobs.get(job_id)
            if job is None or job.namespace != ns:
                self._error(404, f"Job {job_id} not found")
                return None
            return job

        # --- routes ---------------------------------------------------------------------------------------------
        def do_GET(self) -> None:  # BaseHTTPRequestHandler's naming
            parts, query, _ = self._record()
            if fake_hub_spaces.oidc_route(self, hub, "GET", parts, query, b""):
                return
            if not self._authorized():
                return
            if parts == ["api", "whoami-v2"]:
                name = self._user()
                return self._json(
                    200, {"name": name, "type": "user", "fullname": name.title(), "avatarUrl": f"/avatars/{name}.png"}
                )
            if parts == ["api", "jobs", "hardware"]:
                return self._json(200, HARDWARE)
            if parts[:2] == ["api", "buckets"] and hub.no_buckets:
                return self._error(404, "Not Found")
            if parts[:2] == ["api", "buckets"] and parts[-1] == "xet-write-token":
                return self._json(
                    200, {"accessToken": "xet-fake", "exp": int(time.time()) + 3600, "casUrl": f"local://{hub.cas}"}
                )
            if fake_hub_buckets.bucket_read_route(self, hub, parts, query):
                return None
            if parts[:2] != ["api", "jobs"] or len(parts) < 3:
                return self._error(404, "not found")
            ns = parts[2]
            if self._forbidden(ns):
                return None
            if len(parts) == 3:
                return self._list(ns, query)
            job = self._job(ns, parts[3])
            if job is None:
                return None
            if len(parts) == 4:
                fault = self._fault("inspect")
                if self._injected(fault):
                    return None
                self._slow(fault)
                try:
                    return self._json(200, job.info())
                except (BrokenPipeError, ConnectionResetError):  # the client stopped waiting
                    return None
            if parts[4] == "logs":
                return self._logs(job)
            if parts[4] == "metrics":
                return self._metrics(job)
            return self._error(404, "not found")

        def do_POST(self) -> None:
            parts, query, body = self._record()
            if fake_hub_spaces.oidc_route(self, hub, "POST", parts, query, body):
                return
            if not self._authorized():
                return
            if parts[:2] == ["api", "buckets"] and hub.no_buckets:
                return self._error(404, "Not Found")
            if parts[:2] == ["api", "buckets"] and self._forbidden(parts[2]):
                return None
            if parts[:2] == ["api", "buckets"] and len(parts) == 4:
                bucket = f"{parts[2]}/{parts[3]}"
                if parts[2] not in hub.namespaces:
                    return self._error(404, "Namespace not found")
                if bucket in hub.buckets:
                    return self._json(
                        409, {"error": "You already created this bucket", "url": f"{hub.url}/buckets/{bucket}"}
                    )
                hub.buckets[bucket] = {}
                return self._json(200, {"url": f"{hub.url}/buckets/{bucket}", "name": parts[3], "id": bucket})
            if parts[:2] == ["api", "buckets"] and parts[-1] == "batch":
                bucket = f"{parts[2]}/{parts[3]}"
                for line in body.decode().splitlines():
                    op = json.loads(line)
                    if op["type"] == "addFile":
                        hub.buckets.setdefault(bucket, {})[op["path"]] = op["xetHash"]
                        hub.bucket_meta.setdefault(bucket, {})[op["path"]] = op
                return self._json(200, {"failed": []})
            if fake_hub_spaces.repo_route(self, hub, parts, body):
                return None
            if parts[:2] != ["api", "jobs"] or len(parts) < 3:
                return self._error(404, "not found")
            ns = parts[2]
            if self._forbidden(ns):
                return None
            if len(parts) == 3:
                return self._create(ns, body)
            job = self._job(ns, parts[3])
            if job is not None and parts[4:] == ["cancel"]:
                hub.cancel(job)
                return self._json(200, {})
            return None

        def _create(self, ns: str, body: bytes) -> None:
            fault = self._fault("create")
            if fault == "drop":
                return self._drop()
            if self._injected(fault):
                return None
            if self._slow(fault):  # the gateway gave up before the job service saw it: nothing created
                return self._drop()
            if ns not in hub.namespaces:
                return self._error(404, "Namespace not found")
            if hub.no_credits:
                return self._error(402, "You need a positive credit balance to run jobs. Add credits.")
            spec = json.loads(body)
            if spec.get("flavor") not in {h["name"] for h in HARDWARE} | {"a10g-large", "t4-small", "h200"}:
                return self._error(400, f"Invalid flavor {spec.get('flavor')!r}")
            job = hub.create_job(ns, spec)
            if fault == "drop-after":
                return self._drop()
            self._slow(fault, "slow-after:")  # created, but the answer comes late
            try:
                return self._json(200, job.info())
            except (BrokenPipeError, ConnectionResetError):
                return None

        def _list(self, ns: str, query: dict[str, list[str]]) -> None:
            wanted = dict(label.split("=", 1) for label in query.get("label", []))
            stages = set(query.get("stage", []))
            jobs = [
                j.info()
                for j in hub.jobs.values()
                if j.namespace == ns
                and all((j.spec.get("labels") or {}).get(k) == v for k, v in wanted.items())
                and (not stages or j.stage in stages)
            ]
            return self._json(200, jobs)

        def _logs(self, job: FakeJob) -> None:
            fault = self._fault("logs")
            if self._injected(fault):
                return None
            self._slow(fault)
            drop_after = int(fault.split(":")[1]) if isinstance(fault, str) and fault.startswith("drop:") else None
            sent, index, last_write = 0, 0, time.monotonic()
            try:
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.end_headers()
                self._event({"data": f"===== Job started at {job.started or _now()} =====", "timestamp": _now()})
                while True:
                    with job.cond:
                        if len(job.lines) <= index and job.stage not in TERMINAL:
                            job.cond.wait(0.5)
                        batch = job.lines[index:]
                        done = job.stage in TERMINAL
                    for ts, text in batch:
                        self._event({"data": text, "timestamp": ts})
                        index, sent = index + 1, sent + 1
                        if drop_after is not None and sent >= drop_after:
                            return self._drop()
                    if batch:
                        last_write = time.monotonic()
                    elif time.monotonic() - last_write > 15:  # the Hub's keep-alive (every 30 s there)
                        self.wfile.write(b": keep-alive\n\n")
                        last_write = time.monotonic()
                    self.wfile.flush()
                    if done and index >= len(job.lines):
                        return None
            except (BrokenPipeError, ConnectionResetError):
                return None

        def _event(self, obj: dict[str, Any]) -> None:
            self.wfile.write(f"data: {json.dumps(obj)}\n\n".encode())

        def _metrics(self, job: FakeJob) -> None:
            if job.stage != "RUNNING":
                return self._error(406, "Job is not running")
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            try:
                for i in range(50):
                    if job.stage != "RUNNING":
                        return None
                    sample = {
                        "cpu_usage_pct": 50 + i % 10,
                        "cpu_millicores": 3500,
                        "memory_used_bytes": 2 * 2**30,
                        "memory_total_bytes": 16 * 2**30,
                        "rx_bps": 0,
                        "tx_bps": 0,
                        "gpus": {
                            "gpu0": {
                                "utilization": 90 + i % 5,
                                "memory_used_bytes": 20 * 2**30,
                                "memory_total_bytes": 22836000000,
                            }
                        },
                        "replica": "r1",
                    }
                    self.wfile.write(f"event: metric\ndata: {json.dumps(sample)}\n\n".encode())
                    self.wfile.flush()
                    time.sleep(0.2)
            except (BrokenPipeError, ConnectionResetError):
                return None
            return None

    return Handler
