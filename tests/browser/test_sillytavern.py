"""SillyTavern with the MultiLLM extension in a real Chromium, against the edge runner.

The tests run in order on one SillyTavern: settings are entered through the UI first,
then the long chat is played."""

from __future__ import annotations

import hashlib
import json
import re
import time

import pytest

from devkit.plans import is_recall, marker_ids
from tests.browser.conftest import (CHARACTER, EXCHANGES, LONG_CHAT, MODEL, RECALL_CHAT, RECALL_MOMENT,
                                   SECOND_CHAT, WINDOW_CHAT)
from devkit import roleplay as rp
from devkit.runner import ROOT
from tests.support.sillytavern import free_port

DOCS = ROOT / "docs"
FINAL = "Aurore remembers the lantern by the river, ночью."
pytestmark = pytest.mark.slow


# ST's top-bar panels open and close by class (openDrawer), then a CSS transition of their
# height and display: a closing panel still looks visible for its transition, and whatever
# is clicked in it meanwhile lands on what lies beneath (the full-screen
# #expression-wrapper). So panels are told apart by class and waited on until still.
DRAWERS_STILL = """() => [...document.querySelectorAll('.drawer-content')]
    .every(e => e.getAnimations().length === 0)"""


def open_drawer(pg, button: str, content: str):
    """Open a top-bar panel of ST (idempotent), once every panel is still."""
    pg.wait_for_function(DRAWERS_STILL)
    if not pg.locator(content).evaluate("e => e.classList.contains('openDrawer')"):
        pg.click(button)
    pg.wait_for_function("s => document.querySelector(s).classList.contains('openDrawer')", arg=content)
    pg.wait_for_function(DRAWERS_STILL)
    pg.locator(content).wait_for(state="visible")


def open_stored_context(pg):
    """The extension's Stored context panel, opened (its search box showing)."""
    open_drawer(pg, "#extensions-settings-button .drawer-toggle", "#rm_extensions_block")
    panel = pg.locator("#multillm_stored_context")
    if not panel.locator("#multillm_search_query").is_visible():
        panel.locator(".inline-drawer-toggle").click()
    return panel


def search_for(pg, query: str):
    """A search from the Stored context panel's box, as a player types it."""
    pg.fill("#multillm_search_query", query)
    pg.press("#multillm_search_query", "Enter")


def close_drawers(pg):
    """Close every open panel by its own toggle (a click on the chat lands on a panel
    that covers it, which keeps it open)."""
    pg.wait_for_function(DRAWERS_STILL)
    for toggle in pg.locator(".drawer:has(> .drawer-content.openDrawer:not(.pinnedOpen)) > .drawer-toggle").all():
        toggle.click()
    pg.wait_for_function("() => !document.querySelector('.drawer-content.openDrawer:not(.pinnedOpen)')")
    pg.wait_for_function(DRAWERS_STILL)


def test_settings_panel_takes_the_key_and_never_shows_it(page, edge, player):
    key, _ = player
    open_drawer(page, "#extensions-settings-button .drawer-toggle", "#rm_extensions_block")
    drawer = page.locator("#multillm_paging_settings")
    drawer.locator(".inline-drawer-toggle").click()
    page.fill("#multillm_paging_url", edge.url)
    page.locator("#multillm_paging_url").dispatch_event("change")
    field = page.locator("#multillm_paging_key")
    assert field.get_attribute("type") == "password"
    field.fill(key)
    field.press("Enter")                    # as the README says: paste, then Enter
    assert field.input_value() == ""
    assert page.locator("#multillm_paging_key_state").inner_text() == "A key is stored. Paste a new one to replace it."
    assert page.locator("#multillm_paging_enabled").is_checked()
    assert page.locator("#multillm_paging_prompt_cache").is_checked()      # on by default (README)
    assert key not in page.locator("#rm_extensions_block").inner_html()
    DOCS.mkdir(exist_ok=True)
    drawer.screenshot(path=str(DOCS / "sillytavern-settings.png"))
    assert page.evaluate("() => SillyTavern.getContext().extensionSettings.multillm_paging.edgeUrl") == edge.url


def test_custom_source_points_at_the_edge(page, edge, player):
    """SillyTavern's status check (Connect) passes against the edge alone: there is no
    Flask origin (FLASK_ORIGIN empty, where a forwarded `/v1/models` would be a 503), the
    API key field stays empty and the extension adds the roleplay key, so the edge answers
    `GET /v1/models` with the key's models, which fill SillyTavern's model list
    (docs/design.md §2)."""
    key, _ = player
    rp.set_model(edge, "fake:rp-other", 8000, 1000)           # listed as well
    rp.set_model(edge, "nobody:unserved", 8000, 1000)         # no such provider: never listed
    logged = len(edge.logs())
    open_drawer(page, "#sys-settings-button .drawer-toggle", "#rm_api_block")
    page.select_option("#main_api", "openai")
    page.select_option("#chat_completion_source", "custom")
    page.fill("#custom_api_url_text", edge.url + "/v1")
    page.fill("#custom_model_id", MODEL)
    assert page.locator("#api_key_custom").input_value() == ""
    page.click("#api_button_openai")
    page.locator("#rm_api_block .online_status_text:visible").filter(has_text="Valid").wait_for()
    options = page.locator("#model_custom_select option").evaluate_all("os => os.map(o => o.value)")
    assert options == ["", "fake:rp-other", MODEL]
    [line] = [r for r in edge.wait_for_log(lambda r: r.get("route") == "list_models", since=logged)
              if r.get("method") == "GET"][-1:]
    assert (line["status"], line["models"]) == (200, 2) and "forwarded" not in line
    assert not [r for r in edge.logs()[logged:] if r.get("route") == "forward"]
    assert key not in edge.output()
    open_drawer(page, "#ai-config-button .drawer-toggle", "#left-nav-panel")
    # ST must send the whole chat: the edge, not ST, decides what leaves the window.
    page.check("#oai_max_context_unlocked")
    page.fill("#openai_max_context_counter", "500000")
    page.locator("#openai_max_context_counter").dispatch_event("input")
    page.check("#openai_function_calling")
    # Whole responses: ST's server relays their JSON, `context_pages` included (never the
    # edge's headers). The 413 test below plays a streamed turn.
    assert page.locator("#stream_toggle").is_checked()      # ST's default
    page.uncheck("#stream_toggle")
    settings = page.evaluate("() => SillyTavern.getContext().chatCompletionSettings")
    assert settings["chat_completion_source"] == "custom" and settings["function_calling"] is True
    assert settings["openai_max_context"] == 500000 and settings["stream_openai"] is False


def open_chat(page, name):
    open_drawer(page, "#rightNavDrawerIcon", "#right-nav-panel")
    page.click("#rm_button_characters")
    page.locator(f"#rm_print_characters_block .character_select:has-text('{CHARACTER}')").click()
    page.wait_for_function(f"() => SillyTavern.getContext().getCurrentChatId() === {json.dumps(name)}")


def send(page, text):
    page.fill("#send_textarea", text)
    page.click("#send_but")


def after_tool(body) -> bool:
    """This turn's tool result is the newest message."""
    return body["messages"][-1].get("role") == "tool"


def chat_requests(provider):
    return [r for r in provider.received if r.path.endswith("/chat/completions")]


def exchange_starts(items) -> list[int]:
    """Where each exchange of a stored chat page starts: its first item, then each user
    message (a page may hold a block of consecutive exchanges, docs/design.md §5.7)."""
    return [0] + [i for i, m in enumerate(items) if i and m.get("role") == "user"]


