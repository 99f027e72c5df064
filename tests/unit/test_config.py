import json

import pytest

from multillm_edge.core import config
from multillm_edge.core.config import (parse_flag, flag_state, safety_tokens, parse_providers,
                                  split_model, provider_auth_headers, MAX_MODEL_NAME, signing_secrets)
from multillm_edge.base.errors import EdgeError


@pytest.mark.parametrize("value,expected", [
    (None, (False, False)), ("", (False, False)), ("false", (False, False)),
    ("  FALSE ", (False, False)), ("true", (True, False)), (" True\n", (True, False)),
    ("TRUE", (True, False)), ("1", (False, True)), ("yes", (False, True)), ("on", (False, True)),
    ("truee", (False, True)), ("t rue", (False, True)), ("   ", (False, False)),
])
def test_parse_flag(value, expected):
    assert parse_flag(value) == expected


def test_flag_state_warns_once_without_value():
    config._flag_warned = False  # a new isolate
    seen = []
    assert flag_state("s3cr3t-ish-VALUE", seen.append) is False
    assert flag_state("other-bad", seen.append) is False
    assert flag_state("true", seen.append) is True
    assert flag_state(None, seen.append) is False
    assert len(seen) == 1
    assert "CONTEXT_PAGING_ENABLED" in seen[0]
    assert "s3cr3t-ish-VALUE" not in seen[0]
    config._flag_warned = False  # a new isolate


def test_flag_state_valid_never_warns():
    config._flag_warned = False  # a new isolate
    seen = []
    for v in (None, "", "false", "true", " TRUE "):
        flag_state(v, seen.append)
    assert seen == []


@pytest.mark.parametrize("value,expected", [
    (None, config.DEFAULT_SAFETY_TOKENS), ("", config.DEFAULT_SAFETY_TOKENS),
    ("512", 512), (" 0 ", 0), ("-5", config.DEFAULT_SAFETY_TOKENS),
    ("abc", config.DEFAULT_SAFETY_TOKENS), ("1.5", config.DEFAULT_SAFETY_TOKENS),
    ("１２", config.DEFAULT_SAFETY_TOKENS), ("99999999999", config.DEFAULT_SAFETY_TOKENS),
    (300, 300),
])
def test_safety_tokens(value, expected):
    assert safety_tokens(value) == expected


def test_limits():
    assert config.MAX_PAGE_BYTES == 65536
    assert config.SESSION_ALLOWANCE_BYTES == 1048576
    assert config.PAGE_TTL_SECONDS == 3600
    assert config.MAX_REQUEST_BYTES == 8 * 1024 * 1024
    assert config.DEFAULT_SAFETY_TOKENS == 256
    assert config.DEFAULT_PAGE_REWRITE_AFTER_SECONDS == 86400
    assert config.DEFAULT_EXPIRED_ROW_RETENTION_SECONDS == 7 * 86400
    assert config.DEFAULT_USAGE_RETENTION_DAYS == 90      # README, wrangler.toml
    assert config.usage_retention_days("30") == 30 and config.usage_retention_days(" 7 ") == 7
    for bad in (None, "", "0", "-1", "1.5", "3661", "ninety", "9" * 13):
        assert config.usage_retention_days(bad) == 90, bad


@pytest.mark.parametrize("value,expected", [
    (None, 86400), ("", 86400), ("  ", 86400), ("3600", 3600), (" 120 ", 120), ("0", 86400),
    ("-5", 86400), ("1e3", 86400), ("1.5", 86400), ("１２", 86400), ("99999999999", 86400),
    (str(10 * 365 * 86400), 10 * 365 * 86400), (str(10 * 365 * 86400 + 1), 86400), (7, 86400),
])
def test_duration_settings(value, expected):
    assert config.rewrite_after(value) == expected
    retention = config.expired_row_retention(value)
    assert retention == (expected if expected != 86400 else 7 * 86400)


GOOD = {"openai": {"base_url": "https://api.openai.com/v1/", "formats": ["chat", "responses"],
                   "api_key_secret": "OPENAI_API_KEY"},
        "anthropic": {"base_url": "http://127.0.0.1:9999/v1", "formats": ["messages"],
                      "api_key_secret": "ANTHROPIC_API_KEY"}}


def test_parse_providers_ok():
    p = parse_providers(json.dumps(GOOD))
    assert set(p) == {"openai", "anthropic"}
    o = p["openai"]
    assert o.base_url == "https://api.openai.com/v1"
    assert o.formats == ("chat", "responses") and o.serves("chat") and not o.serves("messages")
    assert o.api_key_secret == "OPENAI_API_KEY"
    assert o.endpoint("chat") == "https://api.openai.com/v1/chat/completions"
    assert p["anthropic"].endpoint("messages") == "http://127.0.0.1:9999/v1/messages"
    assert parse_providers(None) == {} and parse_providers("") == {} and parse_providers("{}") == {}
    assert o.model_name == "qualified" and o.upstream_model("openai:gpt-4o") == "openai:gpt-4o"
    assert o.cache_breakpoints is False                        # the default (design §5.7)


