"""Usage as the provider reported it, read from its answer as the edge relays it
(docs/design.md §4.1).

Each wire format says where its usage is and what its fields mean (``usage_of``: a
whole JSON answer; ``event_usage``: one stream event's data; ``USAGE_FIELDS`` and
``usage_counts``: the four figures from the fields). This module reads the answer's
bytes as they pass — a JSON body, or SSE events split anywhere across reads — keeping
at most WHOLE_BYTES of one event (or body) and, past that, its last TAIL_BYTES only, and
settles the turn's `Usage`. A figure the provider did not report (or reported as
anything but a whole number from 0 to MAX_TOKENS) is estimated from bytes, as the seed
counts tokens: the upstream body's bytes for input, the relayed answer's for output.
"""

from __future__ import annotations

import json
from typing import NamedTuple, Optional

#: One turn's reported figure above this is not a figure (no window is that large).
MAX_TOKENS = 100_000_000
#: One SSE event, or a JSON answer, is parsed whole up to this many bytes ...
WHOLE_BYTES = 256 * 1024
#: ... and past it only its last TAIL_BYTES are kept, where the usage object ends it.
TAIL_BYTES = 64 * 1024

_USAGE_KEY = b'"usage"'
_NULL_USAGE = b'"usage":null'


class Usage(NamedTuple):
    """One answered turn's figures (migrations/0003: input counts the cached and
    written parts too). ``estimated``: some figure came from bytes."""
    input_tokens: int
    cached_input_tokens: int
    cache_write_tokens: int
    output_tokens: int
    estimated: bool


def count(value) -> Optional[int]:
    """A reported figure: a JSON integer from 0 to MAX_TOKENS, else None (a string, a
    float, NaN, a boolean, a negative or huge number is no figure)."""
    if type(value) is int and 0 <= value <= MAX_TOKENS:
        return value
    return None


def fields(usage, names: tuple) -> dict:
    """The valid figures of a usage object, by dotted name (``a.b``: ``usage[a][b]``)."""
    out = {}
    if type(usage) is not dict:
        return out
    for name in names:
        value = usage
        for part in name.split("."):
            value = value.get(part) if type(value) is dict else None
        n = count(value)
        if n is not None:
            out[name] = n
    return out


def settle(counts: tuple, sent_bytes: int, relayed_bytes: int) -> Usage:
    """The turn's Usage from a format's ``usage_counts`` (input, cached, written, output;
    None = not reported): a missing input or output is the bytes, and marks it estimated;
    a cached or written part larger than the input is dropped."""
    inp, cached, written, out = counts
    estimated = inp is None or out is None
    inp = sent_bytes if inp is None else inp
    out = relayed_bytes if out is None else out
    cached = cached if cached is not None and cached <= inp else 0
    written = written if written is not None and written <= inp else 0
    return Usage(inp, cached, written, out, estimated)


def tail_usage(tail: bytes):
    """The last ``"usage": {…}`` object at JSON structure level in ``tail`` (the end of
    an answer too long to parse whole), else None. A quote escaped inside a string is
    text, not a key: in valid JSON a key's quote follows an even run of backslashes."""
    end = len(tail)
    while True:
        at = tail.rfind(_USAGE_KEY, 0, end)
        if at < 0:
            return None
        end = at
        slashes = 0
        while at - slashes > 0 and tail[at - slashes - 1] == 0x5C:
            slashes += 1
        if slashes % 2:
            continue
        rest = tail[at + len(_USAGE_KEY):].lstrip()
        if not rest.startswith(b":"):
            continue
        rest = rest[1:].lstrip()
        if not rest.startswith(b"{"):
            continue
        try:
            doc, _ = json.JSONDecoder().raw_decode(rest.decode("utf-8", "replace"))
        except ValueError:
            continue
        return doc if type(doc) is dict else None


def _loads(data: bytes):
    try:
        return json.loads(data)
    except (ValueError, RecursionError):
        return None


class Meter:
    """Watches one relayed answer (``feed`` each read, ``end`` once) and hands the
    settled Usage to ``done`` at the end. Bounded: one event's bytes at most; never
    raises into the relay (a failure leaves the figures estimated)."""

    def __init__(self, fmt, sse: bool, sent_bytes: int, done):
        self._fmt, self._sse, self._sent, self._done = fmt, sse, sent_bytes, done
        self._buf = bytearray()
        self._cut = False          # the buffered event lost its head (kept: its tail)
        self._cr = False           # the stream has used \r: look for its boundaries too
        self._fields: dict = {}
        self.relayed = 0
        self._ended = False

    def feed(self, chunk: bytes) -> None:
        if self._ended:
            return
        self.relayed += len(chunk)
        try:
            if self._sse:
                self._feed_events(chunk)
            else:
                self._keep(chunk)
        except Exception:  # noqa: BLE001 — a figure lost is estimated, the answer flows
            self._buf, self._cut = bytearray(), False

    def end(self) -> None:
        if self._ended:
            return
        self._ended = True
        try:
            if self._sse:
                if self._buf:
                    self._event(bytes(self._buf))
            elif self._buf:
                self._take(tail_usage(bytes(self._buf)) if self._cut
                           else self._fmt.usage_of(_loads(bytes(self._buf))))
        except Exception:  # noqa: BLE001
            pass
        self._buf = bytearray()
        self._done(settle(self._fmt.usage_counts(self._fields), self._sent, self.relayed))

    def _take(self, usage) -> None:
        self._fields.update(fields(usage, self._fmt.USAGE_FIELDS))

    def _keep(self, chunk: bytes) -> None:
        buf = self._buf
        buf += chunk
        if len(buf) > WHOLE_BYTES + TAIL_BYTES:
            del buf[:len(buf) - TAIL_BYTES]
            self._cut = True

    def _feed_events(self, chunk: bytes) -> None:
        buf = self._buf
        search = max(0, len(buf) - 3)      # a boundary may straddle two reads
        buf += chunk
        if not self._cr and b"\r" in chunk:
            self._cr = True
        start = 0
        while True:
            end, gap = self._boundary(buf, search)
            if end < 0:
                break
            self._event(bytes(buf[start:end]))
            start = search = end + gap
        if start:
            del buf[:start]
        if len(buf) > WHOLE_BYTES + TAIL_BYTES:
            del buf[:len(buf) - TAIL_BYTES]
            self._cut = True

    def _boundary(self, buf: bytearray, at: int) -> tuple:
        """(end of the next event from ``at``, length of the blank line), or (-1, 0)."""
        end = buf.find(b"\n\n", at)
        if not self._cr:
            return (end, 2) if end >= 0 else (-1, 0)
        best = (end, 2) if end >= 0 else (-1, 0)
        for sep in (b"\r\n\r\n", b"\r\r"):
            i = buf.find(sep, at, best[0] if best[0] >= 0 else len(buf))
            if i >= 0 and (best[0] < 0 or i < best[0]):
                best = (i, len(sep))
        return best

    def _event(self, event: bytes) -> None:
        cut, self._cut = self._cut, False
        if _USAGE_KEY not in event or event.count(_USAGE_KEY) == event.count(_NULL_USAGE):
            return
        if cut:
            self._take(tail_usage(event))
            return
        data = [line[5:].removeprefix(b" ") for line in event.replace(b"\r", b"\n").split(b"\n")
                if line.startswith(b"data:")]
        if data:
            self._take(self._fmt.event_usage(_loads(b"\n".join(data))))