def exchange_bytes(stored: bytes, n: int) -> bytes:
    """Exchange ``n`` (from 1) of a stored page, as bytes: its items' compact JSON, which
    is a byte slice of the page (the page is its items' bytes comma-joined, §5.8)."""
    items = json.loads(stored)
    bounds = exchange_starts(items) + [len(items)]
    part = json.dumps(items[bounds[n - 1]:bounds[n]], ensure_ascii=False, separators=(",", ":")).encode()
    assert part[1:-1] in stored
    return part


def test_long_chat_is_paged_and_the_model_gets_a_page_back(page, edge, provider, player, sillytavern):
    key, principal = player
    provider.clear()
    first_ids = []

    def script(body):
        if not after_tool(body):
            ids = [i for m in body["messages"] if m.get("role") == "user" for i in (marker_ids(m.get("content")) or [])]
            first_ids.extend(ids)
            return "tool", ids[1]        # the first block page (no exchange named: its first)
        return "text", FINAL
    provider.model.script = script

    open_chat(page, LONG_CHAT)
    # ST renders only the latest messages; the chat itself holds them all.
    page.wait_for_function(f"() => SillyTavern.getContext().chat.length === {2 * EXCHANGES + 1}")
    page.locator("#chat .mes").last.wait_for()
    send(page, "Do you remember how this journey began?")
    page.locator("#chat .mes_text").filter(has_text=FINAL).wait_for(timeout=90_000)
    assert page.evaluate("() => SillyTavern.getContext().chat.at(-1).mes") == FINAL

    first, second = (r.json() for r in chat_requests(provider))
    raw_first, raw_second = chat_requests(provider)
    # First upstream request: the marker naming pages that hold the chat's oldest ≥ 140
    # exchanges in order (most pages blocks of several; what follows the marker is the
    # next message), the edge's tool schema once, no capabilities, no roleplay key anywhere.
    pages = [json.loads(rp.stored_page(edge, i)) for i in first_ids]
    held = [len(exchange_starts(items)) for items in pages]
    heads = [m["content"].split(" ")[0] for items in pages for m in items]
    chat_heads = ["greet-0000"] + [f"{w}-{i:04d}" for i in range(EXCHANGES) for w in "ua"]
    assert heads == chat_heads[:len(heads)] and sum(held) >= 140 and len(first_ids) < sum(held)
    sent = first["messages"]
    at = next(i for i, m in enumerate(sent) if marker_ids(m.get("content")))
    assert sent[at + 1]["content"].split(" ")[0] == chat_heads[len(heads)]
    tools = [t["function"]["name"] for t in first.get("tools", [])]
    assert tools == ["multillm_context_retrieve", "multillm_context_search"]   # both declared
    assert "capabilities" not in first and "capabilities" not in second
    for rec in (raw_first, raw_second):
        assert key.encode() not in rec.body and key not in json.dumps(rec.headers)
        assert "x-roleplay-session-id" not in rec.headers
    # Second: the tool result is byte for byte the page's first exchange (the model named
    # no exchange: 1), never the whole block.
    [row] = edge.sql("SELECT * FROM context_pages WHERE page_id = ?1", first_ids[1])
    offset = row.get("r2_offset", 0)        # a page may be a byte range of its request's object
    stored = edge.r2_get(row["r2_key"])[offset:offset + row["byte_length"]]
    assert len(stored) == row["byte_length"] and hashlib.sha256(stored).hexdigest() == row["sha256"]
    assert held[1] > 1, held[:4]             # a block: exchange 1 is not the whole page
    [tool_msg] = [m for m in second["messages"] if m.get("role") == "tool"]
    got = tool_msg["content"].encode("utf-8")
    assert got == exchange_bytes(stored, 1) and stored.startswith(got[:-1]) and len(got) < len(stored)
    call = [m for m in second["messages"] if m.get("tool_calls")][0]["tool_calls"][0]
    assert call["id"] == tool_msg["tool_call_id"]
    assert json.loads(call["function"]["arguments"]) == {"page_id": first_ids[1]}
    # The oldest page starts with the chat's oldest message as ST sent it, the greeting;
    # the block read back starts its first exchange with the player's turn after it.
    assert pages[0][0]["content"].startswith("greet-0000 «Aurore»")
    assert [m["content"].split(" ")[0] for m in json.loads(got)] == chat_heads[len(pages[0]):len(pages[0]) + 2]
    # One session for this chat, stored in its metadata; the indicator shows the count.
    sessions = edge.sql("SELECT session_id FROM roleplay_sessions WHERE principal = ?1", principal)
    meta = page.evaluate("() => SillyTavern.getContext().chatMetadata.multillm_paging")
    assert [s["session_id"] for s in sessions] == [meta["session_id"]]
    assert row["session_id"] == meta["session_id"]
    indicator = page.locator("#multillm_paging_indicator")
    indicator.filter(has_text="pages stored").wait_for()
    n_pages = int(indicator.inner_text().split()[0])
    assert meta["pages"] == n_pages == len(set(marker_page_ids(second))) > 1
    # The key reached the edge, and was logged nowhere on the way.
    assert key not in "\n".join(page.console_lines) and key not in sillytavern.output()
    close_drawers(page)
    page.screenshot(path=str(DOCS / "sillytavern-chat-paged.png"))


def set_streaming(page, on: bool):
    open_drawer(page, "#ai-config-button .drawer-toggle", "#left-nav-panel")
    page.set_checked("#stream_toggle", on)
    close_drawers(page)


def marker_page_ids(body) -> list[str]:
    return [i for m in body["messages"] if m.get("role") == "user" for i in (marker_ids(m.get("content")) or [])]


def test_page_count_is_read_whole_when_the_stream_arrives_in_pieces(page, edge, provider, relay):
    """A streamed turn behind a relay that hands the edge's answer on in small pieces:
    the leading `: multillm-context-pages …` line (one id per page, most pages blocks of
    exchanges) reaches the page in many reads, and the indicator counts every id, not
    those of the first read."""
    answer = "The river remembers every lantern."
    provider.clear()
    provider.model.script = lambda body: ("text", answer)
    set_extension(page, url=relay.url)
    set_custom_url(page, relay.url + "/v1")
    set_streaming(page, True)
    try:
        send(page, "Walk with me along the river.")
        page.locator("#chat .mes_text").filter(has_text=answer).wait_for(timeout=90_000)
        wait_idle(page)
        [req] = chat_requests(provider)
        ids = marker_page_ids(req.json())
        assert len(ids) > 10 and len(",".join(ids)) > 5 * relay.piece    # the line spans reads
        assert relay.responses >= 1
        indicator = page.locator("#multillm_paging_indicator")
        indicator.filter(has_text=f"{len(ids)} pages stored").wait_for(timeout=10_000)
        assert page.evaluate("() => SillyTavern.getContext().chatMetadata.multillm_paging.pages") == len(ids)
    finally:
        set_streaming(page, False)
        set_extension(page, url=edge.url)
        set_custom_url(page, edge.url + "/v1")


# --- negative paths -------------------------------------------------------------------

def toasts(page, kind="error"):
    return page.locator(f"#toast-container .toast-{kind}").all_inner_texts()


def clear_toasts(page):
    page.evaluate("() => document.querySelectorAll('#toast-container .toast').forEach(t => t.remove())")


def wait_idle(page):
    """ST is ready for the next message: the send button is back."""
    page.locator("#send_but").wait_for(state="visible")
    page.wait_for_function("() => !document.body.dataset.generating && !$('#mes_stop').is(':visible')")


