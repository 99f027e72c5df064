"""Roleplay fixtures: principals, keys, sessions and models seeded in the runner's D1,
and long conversations in the three wire formats, each text unique and traceable."""

from __future__ import annotations

import hashlib
import json
import secrets
from dataclasses import dataclass

SIGNING_SECRET = "test-signing-secret-0123456789abcdef"   # 35 bytes (at least 32)
PROVIDER_KEY = "sk-provider-SECRET-4f1a"


def edge_vars(provider_url: str, origin_url: str = "", **extra) -> dict:
    providers = {"fake": {"base_url": provider_url + "/v1",
                          "formats": ["chat", "responses", "messages"],
                          "api_key_secret": "FAKE_API_KEY"},
                 "dead": {"base_url": "http://127.0.0.1:9/v1", "formats": ["chat"],
                          "api_key_secret": "FAKE_API_KEY"},
                 "bare": {"base_url": provider_url + "/v1", "formats": ["chat", "responses", "messages"],
                          "api_key_secret": "FAKE_API_KEY", "model_name": "bare"}}
    return {"CONTEXT_PAGING_ENABLED": "true", "PROVIDERS": json.dumps(providers),
            "FAKE_API_KEY": PROVIDER_KEY, "MEDIA_SIGNING_SECRET": SIGNING_SECRET,
            "FLASK_ORIGIN": origin_url, **extra}


def seed_principal(edge, principal: str | None = None, grants=("chat",), retention="standard",
                   revision: int = 1) -> tuple[str, str]:
    """A key and policy for a (new) principal → (key, principal)."""
    principal = principal or "p_" + secrets.token_hex(4)
    key = "rpk_" + secrets.token_urlsafe(32)      # the admin CLI's format (docs/design.md §2)
    edge.sql("INSERT INTO roleplay_keys (key_sha256, principal, created_at) VALUES (?1, ?2, 0)",
             hashlib.sha256(key.encode()).hexdigest(), principal)
    set_policy(edge, principal, grants, retention, revision)
    return key, principal


def set_policy(edge, principal, grants=("chat",), retention="standard", revision=1):
    edge.sql("INSERT INTO principal_policies (principal, revision, grants, retention, updated_at) "
             "VALUES (?1, ?2, ?3, ?4, 0) ON CONFLICT(principal) DO UPDATE SET "
             "revision = excluded.revision, grants = excluded.grants, retention = excluded.retention",
             principal, revision, json.dumps(list(grants)), retention)


def set_model(edge, model: str, input_tokens: int, max_output_tokens: int = 1000):
    edge.sql("INSERT OR REPLACE INTO models (model, input_tokens, max_output_tokens) VALUES (?1, ?2, ?3)",
             model, input_tokens, max_output_tokens)


def open_session(edge, key: str) -> str:
    r = edge.client.post("/v1/roleplay/sessions", headers={"Authorization": f"Bearer {key}"})
    assert r.status_code == 201, r.text
    return r.json()["session_id"]


@dataclass(frozen=True)
class Player:
    """A principal with a key and one open session."""
    key: str
    principal: str
    session: str

    def headers(self, **extra) -> dict:
        return {"Authorization": f"Bearer {self.key}", "X-Roleplay-Session-ID": self.session, **extra}


def new_player(edge, **policy) -> Player:
    key, principal = seed_principal(edge, **policy)
    return Player(key, principal, open_session(edge, key))


def page_location(edge, page_id: str) -> tuple[str, int, int]:
    """(object key, offset, length) of a stored page, from its row."""
    [row] = edge.sql("SELECT r2_key, r2_offset, byte_length FROM context_pages WHERE page_id = ?1", page_id)
    return row["r2_key"], row["r2_offset"], row["byte_length"]


def stored_page(edge, page_id: str) -> bytes | None:
    """A page's stored bytes: its range of its request's R2 object (a legacy row's
    whole per-page object). None if the object is gone."""
    key, offset, length = page_location(edge, page_id)
    data = edge.r2_get(key)
    return None if data is None else data[offset:offset + length]