def test_a_provider_may_declare_it_takes_cache_breakpoints():
    for value in (True, False):
        spec = {**GOOD["openai"], "cache_breakpoints": value}
        assert parse_providers(json.dumps({"router": spec}))["router"].cache_breakpoints is value


def test_bare_model_names_drop_the_provider_prefix():
    spec = {**GOOD["openai"], "model_name": "bare"}
    o = parse_providers(json.dumps({"openai": spec}))["openai"]
    assert o.upstream_model("openai:gpt-4o") == "gpt-4o"
    assert o.upstream_model("openai:ft:gpt-4o:org") == "ft:gpt-4o:org"


@pytest.mark.parametrize("text", [
    "not json", "[]", '{"x": 1}',
    json.dumps({"o": {"base_url": "ftp://x", "formats": ["chat"], "api_key_secret": "K"}}),
    json.dumps({"o": {"base_url": "https://x?q=1", "formats": ["chat"], "api_key_secret": "K"}}),
    json.dumps({"o": {"base_url": "https://x", "formats": [], "api_key_secret": "K"}}),
    json.dumps({"o": {"base_url": "https://x", "formats": ["chat", "chat"], "api_key_secret": "K"}}),
    json.dumps({"o": {"base_url": "https://x", "formats": ["completions"], "api_key_secret": "K"}}),
    json.dumps({"o": {"base_url": "https://x", "formats": ["chat"]}}),
    json.dumps({"o": {"base_url": "https://x", "formats": ["chat"], "api_key_secret": "sk-live-123"}}),
    json.dumps({"o": {"base_url": "https://x", "formats": ["chat"], "api_key_secret": "K", "extra": 1}}),
    json.dumps({"o": {"base_url": "https://x", "formats": ["chat"], "api_key_secret": "K", "model_name": "x"}}),
    json.dumps({"a:b": {"base_url": "https://x", "formats": ["chat"], "api_key_secret": "K"}}),
    *(json.dumps({"o": {"base_url": "https://x", "formats": ["chat"], "api_key_secret": "K",
                        "cache_breakpoints": v}}) for v in ("true", 1, None, "sk-live-123", {})),
])
def test_parse_providers_invalid(text):
    with pytest.raises(EdgeError) as e:
        parse_providers(text)
    assert e.value.status == 503 and e.value.code == "providers_misconfigured"
    assert "sk-live-123" not in e.value.message


@pytest.mark.parametrize("value,expected", [
    ("openai:gpt-4o", ("openai", "gpt-4o")),
    ("openrouter:meta/llama:free", ("openrouter", "meta/llama:free")),
])
def test_split_model(value, expected):
    assert split_model(value) == expected


def test_split_model_length_limit():
    longest = "openrouter:" + "m" * (MAX_MODEL_NAME - len("openrouter:"))
    assert split_model(longest) == ("openrouter", longest.split(":", 1)[1])
    with pytest.raises(EdgeError) as e:
        split_model(longest + "m")
    assert (e.value.status, e.value.code) == (400, "invalid_model")
    assert str(MAX_MODEL_NAME) in e.value.message


@pytest.mark.parametrize("value", ["gpt-4o", ":gpt", "openai:", None, 3, "open ai:x", "openai: x", "o:x\n"])
def test_split_model_bad(value):
    with pytest.raises(EdgeError) as e:
        split_model(value)
    assert e.value.status == 400


def test_provider_auth_headers():
    assert provider_auth_headers("chat", "k1") == {"Authorization": "Bearer k1"}
    assert provider_auth_headers("responses", "k1") == {"Authorization": "Bearer k1"}
    assert provider_auth_headers("messages", "k2") == {"x-api-key": "k2", "anthropic-version": "2023-06-01"}
    assert provider_auth_headers("messages", "k2", "2024-01-01")["anthropic-version"] == "2024-01-01"
    with pytest.raises(EdgeError):
        provider_auth_headers("chat", "")
    with pytest.raises(EdgeError):
        provider_auth_headers("chat", "a\r\nX-Evil: 1")
    with pytest.raises(ValueError):
        provider_auth_headers("other", "k")


LONG, LONG2, FLASK = "m" * 32, "p" * 44, "f" * 32


def test_signing_secrets():
    env = {}
    assert signing_secrets(env.get) is None
    env["FLASK_SECRET_KEY"] = FLASK
    assert signing_secrets(env.get) == (FLASK.encode(), None)
    env["MEDIA_SIGNING_SECRET"] = ""
    assert signing_secrets(env.get) == (FLASK.encode(), None)
    env["MEDIA_SIGNING_SECRET"] = LONG
    env["MEDIA_SIGNING_SECRET_PREVIOUS"] = LONG2
    assert signing_secrets(env.get) == (LONG.encode(), LONG2.encode())
    env["MEDIA_SIGNING_SECRET_PREVIOUS"] = ""
    assert signing_secrets(env.get) == (LONG.encode(), None)