def test_a_page_that_is_gone_comes_back_as_tool_text_and_the_turn_goes_on(page, edge, provider):
    gone = "cp_" + "A" * 43
    answer = "Then we walk on without that memory."
    provider.clear()
    provider.model.script = lambda body: ("text", answer) if after_tool(body) else ("tool", gone)
    clear_toasts(page)
    send(page, "And the night before?")
    page.locator("#chat .mes_text").filter(has_text=answer).wait_for(timeout=90_000)
    second = chat_requests(provider)[1].json()
    tool_msg = [m for m in second["messages"] if m.get("role") == "tool"][-1]
    assert tool_msg["content"] == f"Page {gone} is no longer available (expired or its session ended). Continue without it."
    assert toasts(page) == []
    wait_idle(page)


def test_a_session_ended_elsewhere_is_replaced_once(page, edge, provider, player):
    key, principal = player
    old = page.evaluate("() => SillyTavern.getContext().chatMetadata.multillm_paging.session_id")
    r = edge.client.delete(f"/v1/roleplay/sessions/{old}", headers={"Authorization": f"Bearer {key}"})
    assert r.status_code == 200
    answer = "A new night, the same lantern."
    provider.clear()
    provider.model.script = lambda body: ("text", answer)
    send(page, "Shall we rest?")
    page.locator("#chat .mes_text").filter(has_text=answer).wait_for(timeout=90_000)
    new = page.evaluate("() => SillyTavern.getContext().chatMetadata.multillm_paging.session_id")
    assert new != old
    open_sessions = edge.sql("SELECT session_id FROM roleplay_sessions WHERE principal = ?1 AND ended_at IS NULL", principal)
    assert [s["session_id"] for s in open_sessions] == [new]
    assert len(chat_requests(provider)) == 1            # the refused request never reached the model
    assert toasts(page) == []
    wait_idle(page)


def test_context_too_large_shows_the_edge_message(page, edge, provider):
    """Streaming: ST's server relays the edge's 413 body, and the toast quotes it."""
    provider.clear()
    open_drawer(page, "#ai-config-button .drawer-toggle", "#left-nav-panel")
    page.check("#stream_toggle")
    close_drawers(page)
    rp.set_model(edge, MODEL, 2500, 1000)
    try:
        clear_toasts(page)
        send(page, "Tell me everything.")
        toast = page.locator("#toast-container .toast-error").filter(has_text="MultiLLM edge: context too large")
        toast.wait_for()
        assert "context window" in toast.inner_text()
        assert chat_requests(provider) == []
        wait_idle(page)
    finally:
        rp.set_model(edge, MODEL, 14000, 1000)
        open_drawer(page, "#ai-config-button .drawer-toggle", "#left-nav-panel")
        page.uncheck("#stream_toggle")
        close_drawers(page)


def set_extension(page, url=None, key=None):
    open_drawer(page, "#extensions-settings-button .drawer-toggle", "#rm_extensions_block")
    if url is not None:
        page.fill("#multillm_paging_url", url)
        page.locator("#multillm_paging_url").dispatch_event("change")
    if key is not None:
        page.fill("#multillm_paging_key", key)
        page.locator("#multillm_paging_key").dispatch_event("change")
        assert page.locator("#multillm_paging_key").input_value() == ""
    close_drawers(page)


def set_custom_url(page, url):
    open_drawer(page, "#sys-settings-button .drawer-toggle", "#rm_api_block")
    page.fill("#custom_api_url_text", url)
    close_drawers(page)


def manage_chats(page):
    page.click("#options_button")
    page.click("#option_select_chat")
    popup = page.locator("#select_chat_popup")
    popup.wait_for(state="visible")
    return popup


def switch_chat(page, name):
    popup = manage_chats(page)
    popup.locator(f".select_chat_block[file_name^='{name}']").click()
    page.wait_for_function(f"() => SillyTavern.getContext().getCurrentChatId() === {json.dumps(name)}")
    popup.wait_for(state="hidden")


def chat_session(page):
    return page.evaluate("() => SillyTavern.getContext().chatMetadata.multillm_paging?.session_id ?? null")


# --- stored context: search and the sliding window -------------------------------------

SEARCH = "multillm_context_search"
PROMPT_CACHE = "multillm_context_prompt_cache"
NOTICE = re.compile(r"^(\d+) oldest messages are no longer sent to the model; they stay in your chat$")


def js_bytes(message) -> int:
    """UTF-8 bytes of JSON.stringify(message)."""
    return len(json.dumps(message, ensure_ascii=False, separators=(",", ":")).encode())


def generate_bodies(page) -> list:
    """The bodies of ST's own generate requests from now on (what the extension adjusted)."""
    seen = []
    page.on("request", lambda r: seen.append(json.loads(r.post_data))
            if r.url.endswith("/api/backends/chat-completions/generate") and r.post_data else None)
    return seen


HIT = re.compile(r"^(cp_[A-Za-z0-9_-]+) exchange=(\d+) (user|assistant): (.+)$")


def test_the_model_searches_stored_context_and_reads_back_the_exchange_it_found(page, edge, provider):
    """The model searches, then retrieves the exchange the best hit names: the search
    result names page and exchange, and the retrieval answers that exchange's exact
    bytes, not its whole block."""
    answer = "By the ford, at the forty-second night."
    provider.clear()
    first = {}

    def script(body):
        if not after_tool(body):
            first["body"] = body
            return "call", (SEARCH, {"query": "0042", "limit": 3})
        result = body["messages"][-1]["content"]
        if result.startswith("Stored exchanges matching"):
            page_id, exchange = HIT.match(result.split("\n")[1]).group(1, 2)
            return "call", ("multillm_context_retrieve", {"page_id": page_id, "exchange": int(exchange)})
        return "text", answer
    provider.model.script = script
    clear_toasts(page)
    send(page, "What happened on the forty-second night?")
    page.locator("#chat .mes_text").filter(has_text=answer).wait_for(timeout=90_000)
    wait_idle(page)
    # The edge gave the model both tools (the extension declared both capabilities).
    names = sorted(t["function"]["name"] for t in first["body"].get("tools", []))
    assert names == ["multillm_context_retrieve", SEARCH]
    ids = set(marker_page_ids(first["body"]))
    _, second, third = (r.json() for r in chat_requests(provider))
    tool_msg = [m for m in second["messages"] if m.get("role") == "tool"][-1]
    lines = tool_msg["content"].split("\n")
    assert lines[0].startswith('Stored exchanges matching "0042", best first (')   # a hit is an exchange
    assert lines[-1] == "Call multillm_context_retrieve with a page_id and its exchange to read that exchange whole."
    hits = lines[1:-1]
    assert 1 <= len(hits) <= 3 and all(HIT.match(h) for h in hits)
    page_id, exchange, role, excerpt = HIT.match(hits[0]).groups()
    exchange = int(exchange)
    # The best hit is exchange 42 of a block page, and its excerpt is verbatim from it.
    stored = rp.stored_page(edge, page_id)
    assert page_id in ids and len(exchange_starts(json.loads(stored))) > 1
    part = exchange_bytes(stored, exchange)
    texts = [m["content"] for m in json.loads(part) if isinstance(m.get("content"), str)]
    assert "0042" in excerpt and any("-0042 " in t for t in texts)
    fragment = excerpt.strip("…").strip()
    assert fragment and any(fragment in " ".join(t.split()) for t in texts)
    # The model read that exchange back: its exact bytes, never the rest of the block.
    read = [m for m in third["messages"] if m.get("role") == "tool"][-1]
    assert read["content"].encode("utf-8") == part and len(part) < len(stored)
    assert toasts(page) == []


