"""SillyTavern with the MultiLLM extension in a real Chromium, against the edge runner.

The tests run in order on one SillyTavern: settings are entered through the UI first,
then the long chat is played."""

from __future__ import annotations

import hashlib
import json
import time

import pytest

from devkit.plans import marker_ids
from tests.browser.conftest import CHARACTER, EXCHANGES, LONG_CHAT, MODEL, SECOND_CHAT
from devkit import roleplay as rp
from devkit.runner import ROOT
from tests.support.sillytavern import free_port

DOCS = ROOT / "docs"
FINAL = "Aurore remembers the lantern by the river, ночью."
pytestmark = pytest.mark.slow


def open_drawer(pg, button: str, content: str):
    """Open a top-bar panel of ST (idempotent)."""
    if not pg.locator(content).is_visible():
        pg.click(button)
    pg.locator(content).wait_for(state="visible")


def close_drawers(pg):
    pg.locator("#chat").click(position={"x": 5, "y": 5}, force=True)


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
    assert key not in page.locator("#rm_extensions_block").inner_html()
    DOCS.mkdir(exist_ok=True)
    drawer.screenshot(path=str(DOCS / "sillytavern-settings.png"))
    assert page.evaluate("() => SillyTavern.getContext().extensionSettings.multillm_paging.edgeUrl") == edge.url


def test_custom_source_points_at_the_edge(page, edge):
    open_drawer(page, "#sys-settings-button .drawer-toggle", "#rm_api_block")
    page.select_option("#main_api", "openai")
    page.select_option("#chat_completion_source", "custom")
    page.fill("#custom_api_url_text", edge.url + "/v1")
    page.fill("#custom_model_id", MODEL)
    page.click("#api_button_openai")
    page.locator("#rm_api_block .online_status_text:visible").filter(has_text="Valid").wait_for()
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


def test_long_chat_is_paged_and_the_model_gets_a_page_back(page, edge, provider, player, sillytavern):
    key, principal = player
    provider.clear()
    first_ids = []

    def script(body):
        if not after_tool(body):
            ids = [i for m in body["messages"] if m.get("role") == "user" for i in (marker_ids(m.get("content")) or [])]
            first_ids.extend(ids)
            return "tool", ids[0]
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
    # First upstream request: the marker naming ≥ 150 pages, the edge's tool schema once,
    # no capabilities, no roleplay key anywhere.
    assert len(first_ids) >= 150
    tools = [t["function"]["name"] for t in first.get("tools", [])]
    assert tools == ["multillm_context_retrieve"]
    assert "capabilities" not in first and "capabilities" not in second
    for rec in (raw_first, raw_second):
        assert key.encode() not in rec.body and key not in json.dumps(rec.headers)
        assert "x-roleplay-session-id" not in rec.headers
    # Second: the tool result is byte for byte the stored page.
    [row] = edge.sql("SELECT * FROM context_pages WHERE page_id = ?1", first_ids[0])
    offset = row.get("r2_offset", 0)        # a page may be a byte range of its request's object
    stored = edge.r2_get(row["r2_key"])[offset:offset + row["byte_length"]]
    assert len(stored) == row["byte_length"] and hashlib.sha256(stored).hexdigest() == row["sha256"]
    [tool_msg] = [m for m in second["messages"] if m.get("role") == "tool"]
    assert tool_msg["content"].encode("utf-8") == stored
    call = [m for m in second["messages"] if m.get("tool_calls")][0]["tool_calls"][0]
    assert call["id"] == tool_msg["tool_call_id"]
    assert json.loads(call["function"]["arguments"]) == {"page_id": first_ids[0]}
    # The first page is the oldest part of the chat as ST sent it: the greeting.
    assert json.loads(stored)[0]["content"].startswith("greet-0000 «Aurore»")
    # One session for this chat, stored in its metadata; the indicator shows the count.
    sessions = edge.sql("SELECT session_id FROM roleplay_sessions WHERE principal = ?1", principal)
    meta = page.evaluate("() => SillyTavern.getContext().chatMetadata.multillm_paging")
    assert [s["session_id"] for s in sessions] == [meta["session_id"]]
    assert row["session_id"] == meta["session_id"]
    indicator = page.locator("#multillm_paging_indicator")
    indicator.filter(has_text="pages stored").wait_for()
    n_pages = int(indicator.inner_text().split()[0])
    assert n_pages >= 150 and meta["pages"] == n_pages
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
    """A streamed turn behind a relay that hands the edge's answer on in 700-byte pieces:
    the leading `: multillm-context-pages …` line (≈ 150 ids, several KB) reaches the page
    in many reads, and the indicator counts every id, not those of the first read."""
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
        assert len(ids) >= 150 and len(",".join(ids)) > 5 * relay.piece    # the line spans reads
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
