"""Slow, obvious, loop-based references that the tests compare torch_ndcg against.

Nothing here imports torch_ndcg: gains, discounts, ranks and ideal DCGs are written out from
their textbook definitions, as plain Python loops (or, for the losses, plain dense ``[N, L, L]``
autograd), so that a bug in the shared kernels cannot hide on both sides.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import Tensor

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

GainOption = str | Callable[[Any], Any]
DiscountOption = str | Callable[[Any], Any]


def _log2(x: Any) -> Any:
    return torch.log2(x) if isinstance(x, Tensor) else math.log2(x)


def gain_function(gain: GainOption) -> Callable[[Any], Any]:
    """A ``gain`` option as a function of labels (numbers or tensors): 2^y - 1, y, or itself."""
    if gain == "exponential":
        return lambda y: 2.0**y - 1.0
    if gain == "linear":
        return lambda y: y * 1.0
    assert callable(gain)
    return gain


def discount_function(discount: DiscountOption) -> Callable[[Any], Any]:
    """A ``discount`` option as a function of 1-based ranks (numbers or tensors).

    ``"log2"``: 1 / log2(1 + r); ``"jarvelin"``: 1 / max(1, log2 r); a callable: itself.
    """
    if discount == "log2":
        return lambda r: 1.0 / _log2(r + 1)
    if discount == "jarvelin":
        return lambda r: (
            1.0 / (torch.log2(r).clamp(min=1) if isinstance(r, Tensor) else max(1.0, math.log2(r)))
        )
    assert callable(discount)
    return discount


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
    return _per_real_row(ndcg_one_list, scores, labels, real, k, **options)


def _per_real_row(
    one_list: Callable[..., float],
    scores: Sequence[Sequence[float]],
    labels: Sequence[Sequence[float]],
    real: Sequence[Sequence[bool]],
    k: int | None,
    **options: object,
) -> list[float]:
    """``one_list`` of each row's real items (where ``real`` is True)."""
    out = []
    for row_scores, row_labels, row_real in zip(scores, labels, real, strict=True):
        kept = [i for i, keep in enumerate(row_real) if keep]
        out.append(
            one_list([row_scores[i] for i in kept], [row_labels[i] for i in kept], k, **options)
        )
    return out


# ---------------------------------------------------------------------------------------------
# Losses: Burges' lambdas by loops, and dense [N, L, L] autograd versions of both losses


def _softplus(x: float) -> float:
    """log(1 + e^x), without overflow."""
    return x + math.log1p(math.exp(-x)) if x > 0 else math.log1p(math.exp(x))


def lambdaloss_lists(
    preds: Tensor,
    target: Tensor,
    mask: Tensor,
    *,
    k: int | None = None,
    sigma: float = 1.0,
    weighting: str = "lambdarank",
    mu: float = 10.0,
    gain: GainOption = "exponential",
    discount: DiscountOption = "log2",
    weight: Tensor | None = None,
) -> tuple[list[float], list[list[float]], list[bool]]:
    """Each list's LambdaLoss and its gradient by loops, and whether the list counts.

    Per list, over its real items (``mask``): gains ``G_i = w_i g(y_i) / Z`` with ``Z`` the
    ideal DCG@k of the unweighted gains (the list counts only where ``Z > 0``; otherwise loss
    and gradient 0), current 1-based ranks ``r`` (scores descending, ties in order of
    appearance), discount ``D``. For every pair with ``G_i > G_j`` and at least one of the two
    in the top k, the weight is ``|G_i - G_j| |D_k(r_i) - D_k(r_j)|`` (``D_k = D`` up to k,
    0 below) for "lambdarank", ``|G_i - G_j| |D(m) - D(m + 1)|`` with ``m = |r_i - r_j|`` for
    "ndcg2", their sum with ``mu`` times the latter for "ndcg2pp"; the pair loss is
    ``weight * log(1 + exp(-sigma (s_i - s_j)))`` and Burges' lambda
    ``-sigma * weight / (1 + exp(sigma (s_i - s_j)))`` goes to i, its negative to j.
    """
    gain_of, discount_of = gain_function(gain), discount_function(discount)
    n_lists, length = preds.shape
    losses: list[float] = []
    grads = [[0.0] * length for _ in range(n_lists)]
    counted: list[bool] = []
    for b in range(n_lists):
        items = [i for i in range(length) if bool(mask[b, i])]
        labels = [float(target[b, i]) for i in items]
        ideal = ideal_dcg_one_list(labels, k, gain=gain_of, discount=discount_of)
        counted.append(ideal > 0)
        if ideal <= 0:
            losses.append(0.0)
            continue
        scores = {i: float(preds[b, i]) for i in items}
        gains = {
            i: (1.0 if weight is None else float(weight[b, i])) * gain_of(y) / ideal
            for i, y in zip(items, labels, strict=True)
        }
        ranked = sorted(items, key=lambda i: -scores[i])  # Python's sort is stable
        rank = {item: position + 1 for position, item in enumerate(ranked)}
        cut = len(items) if k is None else k

        def disc_k(r: int, cut: int = cut) -> float:
            return discount_of(r) if r <= cut else 0.0

        total = 0.0
        for i in items:
            for j in items:
                if gains[i] <= gains[j] or min(rank[i], rank[j]) > cut:
                    continue
                gain_gap = gains[i] - gains[j]
                lambdarank = gain_gap * abs(disc_k(rank[i]) - disc_k(rank[j]))
                gap = abs(rank[i] - rank[j])
                ndcg2 = gain_gap * abs(discount_of(gap) - discount_of(gap + 1))
                pair_weight = {
                    "lambdarank": lambdarank,
                    "ndcg2": ndcg2,
                    "ndcg2pp": lambdarank + mu * ndcg2,
                }[weighting]
                diff = scores[i] - scores[j]
                total += pair_weight * _softplus(-sigma * diff)
                lam = -sigma * pair_weight / (1.0 + math.exp(sigma * diff))
                grads[b][i] += lam
                grads[b][j] -= lam
        losses.append(total)
    return losses, grads, counted