@pytest.mark.parametrize("env, named", [
    ({"MEDIA_SIGNING_SECRET": "x" * 31}, "MEDIA_SIGNING_SECRET"),
    ({"MEDIA_SIGNING_SECRET": "é" * 15}, "MEDIA_SIGNING_SECRET"),         # 30 bytes in UTF-8
    ({"FLASK_SECRET_KEY": "short-flask-SECRETVALUE"}, "FLASK_SECRET_KEY"),
    ({"MEDIA_SIGNING_SECRET": LONG, "MEDIA_SIGNING_SECRET_PREVIOUS": "old-SECRETVALUE"},
     "MEDIA_SIGNING_SECRET_PREVIOUS"),
])
def test_a_short_signing_secret_is_refused_naming_the_setting_once(env, named):
    config._warned.clear()   # a new isolate
    seen = []
    for _ in range(3):
        with pytest.raises(EdgeError) as e:
            signing_secrets(env.get, seen.append)
        assert (e.value.status, e.value.code) == (503, "signing_not_configured")
        assert e.value.message.startswith(f"{named} is shorter than 32 bytes")
        assert "openssl rand -base64 32" in e.value.message
    assert len(seen) == 1 and seen[0].startswith(named)
    assert "SECRETVALUE" not in seen[0] + e.value.message
    assert config.config_errors(env.get) == [named]
    config._warned.clear()


def test_a_short_flask_key_is_not_used_when_the_media_secret_is_set():
    env = {"MEDIA_SIGNING_SECRET": LONG, "FLASK_SECRET_KEY": "short"}
    assert signing_secrets(env.get) == (LONG.encode(), None)
    assert config.config_errors(env.get) == []


def test_32_bytes_is_enough():
    assert signing_secrets({"MEDIA_SIGNING_SECRET": "k" * 32}.get) == (b"k" * 32, None)


ONE = {"openai": {"base_url": "https://api.openai.com/v1", "formats": ["chat"],
                   "api_key_secret": "OPENAI_API_KEY", "model_name": "bare"}}


def test_providers_as_an_object_is_the_same_as_its_json_text():
    """A TOML table or JSON object var (handed over as a dict or as its JSON text) and the
    string form configure the same providers."""
    from_text = parse_providers(json.dumps(ONE))
    assert parse_providers(ONE) == from_text
    assert config.providers(ONE) == from_text
    assert from_text["openai"].upstream_model("openai:gpt-4o-mini") == "gpt-4o-mini"


@pytest.mark.parametrize("value", ["{not json SECRETVALUE", "[1, 2]", ["SECRETVALUE"], 7,
                                   {"openai": {"base_url": "SECRETVALUE"}}])
def test_invalid_providers_warn_once_naming_the_setting(value):
    config._warned.clear()
    config._PROVIDERS_CACHE.clear()
    seen = []
    for _ in range(3):
        with pytest.raises(EdgeError) as e:
            config.providers(value, seen.append)
        assert e.value.code == "providers_misconfigured"
    assert len(seen) == 1 and seen[0].startswith("PROVIDERS")
    assert "SECRETVALUE" not in seen[0]
    text = value if isinstance(value, str) else json.dumps(value)
    assert config.config_errors({"PROVIDERS": text}.get) == ["PROVIDERS"]
    config._warned.clear()


@pytest.mark.parametrize("value, stringified, expected", [
    (None, None, None), ("text", None, "text"), (True, None, "true"), (False, None, "false"),
    (256, None, "256"), (ONE, None, json.dumps(ONE)), (object(), "{\"js\": 1}", "{\"js\": 1}"),
])
def test_a_json_var_reaches_the_core_as_its_json_text(value, stringified, expected):
    from multillm_edge.base.platform import var_text
    assert var_text(value, lambda v: stringified) == expected


def test_config_errors_names_each_invalid_setting_and_no_value():
    env = {"CONTEXT_PAGING_ENABLED": "yes-VALUE", "CORS_ALLOWED_ORIGINS": "https://x.test/VALUE",
           "PROVIDERS": "{VALUE", "MEDIA_SIGNING_SECRET": "VALUE"}
    assert config.config_errors(env.get) == ["CONTEXT_PAGING_ENABLED", "CORS_ALLOWED_ORIGINS",
                                             "PROVIDERS", "MEDIA_SIGNING_SECRET"]
    assert config.config_errors({"CONTEXT_PAGING_ENABLED": "true", "PROVIDERS": "{}",
                                 "MEDIA_SIGNING_SECRET": LONG}.get) == []


def test_missing_providers_are_the_registered_ones_providers_lacks():
    assert config.missing_providers(["anthropic", "openai"], parse_providers(ONE)) == ["anthropic"]
    assert config.missing_providers(["openai"], parse_providers(ONE)) == []
