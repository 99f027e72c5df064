"""Real local HTTP servers standing in for an upstream provider and the Flask origin.

Each records exactly what it received (method, path, headers, body bytes) and answers
with a scripted reply: a status, headers and body chunks, optionally spaced in time so
streaming can be observed at the client — or a provider that hangs before its headers,
stalls mid-stream, or streams on and on. It notes the moment a client goes away.
"""

from __future__ import annotations

import json
import select
import socket
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
    chunks: list[bytes] = field(default_factory=lambda: [b'{"ok":true}'])   # or any iterable
    delay: float = 0.0               # seconds between chunks
    head_delay: float = 0.0          # seconds before the status line (a hung provider)
    stall_after: int | None = None   # after this many chunks, go silent for `stall` seconds
    stall: float = 0.0
    length: bool = False             # Content-Length framing instead of chunked


def answer(path: str, text: str) -> Reply:
    """A provider's whole JSON answer ``text``, in the wire format ``path`` names
    (Messages with its usage, Responses, else Chat Completions)."""
    if path.endswith("/messages"):
        doc = {"id": "msg_1", "type": "message", "role": "assistant", "model": "m",
               "content": [{"type": "text", "text": text}], "stop_reason": "end_turn",
               "usage": {"input_tokens": 1, "output_tokens": 1}}
    elif path.endswith("/responses"):
        doc = {"id": "resp_1", "object": "response", "status": "completed", "output": []}
    else:
        doc = {"id": "chatcmpl-1", "object": "chat.completion", "created": 0, "model": "m",
               "choices": [{"index": 0, "finish_reason": "stop",
                            "message": {"role": "assistant", "content": text}}]}
    return Reply(chunks=[json.dumps(doc).encode()])


@dataclass
class Sent:
    """What the server managed to send for one request, and when its client left."""
    chunks: int = 0
    closed_at: float | None = None   # time.monotonic() when the client was seen gone
    done: bool = False


class FakeServer:
    """A threaded HTTP server; `reply` may be a Reply or a callable(Received) -> Reply."""

    def __init__(self, reply=None):
        self.received: list[Received] = []
        self.sent: list[Sent] = []
        self.reply = reply or Reply()
        self._lock = threading.Lock()
        self._closing = threading.Event()
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
                sent = Sent()
                with server._lock:
                    server.sent.append(sent)
                try:
                    self._answer(reply, sent)
                except (BrokenPipeError, ConnectionResetError):
                    sent.closed_at = sent.closed_at or time.monotonic()
                    self.close_connection = True

            def _wait(self, seconds: float, sent: Sent) -> None:
                """Sleep, but notice a client that closes its connection meanwhile."""
                deadline = time.monotonic() + seconds
                while not server._closing.is_set():
                    left = deadline - time.monotonic()
                    if left <= 0:
                        return
                    if self._client_gone(min(left, 0.05)):
                        sent.closed_at = time.monotonic()
                        raise ConnectionResetError("client went away")

            def _client_gone(self, timeout: float) -> bool:
                readable, _, _ = select.select([self.connection], [], [], timeout)
                if not readable:
                    return False
                try:
                    return self.connection.recv(1, socket.MSG_PEEK) == b""
                except OSError:
                    return True

            def _answer(self, reply: Reply, sent: Sent) -> None:
                self._wait(reply.head_delay, sent)
                chunks = reply.chunks
                self.send_response(reply.status)
                for k, v in reply.headers:
                    self.send_header(k, v)
                if reply.length:
                    chunks = list(chunks)
                    self.send_header("content-length", str(sum(map(len, chunks))))
                else:
                    self.send_header("transfer-encoding", "chunked")
                self.end_headers()
                for i, chunk in enumerate(chunks):
                    if i and reply.delay:
                        self._wait(reply.delay, sent)
                    if reply.stall_after is not None and i == reply.stall_after:
                        self._wait(reply.stall, sent)
                    self.wfile.write(chunk if reply.length else b"%x\r\n%s\r\n" % (len(chunk), chunk))
                    self.wfile.flush()
                    sent.chunks += 1
                if not reply.length:
                    self.wfile.write(b"0\r\n\r\n")
                    self.wfile.flush()
                sent.done = True

            def _read_chunked(self) -> bytes:
                out = bytearray()
                while True:
                    size = int(self.rfile.readline().split(b";")[0], 16)
                    if size == 0:
                        self.rfile.readline()
                        return bytes(out)
                    out += self.rfile.read(size)
                    self.rfile.readline()

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = do_OPTIONS = _handle

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self._thread.start()

    def close(self):
        self._closing.set()
        self.httpd.shutdown()
        self.httpd.server_close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def clear(self):
        with self._lock:
            self.received.clear()
            self.sent.clear()
