"""The callback's HTTP transport: the run is spooled to a local directory as the directory transport writes it, and
a background thread sends its new complete lines to the dashboard's `POST /grpo/ingest` in batches.

Training never waits on the network: the job's code writes the spool files, the sender only reads them. The
dashboard acknowledges how many bytes of each file it holds and the sender resumes from there, so a dashboard that
is down, restarted or slow gets every line exactly once when it answers again (store/remote_ingest.py). Retries back
off up to `MAX_BACKOFF_S`; a refused token (401/403) is warned about once and the sender keeps spooling and retrying.
At the end of training the sender goes on in the background for up to `flush_s` more seconds (`finish`: training
returns at once, and the process waits for it at exit: `close`), unless the dashboard's last answer refused the token:
the process's token will not change, so it does not wait. What is left stays in the spool and is sent by
`python -m grpo_dashboard.integrations.send SPOOL_DIR URL`.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from grpo_dashboard.store.external import HEARTBEAT_S

STREAMS = {"metrics": "metrics.jsonl", "samples": "samples.jsonl"}
BATCH_BYTES = 1024 * 1024
BATCH_LINES = 2000
MAX_BACKOFF_S = 10.0
SENT_FILE = "sent.json"


class Sender:
    """Sends the spool directory's new lines to `url` with `token` (a Hugging Face token on a Space)."""

    def __init__(
        self,
        spool: Path,
        url: str,
        run_id: str,
        token: str | None,
        interval_s: float = 0.5,
        heartbeat_s: float | None = None,
    ) -> None:
        self.spool, self.run_id, self.token = spool, run_id, token
        self.base_url = url.rstrip("/")
        self.url = self.base_url + "/grpo/ingest"
        self.interval_s = interval_s
        env = os.environ.get("GRPO_DASHBOARD_HEARTBEAT_S")
        self.heartbeat_s = heartbeat_s or (float(env) if env else HEARTBEAT_S)
        self._last_post = time.monotonic()
        self.sent = self._load()
        self.stop_asked = False  # the dashboard asked to stop the trainer (Cancel)
        self.warned: set[str] = set()
        self.posts = 0
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._spec_sent = bool(self.sent.get("metrics"))
        self._finish_by: float | None = None  # set by `finish`: the thread ends once all is sent, or at this time
        self._refused = False  # the last answer refused the token (401/403)

    def start(self) -> Sender:
        """Start the background thread."""
        self._thread = threading.Thread(target=self._run, name="grpo-dashboard-sender", daemon=True)
        self._thread.start()
        return self

    def finish(self, flush_s: float) -> None:
        """Training ended: send what is left now, in the background, for at most `flush_s`; the thread then ends on
        its own (`close` waits for it)."""
        self._finish_by = time.monotonic() + flush_s
        self._wake.set()

    def close_finished(self) -> bool:
        """`close` for what `finish` has left of its time (at the process's exit); True when everything was sent."""
        left = 0.0 if self._finish_by is None else self._finish_by - time.monotonic()
        return self.close(max(0.0, left))

    def close(self, flush_s: float) -> bool:
        """Stop after sending what is spooled, trying for at most `flush_s`; True when everything was sent."""
        deadline = time.monotonic() + flush_s
        while time.monotonic() < deadline and not self.done() and (self._thread is None or self._thread.is_alive()):
            self._wake.set()
            time.sleep(0.1)
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        done = self.done()
        if not done:
            self._warn(
                "left",
                f"not all of run {self.run_id} reached {self.url} before the script ended; it stays in {self.spool}. "
                f"Send it later with: python -m grpo_dashboard.integrations.send {self.spool} {self.base_url}",
            )
        return done

    def done(self) -> bool:
        """Every complete line of every spool file was acknowledged."""
        return all(not self._read(name, self.sent.get(stream, 0))[0] for stream, name in STREAMS.items())

    def _run(self) -> None:
        backoff = self.interval_s
        while not self._stop.is_set():
            try:
                wait = 0.0 if self.send_once() else self.interval_s
                backoff = self.interval_s
            except _Retry:
                backoff = wait = min(MAX_BACKOFF_S, backoff * 2)
            if self._finish_by is not None:
                if self.done() or time.monotonic() >= self._finish_by or self._refused:
                    return
                wait = min(wait, max(0.0, self._finish_by - time.monotonic()))
            if wait:
                self._wake.wait(wait)
                self._wake.clear()

    def send_once(self) -> bool:
        """Send one batch of each stream that has new lines; True if something was sent. _Retry on failure."""
        sent_any = False
        for stream, name in STREAMS.items():
            lines, start = self._read(name, self.sent.get(stream, 0))
            idle = time.monotonic() - self._last_post
            if not lines and (stream != "metrics" or (self._spec_sent and idle < self.heartbeat_s)):
                continue  # an empty metrics batch after `heartbeat_s` of silence tells the dashboard we are alive
            if stream == "samples" and not self._spec_sent:
                continue  # the run is created by its first metrics batch
            batch: dict[str, Any] = {"v": 1, "run": self.run_id, "stream": stream, "offset": start, "lines": lines}
            if not self._spec_sent:
                batch["spec"] = (self.spool / "run.yaml").read_text(encoding="utf-8")
            answer = self._post(batch)
            self._spec_sent = True
            self.sent[stream] = int(answer["received"])
            self.stop_asked = self.stop_asked or bool(answer.get("stop"))
            self._save()
            sent_any = sent_any or bool(lines)
        return sent_any

    def _read(self, name: str, offset: int) -> tuple[list[str], int]:
        try:
            with open(self.spool / name, "rb") as f:
                f.seek(offset)
                chunk = f.read(BATCH_BYTES)
        except OSError:
            return [], offset
        end = chunk.rfind(b"\n")
        if end < 0:
            return [], offset
        lines = chunk[:end].split(b"\n")[:BATCH_LINES]
        return [line.decode("utf-8", "surrogateescape") for line in lines], offset

    def _post(self, batch: dict[str, Any]) -> dict[str, Any]:
        body = json.dumps(batch).encode("utf-8", "surrogatepass")
        request = urllib.request.Request(self.url, data=body, method="POST")
        request.add_header("Content-Type", "application/json")
        if self.token:
            request.add_header("Authorization", f"Bearer {self.token}")
        self.posts += 1
        self._last_post = time.monotonic()
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                answer = dict(json.loads(response.read()))
            self._refused = False
            return answer
        except urllib.error.HTTPError as exc:
            detail = _error_text(exc)
            self._refused = exc.code in (401, 403)
            if exc.code == 409:  # the dashboard has fewer bytes than we thought (its disk was restored): resend
                received = json.loads(detail or "{}").get("received", 0) if detail.startswith("{") else 0
                self.sent[batch["stream"]] = int(received)
                raise _Retry() from None
            if exc.code == 404 and detail.startswith("{") and "received" in detail:
                self._spec_sent = False  # the dashboard lost the run (a fresh data directory): create it again
                self.sent = {}
                raise _Retry() from None
            if exc.code in (401, 403):
                self._warn("auth", f"{self.url} refused the token ({exc.code}: {detail}); spooling to {self.spool}")
            elif exc.code == 400:
                self._warn("400", f"{self.url} refused a batch of run {self.run_id}: {detail}")
            else:
                self._warn(str(exc.code), f"{self.url} answered {exc.code} ({detail}); retrying")
            raise _Retry() from None
        except (OSError, ValueError) as exc:
            self._warn("down", f"{self.url} is not answering ({exc}); spooling to {self.spool} and retrying")
            raise _Retry() from None

    def _warn(self, kind: str, message: str) -> None:
        if kind not in self.warned:
            self.warned.add(kind)
            sys.stderr.write(f"[grpo-dashboard] {message}\n")

    def _load(self) -> dict[str, int]:
        try:
            data = json.loads((self.spool / SENT_FILE).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        return {k: int(v) for k, v in data.items() if k in STREAMS} if isinstance(data, dict) else {}

    def _save(self) -> None:
        tmp = self.spool / f".{SENT_FILE}.tmp"
        tmp.write_text(json.dumps(self.sent), encoding="utf-8")
        os.replace(tmp, self.spool / SENT_FILE)


class _Retry(Exception):
    """This round failed; try again after a back-off."""


def _error_text(exc: urllib.error.HTTPError) -> str:
    try:
        return exc.read().decode("utf-8", "replace")[:500]
    except OSError:
        return ""
