"""Flag parsing, limits, providers and signing secrets (docs/design.md §3).

Pure functions over strings: the platform layer reads `env` and passes values in.
Nothing here logs a configured value.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Callable, Optional

from .. import formats as _formats
from ..base.cors import SETTING as CORS_SETTING, parse_origins
from ..base.errors import EdgeError
from ..formats.registry import NAMES

# ---------------------------------------------------------------------------
# Limits
# ---------------------------------------------------------------------------

#: Largest request body the edge accepts on a roleplay generation route (413 above).
#: 8 MiB covers a ~6,000-exchange roleplay history (about 6.6 MB, RUNTIME-NOTES),
#: far beyond any model window, while bounding parse + hash CPU time per request.
MAX_REQUEST_BYTES = 8 * 1024 * 1024
#: Largest single page body (canonical bytes); a plan needing more -> 413 context_page_too_large.
MAX_PAGE_BYTES = 65536
#: Active (unexpired) page bytes allowed per (principal, session).
SESSION_ALLOWANCE_BYTES = 1024 * 1024
#: Active pages per (principal, session). Not a policy: D1 caps a string value at 2 MB,
#: and a turn reads every active page's location in one value (~150 bytes a page) and
#: writes its rows in one parameter (~200 bytes a row). At the 1 MiB allowance this binds
#: only when pages average under 175 bytes; one R2 object per request makes the page
#: count free of any per-request operation limit.
MAX_SESSION_PAGES = 6000
#: The page-id list header is sent only while it stays this small (proxies cap headers).
MAX_PAGE_LIST_HEADER = 4096
#: Largest provider JSON answer the edge parses to add `context_pages`. Parsing and
#: re-encoding holds several copies of it in the isolate's 128 MB, and a client can ask
#: for a big one (OpenAI's `n` up to 128 choices); a longer answer is relayed unchanged.
MAX_ANNOTATED_BYTES = 4 * 1024 * 1024
#: Every page write sets expires_at = now + PAGE_TTL_SECONDS. A reused page's row is
#: rewritten only when less than half of it remains (lazy refresh).
PAGE_TTL_SECONDS = 3600
#: PAGE_REWRITE_AFTER_SECONDS default: a reused page whose body is older is written again
#: (the R2 lifecycle rule on context-pages/ must be older than this plus the TTL).
DEFAULT_PAGE_REWRITE_AFTER_SECONDS = 86400
#: EXPIRED_ROW_RETENTION_SECONDS default: the scheduled cleanup deletes roleplay rows
#: expired for longer than this.
DEFAULT_EXPIRED_ROW_RETENTION_SECONDS = 7 * 86400
#: The scheduled cleanup deletes at most CLEANUP_BATCH_ROWS rows per statement and runs
#: at most CLEANUP_MAX_BATCHES statements per invocation (what is left waits an hour).
CLEANUP_BATCH_ROWS = 1000
CLEANUP_MAX_BATCHES = 10
#: Default for CONTEXT_SAFETY_TOKENS when unset or invalid; matches wrangler.toml [vars].
DEFAULT_SAFETY_TOKENS = 256
#: Upper bound for CONTEXT_SAFETY_TOKENS (larger values fall back to the default).
MAX_SAFETY_TOKENS = 1_000_000

FLAG_NAME = "CONTEXT_PAGING_ENABLED"

# ---------------------------------------------------------------------------
# CONTEXT_PAGING_ENABLED
# ---------------------------------------------------------------------------


def parse_flag(value: Optional[str]) -> tuple[bool, bool]:
    """(enabled, invalid). Unset, empty or "false" -> off; "true" -> on (trimmed,
    case-insensitive); anything else -> off and invalid."""
    if value is None:
        return False, False
    if not isinstance(value, str):
        return False, True
    v = value.strip().lower()
    if v in ("", "false"):
        return False, False
    if v == "true":
        return True, False
    return False, True


_flag_warned = False


def flag_state(env_value: Optional[str], warn: Callable[[str], None]) -> bool:
    """Whether paging is enabled; calls ``warn`` at most once per process (isolate)
    for an invalid value. The warning names the setting, never its value."""
    global _flag_warned
    enabled, invalid = parse_flag(env_value)
    if invalid and not _flag_warned:
        _flag_warned = True
        warn(f"{FLAG_NAME} has an invalid value; context paging is off. "
             "Accepted values: true, false (or unset).")
    return enabled



# ---------------------------------------------------------------------------
# CONTEXT_SAFETY_TOKENS
# ---------------------------------------------------------------------------

_DIGITS = re.compile(r"[0-9]+\Z")


def _decimal(value, default: int, low: int, high: int) -> int:
    """A non-negative decimal integer setting within [low, high]; unset, empty,
    malformed or out of range -> ``default``. Never a bool."""
    if isinstance(value, int) and not isinstance(value, bool):
        n = value
    elif isinstance(value, str) and _DIGITS.match(value.strip()) and len(value.strip()) <= 12:
        n = int(value.strip())
    else:
        return default
    return n if low <= n <= high else default


def safety_tokens(value: Optional[str]) -> int:
    """CONTEXT_SAFETY_TOKENS: a non-negative decimal integer; unset, empty, negative,
    non-numeric or above MAX_SAFETY_TOKENS -> DEFAULT_SAFETY_TOKENS."""
    return _decimal(value, DEFAULT_SAFETY_TOKENS, 0, MAX_SAFETY_TOKENS)


# ---------------------------------------------------------------------------
# UPSTREAM_TIMEOUT_SECONDS, UPSTREAM_IDLE_SECONDS
# ---------------------------------------------------------------------------

#: Wait for a provider's response headers before trying the next candidate (504 if none).
DEFAULT_UPSTREAM_TIMEOUT_SECONDS = 120.0
#: Longest silence between two chunks of a provider's stream before the edge ends it.
DEFAULT_UPSTREAM_IDLE_SECONDS = 60.0
#: Upper bound for both (a Worker's request lives no longer than this is useful).
MAX_UPSTREAM_SECONDS = 3600.0

_SECONDS = re.compile(r"[0-9]{1,6}(\.[0-9]{1,3})?\Z")


def seconds(value: Optional[str], default: float) -> float:
    """A positive decimal number of seconds (e.g. "120", "2.5"); unset, empty, zero,
    malformed or above MAX_UPSTREAM_SECONDS -> `default`."""
    if not isinstance(value, str) or not _SECONDS.match(value.strip()):
        return default
    n = float(value.strip())
    return n if 0 < n <= MAX_UPSTREAM_SECONDS else default


# ---------------------------------------------------------------------------
# PAGE_REWRITE_AFTER_SECONDS, EXPIRED_ROW_RETENTION_SECONDS
# ---------------------------------------------------------------------------

_MAX_SECONDS = 10 * 365 * 86400


def _duration(value, default: int) -> int:
    """A duration var (a string of whole seconds, up to ten years)."""
    return _decimal(value if isinstance(value, str) else None, default, 1, _MAX_SECONDS)


def rewrite_after(value: Optional[str]) -> int:
    return _duration(value, DEFAULT_PAGE_REWRITE_AFTER_SECONDS)


def expired_row_retention(value: Optional[str]) -> int:
    return _duration(value, DEFAULT_EXPIRED_ROW_RETENTION_SECONDS)


#: USAGE_RETENTION_DAYS default: the cleanup keeps this many UTC days of usage rows
#: (today included), and `GET /v1/roleplay/usage?days=N` reaches at most this far.
DEFAULT_USAGE_RETENTION_DAYS = 90
MAX_USAGE_RETENTION_DAYS = 3660


def usage_retention_days(value: Optional[str]) -> int:
    """USAGE_RETENTION_DAYS: whole days, 1 to MAX_USAGE_RETENTION_DAYS; else the default."""
    return _decimal(value if isinstance(value, str) else None, DEFAULT_USAGE_RETENTION_DAYS,
                    1, MAX_USAGE_RETENTION_DAYS)


# ---------------------------------------------------------------------------
# PROVIDERS
# ---------------------------------------------------------------------------

#: Longest `provider:model` accepted. Real model ids are under 100 characters; the
#: names go into the one D1 read as a parameter (D1 refuses values over 2 MB), so an
#: absurd one is a 400 before any storage work, not a storage fault.
MAX_MODEL_NAME = 256
_PROVIDER_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}\Z")
_SECRET_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}\Z")


@dataclass(frozen=True)
class Provider:
    name: str
    base_url: str              # e.g. "https://api.openai.com/v1" (no trailing slash)
    formats: tuple[str, ...]   # subset of the registry's NAMES
    api_key_secret: str        # name of the env secret holding the API key
    # "qualified" (default): `model` goes upstream exactly as the client wrote it
    # ("provider:model", docs/design.md §5.4). "bare": the provider's own id after "provider:",
    # for providers such as api.openai.com that reject the gateway's qualified names.
    model_name: str = "qualified"
    # The provider takes Anthropic-style `cache_control` on chat content parts (routers to
    # Claude and Gemini): with the prompt cache, chat plans carry the anchors (design §5.7).
    cache_breakpoints: bool = False

    def upstream_model(self, model: str) -> str:
        return split_model(model)[1] if self.model_name == "bare" else model

    def serves(self, fmt: str) -> bool:
        return fmt in self.formats

    def endpoint(self, fmt: str) -> str:
        # base_url includes "/v1"; the format names the rest
        return self.base_url + _formats.get(fmt).UPSTREAM_PATH


def _misconfigured(message: str) -> EdgeError:
    return EdgeError(503, "providers_misconfigured", message)


_PROVIDERS_CACHE: dict = {}   # the variable's text -> its providers (read-only use)


def providers(value, warn: Optional[Callable[[str], None]] = None) -> dict[str, Provider]:
    """`parse_providers`, once per isolate for a given value: a request pays a dict
    lookup, and a changed variable (a new deployment) is parsed anew. Only successes
    are kept; a misconfiguration is raised again, freshly, on every request, and
    ``warn`` hears of it once per isolate (the message names the setting and field)."""
    key = value if value is None or isinstance(value, str) else json.dumps(value, sort_keys=True)
    got = _PROVIDERS_CACHE.get(key)
    if got is None:
        try:
            got = parse_providers(value)
        except EdgeError as e:
            if warn is not None:
                warn_once(PROVIDERS_NAME, f"{e.message} Requests needing a provider answer "
                          "503 providers_misconfigured; /healthz lists it in config_errors.", warn)
            raise
        if len(_PROVIDERS_CACHE) >= 4:      # a few texts at most in an isolate's life
            _PROVIDERS_CACHE.clear()
        _PROVIDERS_CACHE[key] = got
    return got


def parse_providers(value) -> dict[str, Provider]:
    """Parse PROVIDERS: {"name": {"base_url", "formats", "api_key_secret", "model_name"?,
    "cache_breakpoints"?}},
    as JSON text (a string var, .dev.vars) or as the object itself (a TOML table or JSON
    object var, which the platform hands over as its JSON text or a dict).

    Unset/empty -> {}. Anything malformed -> EdgeError(503, "providers_misconfigured")
    whose message names the offending provider/field, never a value."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return {}
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            raise _misconfigured("PROVIDERS is not valid JSON.") from None
    if not isinstance(value, dict):
        raise _misconfigured("PROVIDERS must be a JSON object (or a TOML table).")
    doc = value
    out: dict[str, Provider] = {}
    for name, spec in doc.items():
        if not _PROVIDER_NAME.match(name):
            raise _misconfigured("PROVIDERS has an invalid provider name.")
        where = f"PROVIDERS[{name!r}]"
        if not isinstance(spec, dict):
            raise _misconfigured(f"{where} must be an object.")
        unknown = set(spec) - {"base_url", "formats", "api_key_secret", "model_name",
                               "cache_breakpoints"}
        if unknown:
            raise _misconfigured(f"{where} has unknown fields: {', '.join(sorted(unknown))}.")
        base_url = spec.get("base_url")
        if (not isinstance(base_url, str) or not re.match(r"https?://[^\s/?#]+[^\s?#]*\Z", base_url)):
            raise _misconfigured(f"{where}.base_url must be an http(s) URL without query or fragment.")
        formats = spec.get("formats")
        if (not isinstance(formats, list) or not formats
                or any(f not in NAMES for f in formats) or len(set(formats)) != len(formats)):
            raise _misconfigured(f"{where}.formats must be a non-empty list of {', '.join(NAMES)}.")
        secret = spec.get("api_key_secret")
        if not isinstance(secret, str) or not _SECRET_NAME.match(secret):
            raise _misconfigured(f"{where}.api_key_secret must name an environment secret.")
        model_name = spec.get("model_name", "qualified")
        if model_name not in ("qualified", "bare"):
            raise _misconfigured(f"{where}.model_name must be \"qualified\" or \"bare\".")
        breakpoints = spec.get("cache_breakpoints", False)
        if type(breakpoints) is not bool:
            raise _misconfigured(f"{where}.cache_breakpoints must be true or false.")
        out[name] = Provider(name=name, base_url=base_url.rstrip("/"),
                             formats=tuple(formats), api_key_secret=secret, model_name=model_name,
                             cache_breakpoints=breakpoints)
    return out


