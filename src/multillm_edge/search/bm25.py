"""Okapi BM25 in one place (docs/design.md §6.1): k1 1.2, b 0.75, idf
``ln(1 + (N - df + .5) / (df + .5))``; a term's part of a document's score added for
the documents holding it only (the others' is 0)."""

from __future__ import annotations

import math

K1, B = 1.2, 0.75
_K = K1 + 1


def idf(n: int, df: int) -> float:
    return math.log(1 + (n - df + 0.5) / (df + 0.5))


def norm(length: int, avg: float) -> float:
    """A document's length normalization, ``K1 × (1 - B + B × length / avg)``."""
    return K1 * (1 - B + B * length / avg)


def norms(lengths: dict, avg: float) -> dict:
    """{document: its ``norm``} of ``lengths`` ({document: length})."""
    return {d: K1 * (1 - B + B * length / avg) for d, length in lengths.items()}


def part(weight: float, norm: dict, tf: dict) -> dict:
    """{document: ``weight`` × BM25's tf part} of each document holding the term (``tf``:
    {document: count}; ``norm``: theirs at least)."""
    return {d: weight * (c * _K / (c + norm[d])) for d, c in tf.items()}


def add(scores: list, got: dict) -> None:
    """Add a term's ``part`` to ``scores``, in place."""
    for d, v in got.items():
        scores[d] += v


def score(tf: dict, length: int, weights: dict, avg: float) -> float:
    """The BM25 of one document (a passage): its terms' counts and its length."""
    n = norm(length, avg)
    return sum([weights[t] * (c * _K / (c + n)) for t, c in tf.items()])
