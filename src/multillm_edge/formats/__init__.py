"""Wire formats: grouping into exchanges, completeness, marker, tool schema, max tokens.

Each format module (``chat``, ``responses``, ``messages``) exposes the same small
interface, used by :mod:`multillm_edge.core.paging` and :mod:`multillm_edge.core.compaction`:

``ITEMS_KEY``                 top-level key holding the pageable history
``classify(item)``            ``(kind, calls, results)``: kind is USER (a genuine user
                              turn), SYSTEM (stands alone) or OTHER; calls/results are
                              keys pairing a tool call with its result
``schema(tool)``              a context ``Tool`` in that format's tool shape
``tool_schema()``             the ``multillm_context_retrieve`` tool in that format
``search_tool_schema()``      the ``multillm_context_search`` tool (docs/design.md §6.1)
``add_tool(body, search)``    append the schemas (retrieve; search too when declared) to
                              the tools of a shallow body copy; True when it created the
                              tools key
``output_reservation(body)``  the request's max-tokens field, ``None`` if absent

Shared by all three: ``history(body, ITEMS_KEY)`` (the list, or ``None`` when there
is nothing to page) and ``marker(text)`` (the marker message, role ``user``).

Grouping is shared (:func:`group_items`): an exchange starts at a genuine user turn
and runs to the next one; a message holding only tool results is not a new turn;
system/developer messages stand alone; anything before the first user turn (a
roleplay greeting) or after a mid-conversation system message until the next user
turn forms its own group.
"""

from __future__ import annotations

from typing import NamedTuple

from ..base.errors import EdgeError

USER = 1
SYSTEM = 2
OTHER = 0
NONE = ()                       # no tool calls, no tool results
PLAIN = (OTHER, NONE, NONE)     # classify's answer for neither a turn nor a tool pairing

# Group kinds
EXCHANGE = "exchange"  # starts at a genuine user turn
LEAD = "lead"          # no user turn at its start (greeting, continuation after system)
STANDALONE = "system"  # one system/developer message

TOOL_NAME = "multillm_context_retrieve"
TOOL_DESCRIPTION = (
    "Retrieve an earlier exchange of this conversation that was stored outside the "
    "context window. Pass one page_id named in a stored-context note; the exchange's "
    "original messages come back verbatim."
)

SEARCH_TOOL_NAME = "multillm_context_search"
SEARCH_TOOL_DESCRIPTION = (
    "Search the earlier exchanges of this conversation that were stored outside the "
    "context window, by words you remember from them: names, places, events, objects, "
    "promises. Returns the best-matching stored exchanges, each with its page_id, its "
    "exchange number and a verbatim excerpt; read one whole with multillm_context_retrieve."
)
# A capability is declared by naming its tool in the request's `capabilities`
# (docs/design.md §5.3, §6.1): the one spelling of each name.
RETRIEVE_CAPABILITY = TOOL_NAME
SEARCH_CAPABILITY = SEARCH_TOOL_NAME     # a second tool; alone it pages nothing
RECALL_CAPABILITY = "multillm_context_recall"   # no tool: the edge quotes (§6.2)
#: The paged boundary moves in steps, so the provider's prefix cache serves (§5.7).
PROMPT_CACHE_CAPABILITY = "multillm_context_prompt_cache"
SEARCH_QUERY_MAX = 1000      # characters of a query (docs/design.md §6.1)
SEARCH_LIMIT_MAX = 10

# The marker text is PREFIX + SEP.join(page_ids) + SUFFIX. JSON string escaping is
# per character, so the serialized size of a marker is computed arithmetically.
MARKER_PREFIX = (
    "[multillm context] Earlier exchanges of this conversation are not shown here: "
    "they are stored verbatim and retrievable with the multillm_context_retrieve tool "
    "by page_id. Stored pages, oldest first: "
)
# With the search capability (docs/design.md §6.1): what each of the two tools does.
MARKER_PREFIX_SEARCH = (
    "[multillm context] Earlier exchanges of this conversation are not shown here: "
    "they are stored verbatim. To find one, call the multillm_context_search tool with "
    "words you remember (names, places, events): it answers with page_ids, exchanges and "
    "verbatim excerpts. To read one, call the multillm_context_retrieve tool with its "
    "page_id and exchange. Stored pages, oldest first: "
)
MARKER_SEP = ", "
MARKER_SUFFIX = "."


def tool_parameters() -> dict:
    return {
        "type": "object",
        "properties": {
            "page_id": {
                "type": "string",
                "description": "The page_id (cp_...) named in the stored-context note.",
            },
            "exchange": {
                "type": "integer", "minimum": 1,
                "description": "A page may hold several consecutive exchanges: which one to "
                               "read (1 = its oldest; search results name it). Default 1.",
            },
        },
        "required": ["page_id"],
        "additionalProperties": False,
    }