def _genuine_user(item: dict) -> bool:
    """A user turn, not a user message holding only tool results (Anthropic)."""
    c = item.get("content")
    return item.get("role") == "user" and not (
        isinstance(c, list) and c and all(isinstance(p, dict) and p.get("type") == "tool_result" for p in c))


def page_exchanges(stored: bytes) -> list[bytes]:
    """A stored page's exchanges, each as its exact bytes — what retrieval's
    ``exchange=N`` answers (docs/design.md §6): the page is its items' compact JSON, an
    exchange runs from a genuine user turn to the next. Checks they are slices of it."""
    items = json.loads(stored)
    cuts = [0] + [i for i, m in enumerate(items) if i and _genuine_user(m)] + [len(items)]
    out = [json.dumps(items[a:b], ensure_ascii=False, separators=(",", ":")).encode()
           for a, b in zip(cuts, cuts[1:])]
    assert b"[" + b",".join(e[1:-1] for e in out) + b"]" == stored
    return out


def line(tag: str, i: int, size: int) -> str:
    """A unique, traceable text of about `size` bytes with Unicode and whitespace."""
    head = f"{tag}-{i:04d} «Aurore» 夜の森へ 🌙 ma\u0301gico \u05e9\u05dc\u05d5\u05dd\t \r\n"
    return head + ("The lantern flickers. " * (size // 22 + 1))[: max(0, size - len(head))]


def chat_history(n: int, size: int = 300, tag: str = "X", tools: bool = True) -> list[dict]:
    msgs = [{"role": "system", "content": f"You are Aurore, a ranger. {tag}-system"},
            {"role": "assistant", "content": line(tag + "-greet", 0, size)}]
    for i in range(n):
        msgs.append({"role": "user", "content": line(tag + "-u", i, size)})
        if tools and i % 5 == 2:
            cid = f"call_{tag}_{i}"
            msgs.append({"role": "assistant", "content": None, "tool_calls": [
                {"id": cid, "type": "function",
                 "function": {"name": "roll_dice", "arguments": json.dumps({"sides": 20, "note": f"{tag}-{i}"})}}]})
            msgs.append({"role": "tool", "tool_call_id": cid, "content": line(tag + "-t", i, 60)})
        msgs.append({"role": "assistant", "content": line(tag + "-a", i, size)})
    return msgs


def chat_body(n: int, model="fake:rp-small", size=300, tag="X", new_turn: str | None = None, **extra) -> dict:
    msgs = chat_history(n, size, tag)
    msgs.append({"role": "user", "content": new_turn or f"{tag}-latest What do we do now?"})
    return {"model": model, "messages": msgs, "max_tokens": 200,
            "capabilities": ["multillm_context_retrieve"], **extra}


def responses_body(n: int, model="fake:rp-small", size=300, tag="R", **extra) -> dict:
    items = []
    for i in range(n):
        items.append({"role": "user", "content": line(tag + "-u", i, size)})
        if i % 4 == 1:
            cid = f"fc_{tag}_{i}"
            items.append({"type": "function_call", "call_id": cid, "name": "roll_dice",
                          "arguments": json.dumps({"sides": 6})})
            items.append({"type": "function_call_output", "call_id": cid, "output": line(tag + "-o", i, 40)})
        items.append({"type": "message", "role": "assistant",
                      "content": [{"type": "output_text", "text": line(tag + "-a", i, size)}]})
    items.append({"role": "user", "content": f"{tag}-latest And then?"})
    return {"model": model, "input": items, "instructions": f"Stay in character. {tag}-instr",
            "max_output_tokens": 200, "capabilities": ["multillm_context_retrieve"], **extra}


def messages_body(n: int, model="fake:rp-small", size=300, tag="M", **extra) -> dict:
    msgs = []
    for i in range(n):
        msgs.append({"role": "user", "content": line(tag + "-u", i, size)})
        if i % 4 == 1:
            tid = f"toolu_{tag}_{i}"
            msgs.append({"role": "assistant", "content": [
                {"type": "text", "text": line(tag + "-pre", i, 40)},
                {"type": "tool_use", "id": tid, "name": "roll_dice", "input": {"sides": 6}}]})
            msgs.append({"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": tid, "content": line(tag + "-res", i, 40)}]})
        msgs.append({"role": "assistant", "content": line(tag + "-a", i, size)})
    msgs.append({"role": "user", "content": f"{tag}-latest Onward?"})
    return {"model": model, "system": f"You are Aurore. {tag}-system", "messages": msgs,
            "max_tokens": 200, "capabilities": ["multillm_context_retrieve"], **extra}


