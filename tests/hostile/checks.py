"""What every hostile case must show, in-process or through the runner."""

from __future__ import annotations

import json
from dataclasses import dataclass

from tests.hostile.generator import (KEY, LIMIT_CODES, LIMITED_KEY, MODELS_LISTED, OTHER_KEY,
                                     RESERVED_TOKEN, SPENT_KEY, Case)


@dataclass
class Observed:
    status: int
    body: bytes
    provider_requests: list      # (headers as text, body bytes) reaching the provider
    origin_requests: int         # requests reaching the Flask origin
    stored_before: tuple         # (rows, objects) before the case
    stored_after: tuple
    origin_seen: list = None     # (headers as text, body bytes) reaching the origin
    headers: list = None         # the answer's (name, value) pairs, names lower-case
    usage_delta: tuple = None    # principal_usage's (requests, input, output, estimated) added


def check_batch(case: Case, seen: Observed) -> None:
    """A batch case is refused exactly when an item really declares the capability
    (docs/design.md §7.1); else it reaches the origin byte for byte, with no roleplay key."""
    where = case.describe()
    declares = case.notes["declares"]
    if declares is not None:
        assert seen.status == 400 and seen.origin_requests == 0, f"{seen.status} {seen.body[:300]!r}\n{where}"
        err = json.loads(seen.body)["error"]
        assert err["code"] == "context_paging_unsupported", where
        assert err.get("line", err.get("param")) in (declares, f"requests[{declares}].params.capabilities"), where
        return
    if "reserved" in case.notes:
        return                                          # check_reserved
    assert seen.status == 200 and seen.origin_requests == 1, f"{seen.status} {seen.body[:300]!r}\n{where}"
    if seen.origin_seen is not None:
        [(headers, body)] = seen.origin_seen
        assert body == case.body, f"origin got other bytes\n{where}"
        if "X-Roleplay-Session-ID" in case.headers:
            assert KEY not in headers, f"roleplay key reached the origin\n{where}"


def check_search(case: Case, seen: Observed) -> None:
    """A search never stores, dispatches or forwards; a 200 is the list shape with
    verbatim-sized excerpts (docs/design.md §6.1)."""
    where = case.describe()
    assert seen.status in (200, 400, 401, 403, 404, 413), f"{seen.status} {seen.body[:300]!r}\n{where}"
    assert not seen.provider_requests and seen.stored_after == seen.stored_before, f"search stored or dispatched\n{where}"
    if seen.status == 200:
        doc = json.loads(seen.body)
        assert doc["object"] == "list" and isinstance(doc["pages_searched"], int), where
        assert isinstance(doc["exchanges_searched"], int), where
        assert len(doc["data"]) <= min(10, doc["exchanges_searched"]), where
        for hit in doc["data"]:
            assert set(hit) == {"page_id", "sha256", "expires_at", "score", "exchange", "excerpt"}, where   # §6.1
            assert len(hit["excerpt"]["text"]) <= 400, where
            assert type(hit["exchange"]) is int and hit["exchange"] >= 1, where
        hits = [(h["page_id"], h["exchange"]) for h in doc["data"]]
        assert len(set(hits)) == len(hits), f"an exchange answered twice\n{where}"   # §6.1


def check_recall(case: Case, seen: Observed) -> None:
    """A paged JSON answer that names recalled moments (docs/design.md §6.2): at most 3,
    each an exchange of a page the answer lists, their count in the header."""
    where = case.describe()
    try:
        doc = json.loads(seen.body)
    except ValueError:
        return
    if not isinstance(doc, dict) or "context_recall" not in doc:
        return
    recalled = doc["context_recall"]
    pages = {p["page_id"] for p in doc["context_pages"]}
    assert isinstance(recalled, list) and len(recalled) <= 3, where
    for m in recalled:
        assert set(m) == {"page_id", "exchange", "score"} and m["page_id"] in pages, where
        assert type(m["exchange"]) is int and m["exchange"] >= 1, where
    if seen.headers is not None:
        assert dict(seen.headers).get("x-multillm-context-recall-count") == str(len(recalled)), where
    quoted = b"Earlier moments that may be relevant" in seen.provider_requests[-1][1]
    assert quoted == bool(recalled), f"recalled moments and the marker disagree\n{where}"