def burges_lambdas(
    preds: Tensor,
    target: Tensor,
    mask: Tensor,
    *,
    k: int | None = None,
    sigma: float = 1.0,
    weighting: str = "lambdarank",
    mu: float = 10.0,
) -> tuple[float, list[list[float]]]:
    """Mean LambdaLoss over lists with a relevant item, and its gradient, by loops.

    For a pair with label y_i > y_j, Burges' lambda is
    lambda_ij = -sigma * |dNDCG_ij| / (1 + exp(sigma (s_i - s_j))); item i gets lambda_ij and
    item j gets -lambda_ij. |dNDCG_ij| is the nDCG@k change of swapping the two items at their
    current ranks (scores descending, ties in order of appearance). Exponential gain, log2
    discount. For "ndcg2" the weight is |1/log2(1+m) - 1/log2(2+m)| |G_i - G_j| / IDCG with m the
    rank gap; "ndcg2pp" adds mu times that to the lambdarank weight. `lambdaloss_lists`, averaged.
    """
    losses, grads, counted = lambdaloss_lists(
        preds, target, mask, k=k, sigma=sigma, weighting=weighting, mu=mu
    )
    scale = 1.0 / max(sum(counted), 1)
    return sum(losses) * scale, [[g * scale for g in row] for row in grads]


def _ranks_first(scores: Tensor, mask: Tensor) -> Tensor:
    """0-based ranks, descending, ties in order of appearance, padded items last."""
    keyed = torch.where(mask, scores, float("-inf"))
    order = torch.sort(keyed, dim=-1, descending=True, stable=True).indices
    return torch.empty_like(order).scatter_(
        -1, order, torch.arange(scores.shape[-1]).expand_as(order)
    )


def _dense_ideal(target: Tensor, mask: Tensor, k: int | None) -> Tensor:
    labels = torch.where(mask, target.to(torch.float64), 0.0)
    best = labels.sort(dim=-1, descending=True).values
    gains = 2.0**best - 1.0
    discounts = 1.0 / torch.log2(torch.arange(2, labels.shape[-1] + 2, dtype=torch.float64))
    if k is not None:
        discounts[k:] = 0
    return (gains * discounts).sum(-1)


def lambdaloss_dense(
    preds: Tensor,
    target: Tensor,
    mask: Tensor,
    *,
    k: int | None = None,
    sigma: float = 1.0,
    weighting: str = "lambdarank",
    mu: float = 10.0,
    reduction: str = "mean",
) -> Tensor:
    """LambdaLoss with every [N, L, L] pair tensor materialised; autograd does the backward."""
    length = preds.shape[-1]
    ideal = _dense_ideal(target, mask, k).to(preds.dtype)
    gains = torch.where(mask, 2.0 ** target.to(preds.dtype) - 1.0, 0.0) / torch.where(
        ideal > 0, ideal, 1.0
    ).unsqueeze(-1)
    ranks = _ranks_first(preds.detach(), mask)
    disc = 1.0 / torch.log2(ranks.to(preds.dtype) + 2.0)
    cut = length if k is None else k
    disc_k = torch.where(ranks < cut, disc, 0.0)
    pair = (target[:, :, None] > target[:, None, :]) & mask[:, :, None] & mask[:, None, :]
    pair &= torch.minimum(ranks[:, :, None], ranks[:, None, :]) < cut
    gain_gap = (gains[:, :, None] - gains[:, None, :]).abs()
    lambdarank = gain_gap * (disc_k[:, :, None] - disc_k[:, None, :]).abs()
    gap = (ranks[:, :, None] - ranks[:, None, :]).abs().clamp(min=1).to(preds.dtype)
    delta = (1.0 / torch.log2(1.0 + gap) - 1.0 / torch.log2(2.0 + gap)).abs()
    ndcg2 = gain_gap * delta
    weight = {"lambdarank": lambdarank, "ndcg2": ndcg2, "ndcg2pp": lambdarank + mu * ndcg2}[
        weighting
    ]
    weight = torch.where(pair, weight, 0.0).detach()
    diff = preds[:, :, None] - preds[:, None, :]
    per_list = (weight * torch.nn.functional.softplus(-sigma * diff)).sum(dim=(1, 2))
    return _reduce(per_list, ideal > 0, reduction)


def ideal_dcgs(
    target: Tensor,
    mask: Tensor,
    k: int | None,
    *,
    gain: GainOption = "exponential",
    discount: DiscountOption = "log2",
) -> Tensor:
    """Ideal DCG@k of each list's real items, by loops (`ideal_dcg_one_list`), float64 ``[N]``."""
    gain_of, discount_of = gain_function(gain), discount_function(discount)
    return torch.tensor(
        [
            ideal_dcg_one_list(
                [float(y) for y, real in zip(labels, keep, strict=True) if real],
                k,
                gain=gain_of,
                discount=discount_of,
            )
            for labels, keep in zip(target.tolist(), mask.tolist(), strict=True)
        ],
        dtype=torch.float64,
    )