def split_model(value) -> tuple[str, str]:
    """"provider:model" -> (provider, model). Splits at the first ':' (model names may
    contain ':'). Bad shape or over MAX_MODEL_NAME characters -> EdgeError(400,
    "invalid_model")."""
    if not isinstance(value, str) or ":" not in value:
        raise EdgeError(400, "invalid_model", "model must be a string of the form provider:model.")
    if len(value) > MAX_MODEL_NAME:
        raise EdgeError(400, "invalid_model", f"model must be at most {MAX_MODEL_NAME} characters.")
    provider, model = value.split(":", 1)
    if not _PROVIDER_NAME.match(provider) or not model or model != model.strip() \
            or any(ord(c) < 0x20 or c == "\x7f" for c in model):
        raise EdgeError(400, "invalid_model", "model must be a string of the form provider:model.")
    return provider, model


def provider_auth_headers(fmt: str, key: str, version: Optional[str] = None,
                          provider: Optional[Provider] = None) -> dict[str, str]:
    """Upstream auth headers, as wire format ``fmt`` declares them; ``version`` is the
    client's value of the format's VERSION_HEADER, if it has one. A missing or unusable
    key is a 503 naming ``provider``'s secret (never its value)."""
    if not isinstance(key, str) or not key or any(c in key for c in "\r\n\x00"):
        raise provider_key_missing(provider)
    return _formats.get(fmt).auth_headers(key, version)


