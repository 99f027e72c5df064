"""The browser tier: a real SillyTavern with the extension, driven by Debian's Chromium
through Playwright, against the local edge runner and a scripted stand-in provider."""

from __future__ import annotations

import json
import threading
import time

import pytest

from devkit import roleplay as rp
from devkit.fakes import FakeServer, Reply
from devkit.runner import Edge
from tests.support.sillytavern import SillyTavern, seed_character

CHROMIUM = "/usr/bin/chromium"
# Without the background-networking flags Chromium dials out at start, which a closed
# network refuses (and slows every launch).
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
MODEL = "fake:rp-st"
CHARACTER = "Aurore"
LONG_CHAT, SECOND_CHAT = "Aurore - long journey", "Aurore - side quest"
WINDOW_CHAT = "Aurore - the long road"
RECALL_CHAT = "Aurore - the old mill"
EXCHANGES = 160
RECALL_EXCHANGES = 60
# An early exchange of the recall chat that the latest message of its test is about.
RECALL_AT = 3
RECALL_MOMENT = ("u-0003 Look what the river left under the old mill: a silver compass, its needle pointing at the moon.",
                 "a-0003 Aurore turns the silver compass over in her palm. \"Keep it. A mill compass never lies about the way home.\"")
_wall = {}


def pytest_terminal_summary(terminalreporter):
    if "seconds" in _wall:
        terminalreporter.write_line(f"browser tier wall time: {_wall['seconds']:.1f} s "
                                    "(SillyTavern, edge runner, Chromium: start, tests, stop)")


@pytest.fixture(scope="module", autouse=True)
def tier_clock():
    """The tier's wall time, its servers' start and stop included (they are module-scoped
    and set up after this fixture, so torn down before it)."""
    t0 = time.monotonic()
    yield
    _wall["seconds"] = _wall.get("seconds", 0) + time.monotonic() - t0


class ScriptedModel:
    """The stand-in provider. `script(body)` → ("tool", page_id) | ("call", (tool name,
    arguments)) | ("text", text); the reply is streamed (SSE) or whole, as the request asks.
    `usage`, when set, is reported as a provider does: in a whole answer, and as a stream's
    last event (`choices: []`) only when the request asks (`stream_options.include_usage`).
    `pause`: seconds a stream waits between its events (a slow model, for Stop)."""

    def __init__(self):
        self.script = lambda body: ("text", "…")
        self.usage = None
        self.pause = 0.0
        self._lock = threading.Lock()
        self.n = 0

    def __call__(self, rec) -> Reply:
        with self._lock:
            body = rec.json()
            kind, value = self.script(body)
            self.n += 1
            if kind == "tool":
                kind, value = "call", ("multillm_context_retrieve", {"page_id": value})
            if kind == "call":
                name, args = value
                message = {"role": "assistant", "content": None, "tool_calls": [
                    {"id": f"call_st{self.n}", "type": "function",
                     "function": {"name": name, "arguments": json.dumps(args)}}]}
                finish = "tool_calls"
            else:
                message, finish = {"role": "assistant", "content": value}, "stop"
            if not body.get("stream"):
                doc = {"id": f"chatcmpl-{self.n}", "object": "chat.completion", "created": 0,
                       "model": "rp-st", "choices": [{"index": 0, "message": message, "finish_reason": finish}]}
                if self.usage is not None:
                    doc["usage"] = self.usage
                return Reply(chunks=[json.dumps(doc).encode()])
            delta = dict(message)
            if delta.get("tool_calls"):
                delta["tool_calls"] = [{"index": 0, **delta["tool_calls"][0]}]
            chunks = [{"choices": [{"index": 0, "delta": delta, "finish_reason": None}]},
                      {"choices": [{"index": 0, "delta": {}, "finish_reason": finish}]}]
            if self.usage is not None and (body.get("stream_options") or {}).get("include_usage"):
                chunks.append({"choices": [], "usage": self.usage})
            sse = [b"data: " + json.dumps({"id": f"chatcmpl-{self.n}", "object": "chat.completion.chunk",
                                           "created": 0, "model": "rp-st", **c}).encode() + b"\n\n"
                   for c in chunks] + [b"data: [DONE]\n\n"]
            return Reply(headers=[("content-type", "text/event-stream")], chunks=sse, delay=self.pause)


@pytest.fixture(scope="module")
def provider():
    model = ScriptedModel()
    with FakeServer(model) as server:
        server.model = model
        yield server


@pytest.fixture(scope="module")
def other_site():
    """A web page of an origin the edge does not list (not the edge's FLASK_ORIGIN)."""
    with FakeServer() as server:
        yield server


@pytest.fixture(scope="module")
def edge(provider, sillytavern, tmp_path_factory):
    # No Flask origin (FLASK_ORIGIN empty): whatever SillyTavern needs, the edge answers
    # itself, its status check (`GET /v1/models`) included. SillyTavern's origin may call
    # sessions, pages and search directly (CORS), as a player's edge would be configured.
    vars_ = rp.edge_vars(provider.url, "", CORS_ALLOWED_ORIGINS=sillytavern.url)
    with Edge(tmp_path_factory.mktemp("edge"), vars=vars_, start_timeout=240) as edge:
        # A window that ~145 of the chat's 160 exchanges must leave (blocks, §5.7).
        rp.set_model(edge, MODEL, 14000, 1000)
        yield edge