def test_the_player_searches_the_stored_context_panel_and_opens_an_exchange(page, edge):
    panel = open_stored_context(page)
    search_for(page, "0007")
    hit = panel.locator(".multillm-search-hit").first
    hit.wait_for(timeout=30_000)
    # Exchange hits: "N of X stored exchanges in M pages" (an edge before exchanges_searched: pages).
    assert re.fullmatch(r"\d+ of (\d+ stored exchanges? in \d+ pages?|\d+ stored pages?) match\.",
                        panel.locator("#multillm_search_results > small").inner_text())
    page_id = hit.locator(".multillm-search-id").inner_text()
    where = re.fullmatch(r"exchange (\d+) of page (cp_\S+)", hit.locator(".multillm-search-where").inner_text())
    assert where and where.group(2) == page_id
    exchange = int(where.group(1))
    assert hit.locator(".multillm-search-role").inner_text() in {"user", "assistant"}
    assert "0007" in hit.locator(".multillm-search-excerpt").inner_text()
    sid = chat_session(page)
    [row] = edge.sql("SELECT session_id FROM context_pages WHERE page_id = ?1", page_id)
    assert row["session_id"] == sid
    hit.locator(".multillm-search-open").click()
    view = hit.locator(".multillm-page-view .multillm-page-message")
    view.first.wait_for()
    # Opened: that exchange, message by message, and none of the rest of its block.
    stored = rp.stored_page(edge, page_id)
    held = len(exchange_starts(json.loads(stored)))
    assert held > 1
    assert hit.locator(".multillm-page-where").inner_text() == f"Exchange {exchange} of the {held} stored in this page:"
    shown = [m for m in json.loads(exchange_bytes(stored, exchange)) if isinstance(m.get("content"), str)]
    assert view.all_inner_texts() == [f"{m['role']}: {m['content']}" for m in shown]
    assert any("u-0007" in t or "a-0007" in t for t in view.all_inner_texts())
    panel.screenshot(path=str(DOCS / "sillytavern-stored-context.png"))
    # A query nothing matches says so.
    search_for(page, "qwzxv")
    panel.locator("#multillm_search_results > small").filter(has_text="No stored exchange matches").wait_for()
    close_drawers(page)


def set_proxy(page, on: bool):
    open_drawer(page, "#extensions-settings-button .drawer-toggle", "#rm_extensions_block")
    drawer = page.locator("#multillm_paging_settings")
    if not page.locator("#multillm_paging_proxy").is_visible():
        drawer.locator(".inline-drawer-toggle").click()
    page.set_checked("#multillm_paging_proxy", on)
    assert page.evaluate("() => SillyTavern.getContext().extensionSettings.multillm_paging.viaProxy") is on
    close_drawers(page)


DIRECT_POST = """async ([url, key]) => {
    try {
        const r = await fetch(url, { method: 'POST', headers: key ? { Authorization: 'Bearer ' + key } : {} });
        return { status: r.status, body: await r.json() };
    } catch (e) {
        return { blocked: String(e) };
    }
}"""


def test_the_extension_calls_the_edge_directly_once_the_edge_lists_sillytavern(page, edge, player, sillytavern):
    """The edge runs with CORS_ALLOWED_ORIGINS = SillyTavern's origin: with the proxy
    off, the Stored context panel's search and Open go from the page straight to the
    edge (real preflights, answered by the edge), and the edge's errors are readable."""
    key, principal = player
    edge_calls = []
    page.on("request", lambda r: edge_calls.append((r.method, r.url)) if "/v1/" in r.url else None)
    set_proxy(page, False)
    try:
        panel = open_stored_context(page)
        search_for(page, "0009")
        hit = panel.locator(".multillm-search-hit").first
        hit.wait_for(timeout=30_000)
        assert "0009" in hit.locator(".multillm-search-excerpt").inner_text()
        hit.locator(".multillm-search-open").click()
        hit.locator(".multillm-page-view .multillm-page-message").first.wait_for()
        assert any("0009" in t for t in hit.locator(".multillm-page-view").all_inner_texts())
        close_drawers(page)
        # Straight to the edge, never through /proxy/.
        direct = [(m, u) for m, u in edge_calls if u.startswith(edge.url + "/v1/context/")]
        assert ("POST", edge.url + "/v1/context/search") in direct
        assert any(m == "GET" and u.startswith(edge.url + "/v1/context/pages/cp_") for m, u in direct)
        assert not [u for _, u in edge_calls if "/proxy/" in u]
        # Each was preflighted (authorization, content-type, x-roleplay-session-id are not
        # simple headers) and the edge answered the preflight itself.
        logs = edge.logs()
        preflights = [r for r in logs if r.get("method") == "OPTIONS"]
        assert preflights and all(r["route"] == "preflight" and r["status"] == 204 for r in preflights)
        assert not [r for r in logs if r.get("method") == "OPTIONS" and r.get("route") == "forward"]
        # The page reads the edge's answers, errors included.
        made = page.evaluate(DIRECT_POST, [edge.url + "/v1/roleplay/sessions", key])
        assert made["status"] == 201 and made["body"]["session_id"].startswith("rps_")
        refused = page.evaluate(DIRECT_POST, [edge.url + "/v1/roleplay/sessions", ""])
        assert refused["status"] == 401 and refused["body"]["error"]["code"] == "invalid_api_key"
        edge.client.delete(f"/v1/roleplay/sessions/{made['body']['session_id']}",
                           headers={"Authorization": f"Bearer {key}"})
    finally:
        set_proxy(page, True)


def test_an_origin_the_edge_does_not_list_is_blocked_by_the_browser(page, edge, player, other_site):
    """A page of another origin (not listed) calling the edge: its preflight is forwarded
    as before (to no origin here: a 503), which grants nothing, so the browser never
    sends the call."""
    key, principal = player
    other = page.context.new_page()
    try:
        other.goto(other_site.url + "/")
        before = edge.sql("SELECT COUNT(*) AS n FROM roleplay_sessions WHERE principal = ?1", principal)
        logged = len(edge.logs())
        got = other.evaluate(DIRECT_POST, [edge.url + "/v1/roleplay/sessions", key])
        assert "blocked" in got and "Failed to fetch" in got["blocked"]
        assert edge.sql("SELECT COUNT(*) AS n FROM roleplay_sessions WHERE principal = ?1", principal) == before
        seen = [(r.get("method"), r.get("route")) for r in edge.logs()[logged:]]
        assert [x for x in seen if x[0] == "OPTIONS" or x[1] == "create_session"] == [("OPTIONS", "forward")]
    finally:
        other.close()


def set_checkbox(page, box: str, setting: str, on: bool):
    """Tick or untick the extension's `#multillm_paging_<box>` and check the setting it stores."""
    open_drawer(page, "#extensions-settings-button .drawer-toggle", "#rm_extensions_block")
    if not page.locator(f"#multillm_paging_{box}").is_visible():
        page.locator("#multillm_paging_settings .inline-drawer-toggle").click()
    page.set_checked(f"#multillm_paging_{box}", on)
    assert page.evaluate(f"() => SillyTavern.getContext().extensionSettings.multillm_paging.{setting}") is on
    close_drawers(page)


def set_prompt_cache(page, on: bool):
    set_checkbox(page, "prompt_cache", "promptCache", on)


def set_window(page, on=None, percent=None):
    open_drawer(page, "#extensions-settings-button .drawer-toggle", "#rm_extensions_block")
    if on is not None:
        page.set_checked("#multillm_paging_window", on)
    if percent is not None:
        page.fill("#multillm_paging_window_percent", str(percent))
        page.locator("#multillm_paging_window_percent").dispatch_event("change")
    close_drawers(page)


