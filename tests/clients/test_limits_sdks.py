"""The `openai` and `anthropic` SDKs on the edge's 429s (design §4.1): past
`requests_per_minute` they wait the `Retry-After` and succeed once the window frees;
past a day limit (`x-should-retry: false`) they raise at once, never sleeping for hours.

The window is made to free in a few seconds: the admitted request is counted with the
runner's clock 55 s back (`/__runner/clock`), so the test stays fast."""

from __future__ import annotations

import time

import anthropic
import openai
import pytest

from tests.clients.conftest import MAX_TOKENS, MODEL, REPLY_TEXT
from devkit import roleplay as rp

pytestmark = pytest.mark.slow


def limit(edge, principal, **values):
    cols = ", ".join(values)
    edge.sql(f"INSERT INTO principal_limits (principal, {cols}, updated_at) "
             f"VALUES (?1, {', '.join(f'?{i + 2}' for i in range(len(values)))}, 0)",
             principal, *values.values())


def refusals(edge, since: int) -> list[dict]:
    return [log for log in edge.logs()[since:] if log.get("status") == 429]


def fill_window(edge, player, path, body):
    """One admitted request, counted 55 s ago: the window (1 per minute) frees in ~5 s."""
    try:
        edge.set_clock(-55)
        r = edge.client.post(path, json=body, headers=player.headers())
        assert r.status_code == 200, r.text
    finally:
        edge.set_clock(0)


def openai_client(edge, player, retries):
    return openai.OpenAI(api_key=player.key, base_url=edge.url + "/v1", max_retries=retries, timeout=60,
                         default_headers={"X-Roleplay-Session-ID": player.session})


def anthropic_client(edge, player, retries):
    return anthropic.Anthropic(api_key=player.key, base_url=edge.url, max_retries=retries, timeout=60,
                               default_headers={"X-Roleplay-Session-ID": player.session})


def test_openai_backs_off_on_rate_limit_exceeded_and_succeeds(edge, provider, roleplayer):
    limit(edge, roleplayer.principal, requests_per_minute=1)
    messages = rp.chat_body(3, tag="SDKRL")["messages"]
    fill_window(edge, roleplayer, "/v1/chat/completions", {"model": MODEL, "messages": messages})
    with openai_client(edge, roleplayer, 0) as client:         # no retries: the 429 as raised
        with pytest.raises(openai.RateLimitError) as caught:
            client.chat.completions.create(model=MODEL, messages=messages, max_tokens=MAX_TOKENS)
    err = caught.value
    assert err.status_code == 429 and err.code == "rate_limit_exceeded"
    assert 2 <= int(err.response.headers["retry-after"]) <= 5
    assert err.body["limit"] == "requests_per_minute" and err.body["limit_value"] == 1
    n, t0 = len(edge.logs()), time.monotonic()
    with openai_client(edge, roleplayer, 2) as client:
        completion = client.chat.completions.create(model=MODEL, messages=messages, max_tokens=MAX_TOKENS)
    assert completion.choices[0].message.content == REPLY_TEXT
    waited = time.monotonic() - t0
    assert 0.5 <= waited < 10 and 1 <= len(refusals(edge, n)) <= 2    # it waited, then passed
    assert len(provider.received) == 2                               # the first, and the one after


def test_anthropic_backs_off_on_rate_limit_exceeded_and_succeeds(edge, provider, roleplayer):
    limit(edge, roleplayer.principal, requests_per_minute=1)
    messages = rp.messages_body(3, tag="SDKRA")["messages"]
    fill_window(edge, roleplayer, "/v1/messages", {"model": MODEL, "max_tokens": MAX_TOKENS, "messages": messages})
    with anthropic_client(edge, roleplayer, 0) as client:
        with pytest.raises(anthropic.RateLimitError) as caught:
            client.messages.create(model=MODEL, messages=messages, max_tokens=MAX_TOKENS)
    err = caught.value
    assert err.status_code == 429 and err.body["type"] == "error"
    assert err.body["error"]["type"] == "rate_limit_error" and err.body["error"]["code"] == "rate_limit_exceeded"
    n, t0 = len(edge.logs()), time.monotonic()
    with anthropic_client(edge, roleplayer, 2) as client:
        message = client.messages.create(model=MODEL, messages=messages, max_tokens=MAX_TOKENS)
    assert message.content[0].text == REPLY_TEXT
    assert 0.5 <= time.monotonic() - t0 < 10 and 1 <= len(refusals(edge, n)) <= 2
    assert len(provider.received) == 2


@pytest.mark.parametrize("sdk", ["openai", "anthropic"])
def test_a_token_budget_429_is_raised_at_once_not_slept_on(edge, provider, roleplayer, sdk):
    limit(edge, roleplayer.principal, tokens_per_day=10)
    edge.sql("INSERT INTO principal_usage (principal, day, model, requests, input_tokens, output_tokens) "
             "VALUES (?1, ?2, ?3, 1, 10, 0)", roleplayer.principal, time.strftime("%Y-%m-%d", time.gmtime()), MODEL)
    n, t0 = len(edge.logs()), time.monotonic()
    if sdk == "openai":
        with openai_client(edge, roleplayer, 2) as client, pytest.raises(openai.RateLimitError) as caught:
            client.chat.completions.create(model=MODEL, messages=rp.chat_body(2)["messages"], max_tokens=10)
        assert caught.value.code == "token_budget_exceeded"
    else:
        with anthropic_client(edge, roleplayer, 2) as client, pytest.raises(anthropic.RateLimitError) as caught:
            client.messages.create(model=MODEL, messages=rp.messages_body(2)["messages"], max_tokens=10)
        assert caught.value.body["error"]["code"] == "token_budget_exceeded"
    assert int(caught.value.response.headers["retry-after"]) > 60
    assert time.monotonic() - t0 < 5 and len(refusals(edge, n)) == 1 and provider.received == []
