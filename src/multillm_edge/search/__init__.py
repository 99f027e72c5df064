"""Findable exchanges: the pure search core (docs/design.md §6.1, §6.2).

Stdlib plus the pinned pure-Python ``snowballstemmer``; nothing else from the package,
no ``js``. ``texts.page_texts(items)`` lists a page's message texts, ``ranker.rank``
ranks exchanges and quotes a verbatim excerpt, ``analyzer`` turns text into terms.
"""

from .ranker import EXCERPT_MAX, MIN_RELEVANCE, ExchangeHit, Scoring, rank  # noqa: F401
from .texts import page_texts  # noqa: F401