def approx_ndcg_dense(
    preds: Tensor,
    target: Tensor,
    mask: Tensor,
    *,
    temperature: float = 1.0,
    k: int | None = None,
    reduction: str = "mean",
    gain: GainOption = "exponential",
    discount: DiscountOption = "log2",
    weight: Tensor | None = None,
) -> Tensor:
    """ApproxNDCG with the [N, L, L] sigmoid matrix materialised; autograd does the backward.

    Smooth ranks ``1 + sum_{j != i, real} sigmoid((s_j - s_i) / T)``; terms ``w_i g(y_i)
    D(rank_i)``, times ``sigmoid((k + 1/2 - rank_i) / T)`` in the lists with more than ``k``
    real items; the loss ``1 - sum / Z`` with ``Z`` the ideal DCG@k of the unweighted gains
    (0 where ``Z`` is 0).
    """
    length = preds.shape[-1]
    diff = (preds[:, None, :] - preds[:, :, None]) / temperature  # [b, i, j] = s_j - s_i
    others = mask[:, None, :] & ~torch.eye(length, dtype=torch.bool)
    ranks = 1.0 + torch.where(others, torch.sigmoid(diff), 0.0).sum(-1)
    item_gains = gain_function(gain)(torch.where(mask, target, 0).to(preds.dtype))
    if weight is not None:
        item_gains = item_gains * weight.to(preds.dtype)
    gains = torch.where(mask, item_gains, 0.0)
    terms = gains * discount_function(discount)(ranks)
    if k is not None:
        cut = mask.sum(-1, keepdim=True) > k
        terms = torch.where(cut, terms * torch.sigmoid((k + 0.5 - ranks) / temperature), terms)
    terms = torch.where(mask, terms, 0.0)
    ideal = ideal_dcgs(target, mask, k, gain=gain, discount=discount).to(preds.dtype)
    per_list = torch.where(ideal > 0, 1 - terms.sum(-1) / torch.where(ideal > 0, ideal, 1.0), 0.0)
    return _reduce(per_list, ideal > 0, reduction)


def _reduce(per_list: Tensor, counted: Tensor, reduction: str) -> Tensor:
    if reduction == "none":
        return per_list
    if reduction == "sum":
        return per_list.sum()
    return per_list.sum() / max(int(counted.sum()), 1)


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


def rows_by_query(query_ids: Sequence[int]) -> dict[int, list[int]]:
    """The row numbers of each query id, in row order; the ids in ascending order."""
    queries: dict[int, list[int]] = {}
    for row, query in enumerate(query_ids):
        queries.setdefault(query, []).append(row)
    return dict(sorted(queries.items()))


# ---------------------------------------------------------------------------------------------
# NeuralNDCG (Pobrotyn & Białobrzeski 2021), from the paper: NeuralSort, then Sinkhorn scaling


def neural_sort_matrix(scores: Tensor, temperature: float) -> Tensor:
    """Deterministic NeuralSort (Grover et al. 2019) of one list of ``n`` scores: ``[n, n]``.

    Row ``i`` (1-based rank position) is the softmax over items ``j`` of
    ``((n + 1 - 2 i) s_j - sum_k |s_j - s_k|) / T``, written entry by entry.
    """
    n = scores.shape[0]
    rows = []
    for i in range(1, n + 1):
        logits = []
        for j in range(n):
            spread = sum((scores[j] - scores[m]).abs() for m in range(n))
            logits.append(((n + 1 - 2 * i) * scores[j] - spread) / temperature)
        rows.append(torch.softmax(torch.stack(logits), dim=0))
    return torch.stack(rows)


def neural_ndcg_dense(
    preds: Tensor,
    target: Tensor,
    mask: Tensor,
    *,
    temperature: float = 1.0,
    k: int | None = None,
    max_iter: int = 50,
    tol: float = 1e-6,
    reduction: str = "mean",
    gain: GainOption = "exponential",
    discount: DiscountOption = "log2",
    weight: Tensor | None = None,
) -> Tensor:
    """NeuralNDCG (exponential gain and log2 discount by default); autograd does the backward.

    Each list's real items (``mask``) get their NeuralSort matrix; all matrices are then scaled
    together (columns, then rows, per iteration) until every row and column of the batch sums
    to 1 within ``tol``, or ``max_iter`` iterations. A list's loss is
    ``1 - sum_{i <= k} sum_j P_ij G_j D(i) / IDCG@k``, with ``G_j = w_j g(y_j)`` (``weight``)
    and the ideal DCG@k of the unweighted gains.
    """
    per_list_items = [preds[b][mask[b]] for b in range(preds.shape[0])]
    matrices = [neural_sort_matrix(scores, temperature) for scores in per_list_items]
    for _ in range(max_iter):
        matrices = [m / m.sum(dim=0, keepdim=True) for m in matrices]
        matrices = [m / m.sum(dim=1, keepdim=True) for m in matrices]
        worst = max(
            [0.0]
            + [
                float((m.detach().sum(dim=d) - 1).abs().max())
                for m in matrices
                if m.numel()
                for d in (0, 1)
            ]
        )
        if worst < tol:
            break
    ideal = ideal_dcgs(target, mask, k, gain=gain, discount=discount).to(preds.dtype)
    gain_of, discount_of = gain_function(gain), discount_function(discount)
    losses = []
    for b, matrix in enumerate(matrices):
        gains = gain_of(target[b][mask[b]].to(preds.dtype))
        if weight is not None:
            gains = gains * weight[b][mask[b]].to(preds.dtype)
        dcg = preds.new_zeros(())
        for i in range(matrix.shape[0]):
            if k is None or i < k:
                dcg = dcg + (matrix[i] * gains).sum() * discount_of(i + 1)
        losses.append(1 - dcg / ideal[b] if ideal[b] > 0 else preds.new_zeros(()))
    return _reduce(torch.stack(losses), ideal > 0, reduction)