def test_a_session_at_its_allowance_is_replaced_once_and_the_window_applied(page, edge, provider, player):
    """Streaming (ST relays the edge's 413 body): the session's stored pages are at the
    allowance, so the edge refuses with context_session_limit_exceeded; the extension
    starts a new session once and sends the request again with the oldest exchanges left
    out, and says so. The figures the chat's last paged answer reported may have started
    the window already (its stored pages past 5 %): then both sends are windowed alike and
    the count is that first pass's."""
    key, principal = player
    assert page.evaluate("() => SillyTavern.getContext().extensionSettings.multillm_paging.windowPercent") == 75
    assert page.locator("#multillm_paging_window").is_checked()
    old = chat_session(page)
    # A row counting 1 MiB toward this session's active bytes (managed authority: never a
    # roleplay page, never listed or searched).
    edge.sql("INSERT INTO context_pages (page_id, authority, principal, session_id, policy_revision, sha256, "
             "byte_length, r2_key, created_at, expires_at, signature) VALUES "
             "('cp_filler', 'managed', ?1, ?2, 1, ?3, 1048576, 'filler', 0, ?4, 'x')",
             principal, old, "0" * 64, int(time.time()) + 86400)
    answer = "A fresh page, the same road."
    provider.clear()
    provider.model.script = lambda body: ("text", answer)
    bodies = generate_bodies(page)
    set_streaming(page, True)
    set_window(page, percent=5)      # the chat's ~100 KB of history > 5 % of 1 MiB
    reported = page.evaluate("() => SillyTavern.getContext().chatMetadata.multillm_paging.figures")
    windowed_before = reported is not None and reported["active_bytes"] > 0.05 * reported["limit_bytes"]
    try:
        clear_toasts(page)
        send(page, "Shall we take the high road?")
        page.locator("#chat .mes_text").filter(has_text=answer).wait_for(timeout=90_000)
        wait_idle(page)
        new = chat_session(page)
        assert new != old
        open_sessions = edge.sql("SELECT session_id FROM roleplay_sessions WHERE principal = ?1 "
                                 "AND ended_at IS NULL AND session_id IN (?2, ?3)", principal, old, new)
        assert {s["session_id"] for s in open_sessions} >= {new}
        # Sent twice: refused before any model call, then windowed in the new session and
        # answered (an edge reporting figures may have windowed the first already).
        assert len(bodies) == 2 and len(chat_requests(provider)) == 1
        windowed = bodies[1]["messages"]
        left_out = page.evaluate("() => SillyTavern.getContext().chatMetadata.multillm_paging.left_out")
        history = [m for m in windowed if m["role"] != "system"]
        assert left_out > 0 and sum(js_bytes(m) for m in history) <= 0.05 * 1048576
        assert any(m["role"] == "system" and m["content"] == "Aurore is a ranger of the night forest."
                   for m in windowed)
        assert windowed[-1]["content"] == "Shall we take the high road?" and history[0]["role"] == "user"
        # The chat's oldest messages are not sent (a tool result may quote them: a page).
        assert not any(m["role"] != "tool" and "greet-0000" in str(m.get("content")) for m in windowed)
        assert bodies[1]["custom_include_headers"] != bodies[0]["custom_include_headers"]   # the new session
        if windowed_before:
            assert bodies[0]["messages"] == windowed
        else:
            assert any("greet-0000" in str(m.get("content")) for m in bodies[0]["messages"])
        [notice] = page.locator("#toast-container .toast-info").filter(has_text="oldest messages").all_inner_texts()
        assert NOTICE.match(notice.split("\n")[-1]).group(1) == str(left_out)
        note = page.locator("#multillm_paging_indicator .multillm-window-note")
        assert NOTICE.match(note.inner_text()).group(1) == str(left_out)
        assert toasts(page) == []
        # The new session stored what it paged: no filler there.
        rows = edge.sql("SELECT page_id FROM context_pages WHERE session_id = ?1", new)
        assert rows and "cp_filler" not in {r["page_id"] for r in rows}
    finally:
        set_streaming(page, False)
        set_window(page, percent=75)


def stable_prefix(sent: bytes) -> bytes:
    """The upstream bytes up to the window's end, as the provider recorded them: the body
    up to its messages, then every message before recall's and the latest turn, compact
    JSON as the edge sends it (docs/design.md §5.7, prompt cache)."""
    items = json.loads(sent)["messages"]
    lead = sent[:sent.index(b'"messages":[') + len(b'"messages":[')]
    return lead + b",".join(json.dumps(m, ensure_ascii=False, separators=(",", ":")).encode()
                            for m in items[:window_end(items)])


def window_end(items: list) -> int:
    """Where the window's stable part ends: before recall's message and the latest turn."""
    end = len(items) - 1
    return end - 1 if end and is_recall(items[end - 1]) else end


def long_text(head: str) -> str:
    """A roleplay turn about as long as each of the seeded chat's messages."""
    return head + " " + ("The road bends along the river under the lanterns. " * 6)[:300]


def test_the_window_starts_from_the_reported_figures_and_st_keeps_answering(page, edge, provider):
    """A second long chat: its first paged answer reports the session's figures
    (context_session); once its stored pages pass the share, the next request leaves the
    oldest exchanges out, the notice shows, and the chat goes on turn after turn. With
    *Keep the provider's prompt cache warm* (the default) the window's cut and the edge's
    paged boundary move in steps: between them each request the provider receives starts
    with the previous one's bytes up to its window's end. Unticked, the capability is not
    declared and the cut moves as the chat grows, one exchange a turn."""
    switch_chat(page, WINDOW_CHAT)
    set_window(page, percent=5)
    bodies = generate_bodies(page)
    try:
        provider.clear()
        provider.model.script = lambda body: ("text", "Turn one on the long road.")
        send(page, "Where does this road lead?")
        page.locator("#chat .mes_text").filter(has_text="Turn one on the long road.").wait_for(timeout=90_000)
        wait_idle(page)
        sid = chat_session(page)
        meta = page.evaluate("() => SillyTavern.getContext().chatMetadata.multillm_paging")
        [active] = edge.sql("SELECT COUNT(*) AS n, SUM(byte_length) AS b FROM context_pages "
                            "WHERE session_id = ?1 AND expires_at > ?2", sid, int(time.time()))
        assert meta["figures"] == {"active_bytes": active["b"], "limit_bytes": 1048576, "active_pages": active["n"]}
        assert active["b"] > 0.05 * 1048576
        indicator = page.locator("#multillm_paging_indicator")
        assert f"· {round(active['b'] / 1024)} of 1024 KiB" in indicator.inner_text()
        assert indicator.locator(".multillm-window-note").count() == 0 and len(bodies) == 1
        for n in range(2, 5):
            clear_toasts(page)
            text = long_text(f"Turn {n} on the long road.")
            provider.model.script = lambda body, text=text: ("text", text)
            send(page, long_text(f"And then, step {n}?"))
            page.locator("#chat .mes_text").filter(has_text=text).wait_for(timeout=90_000)
            wait_idle(page)
            sent = [m for m in bodies[-1]["messages"] if m["role"] != "system"]
            assert sum(js_bytes(m) for m in sent) <= 0.05 * 1048576
            note = page.locator("#multillm_paging_indicator .multillm-window-note")
            assert NOTICE.match(note.inner_text())
            notices = page.locator("#toast-container .toast-info").filter(has_text="oldest messages")
            assert notices.count() == (1 if n == 2 else 0)     # a toast when the window starts
            assert chat_session(page) == sid and toasts(page) == []
        # The cut stayed where the window started: each request sent the last one's
        # messages and the exchange added since (never a message less at the start) ...
        assert all(PROMPT_CACHE in json.loads(b["custom_include_body"])["capabilities"] for b in bodies)
        windowed = [b["messages"] for b in bodies[1:]]
        assert all(b == c[:len(b)] and len(c) == len(b) + 2 for b, c in zip(windowed, windowed[1:]))
        # ... and so did what the provider received, up to the window's end: the marker
        # (the same pages) and the window after it, appended to.
        upstream = chat_requests(provider)[1:]
        assert len(upstream) == 3 and marker_page_ids(upstream[0].json())
        for before, after in zip(upstream, upstream[1:]):
            prefix = stable_prefix(before.body)
            assert after.body.startswith(prefix), (len(prefix), len(after.body))
            assert marker_page_ids(after.json()) == marker_page_ids(before.json())
            # Append-only: right after the prefix comes the turn the last request ended with.
            items = before.json()["messages"]
            assert after.json()["messages"][window_end(items)] == items[-1]
        shared = [f"{len(stable_prefix(b.body))} of {len(a.body)} B" for b, a in zip(upstream, upstream[1:])]
        print(f"\nconsecutive upstream requests past the allowance share: {shared}")
        # Unticked: no capability, and the cut moves as the chat grows, one exchange a turn.
        set_prompt_cache(page, False)
        try:
            for n in range(5, 8):
                text = long_text(f"Turn {n} on the long road.")
                provider.model.script = lambda body, text=text: ("text", text)
                send(page, long_text(f"And then, step {n}?"))
                page.locator("#chat .mes_text").filter(has_text=text).wait_for(timeout=90_000)
                wait_idle(page)
                assert PROMPT_CACHE not in json.loads(bodies[-1]["custom_include_body"])["capabilities"]
            firsts = [next(m for m in b["messages"] if m["role"] != "system") for b in bodies[-3:]]
            assert firsts[0] != firsts[1] != firsts[2]
        finally:
            set_prompt_cache(page, True)
        # Window off: the whole history goes again, and the line leaves the indicator.
        set_window(page, on=False)
        provider.model.script = lambda body: ("text", "The whole road again.")
        send(page, "Tell me all of it.")
        page.locator("#chat .mes_text").filter(has_text="The whole road again.").wait_for(timeout=90_000)
        wait_idle(page)
        assert any("greet-0000" in json.dumps(m, ensure_ascii=False) for m in bodies[-1]["messages"])
        assert page.locator("#multillm_paging_indicator .multillm-window-note").count() == 0
    finally:
        set_window(page, on=True, percent=75)