# A long roleplay as the window figures are measured (issue 19): a ~2 KB character card
# and exchanges of ~1.9 KB (a ~0.5 KB player turn, a ~1.4 KB narrated answer).
CARD = ("You are Captain Mira of the skyship Aurora: bold, warm, a little reckless. "
        "Narrate in vivid second person, never speak for the player, keep the crew alive. " * 13)[:2000]


def long_turn(i: int, tag: str = "L") -> dict:
    """The player's message of exchange `i`: unique, Unicode, ~0.5 KB."""
    return {"role": "user", "content": f"{tag}-{i:05d} *leans on the rail* Tell me about port {i}, "
            "captain. What do the sky-whales sing there? 港口の歌 🌬️\n" * 5}


def long_answer(i: int, tag: str = "L") -> str:
    """The narrated answer of exchange `i`: unique, Unicode, ~1.4 KB."""
    return (f"{tag}-{i:05d} *Mira smiles and points toward the horizon.* Port {i}, the singing "
            "harbour. The whales rise at dusk, their songs rolling through the cloud-sea like "
            "thunder wrapped in velvet. ¡Qué maravilla! Les marins y dansent jusqu'à l'aube.\r\n") * 5 \
        + "*The deck sways beneath your feet; the lanterns swing.*"


def long_exchange(i: int, tag: str = "L") -> list[dict]:
    return [long_turn(i, tag), {"role": "assistant", "content": long_answer(i, tag)}]


# A history whose every exchange is its own page. Blocks (docs/design.md §5.7) close
# after an exchange whose bytes' CRC-32 is a multiple of BLOCK_SPAN, so a history where
# every exchange's does pages one exchange per handle, as many pages as exchanges paged:
# what a test of long page lists (over the 4 KiB header, 200+ handles) needs.

def _retext(item: dict, suffix: str) -> dict:
    """``item`` with ``suffix`` after its text (a string content, or a list content's
    last text part)."""
    content = item.get("content")
    if isinstance(content, str):
        return {**item, "content": content + suffix}
    part = content[-1]
    return {**item, "content": content[:-1] + [{**part, "text": part["text"] + suffix}]}


def _has_text(item) -> bool:
    c = item.get("content") if isinstance(item, dict) else None
    return isinstance(c, str) or (isinstance(c, list) and bool(c) and isinstance(c[-1], dict)
                                  and isinstance(c[-1].get("text"), str))


def one_page_each(fmt: str, body: dict) -> dict:
    """``body`` with a short nonce after the last text of each exchange but the newest,
    chosen so the exchange's bytes' CRC-32 is a multiple of the block span: every block
    closes after one exchange. Exchanges already aligned are left as they are, so a
    history grown and aligned again keeps its earlier pages."""
    from zlib import crc32
    from multillm_edge import formats
    from multillm_edge.core.paging import BLOCK_SPAN
    mod = formats.get(fmt)
    items = list(body[mod.ITEMS_KEY])
    groups = formats.group_items(items, mod.classify)
    for g in groups[:-1]:
        if g.kind != formats.EXCHANGE:
            continue
        last = max(i for i in range(g.start, g.end) if _has_text(items[i]))
        original, n = items[last], 0
        while crc32(json.dumps(items[g.start:g.end], ensure_ascii=False,
                               separators=(",", ":")).encode()) % BLOCK_SPAN:
            n += 1
            items[last] = _retext(original, f" ~{n}")
    return {**body, mod.ITEMS_KEY: items}
