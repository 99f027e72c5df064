"""Okapi BM25 in one place (docs/design.md §6.1): k1 1.2, b 0.75, idf
``ln(1 + (N - df + .5) / (df + .5))``; a term's part of a document's score added for
the documents holding it only (the others' is 0)."""

from __future__ import annotations

import math
from operator import add as _plus

K1, B = 1.2, 0.75
_K = K1 + 1


def idf(n: int, df: int) -> float:
    return math.log(1 + (n - df + 0.5) / (df + 0.5))


def norm(length: int, avg: float) -> float:
    """A document's length normalization, ``K1 × (1 - B + B × length / avg)``."""
    return K1 * (1 - B + B * length / avg)


def norms(lengths: list, avg: float) -> list:
    """Each document's ``norm``."""
    return [K1 * (1 - B + B * length / avg) for length in lengths]


def part(weight: float, norm, tf: dict, n: int):
    """``weight`` × BM25's tf part of each of the ``n`` documents holding the term
    (``tf``: {document: count}; ``norm``: their ``norm``, by document): {document:
    part}, or, when most hold it (``dense``), every document's as a list (0.0 for the
    others: added in C, and a score plus 0.0 is itself)."""
    if not dense(len(tf), n):
        return {d: weight * (c * _K / (c + norm[d])) for d, c in tf.items()}
    col = [0.0] * n
    for d, c in tf.items():
        col[d] = weight * (c * _K / (c + norm[d]))
    return col


def column_part(weight: float, norm: list, counts: list) -> list:
    """``part`` of every document's count (``counts``, 0 where none)."""
    return [weight * (c * _K / (c + m)) if c else 0.0 for c, m in zip(counts, norm)]


def dense(df: int, n: int) -> bool:
    """A term in most of the ``n`` documents: its part kept as a list."""
    return 3 * df > n


def added(scores: list | None, got, n: int) -> list:
    """``scores`` with a term's ``part`` added (a list part in C, making a new list);
    None: nothing added yet, so from 0.0 — a list part then copied, not added: 0.0 + x
    is x for every part (never -0.0: an idf and a count are positive, a zero is 0.0)."""
    if type(got) is not dict:      # a list, or the corpus's array of it (ranker._packed)
        return list(got) if scores is None else list(map(_plus, scores, got))
    if scores is None:
        scores = [0.0] * n
    for d, v in got.items():
        scores[d] += v
    return scores


def score(tf: dict, length: int, weights: dict, avg: float) -> float:
    """The BM25 of one document (a passage): its terms' counts and its length."""
    n = norm(length, avg)
    return sum([weights[t] * (c * _K / (c + n)) for t, c in tf.items()])


def score_in_order(weights: dict, counts: dict, norm: float) -> float:
    """A document's sum of its terms' ``part`` (``norm``: its length normalization),
    added in ``weights``' order from 0.0, as the parts of many are (``added``)."""
    out = 0.0
    for t, weight in weights.items():
        c = counts.get(t)
        if c:
            out += weight * (c * _K / (c + norm))
    return out