def search_tool_parameters() -> dict:
    return {
        "type": "object",
        "properties": {
            "query": {
                "type": "string",
                "description": "Words to look for in the stored exchanges (names, places, "
                               f"events), 1-{SEARCH_QUERY_MAX} characters.",
            },
            "limit": {
                "type": "integer", "minimum": 1, "maximum": SEARCH_LIMIT_MAX,
                "description": "How many exchanges to return (default 5).",
            },
        },
        "required": ["query"],
        "additionalProperties": False,
    }


class Tool(NamedTuple):
    """A context tool, for a format module's ``schema(tool)`` to shape."""
    name: str
    description: str
    parameters: object    # () -> the JSON schema of its arguments


RETRIEVE = Tool(TOOL_NAME, TOOL_DESCRIPTION, tool_parameters)
SEARCH = Tool(SEARCH_TOOL_NAME, SEARCH_TOOL_DESCRIPTION, search_tool_parameters)


def context_tools(search: bool) -> tuple:
    """The tools a paged request gains: retrieve, and search when declared (§6.1)."""
    return (RETRIEVE, SEARCH) if search else (RETRIEVE,)


def add_context_tools(body: dict, key: str, shape, search: bool) -> bool:
    """Append the context tools, each as ``shape(tool)``, to ``body[key]``; True if the
    list was created (a format module's ``add_tool``)."""
    created = False
    for tool in context_tools(search):
        created |= tools_list_append(body, key, shape(tool))
    return created


def history(body: dict, key: str):
    """The pageable list under `key`, or None when there is none."""
    v = body.get(key)
    return v if isinstance(v, list) else None


def marker(text: str) -> dict:
    """The marker message: a plain user turn, the same shape in all three formats."""
    return {"role": "user", "content": text}



def marker_prefix(search: bool = False) -> str:
    return MARKER_PREFIX_SEARCH if search else MARKER_PREFIX


def marker_text(page_ids, search: bool = False) -> str:
    return marker_prefix(search) + MARKER_SEP.join(page_ids) + MARKER_SUFFIX



def exchange_starts(items: list) -> list:
    """Where each exchange of a page's items starts (docs/design.md §6): 0, then every
    item each wire format reads as a genuine user turn. A page does not record its
    format; it holds complete exchanges only, and a turn one format starts and another
    continues (an Anthropic tool-result message) is read as a continuation."""
    from .registry import FORMATS
    kinds = [f.classify for f in FORMATS]
    return [0] + [i for i in range(1, len(items))
                  if all(c(items[i])[0] == USER for c in kinds)]


class Group(NamedTuple):
    start: int       # index into the items list
    end: int         # exclusive
    kind: str        # EXCHANGE | LEAD | STANDALONE
    complete: bool   # every call has its result in the group and vice versa


def _complete(orphan: bool, pending: dict) -> bool:
    """Every result had its call and every call its result."""
    return not orphan and (not pending or not any(pending.values()))


_group = tuple.__new__   # _group(Group, (start, end, kind, complete)): no Python frame


def group_items(items: list, classify) -> list[Group]:
    """Split ``items`` into groups (linear, one classify call per item)."""
    groups: list[Group] = []
    append = groups.append
    start = -1
    kind = LEAD
    pending: dict = {}
    orphan = False
    for i, it in enumerate(items):
        c = classify(it)
        if c is PLAIN and start >= 0:
            continue  # the common case: a plain reply inside the current group
        k, calls, results = c
        if k == SYSTEM:
            if start >= 0:
                append(_group(Group, (start, i, kind, _complete(orphan, pending))))
                start = -1
            append(_group(Group, (i, i + 1, STANDALONE, True)))
            continue
        if k == USER or start < 0:
            if start >= 0:
                append(_group(Group, (start, i, kind, _complete(orphan, pending))))
            start = i
            kind = EXCHANGE if k == USER else LEAD
            if pending:
                pending = {}
            orphan = False
        # results before calls: a message normally holds one or the other
        if results:
            for r in results:
                n = pending.get(r, 0)
                if n:
                    pending[r] = n - 1
                else:
                    orphan = True
        if calls:
            for c in calls:
                pending[c] = pending.get(c, 0) + 1
    if start >= 0:
        append(_group(Group, (start, len(items), kind, _complete(orphan, pending))))
    return groups


def tools_list_append(body: dict, key: str, entry: dict) -> bool:
    """Append ``entry`` to ``body[key]`` (a new list); True if the key was created."""
    tools = body.get(key)
    if tools is None:
        created = key not in body
        body[key] = [entry]
        return created
    if not isinstance(tools, list):
        raise EdgeError(400, "invalid_request", f"`{key}` must be an array.")
    body[key] = tools + [entry]
    return False



def int_field(body: dict, *names):
    for name in names:
        v = body.get(name)
        if isinstance(v, int) and not isinstance(v, bool):
            return v
    return None


def get(fmt: str):
    """The module of wire format ``fmt`` (formats/registry.py; imported here lazily: the
    format modules import this package)."""
    from .registry import get as _get
    return _get(fmt)