def closed_form_update(
    sums: list[float], reference: list[float], old: list[float], bias_norm: float
) -> list[float]:
    """Hu et al.'s update ``(S[i] / R[i]) ** (1 / (p + 1))``; ``old`` where S[i] or R[i] is 0."""
    exponent = 1.0 / (1.0 + bias_norm)
    return [
        (s / r) ** exponent if s > 0 and r > 0 else t
        for s, r, t in zip(sums, reference, old, strict=True)
    ]


def bias_step(
    per_list: list[tuple[list[float], list[float], dict[int, float]]],
    t_plus: list[float],
    t_minus: list[float],
    bias_norm: float,
    match_exposure: bool,
) -> tuple[list[list[float]], list[float], list[float]]:
    """The four statistics ``[S+, S-, R+, R-]`` and the updated biases from each list's sums.

    ``per_list`` holds each list's ``S+`` and ``S-`` by position and how often it shows each
    position relative to the top one (1 or 0 for one session; the share of its sessions that
    show it for summed sessions). ``R[i]`` is the top position's statistic summed over the
    lists, each times that share (``match_exposure``), or over every list (``R[i] = S[0]``,
    the paper's form).
    """
    n_positions = len(t_plus)
    s_plus, s_minus = [0.0] * n_positions, [0.0] * n_positions
    r_plus, r_minus = [0.0] * n_positions, [0.0] * n_positions
    for plus, minus, shown in per_list:
        for i in range(n_positions):
            s_plus[i] += plus[i]
            s_minus[i] += minus[i]
            share = shown.get(i, 0.0) if match_exposure else 1.0
            r_plus[i] += plus[0] * share
            r_minus[i] += minus[0] * share
    return (
        [s_plus, s_minus, r_plus, r_minus],
        closed_form_update(s_plus, r_plus, t_plus, bias_norm),
        closed_form_update(s_minus, r_minus, t_minus, bias_norm),
    )


def unbiased_lambdarank_step(
    preds: list[list[float]],
    clicks: list[list[int]],
    positions: list[list[int]],
    t_plus: list[float],
    t_minus: list[float],
    *,
    k: int | None = None,
    sigma: float = 1.0,
    bias_norm: float = 0.0,
    match_exposure: bool = True,
    gain: GainOption = "exponential",
    discount: DiscountOption = "log2",
) -> tuple[list[float], list[list[float]], list[float], list[float]]:
    """One step of Unbiased LambdaMART (Hu et al., WWW 2019, eqs. 12-13), loop by loop.

    Per list: current ranks by score (ties in order of appearance, items at position -1 left
    out), ``|delta nDCG@k|`` of swapping each clicked/unclicked pair (exponential gain = click,
    log2 discount, ideal DCG@k of the clicks), pair loss
    ``L = |delta nDCG| log(1 + exp(-sigma (s_w - s_l)))``. Returns the debiased loss of each
    list (``L / (t+[i] t-[j])`` summed), the statistics ``[S+, S-, R+, R-]`` with
    ``S+[i] = sum Z L / t-[j]`` and ``S-[j] = sum Z L / t+[i]`` (``Z`` the list's ideal DCG:
    each click counts alike, whatever the session's other clicks; `bias_step` for ``R``), and the
    updated biases ``(S[i] / R[i]) ** (1 / (p + 1))`` (unchanged where ``S[i]`` or ``R[i]``
    is 0).

    Other ``gain`` and ``discount`` options: the gains ``g(c)`` of the clicks, a pair for each
    ``g(c_w) > g(c_l)`` with ``|delta nDCG@k| = (g(c_w) - g(c_l)) |D_k(r_w) - D_k(r_l)| / Z``,
    ``Z`` the ideal DCG@k of the gains (2^c - 1 = c, log2 discount: the paper's).
    """
    gain_of, discount_of = gain_function(gain), discount_function(discount)
    n_positions = len(t_plus)
    losses = []
    per_list = []
    for scores, list_clicks, list_positions in zip(preds, clicks, positions, strict=True):
        s_plus = [0.0] * n_positions
        s_minus = [0.0] * n_positions
        shown = [i for i, position in enumerate(list_positions) if position != -1]
        order = sorted(shown, key=lambda i: (-scores[i], i))
        rank = {item: r + 1 for r, item in enumerate(order)}
        cut = len(shown) if k is None else k
        gains = {i: float(gain_of(float(list_clicks[i]))) for i in shown}
        ideal = ideal_dcg_one_list(list(gains.values()), k, gain=lambda g: g, discount=discount_of)
        total = 0.0
        for w in shown:
            for lo in shown:
                if not gains[w] > gains[lo] or ideal == 0:
                    continue
                d_w = discount_of(rank[w]) if rank[w] <= cut else 0.0
                d_l = discount_of(rank[lo]) if rank[lo] <= cut else 0.0
                delta = (gains[w] - gains[lo]) * abs(d_w - d_l) / ideal
                pair = delta * math.log1p(math.exp(-sigma * (scores[w] - scores[lo])))
                i, j = list_positions[w], list_positions[lo]
                total += pair / (t_plus[i] * t_minus[j])
                s_plus[i] += pair * ideal / t_minus[j]  # the statistics leave out 1 / ideal
                s_minus[j] += pair * ideal / t_plus[i]
        losses.append(total)
        per_list.append((s_plus, s_minus, {list_positions[i]: 1.0 for i in shown}))
    return (losses, *bias_step(per_list, t_plus, t_minus, bias_norm, match_exposure))


