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
import re
from typing import NamedTuple, Optional

#: One turn's reported figure above this is not a figure (no window is that large).
MAX_TOKENS = 100_000_000
#: A JSON answer is parsed whole up to this many bytes (a stream's first event too) ...
WHOLE_BYTES = 64 * 1024
#: ... and past it only its last TAIL_BYTES are kept, where the usage object ends it; a
#: stream keeps its last TAIL_BYTES to 2 × TAIL_BYTES, where its usage events are.
TAIL_BYTES = 16 * 1024

_USAGE_KEY = b'"usage"'


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


_BOUNDARY = re.compile(rb"\r\n\r\n|\n\n|\r\r")


class Meter:
    """Watches one relayed answer (``feed`` each read, ``end`` once) and hands the
    settled Usage to ``done`` at the end. Bounded and cheap per read: a JSON answer is
    kept up to WHOLE_BYTES (past it, its last TAIL_BYTES); a stream keeps its first
    event and its last TAIL_BYTES..2 × TAIL_BYTES: in the three formats usage rides
    only on a stream's first event (Messages' `message_start`) and on its last usage
    event (the final chunk, `response.completed`, `message_delta`, each with the turn's
    final figures). At the end those two events are parsed, found from the stream's end
    backwards: the per-read work is an append. Never raises into the relay (a failure
    leaves the figures estimated)."""

    def __init__(self, fmt, sse: bool, sent_bytes: int, done):
        self._fmt, self._sse, self._sent, self._done = fmt, sse, sent_bytes, done
        self._buf = bytearray()    # JSON: the body (or its tail); SSE: the first event
        self._cut = False          # JSON: the body lost its head
        self._first = not sse      # SSE: the first event is complete (or given up)
        self._tail: list = []      # SSE: the latest reads
        self._tail_bytes = 0
        self._tail_cut = False     # SSE: reads before the tail were dropped
        self._fields: dict = {}
        self.relayed = 0
        self._ended = False

    def held(self) -> int:
        """Bytes kept (the bound the tests check)."""
        return len(self._buf) + self._tail_bytes

    def feed(self, chunk: bytes) -> None:
        if self._ended:
            return
        n = len(chunk)
        self.relayed += n
        if self._first and self._sse:          # the common read: an append
            self._tail.append(chunk)
            self._tail_bytes += n
            if self._tail_bytes > 2 * TAIL_BYTES:
                self._trim()
            return
        try:
            if not self._sse:
                self._keep(chunk)
                return
            buf = self._buf
            buf += chunk
            ends = _BOUNDARY.search(buf, max(0, len(buf) - n - 3))
            if ends is not None or len(buf) > WHOLE_BYTES:
                self._first = True         # the first event is whole, or too long to keep
                del buf[ends.end() if ends is not None and ends.end() <= WHOLE_BYTES else 0:]
            self._tail.append(chunk)
            self._tail_bytes += n
        except Exception:  # noqa: BLE001 — a figure lost is estimated, the answer flows
            self._buf, self._tail, self._tail_bytes = bytearray(), [], 0

    def _trim(self) -> None:
        kept = b"".join(self._tail)[-TAIL_BYTES:]
        self._tail, self._tail_bytes, self._tail_cut = [kept], len(kept), True

    def end(self) -> None:
        if self._ended:
            return
        self._ended = True
        try:
            if self._sse:
                self._events()
            elif self._buf:
                self._take(tail_usage(bytes(self._buf)) if self._cut
                           else self._fmt.usage_of(_loads(bytes(self._buf))))
        except Exception:  # noqa: BLE001
            pass
        self._buf, self._tail = bytearray(), []
        self._done(settle(self._fmt.usage_counts(self._fields), self._sent, self.relayed))

    def _take(self, usage) -> None:
        self._fields.update(fields(usage, self._fmt.USAGE_FIELDS))

    def _keep(self, chunk: bytes) -> None:
        buf = self._buf
        buf += chunk
        if len(buf) > WHOLE_BYTES + TAIL_BYTES:
            del buf[:len(buf) - TAIL_BYTES]
            self._cut = True

    def _events(self) -> None:
        """The first event, then the last one whose usage is not null (figures in both:
        Messages' start and its delta; later figures replace earlier)."""
        head = bytes(self._buf)
        first = _BOUNDARY.search(head)
        if first is not None and _last_usage(head, first.start()) is not None:
            self._event(head[:first.start()])
        tail = b"".join(self._tail)
        at = _last_usage(tail, len(tail))
        if at is None:
            return
        lead = _BOUNDARY.search(tail) if self._tail_cut else None
        if self._tail_cut and (lead is None or at < lead.start()):   # its head was dropped
            self._event(tail[:lead.start()] if lead else tail, cut=True)
            return
        after = _BOUNDARY.search(tail, at)
        self._event(tail[_last_boundary(tail, lead.end() if lead else 0, at):
                         after.start() if after else len(tail)])

    def _event(self, event: bytes, cut: bool = False) -> None:
        if cut:
            self._take(tail_usage(event))
            return
        data = [line[5:].removeprefix(b" ") for line in event.replace(b"\r", b"\n").split(b"\n")
                if line.startswith(b"data:")]
        if data:
            self._take(self._fmt.event_usage(_loads(b"\n".join(data))))


def _last_usage(data: bytes, end: int):
    """Where the last `"usage"` key before ``end`` whose value is not null is, else None."""
    while True:
        at = data.rfind(_USAGE_KEY, 0, end)
        if at < 0:
            return None
        rest = data[at + len(_USAGE_KEY):at + len(_USAGE_KEY) + 40].lstrip()
        if rest.startswith(b":") and not rest[1:].lstrip().startswith(b"null"):
            return at
        end = at


def _last_boundary(data: bytes, low: int, high: int) -> int:
    """Where the event holding position ``high`` starts (after the last blank line
    between ``low`` and it), else ``low``."""
    start = low
    for sep in (b"\n\n", b"\r\r", b"\r\n\r\n"):
        at = data.rfind(sep, low, high)
        if at >= 0:
            start = max(start, at + len(sep))
    return start