def provider_key_missing(provider: Optional[Provider]) -> EdgeError:
    """503 saying which secret to set and where (docs/design.md §8): the name the
    provider's PROVIDERS entry reads, never a value."""
    if provider is None:
        return EdgeError(503, "provider_key_missing", "Provider API key is missing or invalid.")
    name = provider.api_key_secret
    return EdgeError(503, "provider_key_missing",
                     f"The API key of provider {provider.name} is missing or invalid: set the secret "
                     f"{name} (its PROVIDERS entry's api_key_secret). Locally: a line {name}=… in "
                     f".dev.vars, then restart the runner (npm start). Deployed: "
                     f"npx wrangler secret put {name}.")


# ---------------------------------------------------------------------------
# Signing secrets
# ---------------------------------------------------------------------------


#: Shortest signing secret accepted (HMAC-SHA256 keys: 32 bytes, `openssl rand -base64 32`).
MIN_SIGNING_SECRET_BYTES = 32
_SIGNING_NAMES = ("MEDIA_SIGNING_SECRET", "FLASK_SECRET_KEY", "MEDIA_SIGNING_SECRET_PREVIOUS")


def signing_secrets(env_get: Callable[[str], Optional[str]],
                    warn: Optional[Callable[[str], None]] = None
                    ) -> Optional[tuple[bytes, Optional[bytes]]]:
    """(current, previous) from MEDIA_SIGNING_SECRET (else FLASK_SECRET_KEY) and
    MEDIA_SIGNING_SECRET_PREVIOUS; empty counts as unset. None if no current secret
    (the caller answers 503). A secret in use shorter than MIN_SIGNING_SECRET_BYTES is
    refused: EdgeError(503, "signing_not_configured") naming the setting, and ``warn``
    hears of it once per isolate (docs/design.md §3)."""
    values = {name: _secret_bytes(env_get(name)) for name in _SIGNING_NAMES}
    current = values["MEDIA_SIGNING_SECRET"] or values["FLASK_SECRET_KEY"]
    if current is None:
        return None
    short = _short_secret(values)
    if short is not None:
        message = (f"{short} is shorter than {MIN_SIGNING_SECRET_BYTES} bytes; page signing is off "
                   "until it is replaced (openssl rand -base64 32).")
        if warn is not None:
            warn_once(short, message, warn)
        raise EdgeError(503, "signing_not_configured", message)
    return current, values["MEDIA_SIGNING_SECRET_PREVIOUS"]