def aggregated_unbiased_lambdarank_step(
    preds: list[list[float]],
    clicks: list[list[list[float]]],
    views: list[list[list[float]]],
    t_plus: list[float],
    t_minus: list[float],
    *,
    k: int | None = None,
    sigma: float = 1.0,
    bias_norm: float = 0.0,
    match_exposure: bool = True,
    discount: DiscountOption = "log2",
) -> tuple[list[float], list[list[float]], list[float], list[float]]:
    """One step of Unbiased LambdaRank on per-item, per-position click and view counts.

    Per list: each item's click mass ``A[w] = sum_i clicks[w][i] / t+[i]`` and non-click mass
    ``B[l] = sum_j (views[l][j] - clicks[l][j]) / t-[j]``; every ordered pair of two different
    items with views has the loss ``L = |D(r_w) - D(r_l)| log(1 + exp(-sigma (s_w - s_l)))``
    (``D`` the discount of the current 1-based rank among those items, ties in order of
    appearance, 0 beyond k), weighted by ``A[w] B[l]``. ``S+[i] = sum clicks[w][i] B[l] L``,
    ``S-[j] = sum (views - clicks)[l][j] A[w] L``; a list shows position ``i`` as often as its
    items' views there add up to, relative to the top position's; ``R`` and the biases as in
    `bias_step`. ``discount`` is ``D`` (log2 by default).
    """
    discount_of = discount_function(discount)
    n_positions = len(t_plus)
    losses = []
    per_list = []
    for scores, list_clicks, list_views in zip(preds, clicks, views, strict=True):
        s_plus = [0.0] * n_positions
        s_minus = [0.0] * n_positions
        items = range(len(scores))
        # Only the items shown (some views) are ranked: the others were never in the list.
        shown = [i for i in items if sum(list_views[i]) > 0]
        order = sorted(shown, key=lambda i: (-scores[i], i))
        rank = {item: r + 1 for r, item in enumerate(order)}
        cut = len(scores) if k is None else k
        skips = [
            [v - c for c, v in zip(cs, vs, strict=True)]
            for cs, vs in zip(list_clicks, list_views, strict=True)
        ]
        won = [sum(c / t for c, t in zip(cs, t_plus, strict=True)) for cs in list_clicks]
        lost = [sum(n / t for n, t in zip(ns, t_minus, strict=True)) for ns in skips]
        total = 0.0
        for w in shown:
            for lo in shown:
                if w == lo:
                    continue
                d_w = discount_of(rank[w]) if rank[w] <= cut else 0.0
                d_l = discount_of(rank[lo]) if rank[lo] <= cut else 0.0
                pair = abs(d_w - d_l) * math.log1p(math.exp(-sigma * (scores[w] - scores[lo])))
                total += won[w] * lost[lo] * pair
                for i in range(n_positions):
                    s_plus[i] += list_clicks[w][i] * lost[lo] * pair
                    s_minus[i] += skips[lo][i] * won[w] * pair
        losses.append(total)
        views_at = [sum(v[i] for v in list_views) for i in range(n_positions)]
        shares = {i: views_at[i] / views_at[0] for i in range(n_positions) if views_at[0] > 0}
        per_list.append((s_plus, s_minus, shares))
    return (losses, *bias_step(per_list, t_plus, t_minus, bias_norm, match_exposure))


# ---------------------------------------------------------------------------------------------
# Option-by-option references (tests/test_options_metrics.py): padded DCG, catalogs, aggregates


def dcg_padded_batch(
    scores: Sequence[Sequence[float]],
    labels: Sequence[Sequence[float]],
    real: Sequence[Sequence[bool]],
    k: int | None,
    **options: object,
) -> list[float]:
    """DCG@k of each row, keeping only the items where ``real`` is True (0 for no item)."""
    return _per_real_row(dcg_one_list, scores, labels, real, k, **options)


def catalog_ndcg_one_user(
    scores: Sequence[float],
    item_ids: Sequence[int],
    grades: dict[int, float],
    excluded: set[int],
    k: int | None,
    *,
    gain: GainFn = exponential_gain,
    discount: DiscountFn = log2_discount,
    ties: str = "average",
    empty_value: float = 0.0,
) -> float:
    """nDCG@k of one user against a catalog whose items ``item_ids`` score ``scores``.

    Excluded items take no rank; every other item of the catalog is ranked by its score (ties
    "first": by position in ``item_ids``, the item index). An item has the grade ``grades``
    gives it, 0 if none. The ideal DCG ranks every grade of ``grades``, also those of items
    that are not in ``item_ids`` (a relevant item the catalog shard never scores).
    """
    kept = [i for i, item in enumerate(item_ids) if item not in excluded]
    ranked_scores = [scores[i] for i in kept]
    ranked_labels = [grades.get(item_ids[i], 0.0) for i in kept]
    ideal = ideal_dcg_one_list(list(grades.values()), k, gain=gain, discount=discount)
    if ideal == 0:
        return empty_value
    value = dcg_one_list(ranked_scores, ranked_labels, k, gain=gain, discount=discount, ties=ties)
    return value / ideal