def test_wrong_key_is_a_toast_and_nothing_is_sent(page, edge, provider, player):
    key, principal = player
    switch_chat(page, SECOND_CHAT)
    assert chat_session(page) is None
    assert page.locator("#multillm_paging_indicator").inner_text() == ""
    set_extension(page, key="rpk_not-a-key-" + "x" * 20)
    provider.clear()
    clear_toasts(page)
    try:
        sessions_before = edge.sql("SELECT COUNT(*) AS n FROM roleplay_sessions WHERE principal = ?1", principal)
        send(page, "Is anyone there?")
        toast = page.locator("#toast-container .toast-error").filter(has_text="MultiLLM: no roleplay session")
        toast.wait_for()
        assert toast.inner_text().endswith("A valid roleplay API key is required. Check the roleplay key in the MultiLLM settings.")
        wait_idle(page)
        assert chat_requests(provider) == [] and chat_session(page) is None
        assert edge.sql("SELECT COUNT(*) AS n FROM roleplay_sessions WHERE principal = ?1", principal) == sessions_before
        assert "rpk_not-a-key" not in "\n".join(page.console_lines)
    finally:
        set_extension(page, key=key)


def test_edge_down_is_a_toast_and_st_keeps_working(page, edge, provider, player):
    key, principal = player
    dead = f"http://127.0.0.1:{free_port()}"
    set_extension(page, url=dead)
    set_custom_url(page, dead + "/v1")
    provider.clear()
    clear_toasts(page)
    send(page, "Hello, forest?")
    toast = page.locator("#toast-container .toast-error").filter(has_text="MultiLLM: no roleplay session")
    toast.wait_for()
    assert f"The MultiLLM edge at {dead} cannot be reached" in toast.inner_text()
    wait_idle(page)
    assert chat_requests(provider) == []
    # The edge is back: the same chat plays on, in a session of its own.
    set_extension(page, url=edge.url)
    set_custom_url(page, edge.url + "/v1")
    answer = "The side quest begins at dawn."
    provider.model.script = lambda body: ("text", answer)
    send(page, "Hello again?")
    page.locator("#chat .mes_text").filter(has_text=answer).wait_for(timeout=90_000)
    [req] = chat_requests(provider)
    assert "Hello again?" in req.body.decode()
    second = chat_session(page)
    assert second and second not in {s["session_id"] for s in edge.sql(
        "SELECT session_id FROM context_pages WHERE principal = ?1", principal)}
    assert page.locator("#multillm_paging_indicator").inner_text() == ""   # this chat fits: no pages
    wait_idle(page)


def test_deleting_a_chat_ends_its_session(page, edge, player):
    key, principal = player
    sid = chat_session(page)
    assert page.evaluate("() => SillyTavern.getContext().getCurrentChatId()") == SECOND_CHAT
    popup = manage_chats(page)
    popup.locator(f".PastChat_cross[file_name^='{SECOND_CHAT}']").click()
    page.locator(".popup:has-text('Delete the Chat File?') .popup-button-ok").click()
    deadline = time.monotonic() + 30
    while not edge.sql("SELECT ended_at FROM roleplay_sessions WHERE session_id = ?1", sid)[0]["ended_at"]:
        assert time.monotonic() < deadline, "the session was not ended"
        time.sleep(0.2)
    r = edge.client.post("/v1/chat/completions", json={"model": MODEL, "messages": [{"role": "user", "content": "hi"}]},
                         headers={"Authorization": f"Bearer {key}", "X-Roleplay-Session-ID": sid})
    assert r.status_code == 404 and r.json()["error"]["code"] == "session_not_found"


# --- recall: relevant moments come back without a tool call (docs/design.md §6.2) ------

RECALL = "multillm_context_recall"
RECALLED = re.compile(r"(\d+) moments? recalled$")   # the line leads with an icon and a space
MOMENT_AT = re.compile(r"^exchange (\d+) of page (cp_[A-Za-z0-9_-]+)$")


def to_recall_chat(page):
    """The recall chat, from wherever the tests before left SillyTavern: no chat open, or
    the chat manager still open (deleting a chat leaves it so)."""
    block = page.locator(f".select_chat_block[file_name^='{RECALL_CHAT}']")
    if page.locator("dialog[open]").count():
        block.wait_for(state="visible")      # the manager lists the chats again after a deletion
    else:
        if not page.evaluate("() => SillyTavern.getContext().getCurrentChatId()"):
            open_chat(page, LONG_CHAT)
        manage_chats(page)
    block.click()
    page.wait_for_function(f"() => SillyTavern.getContext().getCurrentChatId() === {json.dumps(RECALL_CHAT)}")
    block.wait_for(state="hidden")


def relayed(answer) -> dict:
    """An answer's headers for a body the test rewrote: without those that describe the
    bytes as they came (SillyTavern compresses larger answers: `content-encoding: br`)."""
    return {k: v for k, v in answer.headers.items()
            if k not in ("content-encoding", "content-length", "transfer-encoding", "etag")}


def moment_location(edge, page_ids) -> tuple[str, int]:
    """(page id, exchange) of the recall chat's compass exchange among stored pages."""
    for page_id in page_ids:
        items = json.loads(rp.stored_page(edge, page_id))
        for n, start in enumerate(exchange_starts(items), 1):
            if items[start].get("content") == RECALL_MOMENT[0]:
                return page_id, n
    raise AssertionError("the compass exchange is in no stored page")


