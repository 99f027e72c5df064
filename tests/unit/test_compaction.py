"""The existing lossy fallback: drop oldest unprotected complete exchanges, loudly."""

import json

import pytest
from hypothesis import given

from devkit.plans import body_size, marker_ids
from multillm_edge.core import compaction, paging
from multillm_edge import formats
from multillm_edge.base.errors import EdgeError
from test_paging import chat_body, messages_body, responses_body
from test_paging_properties import SETTINGS, assert_upstream_bytes, build, dumps, scenario, truth_pageable


def compact(fmt, body, budget, *, strip=()):
    """One budget's (body, dropped count); its 413 raised."""
    (out,) = compaction.compact_candidates(fmt, body, [budget], strip=strip)
    if isinstance(out, EdgeError):
        raise out
    assert out.pages == [] and out.size == body_size(out.body)
    assert_upstream_bytes(out)
    return out.body, out.dropped


def test_fits_unchanged():
    body = chat_body()
    out, n = compact("chat", body, 10**6)
    assert out is body and n == 0


@pytest.mark.parametrize("fmt,make", [("chat", chat_body), ("responses", responses_body),
                                      ("messages", messages_body)])
def test_drops_oldest_and_counts(fmt, make):
    body = make()
    full = body_size(body)
    out, n = compact(fmt, body, full - 600)
    assert n >= 1 and body_size(out) <= full - 600
    key = formats.get(fmt).ITEMS_KEY
    assert out[key][-1] == body[key][-1]
    assert "multillm_context_retrieve" not in json.dumps(out.get("tools", []))
    assert not any(marker_ids(m.get("content")) for m in out[key] if isinstance(m, dict))
    assert out["capabilities"] == body["capabilities"]  # left as received by default
    out2, _ = compact(fmt, body, full - 600, strip=paging.EDGE_FIELDS)
    assert "capabilities" not in out2


def test_cannot_fit_413():
    with pytest.raises(EdgeError) as ei:
        compact("chat", chat_body(), 200)
    e = ei.value
    assert e.status == 413 and e.code == "context_window_exceeded"
    assert "context window" in e.message and "maximum context length" in e.message
    assert e.details["budget"] == 200


@SETTINGS
@given(scenario)
def test_compaction_property(sc):
    fmt, segs, frac, protected, tools_present, *_ = sc
    body, items, truth = build(fmt, segs, protected, tools_present)
    base = paging.strip_edge_fields(body)
    full = len(dumps(base))
    budget = int(full * frac)
    mod = formats.get(fmt)
    pageable = truth_pageable(truth, protected or [])
    expected = None
    for k in range(len(pageable) + 1):
        drop = set(pageable[:k])
        ref = dict(base)
        ref[mod.ITEMS_KEY] = [x for gi, (s, e, _, _) in enumerate(truth) if gi not in drop
                              for x in items[s:e]]
        if len(dumps(ref)) <= budget:
            expected = (k, ref)
            break
    try:
        out, n = compact(fmt, body, budget, strip=paging.EDGE_FIELDS)
    except EdgeError as e:
        assert expected is None and e.code == "context_window_exceeded"
        return
    assert (n, dumps(out)) == (expected[0], dumps(expected[1]))


def test_compact_candidates_prepares_once_and_reports_each_budget():
    from multillm_edge.core.compaction import compact_candidates
    body = {"model": "p:m", "messages": [
        {"role": "user", "content": "u" * 100}, {"role": "assistant", "content": "a" * 100},
        {"role": "user", "content": "latest"}]}
    full = len(json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode())
    fits, dropped, too_small = compact_candidates("chat", body, [full, full - 10, 10])
    assert (fits.body, fits.dropped) == (body, 0) and fits.body is body and fits.as_received
    assert dropped.dropped == 1 and dropped.body["messages"] == body["messages"][2:]
    assert not dropped.as_received
    assert isinstance(too_small, EdgeError) and too_small.code == "context_window_exceeded"
