"""HTTPS for tests that need a browser to see real sites: a self-signed certificate, a TLS front that relays to a plain
HTTP server (as Hugging Face's proxy stands in front of a Space) and records what the browser sent through it, and a
static HTTPS site (another site's pages).

Chromium reaches them under any host name with `--host-resolver-rules="MAP name 127.0.0.1"` and
`--ignore-certificate-errors`; the port stays the one in the URL.
"""

from __future__ import annotations

import asyncio
import datetime
import re
import ssl
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

_HEAD = re.compile(rb"(GET|HEAD|POST|PUT|PATCH|DELETE|OPTIONS) (\S+) HTTP/1\.[01]\r\n(.*?)\r\n\r\n", re.S)


def self_signed(directory: Path, hosts: list[str]) -> tuple[Path, Path]:
    """A certificate for `hosts` signed by its own key, written to `directory`; returns (cert file, key file)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, hosts[0])])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=7))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(h) for h in hosts]), critical=False)
        .sign(key, hashes.SHA256())
    )
    cert_file, key_file = directory / "cert.pem", directory / "key.pem"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return cert_file, key_file


def server_context(cert: Path, key: Path) -> ssl.SSLContext:
    """A server-side TLS context with `cert` and `key`."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    return context


class TlsFront:
    """Terminates TLS on 127.0.0.1:`port` and relays each connection to 127.0.0.1:`target` (set before the first
    connection), keeping every byte the client sent (`requests()` reads the request heads back)."""

    def __init__(self, cert: Path, key: Path) -> None:
        self.context = server_context(cert, key)
        self.target: int | None = None
        self.sent: list[bytearray] = []
        self.loop = asyncio.new_event_loop()
        # the browser drops connections mid-TLS when it closes; those are not the test's business
        self.loop.set_exception_handler(lambda loop, ctx: None)
        self.thread = threading.Thread(target=self.loop.run_forever, name="tls-front", daemon=True)
        self.server: Any = None
        self.port = 0

    def start(self) -> TlsFront:
        """Listen on a free port (`self.port`)."""
        self.thread.start()
        start = asyncio.start_server(self._relay, "127.0.0.1", 0, ssl=self.context)
        self.server = asyncio.run_coroutine_threadsafe(start, self.loop).result(30)
        self.port = self.server.sockets[0].getsockname()[1]
        return self

    def stop(self) -> None:
        """Close the listener and the loop."""

        async def close() -> None:
            self.server.close()

        asyncio.run_coroutine_threadsafe(close(), self.loop).result(30)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(30)

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        assert self.target is not None, "set TlsFront.target before connecting"
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target)
        record = bytearray()
        self.sent.append(record)

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter, keep: bytearray | None) -> None:
            try:
                while data := await src.read(65536):
                    if keep is not None:
                        keep.extend(data)
                    dst.write(data)
                    await dst.drain()
            except (ConnectionError, ssl.SSLError):
                pass
            finally:
                dst.close()

        await asyncio.gather(pipe(reader, up_writer, record), pipe(up_reader, writer, None))

    def requests(self) -> list[dict[str, Any]]:
        """Every request head the clients sent so far: {"method", "target", "headers" (lower-case names)}."""
        found = []
        for record in list(self.sent):
            for m in _HEAD.finditer(bytes(record)):
                lines = m.group(3).decode("latin-1").split("\r\n")
                headers = dict((k.strip().lower(), v.strip()) for k, _, v in (ln.partition(":") for ln in lines))
                found.append({"method": m.group(1).decode(), "target": m.group(2).decode(), "headers": headers})
        return found


class TlsSite:
    """Static pages over HTTPS on 127.0.0.1:`port`: `pages` maps a path to its HTML (changeable while it serves)."""

    def __init__(self, cert: Path, key: Path, pages: dict[str, str]) -> None:
        site = self

        class Handler(BaseHTTPRequestHandler):
            def setup(self) -> None:
                self.request.do_handshake()  # here, in the connection's thread, not in the accepting loop
                super().setup()

            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:  # BaseHTTPRequestHandler's naming
                page = site.pages.get(self.path.split("?")[0])
                body = (page or "not found").encode()
                self.send_response(200 if page is not None else 404)
                self.send_header("Content-Type", "text/html; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.pages = pages
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.httpd.socket = server_context(cert, key).wrap_socket(
            self.httpd.socket, server_side=True, do_handshake_on_connect=False
        )
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, name="tls-site", daemon=True)

    def start(self) -> TlsSite:
        """Serve in a background thread."""
        self.thread.start()
        return self

    def stop(self) -> None:
        """Stop serving."""
        self.httpd.shutdown()
        self.httpd.server_close()
