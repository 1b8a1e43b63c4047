"""Slow, obvious, loop-based references that the tests compare torch_ndcg against.

Nothing here imports torch_ndcg or vectorises anything: plain Python over lists of floats.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

GainFn = Callable[[float], float]
DiscountFn = Callable[[int], float]


def exponential_gain(label: float) -> float:
    return 2.0**label - 1.0


def linear_gain(label: float) -> float:
    return float(label)


def log2_discount(rank: int) -> float:
    return 1.0 / math.log2(rank + 1)


def jarvelin_discount(rank: int) -> float:
    return 1.0 / max(1.0, math.log2(rank))


GAINS: dict[str, GainFn] = {"exponential": exponential_gain, "linear": linear_gain}
DISCOUNTS: dict[str, DiscountFn] = {"log2": log2_discount, "jarvelin": jarvelin_discount}


def dcg_one_list(
    scores: Sequence[float],
    labels: Sequence[float],
    k: int | None,
    *,
    gain: GainFn = exponential_gain,
    discount: DiscountFn = log2_discount,
    ties: str = "average",
) -> float:
    """DCG@k of one list (no padding) by walking its tie groups one by one."""
    cutoff = len(scores) if k is None else min(k, len(scores))
    # Sort positions by score, descending; Python's sort is stable, so equal scores keep their
    # order of appearance.
    order = sorted(range(len(scores)), key=lambda i: -scores[i])
    total = 0.0
    position = 0
    while position < len(order):
        end = position + 1
        if ties == "average":
            while end < len(order) and scores[order[end]] == scores[order[position]]:
                end += 1
        group = order[position:end]
        mean_gain = sum(gain(labels[i]) for i in group) / len(group)
        for rank in range(position + 1, end + 1):
            if rank <= cutoff:
                total += mean_gain * discount(rank)
        position = end
    return total


def ideal_dcg_one_list(
    labels: Sequence[float],
    k: int | None,
    *,
    gain: GainFn = exponential_gain,
    discount: DiscountFn = log2_discount,
) -> float:
    """DCG@k of the labels sorted by gain, descending."""
    best = sorted((gain(y) for y in labels), reverse=True)
    cutoff = len(best) if k is None else min(k, len(best))
    return sum(best[r] * discount(r + 1) for r in range(cutoff))


def ndcg_one_list(
    scores: Sequence[float],
    labels: Sequence[float],
    k: int | None,
    *,
    gain: GainFn = exponential_gain,
    discount: DiscountFn = log2_discount,
    ties: str = "average",
    empty_value: float = 0.0,
) -> float:
    """nDCG@k of one list; ``empty_value`` when the ideal DCG is 0."""
    ideal = ideal_dcg_one_list(labels, k, gain=gain, discount=discount)
    if ideal == 0:
        return empty_value
    return dcg_one_list(scores, labels, k, gain=gain, discount=discount, ties=ties) / ideal


def ndcg_padded_batch(
    scores: Sequence[Sequence[float]],
    labels: Sequence[Sequence[float]],
    real: Sequence[Sequence[bool]],
    k: int | None,
    **options: object,
) -> list[float]:
    """nDCG@k of each row, keeping only the items where ``real`` is True."""
    out = []
    for row_scores, row_labels, row_real in zip(scores, labels, real, strict=True):
        kept = [i for i, keep in enumerate(row_real) if keep]
        out.append(
            ndcg_one_list(
                [row_scores[i] for i in kept],
                [row_labels[i] for i in kept],
                k,
                **options,  # type: ignore[arg-type]
            )
        )
    return out


# ---------------------------------------------------------------------------------------------
# Retrieval layout: flat rows grouped by query id (for RetrievalNDCG)


def ndcg_per_query(
    scores: Sequence[float],
    labels: Sequence[float],
    query_ids: Sequence[int],
    k: int | None,
    **options: object,
) -> dict[int, float]:
    """nDCG@k of each query of flat rows, by id; a query's items keep their row order."""
    queries: dict[int, tuple[list[float], list[float]]] = {}
    for score, label, query in zip(scores, labels, query_ids, strict=True):
        query_scores, query_labels = queries.setdefault(query, ([], []))
        query_scores.append(score)
        query_labels.append(label)
    return {
        query: ndcg_one_list(query_scores, query_labels, k, **options)  # type: ignore[arg-type]
        for query, (query_scores, query_labels) in queries.items()
    }