def check_cors(case: Case, seen: Observed) -> None:
    """A listed origin on a CORS route gets the edge's answer and its exact Origin back;
    anything else behaves as without the setting: a preflight reaches the origin, and no
    answer carries an access-control-* header. Never `*`, never credentials."""
    where = case.describe()
    expect = case.notes["cors"]
    headers = [(k.lower(), v) for k, v in seen.headers]
    allow = [v for k, v in headers if k.startswith("access-control-")]
    assert "*" not in allow and "access-control-allow-credentials" not in dict(headers), where
    if not expect["edge"]:
        assert not allow, f"CORS headers off the edge's routes or for an unlisted origin\n{where}"
        if expect["preflight"]:
            assert seen.origin_requests == 1 and seen.status == 200, f"{seen.status} {seen.body[:200]!r}\n{where}"
        return
    assert dict(headers).get("access-control-allow-origin") == expect["origin"], where
    if expect["preflight"]:
        assert seen.status == 204 and seen.origin_requests == 0 and not seen.provider_requests, where
        assert seen.stored_after == seen.stored_before, where


REFUSAL_CODES = {400: "roleplay_session_required", 401: "invalid_api_key", 403: "roleplay_key_not_accepted"}


def check_reserved(case: Case, seen: Observed) -> None:
    """A reserved-format key on a path the edge would forward: the edge answers (400
    naming the session, 401, or 403 for a live key), the origin sees nothing (§2)."""
    where = case.describe()
    assert seen.status in case.notes["reserved"] and seen.origin_requests == 0, \
        f"{seen.status} {seen.body[:300]!r}\n{where}"
    if case.method != "HEAD":
        assert json.loads(seen.body)["error"]["code"] == REFUSAL_CODES[seen.status], where


def check_models(case: Case, seen: Observed) -> None:
    """`GET /v1/models` with a live roleplay key: the edge's list, the origin untouched;
    anything else reaches the origin once, its authorization headers as sent, and the
    origin's answer comes back (docs/design.md §2)."""
    where = case.describe()
    if case.notes["models"] == "edge":
        assert seen.status == 200 and seen.origin_requests == 0, f"{seen.status} {seen.body[:300]!r}\n{where}"
        doc = json.loads(seen.body)
        assert set(doc) == {"object", "data"} and doc["object"] == "list", where
        assert [m["id"] for m in doc["data"]] == MODELS_LISTED, where
        assert all(m == {"id": m["id"], "object": "model", "created": 0, "owned_by": "fake"}
                   for m in doc["data"]), where
        if seen.headers is not None:
            assert dict(seen.headers).get("cache-control") == "private, no-store", where
        return
    if case.notes["models"] == "refused":
        return                                          # check_reserved
    assert seen.origin_requests == 1 and seen.status == 200, f"{seen.status} {seen.body[:300]!r}\n{where}"
    assert not seen.provider_requests and seen.stored_after == seen.stored_before, where
    if seen.origin_seen is not None:
        [(headers, _)] = seen.origin_seen
        for name in ("Authorization", "x-api-key"):
            if case.headers.get(name, "").strip():
                assert case.headers[name].strip() in headers, f"{name} not forwarded as sent\n{where}"


def check_anchors(case: Case, seen: Observed) -> None:
    """The prompt cache's anchors (docs/design.md §5.7): what reaches the provider holds no
    more breakpoints than Anthropic's 4, or the client's own count when it sent more."""
    from multillm_edge.base.jsonbytes import compact
    from multillm_edge.formats import breakpoints as bp
    try:
        theirs = bp.count(compact(json.loads(case.body)))
        sent = bp.count(compact(json.loads(seen.provider_requests[-1][1])))
    except ValueError:
        return
    assert sent <= max(bp.MAX_BREAKPOINTS, theirs), f"{sent} breakpoints upstream\n{case.describe()}"


def check_limits(case: Case, seen: Observed, err: dict | None) -> None:
    """A principal's limits (design §4.1): only a key with limits meets them; a 429 names
    its limit and carries a whole-seconds `Retry-After`; SPENT's generations never pass."""
    where = case.describe()
    auth = case.headers.get("Authorization", "") + case.headers.get("x-api-key", "")
    limited = LIMITED_KEY in auth or SPENT_KEY in auth
    code = (err or {}).get("code")
    if seen.status == 429 or code in LIMIT_CODES[413]:
        assert limited and code in LIMIT_CODES[seen.status], f"{seen.status} {code}\n{where}"
    if seen.status == 429:
        if seen.headers is not None:
            retry = dict(seen.headers).get("retry-after", "")
            assert retry.isdigit() and 1 <= int(retry) <= 86400, where
            assert int(retry) == err["retry_after_seconds"], where
        assert err["limit"] in ("requests_per_minute", "tokens_per_day", "sessions_per_day"), where
    if SPENT_KEY in auth and case.path.split("?")[0] in ("/v1/chat/completions", "/v1/responses", "/v1/messages"):
        assert seen.status != 200 and not seen.provider_requests, f"a spent key was served\n{where}"