def _short_secret(values: dict) -> Optional[str]:
    """The first secret in use shorter than the minimum, by name (None: all long enough)."""
    used = ("MEDIA_SIGNING_SECRET" if values["MEDIA_SIGNING_SECRET"] else "FLASK_SECRET_KEY",
            "MEDIA_SIGNING_SECRET_PREVIOUS")
    return next((n for n in used if values[n] is not None
                 and len(values[n]) < MIN_SIGNING_SECRET_BYTES), None)


def _secret_bytes(v) -> Optional[bytes]:
    if isinstance(v, (bytes, bytearray)):
        return bytes(v) or None
    if isinstance(v, str) and v:
        return v.encode("utf-8")
    return None


# ---------------------------------------------------------------------------
# Settings that cannot fail silently (docs/design.md §3)
# ---------------------------------------------------------------------------

PROVIDERS_NAME = "PROVIDERS"
_warned: set = set()   # the settings already warned about in this isolate


def warn_once(setting: str, message: str, warn: Callable[[str], None]) -> None:
    """One warning per isolate and setting. ``message`` names the setting, never a value."""
    if setting not in _warned:
        _warned.add(setting)
        warn(message)


def config_errors(env_get: Callable[[str], Optional[str]]) -> list[str]:
    """The settings whose value is invalid (names only, never values): what /healthz
    reports in `config_errors`. Each is also one warning per isolate where it is used."""
    errors = []
    if parse_flag(env_get(FLAG_NAME))[1]:
        errors.append(FLAG_NAME)
    if parse_origins(env_get(CORS_SETTING))[1]:
        errors.append(CORS_SETTING)
    try:
        parse_providers(env_get(PROVIDERS_NAME))
    except EdgeError:
        errors.append(PROVIDERS_NAME)
    short = _short_secret({name: _secret_bytes(env_get(name)) for name in _SIGNING_NAMES})
    if short is not None:
        errors.append(short)
    return errors


def warn_unserved(warn: Callable[[str], None]) -> None:
    """Once per isolate: a registered model names a provider PROVIDERS does not define."""
    warn_once("PROVIDERS:models", "A registered model names a provider that PROVIDERS does "
              "not define; requests for it answer unknown_model (/healthz: missing_providers).",
              warn)


def missing_providers(registered: list[str], configured: dict) -> list[str]:
    """The providers registered models name (`provider:model` in D1) that PROVIDERS does
    not define: requests for those models answer unknown_model."""
    return sorted({p for p in registered if p and p not in configured})
