"""Findable exchanges: the pure search core (docs/design.md §6.1, §6.2). Stdlib plus
the pinned pure-Python ``snowballstemmer``; no ``js``. Layers, lowest first: state,
analysis, stems, docs, corpus, match, bm25, passages, excerpt, ranker; ``texts`` apart."""

from .docs import doc_key  # noqa: F401
from .excerpt import ELLIPSIS, EXCERPT_MAX  # noqa: F401
from .ranker import MIN_RELEVANCE, ExchangeHit, Query, Scoring, prepare, rank  # noqa: F401
from .state import STATE  # noqa: F401
from .texts import page_texts  # noqa: F401
