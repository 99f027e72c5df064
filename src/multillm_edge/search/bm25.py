"""Okapi BM25 in one place (docs/design.md §6.1): k1 1.2, b 0.75, idf
``ln(1 + (N - df + .5) / (df + .5))``; a term's part of every document's score added
sparse (the documents holding it) or dense (a column, in list passes)."""

from __future__ import annotations

import math

K1, B = 1.2, 0.75
_K = K1 + 1


def idf(n: int, df: int) -> float:
    return math.log(1 + (n - df + 0.5) / (df + 0.5))


def norms(lengths: list, avg: float) -> list:
    """Each document's length normalization, ``K1 × (1 - B + B × length / avg)``."""
    return [K1 * (1 - B + B * length / avg) for length in lengths]


def dense(df: int, n: int) -> bool:
    """A term in most of the ``n`` documents: added as a column (the same figures)."""
    return 3 * df > n


def add(scores: list, weight: float, norm: list, tf: dict, col: list | None = None) -> list:
    """``scores`` plus ``weight`` × BM25's tf part of each document holding the term
    (``tf``: {document: count}; ``col``: every document's count, when dense)."""
    if col is not None:
        return [s + weight * (c * _K / (c + m)) if c else s for s, c, m in zip(scores, col, norm)]
    for d, c in tf.items():
        scores[d] += weight * (c * _K / (c + norm[d]))
    return scores


def score(tf: dict, length: int, weights: dict, avg: float) -> float:
    """The BM25 of one document (a passage): its terms' counts and its length."""
    norm = K1 * (1 - B + B * length / avg)
    return sum([weights[t] * (c * _K / (c + norm)) for t, c in tf.items()])