@pytest.fixture(scope="module")
def player(edge):
    key, principal = rp.seed_principal(edge)
    return key, principal


@pytest.fixture(scope="module")
def sillytavern(tmp_path_factory, provider):
    def setup_user(user):
        seed_character(user, CHARACTER, {LONG_CHAT: EXCHANGES, SECOND_CHAT: 3, WINDOW_CHAT: EXCHANGES,
                                         RECALL_CHAT: RECALL_EXCHANGES},
                       {RECALL_CHAT: {RECALL_AT: RECALL_MOMENT}})

    with SillyTavern(tmp_path_factory.mktemp("sillytavern"), setup_user) as st:
        yield st


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright
    with sync_playwright() as p:
        # launch() gives every run a fresh temporary profile (--user-data-dir).
        b = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        yield b
        b.close()


@pytest.fixture(scope="module")
def page(browser, sillytavern):
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    pg = context.new_page()
    pg.console_lines = []
    pg.on("console", lambda m: pg.console_lines.append(m.text))
    pg.set_default_timeout(30_000)
    pg.goto(sillytavern.url + "/", wait_until="domcontentloaded")
    pg.wait_for_function("() => window.SillyTavern && document.getElementById('multillm_paging_settings')",
                         timeout=120_000)
    # First run: ST asks for a persona name.
    welcome = pg.locator(".popup:has-text('Welcome to SillyTavern') .popup-button-ok")
    welcome.click()
    welcome.wait_for(state="detached")
    yield pg
    context.close()


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item, call):
    rep = yield
    setattr(item, "rep_" + rep.when, rep)
    return rep


@pytest.fixture(autouse=True)
def explain_failure(request, tmp_path_factory):
    """On failure: what the browser said, the toasts, ST's log tail and a screenshot."""
    yield
    rep = getattr(request.node, "rep_call", None)
    if not (rep and rep.failed) or "page" not in request.fixturenames:
        return
    pg = request.getfixturevalue("page")
    st = request.getfixturevalue("sillytavern")
    shot = tmp_path_factory.mktemp("failure") / f"{request.node.name}.png"
    pg.screenshot(path=str(shot))
    state = pg.evaluate("() => [SillyTavern.getContext().chatMetadata.multillm_paging, "
                        "document.getElementById('multillm_paging_indicator')?.outerHTML]")
    print(f"\n--- extension state: {state}")
    print(f"--- screenshot: {shot}\n--- toasts: {pg.locator('#toast-container').all_inner_texts()}")
    print("--- console (last 40):\n" + "\n".join(line[:300] for line in pg.console_lines[-40:]))
    print("--- SillyTavern log (last 30):\n" + "\n".join(line[:300] for line in st.lines[-30:]))
    if "edge" in request.fixturenames:
        print("--- edge log (last 8):\n" + "\n".join(line[:600] for line in request.getfixturevalue("edge").lines[-8:]))
    if "provider" in request.fixturenames:
        for rec in request.getfixturevalue("provider").received:
            print("--- provider got", rec.method, rec.path, rec.body[:300])


class SplittingRelay:
    """A local HTTP relay in front of the edge that hands each response on in small
    pieces with pauses, as a slow network or a buffering proxy does: a long leading SSE
    comment line reaches SillyTavern, and the page, in several reads."""

    def __init__(self, target: str, piece: int = 700, pause: float = 0.03):
        import httpx
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
        relay = self
        self.piece, self.pause, self.responses = piece, pause, 0
        self._client = httpx.Client(base_url=target, timeout=120)

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.0"        # the body ends when the connection closes

            def log_message(self, *args):
                pass

            def _relay(self):
                n = int(self.headers.get("content-length") or 0)
                body = self.rfile.read(n) if n else None
                skip = {"host", "content-length", "connection", "transfer-encoding", "accept-encoding"}
                headers = {k: v for k, v in self.headers.items() if k.lower() not in skip}
                with relay._client.stream(self.command, self.path, content=body, headers=headers) as r:
                    self.send_response(r.status_code)
                    for k, v in r.headers.items():
                        if k.lower() not in {"content-length", "transfer-encoding", "connection", "content-encoding"}:
                            self.send_header(k, v)
                    self.send_header("connection", "close")
                    self.end_headers()
                    for data in r.iter_bytes():
                        for i in range(0, len(data), relay.piece):
                            self.wfile.write(data[i:i + relay.piece])
                            self.wfile.flush()
                            time.sleep(relay.pause)
                relay.responses += 1

            do_GET = do_POST = do_DELETE = do_PUT = _relay

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def close(self):
        self._server.shutdown()
        self._server.server_close()
        self._client.close()


@pytest.fixture(scope="module")
def relay(edge):
    # Pieces small enough that the pages line (~48 bytes an id; blocks make the ids few,
    # docs/design.md §5.7) spans several reads.
    r = SplittingRelay(edge.url, piece=96)
    yield r
    r.close()