def test_recalled_moments_are_counted_and_listed_as_the_wire_contract_says(page, edge, provider):
    """The extension's side of recall alone, against the documented wire contract: the
    edge's answer, as SillyTavern relays it, is given `context_recall` (whole answers) or
    the `: multillm-context-recall` comment (streams) naming the compass exchange. The
    indicator counts the moments, the panel lists them and opens that exchange."""
    to_recall_chat(page)
    provider.clear()
    where = {}

    def turn(text):
        answer = f"Aurore nods: {text}"     # no word of the moment: never a rival to it
        provider.model.script = lambda body: ("text", answer)
        send(page, text)
        page.locator("#chat .mes_text").filter(has_text=answer).wait_for(timeout=90_000)
        wait_idle(page)

    def add_recall(route):
        answer = route.fetch()
        text = answer.text()
        if text.startswith("{"):
            doc = json.loads(text)
            where["moment"] = moment_location(edge, [p["page_id"] for p in doc["context_pages"]])
            doc["context_recall"] = [{"page_id": where["moment"][0], "exchange": where["moment"][1], "score": 3.14159}]
            route.fulfill(status=answer.status, headers=relayed(answer), body=json.dumps(doc))
            return
        head, _, rest = text.partition("\n")                  # the pages line, then the rest
        # the edge's own recall line (it recalled nothing for these words) gives way to ours
        rest = re.sub(r"(?m)^: multillm-context-recall.*\n\n?", "", rest)
        where["moment"] = moment_location(edge, head.split(" ")[-1].split(","))
        line = f": multillm-context-recall {where['moment'][0]}:{where['moment'][1]}"
        route.fulfill(status=answer.status, headers=relayed(answer), body=f"{head}\n{line}\n{rest}")

    page.route("**/api/backends/chat-completions/generate", add_recall)
    try:
        for streaming, score in ((False, "score 3.14"), (True, "recalled")):
            set_streaming(page, streaming)
            clear_toasts(page)
            turn(f"Again, tell me ({'streamed' if streaming else 'whole'})?")
            indicator = page.locator("#multillm_paging_indicator .multillm-recall-note")
            indicator.filter(has_text="1 moment recalled").wait_for(timeout=10_000)
            page_id, exchange = where["moment"]
            recalled = page.evaluate("() => SillyTavern.getContext().chatMetadata.multillm_paging.recall")
            assert [(m["page_id"], m["exchange"]) for m in recalled] == [(page_id, exchange)]
            panel = open_stored_context(page)
            [moment] = panel.locator("#multillm_recall_list .multillm-recall-moment").all()
            assert panel.locator("#multillm_recall_list > small").inner_text() == \
                "1 moment brought back for the latest message, most relevant first:"
            assert moment.locator(".multillm-search-where").inner_text() == f"exchange {exchange} of page {page_id}"
            assert moment.locator(".multillm-recall-score").inner_text() == score
            moment.locator(".multillm-search-open").click()
            view = moment.locator(".multillm-page-view .multillm-page-message")
            view.first.wait_for()
            assert view.all_inner_texts() == [f"user: {RECALL_MOMENT[0]}", f"assistant: {RECALL_MOMENT[1]}"]
            close_drawers(page)
            assert toasts(page) == []
    finally:
        page.unroute("**/api/backends/chat-completions/generate")
        set_streaming(page, False)
    # An answer that names no moment clears them: the count is the latest message's.
    turn("And then?")
    page.wait_for_function("() => SillyTavern.getContext().chatMetadata.multillm_paging.recall.length === 0")
    assert page.locator("#multillm_paging_indicator .multillm-recall-note").count() == 0
    # Turned off, the capability is not declared.
    bodies = generate_bodies(page)
    set_recall(page, False)
    try:
        turn("One more step?")
        assert RECALL not in json.loads(bodies[-1]["custom_include_body"])["capabilities"]
    finally:
        set_recall(page, True)


def set_recall(page, on: bool):
    set_checkbox(page, "recall", "recall", on)


def test_relevant_moments_come_back_without_a_tool_call(page, edge, provider):
    """A chat long enough to be paged whose latest message is about its 4th exchange: with
    *Bring back relevant moments automatically* on (the default), the request declares
    recall, the edge quotes that exchange in a message right before the latest turn (never
    in its marker, which stays as the last turn sent it) and lists it (`context_recall`);
    the indicator counts the moments and the Stored context panel lists and opens them.
    Everything before the indicator's count holds without the edge's recall; from there
    on the edge must implement it."""
    answer = "Aurore taps the compass: the needle still points home."
    to_recall_chat(page)
    open_drawer(page, "#extensions-settings-button .drawer-toggle", "#rm_extensions_block")
    if not page.locator("#multillm_paging_recall").is_visible():
        page.locator("#multillm_paging_settings .inline-drawer-toggle").click()
    assert page.locator("#multillm_paging_recall").is_checked()          # on by default
    page.set_checked("#multillm_paging_recall", True)
    close_drawers(page)
    bodies = generate_bodies(page)
    provider.clear()
    provider.model.script = lambda body: ("text", answer)
    clear_toasts(page)
    send(page, "Do you still carry the silver compass we found under the old mill?")
    page.locator("#chat .mes_text").filter(has_text=answer).wait_for(timeout=90_000)
    wait_idle(page)
    # The request declared recall next to retrieval and search; the edge paged it (the
    # early exchange is in a page) and stripped the capabilities; no tool was called.
    [sent] = bodies
    assert json.loads(sent["custom_include_body"])["capabilities"] == [
        "multillm_context_retrieve", "multillm_context_search", RECALL, PROMPT_CACHE]
    [req] = chat_requests(provider)
    upstream = req.json()
    ids = marker_page_ids(upstream)
    assert ids and "capabilities" not in upstream
    moment_pages = [i for i in ids if RECALL_MOMENT[0][:40].encode() in rp.stored_page(edge, i)]
    assert len(moment_pages) >= 1
    assert not any(RECALL_MOMENT[0][:40] in str(m.get("content")) for m in upstream["messages"]
                   if not marker_ids(m.get("content")) and not is_recall(m))    # paged, not sent as is
    assert toasts(page) == []
    # --- from here the edge's recall (§6.2) is needed ---------------------------------
    indicator = page.locator("#multillm_paging_indicator .multillm-recall-note")
    indicator.filter(has_text=RECALLED).wait_for(timeout=10_000)
    recalled = page.evaluate("() => SillyTavern.getContext().chatMetadata.multillm_paging.recall")
    count = int(RECALLED.match(indicator.inner_text().strip()).group(1))
    assert count == len(recalled) >= 1
    # The best moment is the compass exchange, quoted verbatim before the latest turn; the
    # extension keeps the moments most relevant first.
    best = max(recalled, key=lambda m: m["score"])
    assert recalled[0] == best
    part = exchange_bytes(rp.stored_page(edge, best["page_id"]), best["exchange"])
    assert [m["content"] for m in json.loads(part)] == list(RECALL_MOMENT)
    assert best["page_id"] in moment_pages and isinstance(best["score"], (int, float))
    *_, quoted, latest = upstream["messages"]
    assert latest["content"] == "Do you still carry the silver compass we found under the old mill?"
    assert is_recall(quoted) and "silver compass" in quoted["content"]
    assert not any("silver compass" in json.dumps(m, ensure_ascii=False)
                   for m in upstream["messages"] if marker_ids(m.get("content")))
    # The Stored context panel lists the moments; Open shows the compass exchange.
    panel = open_stored_context(page)
    moments = panel.locator("#multillm_recall_list .multillm-recall-moment")
    assert moments.count() == count
    assert panel.locator("#multillm_recall_list > small").inner_text().startswith(
        f"{count} moment{'s' if count > 1 else ''} brought back for the latest message")
    first = moments.first
    where = MOMENT_AT.match(first.locator(".multillm-search-where").inner_text())
    assert where and (int(where.group(1)), where.group(2)) == (best["exchange"], best["page_id"])
    assert first.locator(".multillm-recall-score").inner_text() == f"score {best['score']:.2f}"
    first.locator(".multillm-search-open").click()
    first.locator(".multillm-page-view .multillm-page-message").first.wait_for()
    assert first.locator(".multillm-page-view .multillm-page-message").all_inner_texts() == [
        f"user: {RECALL_MOMENT[0]}", f"assistant: {RECALL_MOMENT[1]}"]
    panel.screenshot(path=str(DOCS / "sillytavern-recall.png"))
    close_drawers(page)


