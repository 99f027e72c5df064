"""Real local HTTP servers standing in for an upstream provider and the Flask origin.

Each records exactly what it received (method, path, headers, body bytes) and answers
with a scripted reply: a status, headers and a list of body chunks, optionally spaced
in time so streaming can be observed at the client.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass
class Received:
    method: str
    path: str
    headers: dict[str, str]          # lower-case names
    raw_headers: list[tuple[str, str]]
    body: bytes

    def json(self):
        return json.loads(self.body)


@dataclass
class Reply:
    status: int = 200
    headers: list[tuple[str, str]] = field(default_factory=lambda: [("content-type", "application/json")])
    chunks: list[bytes] = field(default_factory=lambda: [b'{"ok":true}'])
    delay: float = 0.0               # seconds between chunks


class FakeServer:
    """A threaded HTTP server; `reply` may be a Reply or a callable(Received) -> Reply."""

    def __init__(self, reply=None):
        self.received: list[Received] = []
        self.reply = reply or Reply()
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def _handle(self):
                length = self.headers.get("content-length")
                if length is not None:
                    body = self.rfile.read(int(length))
                elif self.headers.get("transfer-encoding", "").lower() == "chunked":
                    body = self._read_chunked()
                else:
                    body = b""
                rec = Received(self.command, self.path,
                               {k.lower(): v for k, v in self.headers.items()},
                               [(k.lower(), v) for k, v in self.headers.items()], body)
                with server._lock:
                    server.received.append(rec)
                reply = server.reply(rec) if callable(server.reply) else server.reply
                self.send_response(reply.status)
                for k, v in reply.headers:
                    self.send_header(k, v)
                self.send_header("transfer-encoding", "chunked")
                self.end_headers()
                for i, chunk in enumerate(reply.chunks):
                    if i and reply.delay:
                        time.sleep(reply.delay)
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                    self.wfile.flush()
                self.wfile.write(b"0\r\n\r\n")
                self.wfile.flush()

            def _read_chunked(self) -> bytes:
                out = bytearray()
                while True:
                    size = int(self.rfile.readline().split(b";")[0], 16)
                    if size == 0:
                        self.rfile.readline()
                        return bytes(out)
                    out += self.rfile.read(size)
                    self.rfile.readline()

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = _handle

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self._thread.start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def clear(self):
        with self._lock:
            self.received.clear()
