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

Merging (docs/design.md §5.9): a search reads every object holding an active page, so
the objects of a session are kept few, size-tiered as an LSM tree is. A turn that writes
an object anyway may also rewrite into it the pages of other objects, only objects
every active row of which it can reproduce byte-exactly (it holds their bodies), and
only when the tiers or the cap (`MergeRule`) call for it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Iterable, Mapping

from .pages import Lifetime, Location, Owner, PageSigner, pack
from .rows import ActivePage


@dataclass
class Writes:
    bodies: list = field(default_factory=list)    # pages written into this request's object
    refresh: list = field(default_factory=list)   # (page, ActivePage): rows rewritten in place
    reused: dict = field(default_factory=dict)    # page_id -> ActivePage, left as they are
    new_bytes: int = 0                            # bytes the allowance does not count yet
    new_pages: int = 0
    moved: list = field(default_factory=list)     # (page, ActivePage, in plan): merged in
    plan_ids: set = field(default_factory=set)    # the plan's page ids

    @property
    def empty(self) -> bool:
        return not self.bodies and not self.refresh

    @property
    def packed(self) -> list:
        """The pages this request's object holds, in order."""
        return self.bodies + [m[0] for m in self.moved]


def classify(pages, known: Mapping[str, ActivePage], now: int, ttl: int, horizon: int) -> Writes:
    """Sort the plan's pages (duplicates once) by what they need; `known` holds the
    active rows (unexpired, current revision) of the session."""
    w = Writes()
    seen = set()
    w.plan_ids = seen       # filled below: every distinct page id of the plan
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
    packed = w.packed
    key, data, offsets = pack(packed) if packed else (None, b"", {})

    def row(p, body: Location, lt: Lifetime = life):
        return sign.make_row(owner, p.sha256, len(p.body), lt, body,
                             page_id=p.page_id)   # the plan's id, made by this signer

    out = [row(p, Location(key, offsets[p.page_id], life.now)) for p in w.bodies]
    out += [row(p, Location(a.r2_key, a.r2_offset, a.body_written_at)) for p, a in w.refresh]
    for p, a, in_plan in w.moved:
        # A page of the plan gets the expiry lazy refresh would give it; a superseded one
        # keeps its own, so it still dies on time (docs/design.md §5.9).
        lt = life if in_plan else Lifetime(life.now, a.expires_at - life.now)
        r = row(p, Location(key, offsets[p.page_id], life.now), lt)
        r["moved_from"] = (a.r2_key, a.r2_offset)
        out.append(r)
    return key, data, out


# ---------------------------------------------------------------------------
# Merging (docs/design.md §5.9)
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class MergeRule:
    """Size tiers: tier(b) = floor(log_fanout(b / base)) (0 below base·fanout). A tier
    holding fanout − 1 objects besides what the write has collected is folded in, and
    again at the tier the sum reaches (a base-`fanout` counter: ≤ fanout − 1 objects per
    tier, ~log_fanout(allowance / base) tiers). `cap`: after the write the session has
    at most this many objects, the smallest movable ones folded in first."""
    fanout: int = 3
    base: int = 4096
    cap: int = 12
    enabled: bool = True    # off: lazy refresh alone (the benches' baseline)


MERGE = MergeRule()


def tier(nbytes: int, rule: MergeRule = MERGE) -> int:
    t, edge = 0, rule.base * rule.fanout
    while nbytes >= edge:
        t += 1
        edge *= rule.fanout
    return t


