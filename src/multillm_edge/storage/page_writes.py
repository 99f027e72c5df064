"""What a turn must write for its plan's pages (docs/design.md §5.8, §5.9): pure decisions.

Each page of the plan is, given the rows the turn knows to be active:
- new (no active row): its body goes into the request's object, a row is written;
- stale body (its body was written `horizon` seconds ago or earlier): written again
  into the request's object and its row repointed, before the bucket's lifecycle rule
  can delete the old object under an active row;
- due (under half its TTL left): its row is rewritten in place (same body location,
  new expiry and signature);
- otherwise reused as it is: nothing written.
A steady turn therefore writes only its new pages, and nothing at all when none is new
or due.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

from ..core.pages import Lifetime, Location, Owner, PageSigner, pack
from .store import ActivePage


@dataclass
class Writes:
    bodies: list = field(default_factory=list)    # pages written into this request's object
    refresh: list = field(default_factory=list)   # (page, ActivePage): rows rewritten in place
    reused: dict = field(default_factory=dict)    # page_id -> ActivePage, left as they are
    new_bytes: int = 0                            # bytes the allowance does not count yet
    new_pages: int = 0

    @property
    def empty(self) -> bool:
        return not self.bodies and not self.refresh


def classify(pages, known: Mapping[str, ActivePage], now: int, ttl: int, horizon: int) -> Writes:
    """Sort the plan's pages (duplicates once) by what they need; `known` holds the
    active rows (unexpired, current revision) of the session."""
    w = Writes()
    seen = set()
    for p in pages:
        if p.page_id in seen:
            continue
        seen.add(p.page_id)
        row = known.get(p.page_id)
        if row is None or row.expires_at <= now:
            w.bodies.append(p)
            w.new_bytes += len(p.body)
            w.new_pages += 1
        elif row.body_written_at <= now - horizon:
            w.bodies.append(p)
        elif row.expires_at - now < ttl / 2:
            w.refresh.append((p, row))
        else:
            w.reused[p.page_id] = row
    return w


def rows(w: Writes, sign: PageSigner, owner: Owner,
         life: Lifetime) -> tuple[str | None, bytes, list[dict]]:
    """(object key or None, object bytes, signed rows) for the writes: written bodies
    point into the one object, refreshed rows keep their body where it is."""
    key, data, offsets = pack(w.bodies) if w.bodies else (None, b"", {})

    def row(p, body: Location):
        return sign.make_row(owner, p.sha256, len(p.body), life, body,
                             page_id=p.page_id)   # the plan's id, made by this signer

    out = [row(p, Location(key, offsets[p.page_id], life.now)) for p in w.bodies]
    out += [row(p, Location(a.r2_key, a.r2_offset, a.body_written_at)) for p, a in w.refresh]
    return key, data, out