def check_usage_route(case: Case, seen: Observed) -> None:
    """`GET /v1/roleplay/usage` (docs/design.md §2, §4.1): the key first (401), then `?days=`
    (400), the list of N days today first, limits and what is left; nothing stored,
    dispatched or forwarded."""
    where = case.describe()
    expect = case.notes["usage"]
    assert not seen.provider_requests and seen.origin_requests == 0, where
    assert seen.stored_after == seen.stored_before, where
    # no key: 401 first; a key and a bad `days`: 400 before the read; else 401 unless live
    if not case.headers or (not expect["live"] and expect["days"] is not None):
        assert seen.status == 401, f"{seen.status} {seen.body[:300]!r}\n{where}"
        return
    if expect["days"] is None:
        assert seen.status == 400 and json.loads(seen.body)["error"].get("param") == "days", where
        return
    assert seen.status == 200, f"{seen.status} {seen.body[:300]!r}\n{where}"
    doc = json.loads(seen.body)
    assert set(doc) == {"days", "limits", "remaining"} and len(doc["days"]) == expect["days"], where
    dates = [d["date"] for d in doc["days"]]
    assert dates == sorted(dates, reverse=True) and len(set(dates)) == len(dates), where
    for d in doc["days"]:
        assert set(d) == {"date", "input_tokens", "cached_input_tokens", "cache_write_tokens",
                          "output_tokens", "requests", "estimated"}, where
        assert all(type(d[k]) is int and d[k] >= 0 for k in d if k not in ("date", "estimated")), where
    names = {"requests_per_minute", "tokens_per_day", "sessions_per_day", "active_bytes"}
    assert set(doc["limits"]) == set(doc["remaining"]) == names, where
    if seen.headers is not None:
        assert dict(seen.headers).get("cache-control") == "private, no-store", where


def check_usage_row(case: Case, seen: Observed) -> None:
    """One answered turn adds exactly its figures to principal_usage: each one the
    provider reported as a whole number 0..1e8, else the bytes (sent body for input,
    the provider's answer for output) and one estimated turn; any other outcome adds
    nothing (docs/design.md §4.1)."""
    where = case.describe()
    _, body, _, (i, o) = case.provider_answer
    answered = seen.provider_requests and 200 <= case.provider_status < 300 and seen.status == 200
    if not answered:
        assert seen.usage_delta == (0, 0, 0, 0), f"usage recorded for no answer {seen.usage_delta}\n{where}"
        return
    sent = len(seen.provider_requests[-1][1])
    expected = (1, sent if i is None else i, len(body) if o is None else o,
                int(i is None or o is None))
    assert seen.usage_delta == expected, f"usage {seen.usage_delta} != {expected}\n{where}"


def check(case: Case, seen: Observed) -> None:
    """Raise AssertionError (with the case) if any invariant is broken."""
    if "declares" in case.notes:
        check_batch(case, seen)
    relayed = bool(seen.provider_requests) and seen.status == case.provider_status >= 500
    where = case.describe()
    assert seen.status < 500 or relayed, f"{seen.status} {seen.body[:300]!r}\n{where}"
    for headers, body in seen.provider_requests:
        for key in (KEY, OTHER_KEY, LIMITED_KEY, SPENT_KEY):
            assert key not in headers and key.encode() not in body, f"roleplay key reached a provider\n{where}"
    if case.roleplay:
        assert seen.origin_requests == 0, f"roleplay traffic reached the origin\n{where}"
    for headers, _ in seen.origin_seen or ():
        assert not RESERVED_TOKEN.search(headers), f"a roleplay-format key reached the origin\n{where}"
    if "reserved" in case.notes and case.notes.get("declares") is None:   # a declaring batch: 400 first
        check_reserved(case, seen)
    err = None
    if case.method != "HEAD" and (seen.status >= 400 and not relayed):
        doc = json.loads(seen.body)
        err = doc["error"]
        assert isinstance(err["code"], str) and isinstance(err["message"], str), where
        assert (doc.get("type") == "error") == case.anthropic, f"wrong envelope\n{where}"
    check_limits(case, seen, err)
    if case.notes.get("search"):
        check_search(case, seen)
    if seen.status == 200 and seen.provider_requests:
        check_recall(case, seen)
        check_anchors(case, seen)
    if "models" in case.notes:
        check_models(case, seen)
    if "usage" in case.notes and case.method == "GET":
        check_usage_route(case, seen)
    if case.provider_answer is not None and seen.usage_delta is not None:
        check_usage_row(case, seen)
    if "cors" in case.notes and seen.headers is not None:
        check_cors(case, seen)
    if seen.status >= 400 and not relayed:
        assert not seen.provider_requests, f"rejected but dispatched\n{where}"
        assert seen.stored_after == seen.stored_before, f"rejected but stored\n{where}"