def lower_median(values: Sequence[float]) -> float:
    """The lower of the two middle values (the middle one for an odd count)."""
    ordered = sorted(values)
    return ordered[(len(ordered) - 1) // 2]


# ---------------------------------------------------------------------------------------------
# Softmax cross-entropy losses (ListNet / softmax loss, XE-NDCG) and peers' formulas, written
# from their papers and documentation, in float64 Python loops over each list's real items.


def _log_softmax(values: Sequence[float]) -> list[float]:
    top = max(values)
    log_total = top + math.log(sum(math.exp(v - top) for v in values))
    return [v - log_total for v in values]


def cross_entropy_lists(
    preds: Sequence[Sequence[float]],
    targets: Sequence[Sequence[float]],
    real: Sequence[Sequence[bool]],
    weights: Sequence[Sequence[float]] | None = None,
) -> tuple[list[float], list[list[float]]]:
    """Per list ``-sum_i w_i t_i log softmax(s)_i`` over its real items, and its gradient
    ``q_i sum_j w_j t_j - w_i t_i`` (``q`` the softmax), 0 on padding. ``targets`` already
    normalised (all 0 for a list that counts for nothing)."""
    losses, grads = [], []
    for row, (scores, target, keep) in enumerate(zip(preds, targets, real, strict=True)):
        items = [i for i, k in enumerate(keep) if k]
        grad = [0.0] * len(scores)
        if not items:
            losses.append(0.0)
            grads.append(grad)
            continue
        w = [1.0 if weights is None else float(weights[row][i]) for i in items]
        t = [float(target[i]) for i in items]
        log_q = _log_softmax([float(scores[i]) for i in items])
        losses.append(-sum(wi * ti * lq for wi, ti, lq in zip(w, t, log_q, strict=True)))
        mass = sum(wi * ti for wi, ti in zip(w, t, strict=True))
        for position, i in enumerate(items):
            grad[i] = math.exp(log_q[position]) * mass - w[position] * t[position]
        grads.append(grad)
    return losses, grads


def normalised_gains(
    target: Sequence[Sequence[float]],
    real: Sequence[Sequence[bool]],
    gain: GainOption = "exponential",
    noise: Sequence[Sequence[float]] | None = None,
) -> list[list[float]]:
    """Each list's target distribution: ``G_i / sum_j G_j`` (softmax loss, ListNet) or, with
    ``noise`` gamma, ``phi_i / sum_j phi_j`` with ``phi = G + 1 - gamma`` (XE-NDCG, Bruch 2021:
    ``2^y - gamma`` for the exponential gain); all 0 where no real item has a positive gain."""
    g = gain_function(gain)
    out = []
    for row, (labels, keep) in enumerate(zip(target, real, strict=True)):
        gains = [float(g(float(y))) if k else 0.0 for y, k in zip(labels, keep, strict=True)]
        if not any(value > 0 for value in gains):
            out.append([0.0] * len(gains))
            continue
        if noise is not None:
            gains = [
                value + 1.0 - float(noise[row][i]) if keep[i] else 0.0
                for i, value in enumerate(gains)
            ]
        total = sum(gains)
        out.append([value / total for value in gains])
    return out


def rax_softmax_loss_normalized(
    scores: Sequence[Sequence[float]], labels: Sequence[Sequence[float]], where: Any
) -> float:
    """Rax's ``softmax_loss(scores, labels, where=where,
    label_fn=rax.utils.normalize_probabilities)`` with its default mean: masked labels 0 and
    scores -inf; labels normalised over the valid items (uniform where they sum to 0);
    ``-sum_valid p_i log_softmax(s)_i``; the mean over lists with a valid item."""
    losses = []
    for s, y, keep in zip(scores, labels, where, strict=True):
        items = [i for i, k in enumerate(keep) if k]
        if not items:
            continue
        total = sum(float(y[i]) for i in items)
        p = [float(y[i]) / total if total > 0 else 1.0 / len(items) for i in items]
        log_q = _log_softmax([float(s[i]) for i in items])
        losses.append(-sum(pi * lq for pi, lq in zip(p, log_q, strict=True)))
    return sum(losses) / len(losses) if losses else 0.0


TF_RANKING_EPSILON = 1e-10


def tf_ranking_softmax_loss(
    labels: Sequence[Sequence[float]], logits: Sequence[Sequence[float]]
) -> float:
    """TF-Ranking's ``SoftmaxLoss`` (``losses_impl``), reduction ``SUM_BY_NONZERO_WEIGHTS``:
    items with a label below 0 are padding (label 0, logit ``log 1e-10``, which stays in the
    softmax); each list's labels over their sum ``S`` (``1e-10`` each where ``S = 0``), its
    cross-entropy with the softmax of all its logits weighted by ``S``; the sum over lists
    divided by the number of lists with ``S != 0``."""
    total, counted = 0.0, 0
    for y, s in zip(labels, logits, strict=True):
        valid = [float(v) >= 0 for v in y]
        clean = [float(v) if ok else 0.0 for v, ok in zip(y, valid, strict=True)]
        z = [
            float(v) if ok else math.log(TF_RANKING_EPSILON) for v, ok in zip(s, valid, strict=True)
        ]
        label_sum = sum(clean)
        padded = clean if label_sum > 0 else [TF_RANKING_EPSILON] * len(clean)
        padded = [v if ok else 0.0 for v, ok in zip(padded, valid, strict=True)]
        norm = sum(padded)
        p = [v / norm if norm else 0.0 for v in padded]
        log_q = _log_softmax(z)
        total += label_sum * -sum(pi * lq for pi, lq in zip(p, log_q, strict=True))
        counted += label_sum != 0
    return total / counted if counted else 0.0


def allrank_list_net(
    y_pred: Sequence[Sequence[float]],
    y_true: Sequence[Sequence[float]],
    eps: float = 1e-10,
    padded_value_indicator: float = -1,
) -> float:
    """allRank's ``listNet``: padded items (label -1) at -inf in both softmaxes; the target is
    the softmax of the labels; ``-sum true_i log(softmax(pred)_i + eps)``; the mean over all
    lists."""
    losses = []
    for s, y in zip(y_pred, y_true, strict=True):
        items = [i for i, v in enumerate(y) if float(v) != padded_value_indicator]
        true = [math.exp(v) for v in _log_softmax([float(y[i]) for i in items])]
        log_q = _log_softmax([float(s[i]) for i in items])
        terms = zip(true, log_q, strict=True)
        losses.append(-sum(t * math.log(math.exp(lq) + eps) for t, lq in terms))
    return sum(losses) / len(losses)


def pl_rank_estimate(
    scores: Sequence[float],
    rho: Sequence[float],
    rankings: Sequence[Sequence[int]],
    k: int,
    discount: DiscountFn = log2_discount,
) -> tuple[list[float], float]:
    r"""PL-Rank's gradient estimate of a Plackett-Luce policy's expected metric, by loops.

    Oosterhuis (SIGIR 2021), the PL-Rank-2 formula that PL-Rank-3 (SIGIR 2022) computes faster:
    with $\theta_i$ = ``discount(i)`` for $i \le k$, rewards $\rho$ and each sampled
    ranking $y$ (its top ``k`` real items, ``rankings``), item $d$ at rank $r_d$ ($> k$ if
    not drawn) gets

    $$
    \sum_{i = r_d + 1}^{k} \theta_i \rho_{y_i}
    + \sum_{i = 1}^{\min(r_d, k)} \pi(d \mid y_{1:i-1})
      \Bigl(\theta_i \rho_d - \sum_{j \ge i} \theta_j \rho_{y_j}\Bigr),
    $$

    with $\pi(d \mid y_{1:i-1}) = e^{s_d} / \sum_{d' \notin y_{1:i-1}} e^{s_{d'}}$ summed
    out loud. Returns the mean over the rankings of each item's estimate, and the mean metric.
    """
    n = len(scores)
    estimate = [0.0] * n
    metric = 0.0
    for ranking in rankings:
        ranking = list(ranking)[: min(k, n)]
        reward = [discount(i + 1) * rho[d] for i, d in enumerate(ranking)]
        metric += sum(reward)
        for d in range(n):
            rank = ranking.index(d) + 1 if d in ranking else len(ranking) + 1
            value = sum(reward[rank:])  # positions rank + 1 .. k (0-based slice from rank)
            for i in range(1, min(rank, len(ranking)) + 1):
                remaining = [e for e in range(n) if e not in ranking[: i - 1]]
                probability = math.exp(scores[d]) / sum(math.exp(scores[e]) for e in remaining)
                value += probability * (discount(i) * rho[d] - sum(reward[i - 1 :]))
            estimate[d] += value
    count = len(rankings)
    return [value / count for value in estimate], metric / count


def pl_expected_metric(
    scores: Tensor, rho: Sequence[float], k: int, discount: DiscountFn = log2_discount
) -> Tensor:
    r"""The exact expected $\sum_{i \le k} \theta_i \rho_{y_i}$ of the Plackett-Luce policy.

    Every ordered top-``k`` of the 1-D ``scores``' items is enumerated with its probability
    $\prod_i e^{s_{y_i}} / \sum_{d \notin y_{1:i-1}} e^{s_d}$ (differentiable: autograd of
    the result is the exact gradient). For lists of a few items only.
    """
    import itertools

    n = scores.shape[0]
    total = scores.new_zeros(())
    for prefix in itertools.permutations(range(n), min(k, n)):
        probability = scores.new_ones(())
        left = list(range(n))
        value = 0.0
        for i, d in enumerate(prefix):
            probability = probability * torch.softmax(scores[left], 0)[left.index(d)]
            left.remove(d)
            value += discount(i + 1) * rho[d]
        total = total + probability * value
    return total


def trec_ndcg_cut(
    run: dict[str, dict[str, float]], qrels: dict[str, dict[str, int]], k: int
) -> dict[str, float]:
    """trec_eval's ``ndcg_cut.k`` of every run query that the qrels judge.

    From its definition (``m_ndcg_cut.c``): the run ranked by score descending, ties by docno
    descending; gain = the qrels grade (negative as 0, unjudged 0), discount 1/log2(1 + rank);
    the ideal DCG from every judged grade of the query, sorted descending; 0 where it is 0.
    """
    values = {}
    for query, scores in run.items():
        if query not in qrels:
            continue
        grades = {doc: max(grade, 0) for doc, grade in qrels[query].items()}
        ranking = sorted(scores, key=lambda doc: (scores[doc], doc), reverse=True)
        dcg = sum(grades.get(doc, 0) / math.log2(r + 2) for r, doc in enumerate(ranking[:k]))
        best = sorted(grades.values(), reverse=True)[:k]
        ideal = sum(grade / math.log2(r + 2) for r, grade in enumerate(best))
        values[query] = dcg / ideal if ideal > 0 else 0.0
    return values


# ---------------------------------------------------------------------------------------------
# RankNet and ListMLE: plain loops of Burges et al. (2005), Xia et al. (2008), Lan et al. (2014)


def ranknet_lists(
    preds: Sequence[Sequence[float]],
    target: Sequence[Sequence[float]],
    real: Sequence[Sequence[bool]],
    weights: Sequence[Sequence[float]] | None = None,
    sigma: float = 1.0,
) -> list[float]:
    """Per list ``sum over y_w > y_l of v_w log(1 + exp(-sigma (s_w - s_l)))``, real items only."""
    losses = []
    for row, (scores, labels, keep) in enumerate(zip(preds, target, real, strict=True)):
        total = 0.0
        for w, loser in itertools.permutations(range(len(scores)), 2):
            if keep[w] and keep[loser] and labels[w] > labels[loser]:
                v = 1.0 if weights is None else float(weights[row][w])
                total += v * _softplus(-sigma * (float(scores[w]) - float(scores[loser])))
        losses.append(total)
    return losses


def plackett_luce_nll(scores: Sequence[float], factors: Sequence[float]) -> float:
    """``-sum_i a_i log(exp(s_i) / sum_{j >= i} exp(s_j))`` of scores in their ranked order."""
    total = 0.0
    for i, (score, factor) in enumerate(zip(scores, factors, strict=True)):
        rest = scores[i:]
        top = max(rest)
        total += factor * (top + math.log(sum(math.exp(s - top) for s in rest)) - score)
    return total


def p_listmle_weights(n: int) -> list[float]:
    """Lan et al.'s position weights as sentence-transformers' PListMLELoss sets them by default:
    ``2^(n - r) - 1`` at the 0-based position ``r``, normalised to sum 1."""
    raw = [2.0 ** (n - r) - 1 for r in range(n)]
    return [w / sum(raw) for w in raw]


def listmle_lists(
    preds: Sequence[Sequence[float]],
    target: Sequence[Sequence[float]],
    real: Sequence[Sequence[bool]],
    weights: Sequence[Sequence[float]] | None = None,
    position_aware: bool = False,
) -> list[float]:
    """Per list ListMLE of the labels' order, ties of labels by score ascending (0 for a list of
    fewer than two different labels)."""
    losses = []
    for row, (scores, labels, keep) in enumerate(zip(preds, target, real, strict=True)):
        items = [i for i, k in enumerate(keep) if k]
        if len({float(labels[i]) for i in items}) < 2:
            losses.append(0.0)
            continue
        items.sort(key=lambda i: (-float(labels[i]), float(scores[i])))
        alpha = p_listmle_weights(len(items)) if position_aware else [1.0] * len(items)
        v = [1.0 if weights is None else float(weights[row][i]) for i in items]
        factors = [a * w for a, w in zip(alpha, v, strict=True)]
        losses.append(plackett_luce_nll([float(scores[i]) for i in items], factors))
    return losses


def listmle_worst_order(scores: Sequence[float], labels: Sequence[float]) -> float:
    """The largest ListMLE loss over every order of the items consistent with the labels."""
    consistent = [
        order
        for order in itertools.permutations(range(len(scores)))
        if all(labels[a] >= labels[b] for a, b in itertools.pairwise(order))
    ]
    return max(
        plackett_luce_nll([float(scores[i]) for i in order], [1.0] * len(order))
        for order in consistent
    )


def allrank_rank_net(y_pred: Tensor, y_true: Tensor) -> Tensor:
    """allRank's rankNet, restated from its formula: the mean over every pair of real items of
    the batch whose labels differ (padding -1), of ``log(1 + exp(-(s_w - s_l)))``."""
    real = y_true != -1
    won = (y_true[:, :, None] > y_true[:, None, :]) & real[:, :, None] & real[:, None, :]
    gaps = y_pred[:, :, None] - y_pred[:, None, :]
    return torch.nn.functional.softplus(-gaps)[won].mean()


def allrank_list_mle(y_pred: Tensor, y_true: Tensor, eps: float = 1e-10) -> Tensor:
    """allRank's listMLE, restated from its formula, on lists without tied labels (padding -1,
    sorted last): ``log(sum_{j >= i} exp(s_j - max) + eps) - (s_i - max)`` summed over the real
    positions, the mean over the lists."""
    order = y_true.argsort(dim=-1, descending=True)
    real = y_true.gather(-1, order) != -1
    s = y_pred.gather(-1, order).masked_fill(~real, -torch.inf)
    centred = s - s.amax(-1, keepdim=True)
    sums = centred.exp().flip(-1).cumsum(-1).flip(-1)
    terms = torch.where(real, torch.log(sums + eps) - centred, 0)
    return terms.sum(-1).mean()