def choose(sizes: Mapping[str, int], written: int, unmovable: Iterable[str] = (),
           rule: MergeRule = MERGE, due: Mapping[str, int] | None = None) -> list[str]:
    """The objects (keys of `sizes`: active bytes each, this request's object apart) to
    fold into the `written` bytes this request writes anyway; [] when it writes
    nothing. Never an unmovable one. `due`: rows per object lazy refresh rewrites
    anyway (a tie between equal sizes goes to the object with more)."""
    if written <= 0:
        return []
    banned = set(unmovable)
    due = due or {}
    pool = sorted((k for k in sizes if k not in banned),
                  key=lambda k: (sizes[k], -due.get(k, 0), k))
    chosen: list[str] = []
    total = written
    while True:     # the counter: merge a full tier, then look at the tier reached
        t = tier(total, rule)
        same = [k for k in pool if k not in chosen and tier(sizes[k], rule) == t]
        if len(same) < rule.fanout - 1:
            break
        chosen += same
        total += sum(sizes[k] for k in same)
    left = len(sizes) - len(chosen) + 1        # + this request's object
    for k in pool:  # the cap: fold the smallest movable objects
        if left <= rule.cap:
            break
        if k not in chosen:
            chosen.append(k)
            left -= 1
    return chosen


def objects(known: Mapping[str, ActivePage], now: int, leaving: set) -> dict:
    """r2_key -> page ids of its active rows, without those `leaving` (rewritten anyway)."""
    out: dict = {}
    for pid, a in known.items():
        if a.expires_at > now and pid not in leaving:
            ids = out.get(a.r2_key)
            if ids is None:
                out[a.r2_key] = [pid]
            else:
                ids.append(pid)
    return out


def merge(w: Writes, known: Mapping[str, ActivePage], now: int, pages,
          superseded: Callable[[set], list] | None = None, rule: MergeRule = MERGE) -> None:
    """Fold other objects' pages into this request's object (w.moved) when the rule
    calls for it; nothing when the request writes no object. `pages`: the plan's; the
    bodies of other rows come from `superseded(byte_lengths)` (pages of the exchanges
    inside the plan's blocks, made only here, for those lengths)."""
    if not w.bodies or not rule.enabled:
        return
    leaving = {p.page_id for p in w.bodies}
    objs = objects(known, now, leaving)
    sizes = {k: sum(known[pid].byte_length for pid in ids) for k, ids in objs.items()}
    refresh = {p.page_id: p for p, _ in w.refresh}
    due = {k: sum(pid in refresh for pid in ids) for k, ids in objs.items()} if refresh else None
    written = sum(len(p.body) for p in w.bodies)
    held = {p.page_id: p for p in pages}
    unmovable: set = set()
    while True:
        chosen = choose(sizes, written, unmovable, rule, due)
        bad = [k for k in chosen if not _reproduce(objs[k], known, held, superseded)]
        if not bad:
            break
        unmovable.update(bad)
    if not chosen:
        return
    for k in chosen:
        for pid in objs[k]:
            w.moved.append((held[pid], known[pid], pid in w.plan_ids))
    if refresh:
        moving = {m[0].page_id for m in w.moved}
        w.refresh = [(p, a) for p, a in w.refresh if p.page_id not in moving]


def _reproduce(ids: list, known: Mapping[str, ActivePage], held: dict,
               superseded: Callable[[set], list] | None) -> bool:
    """Whether every page `ids` names is in `held`, adding the superseded pages made
    for the missing rows' byte lengths (a page's id binds its bytes: a match is exact)."""
    missing = [pid for pid in ids if pid not in held]
    if missing and superseded is not None:
        lengths = {known[pid].byte_length for pid in missing}
        for p in superseded(lengths):
            held.setdefault(p.page_id, p)
    return all(pid in held for pid in missing)


def covered_rows(pages, known: Mapping[str, ActivePage], now: int,
                 superseded: Callable[[set], list] | None) -> dict:
    """page_id -> byte_length of the active rows this plan's blocks hold again: the
    single pages an earlier turn stored for exchanges that are now inside a block page of
    the plan (docs/design.md §5.9). Their bytes are in the allowance once, as the block's.
    Only rows of a length some such exchange has are looked for (`superseded` hashes just
    those exchanges); none without blocks."""
    if superseded is None:
        return {}
    sent = {p.page_id for p in pages}
    lengths = {a.byte_length for pid, a in known.items() if pid not in sent and a.expires_at > now}
    if not lengths:
        return {}
    return {p.page_id: known[p.page_id].byte_length for p in superseded(lengths)
            if p.page_id in known and p.page_id not in sent and known[p.page_id].expires_at > now}