# --- what the provider's cache served, shown to the player (README: Playing in SillyTavern)

CACHE_NOTE = "#multillm_paging_indicator .multillm-cache-note"


def test_the_player_sees_what_the_providers_cache_served(page, edge, provider):
    """The stand-in provider reports cached tokens: in OpenAI's shape on a whole answer, in
    Anthropic's (its `input_tokens` counts no cache read or write) as a stream's last event,
    which the extension asked for (`stream_options.include_usage`). The top of the chat and
    the Stored context panel show the input and the share the cache served; SillyTavern's
    answer is what the provider streamed; a provider that says nothing shows nothing."""
    to_recall_chat(page)
    bodies = generate_bodies(page)
    turns = [  # (streamed, usage the provider reports, the line the player reads)
        (False, {"prompt_tokens": 41234, "completion_tokens": 12, "total_tokens": 41246,
                 "prompt_tokens_details": {"cached_tokens": 37888}},
         "input 41k tokens, 92 % from the provider's cache"),
        (True, {"input_tokens": 1200, "cache_read_input_tokens": 36000, "cache_creation_input_tokens": 2800,
                "output_tokens": 9},
         "input 40k tokens, 90 % from the provider's cache, 2.8k written to it"),
        (True, None, None),
    ]
    try:
        for n, (streamed, usage, line) in enumerate(turns):
            answer = f"Aurore counts the coins twice ({n}), ночью."
            set_streaming(page, streamed)
            provider.clear()
            provider.model.usage = usage
            provider.model.script = lambda body: ("text", answer)
            clear_toasts(page)
            send(page, f"How much did the ferry cost ({n})?")
            page.locator("#chat .mes_text").filter(has_text=answer).wait_for(timeout=90_000)
            wait_idle(page)
            # SillyTavern got the answer as the provider sent it, whatever the extension read.
            assert page.evaluate("() => SillyTavern.getContext().chat.at(-1).mes") == answer
            [req] = chat_requests(provider)
            asked = {"stream_options": {"include_usage": True}} if streamed else {}
            assert {k: v for k, v in req.json().items() if k == "stream_options"} == asked
            assert {k: v for k, v in json.loads(bodies[-1]["custom_include_body"]).items()
                    if k == "stream_options"} == asked
            if line:
                page.locator(CACHE_NOTE).filter(has_text=line).wait_for(timeout=10_000)
                assert page.locator(CACHE_NOTE).inner_text().strip() == line
            else:
                page.wait_for_function("() => SillyTavern.getContext().chatMetadata.multillm_paging.usage === null")
                assert page.locator(CACHE_NOTE).count() == 0
            panel = open_stored_context(page)
            assert panel.locator("#multillm_cache_usage").inner_text() == (f"Latest request: {line}." if line else "")
            close_drawers(page)
            assert toasts(page) == []
    finally:
        provider.model.usage = None
        set_streaming(page, False)


SPENDING = "#multillm_stored_context #multillm_spending"


def tokens_text(n: int) -> str:
    """clients/sillytavern/usage.js `tokens`: 850, 4.1k, 41k, 1.2M."""
    if n < 1000:
        return str(round(n))
    if n < 10000:
        return f"{float(f'{n / 1000:.1f}'):g}k"
    if n < 999500:
        return f"{round(n / 1000)}k"
    return f"{float(f'{n / 1e6:.1f}'):g}M"


def test_the_panel_shows_what_the_key_has_spent_today(page, edge, provider, player):
    """After an answer the Stored context panel shows the key's usage today as the edge
    recorded it (`GET /v1/roleplay/usage`, docs/design.md §4.1) against the budget the
    operator set: "Usage today: 412k of 1M tokens, N requests; at most 10 a minute."."""
    key, principal = player
    edge.sql("INSERT OR REPLACE INTO principal_limits (principal, requests_per_minute, tokens_per_day, "
             "updated_at) VALUES (?1, 10, 1000000, 0)", principal)
    usage = lambda: edge.client.get("/v1/roleplay/usage?days=1",   # noqa: E731
                                    headers={"Authorization": f"Bearer {key}"}).json()
    before = usage()["days"][0]["requests"]
    answer = "Aurore tallies the day's coins, ночью."
    try:
        to_recall_chat(page)
        set_streaming(page, False)
        provider.clear()
        provider.model.usage = {"prompt_tokens": 400000, "completion_tokens": 12000}
        provider.model.script = lambda body: ("text", answer)
        clear_toasts(page)
        send(page, "What did we spend today?")
        page.locator("#chat .mes_text").filter(has_text=answer).wait_for(timeout=90_000)
        wait_idle(page)
        deadline = time.monotonic() + 10
        while usage()["days"][0]["requests"] == before and time.monotonic() < deadline:
            time.sleep(0.1)
        doc = usage()
        today = doc["days"][0]
        assert today["requests"] == before + 1 and doc["limits"]["tokens_per_day"] == 1000000
        used = today["input_tokens"] + today["output_tokens"]
        expected = (f"Usage today: {tokens_text(used)} of 1M tokens, {today['requests']} requests"
                    f"{', partly estimated' if today['estimated'] else ''}; at most 10 a minute.")
        panel = open_stored_context(page)
        panel.locator("#multillm_spending").filter(has_text=expected).wait_for(timeout=10_000)
        assert page.locator(SPENDING).inner_text() == expected
        assert toasts(page) == []
    finally:
        provider.model.usage = None
        edge.sql("DELETE FROM principal_limits WHERE principal = ?1", principal)
        close_drawers(page)


def test_stop_still_ends_the_request_while_the_extension_reads_the_stream(page, edge, provider):
    """The extension reads its copy of a stream to the end for the usage; the player's Stop
    still ends the request all the way to the provider (no tokens billed past it), and the
    stopped turn shows no cache use."""
    to_recall_chat(page)
    set_streaming(page, True)
    begun = "Aurore starts to tell the tale of the " + "long, long " * 400
    provider.clear()
    provider.model.script = lambda body: ("text", begun)
    provider.model.usage = {"prompt_tokens": 41234, "prompt_tokens_details": {"cached_tokens": 37888}}
    # 15 s between events. SillyTavern 1.19 shows a stream's text a pause late (its server
    # compresses the stream; the edge relays each event at once): a first event of 4 KB
    # shows after the first pause, so Stop falls in the second, while the extension is
    # still reading its copy.
    provider.model.pause = 15.0
    try:
        send(page, "Tell me the whole tale, slowly.")
        page.locator("#chat .mes_text").filter(has_text=begun.strip()).wait_for(timeout=90_000)
        page.click("#mes_stop")
        deadline = time.monotonic() + 20
        while not (provider.sent and provider.sent[-1].closed_at):
            assert time.monotonic() < deadline, "the provider's stream was not ended by Stop"
            time.sleep(0.2)
        assert not provider.sent[-1].done
        wait_idle(page)
        assert page.evaluate("() => SillyTavern.getContext().chatMetadata.multillm_paging.usage") is None
        assert page.locator(CACHE_NOTE).count() == 0
    finally:
        provider.model.pause = 0.0
        provider.model.usage = None
        set_streaming(page, False)
