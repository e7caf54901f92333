"""A stand-in for `trl vllm-serve` (vLLM needs a GPU and is not installed here): an HTTP server that answers
GET /health/ with 200 once `--healthy-after` seconds have passed (503 before, or always with --never-healthy), logs
each request to stdout, and exits with code 7 after `--die-after` seconds when given."""

from __future__ import annotations

import argparse
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--healthy-after", type=float, default=0.0)
    parser.add_argument("--never-healthy", action="store_true")
    parser.add_argument("--die-after", type=float, default=None)
    parser.add_argument("--tag", default="", help="A marker tests find the process by.")
    args = parser.parse_args()
    t0 = time.monotonic()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # http.server's naming
            ok = self.path == "/health/" and not args.never_healthy and time.monotonic() - t0 >= args.healthy_after
            self.send_response(200 if ok else 503)
            self.send_header("Content-Length", "0")
            self.end_headers()
            print(f"standin: GET {self.path} -> {200 if ok else 503}", flush=True)

        def log_message(self, *a: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    print(f"standin: serving on {args.port}", flush=True)
    if args.die_after is not None:

        def die() -> None:
            time.sleep(args.die_after)
            print("standin: dying", flush=True)
            sys.stdout.flush()
            import os

            os._exit(7)

        threading.Thread(target=die, daemon=True).start()
    server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
