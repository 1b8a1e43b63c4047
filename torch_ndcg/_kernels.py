r"""Gains, discounts, ranking, tie-averaged DCG, ideal DCG and normalising: the formulas.

The package computes these nowhere else; each function here reads against the formula in its
docstring. With gain $g$ and discount $d$ of 1-based ranks, a list ranked by its scores
(best first) has

$$
\mathrm{DCG@}k = \sum_{r \le k} g(y_{(r)}) \, d(r), \qquad
\mathrm{nDCG@}k = \mathrm{DCG@}k \, / \, \mathrm{IDCG@}k,
$$

where the ideal DCG ranks the list by its labels. Lists live on the last dimension of 2-D
``[N, L]`` tensors; ``mask`` is ``True`` for real items, and padded items have a gain of 0, so
they never count. Items are ranked by keys with the order of their scores in which padding lies
below every real item (`torch_ndcg._dcg_paths.ranking_keys`); which path computes what, and
when, is `torch_ndcg._dcg_paths`' business (here only the ways of the tie averaging, bounded in
memory, and of the ideal DCG, from the top labels or from label counts, which it picks).
Everything here assumes checked input.

The matrix products of the package run in the dtypes they are given only with autocast off:
callers enter `full_precision` once around them. The gains' properties (monotone, declared,
their largest label) are `torch_ndcg._options`'; their formulas are computed here (`gains`).
"""

from __future__ import annotations

import contextlib
import functools
import math
from collections.abc import Callable, Iterator, Sequence
from typing import NamedTuple, cast

import torch
from torch import Tensor

from torch_ndcg import _options, _tables
from torch_ndcg._options import Discount, EmptyTargetAction, Gain, GainFn, accumulate_dtype

Select = Callable[[Tensor, int], tuple[Tensor, Tensor]]


class Lists(NamedTuple):
    """``[N, L]`` lists as the helpers take them: labels, what is real, scores, what is ranked.

    ``mask`` is ``True`` for real items (``None``: all); ``ranked`` ``True`` for the real items
    that take a rank (``None``: all), the others counting in the ideal DCG only.
    """

    target: Tensor
    mask: Tensor | None = None
    preds: Tensor | None = None
    ranked: Tensor | None = None


def as_dtype(tensor: Tensor, dtype: torch.dtype) -> Tensor:
    """``tensor.to(dtype)``, without the call where it is that dtype already.

    A ``Tensor.to`` that changes nothing still parses its arguments: about a microsecond of
    host time, several times per call of a hot path on small input. The dtype is passed by
    keyword, which ``Tensor.to`` parses faster than a positional one (1.8 against 2.5 us).
    """
    return tensor if tensor.dtype == dtype else tensor.to(dtype=dtype)


@_tables.kept
def _table(gain: tuple[float, ...], dtype: torch.dtype, device: torch.device) -> Tensor:
    """The table as a tensor, NaN past its end (the gain of a label outside it): kept."""
    return torch.tensor((*gain, math.nan), dtype=dtype, device=device)


def gains(target: Tensor, gain: Gain, dtype: torch.dtype) -> Tensor:
    r"""Gain of each label, computed in ``dtype``: $2^y - 1$, $y$, ``gain[y]`` or ``gain(y)``.

    A table gives NaN to a label that is not one of its indices (negative, fractional or past
    its end): the checks reject those labels, and padding's gain is replaced by the callers.

    Args:
        target: relevance labels.
        gain: a checked gain: a name, a tuple of per-label gains or an element-wise callable.
        dtype: the floating dtype the labels are taken in (a callable may answer in another).

    Returns:
        A tensor of the shape of ``target``.
    """
    target = as_dtype(target, dtype)
    if gain == "exponential":  # the default, without a call through `NAMED_GAINS`
        return torch.exp2(target) - 1
    if _options.named(gain):  # the kinds told apart by `torch_ndcg._options` alone
        return _options.NAMED_GAINS[gain].formula(target)
    if not _options.indexed(gain):  # the kind left: a callable
        return cast(GainFn, gain)(target)
    size = len(gain)
    index = target.long()
    inside = (target == index) & (index >= 0) & (index < size)
    return _table(gain, dtype, target.device)[torch.where(inside, index, size)]


def discounts(ranks: Tensor, discount: Discount) -> Tensor:
    r"""Discount at 1-based ``ranks``.

    ``"log2"`` is $1 / \log_2(1 + r)$; ``"jarvelin"`` is $1 / \max(1, \log_2 r)$
    (Järvelin & Kekäläinen 2002); a callable receives the ranks as a floating tensor.
    """
    if callable(discount):
        return discount(ranks)
    return _denominators(ranks, discount).reciprocal()


def discounted(values: Tensor, ranks: Tensor, discount: Discount) -> Tensor:
    r"""``values`` times the discount at 1-based ``ranks``: $v \, d(r)$ (see `discounts`).

    A named discount divides by its denominator (one operation fewer than its reciprocal
    times the values).
    """
    if callable(discount):
        return values * discount(ranks)
    return values / _denominators(ranks, discount)


def _denominators(ranks: Tensor, discount: str) -> Tensor:
    """The denominators of a named discount at 1-based ``ranks`` (see `discounts`)."""
    return torch.log2(ranks + 1) if discount == "log2" else torch.log2(ranks).clamp(min=1)


def position_discounts(
    n: int, discount: Discount, *, dtype: torch.dtype, device: torch.device
) -> Tensor:
    """Discounts of ranks ``1..n`` as a 1-D tensor of length ``n``."""
    ranks = torch.arange(1, n + 1, dtype=dtype, device=device)
    return discounts(ranks, discount).to(dtype)  # a callable may answer in another dtype


def list_gains(target: Tensor, mask: Tensor | None, gain: Gain, dtype: torch.dtype) -> Tensor:
    """Gains of every item in ``dtype``, 0 for padded items."""
    item_gains = gains(target, gain, dtype)
    if mask is not None:
        item_gains = torch.where(mask, item_gains, 0)
    return item_gains


# Batches of at most this many items are small: the call's cost is the number of operations it
# launches, not their size, so they take the paths with the fewest (float scores as their own
# keys, the ideal DCG from the sorted gains, one product for both DCGs).
SMALL_ELEMENTS = 1 << 12


def top(values: Tensor, kmax: int) -> tuple[Tensor, Tensor]:
    """The ``kmax`` largest values of each row, sorted descending, and their indices.

    A small batch (`SMALL_ELEMENTS`) is selected by ``topk`` even when all its items are
    wanted: for a few rows it costs less than ``sort``.
    """
    if kmax >= values.shape[-1] and values.numel() > SMALL_ELEMENTS:
        return values.sort(dim=-1, descending=True)
    return values.topk(kmax, dim=-1, sorted=True)


def ranked_gains(
    target: Tensor, mask: Tensor | None, order: Tensor, gain: Gain, dtype: torch.dtype
) -> Tensor:
    """Gains of the items at ``order`` (``[N, kmax]`` indices, best first), 0 for padded ones.

    Only the selected labels are gathered and turned into gains.
    """
    ranked_mask = None if mask is None else mask.gather(-1, order)
    return list_gains(target.gather(-1, order), ranked_mask, gain, dtype)


# Top positions times items up to which `tie_averaged_gains` compares every top position with
# every item (a few kernels, the fewest launches on an accelerator); larger batches group the
# runs of equal keys of the top instead.
DENSE_TIE_ELEMENTS = 1 << 22


def tie_averaged_gains(
    keys: Tensor, top_keys: Tensor, top_index: Tensor, item_gains: Tensor
) -> Tensor:
    r"""Mean gain of the tie group covering each of the top ``kmax`` positions, ``[N, kmax]``.

    The tie-aware DCG of McSherry & Najork (2008): every item of a group $T$ of equal scores
    is credited the mean gain of its group, $\bar g_T = \frac{1}{|T|} \sum_{i \in T} g_i$, so
    the DCG does not depend on how ties are broken. The group at the ``kmax`` boundary is
    averaged over all its members in the whole list, including those below the cut-off. Up to
    `DENSE_TIE_ELEMENTS` top positions times items, each top position is compared with every
    item of its list: its group is the items with its key, wherever they rank (the position's
    own item is one of them). Above, in memory bounded for large inputs, the runs of equal keys
    in the top are grouped, and only the group at the ``kmax`` boundary is looked up in the
    whole list: the same means, without the ``[N, kmax, L]`` comparison. Without ties this is
    the gains of the top items.

    Args:
        keys: ``[N, L]`` ranking keys.
        top_keys: ``[N, kmax]`` best keys, descending.
        top_index: ``[N, kmax]`` their indices.
        item_gains: ``[N, L]`` gains, 0 for padded items.

    Returns:
        ``[N, kmax]`` in the accumulation dtype (float64 where the device has it): sums of up
        to L exponential gains (2^127 each in float32) are taken in float64.
    """
    acc = accumulate_dtype(item_gains.device)
    n_lists, kmax = top_keys.shape
    if n_lists * kmax * keys.shape[-1] <= DENSE_TIE_ELEMENTS:
        same_key = keys[:, None, :] == top_keys[:, :, None]
        group_gain = torch.where(same_key, item_gains[:, None, :], 0).sum(-1, dtype=acc)
        return group_gain / same_key.sum(-1)
    top_gains = item_gains.gather(-1, top_index).to(dtype=acc)
    starts_group = torch.ones_like(top_keys, dtype=torch.bool)
    starts_group[..., 1:] = top_keys[..., 1:] != top_keys[..., :-1]
    group_id = starts_group.cumsum(dim=-1) - 1
    group_gain = torch.zeros_like(top_gains).scatter_add_(-1, group_id, top_gains)
    group_size = torch.zeros_like(top_gains).scatter_add_(-1, group_id, torch.ones_like(top_gains))
    mean_gain = (group_gain / group_size.clamp(min=1)).gather(-1, group_id)
    if kmax == keys.shape[-1]:
        return mean_gain
    boundary = top_keys[..., -1:]
    in_boundary_group = keys == boundary
    boundary_gain = torch.where(in_boundary_group, item_gains, 0).sum(-1, keepdim=True, dtype=acc)
    boundary_size = in_boundary_group.sum(dim=-1, keepdim=True).clamp(min=1)
    return torch.where(top_keys == boundary, boundary_gain / boundary_size, mean_gain)


@_tables.kept
def _cutoff_weights(
    discount: Discount,
    kmax: int,
    ks: tuple[int, ...],
    dtype: torch.dtype,
    device: torch.device,
    cumulative: bool,
) -> Tensor:
    """See `cutoff_matrix`."""
    weights = position_discounts(kmax, discount, dtype=dtype, device=device)
    # Compared with each cut-off as a Python int: no host-to-device copy (which would
    # synchronise a CUDA stream at every call with a callable discount, never kept).
    positions = torch.arange(kmax, device=device)
    inside = torch.stack([positions < cutoff for cutoff in ks], dim=1)
    matrix = torch.where(inside, weights[:, None], 0)
    if cumulative:
        matrix = torch.cat([matrix.new_zeros(1, len(ks)), matrix.cumsum(0)])
    return matrix


def cutoff_matrix(
    kmax: int,
    ks: Sequence[int],
    discount: Discount,
    dtype: torch.dtype,
    device: torch.device,
    *,
    cumulative: bool = False,
) -> Tensor:
    r"""``[kmax, len(ks)]``: discount of rank ``r + 1`` in column ``j`` if ``r < ks[j]``, else 0.

    With ``cumulative``, ``[kmax + 1, len(ks)]`` whose row ``m`` is the sum of the first ``m``
    rows: $D_k(m) = \sum_{r \le \min(m, k)} d(r)$ in column ``k``. Kept between calls for
    named discounts (`torch_ndcg._tables`): read-only.
    """
    return _cutoff_weights(discount, kmax, tuple(ks), dtype, device, cumulative)


def cumulative_dcg(position_gains: Tensor, ks: Sequence[int], discount: Discount) -> Tensor:
    r"""DCG at each cut-off from per-position gains: $\sum_{r \le k} g_r \, d(r)$.

    One matrix product with the ``[kmax, len(ks)]`` cut-off discount matrix (`cutoff_matrix`).

    Args:
        position_gains: ``[..., kmax]`` gains credited to ranks ``1..kmax``.
        ks: cut-offs; values above ``kmax`` mean ``kmax``.
        discount: discount name or callable.

    Returns:
        ``[..., len(ks)]`` in the accumulation dtype (float64 where the device has it).
    """
    acc = accumulate_dtype(position_gains.device)
    weights = cutoff_matrix(position_gains.shape[-1], ks, discount, acc, position_gains.device)
    return position_gains.to(dtype=acc) @ weights


def ideal_ranked_gains(
    lists: Lists, item_gains: Tensor | None, kmax: int, gain: Gain, dtype: torch.dtype,
    select: Select = top,
) -> Tensor:
    """Gains of the ideal ranking's top ``kmax`` positions, ``[N, kmax]``; 0 past the real items.

    A monotone gain (`torch_ndcg._options.monotone`) gives the ideal order as the label order, and
    the top ``kmax`` labels are selected in the labels' own dtype (cheaper for integer labels);
    any other gain is ranked by the gains themselves (``item_gains``, required then), and so
    are labels whose gains are at hand (the same order; no gain is taken twice). ``select``
    picks the ``kmax`` largest values of each row, sorted descending (`top` by default).
    Padding takes the dtype's smallest value, below every valid label or gain.
    """
    mask = lists.mask
    values = lists.target if item_gains is None else item_gains
    if values.dtype == torch.bool:  # ``topk`` takes no bool labels
        values = values.to(torch.uint8)
    if mask is not None:
        lowest = float("-inf") if values.is_floating_point() else torch.iinfo(values.dtype).min
        values = torch.where(mask, values, lowest)
    best = select(values, kmax)[0]
    best_gains = gains(best, gain, dtype) if item_gains is None else best.to(dtype=dtype)
    if mask is not None:
        best_gains = torch.where(best == lowest, 0, best_gains)
    return best_gains


@_tables.kept
def _level_gain_steps(
    levels: int,
    gain: Gain,
    dtype: torch.dtype,
    acc: torch.dtype,
    device: torch.device,
) -> Tensor:
    """``[levels]``: $g(v) - g(v - 1)$ for ``v = levels - 1`` down to 0; $g(-1) = 0$.

    The gains are computed in ``dtype``, as the DCG's are, and differenced in ``acc``: the
    steps then add up to the very gains the DCG credits.
    """
    levels_down = torch.arange(levels - 1, -1, -1, dtype=dtype, device=device)
    level_gains = gains(levels_down, gain, dtype).to(dtype=acc)
    return level_gains - torch.cat([level_gains[1:], level_gains.new_zeros(1)])


def ideal_dcg(
    lists: Lists, options: _options.ListOptions, dtype: torch.dtype, *,
    item_gains: Tensor | None = None, levels: int | None = None, select: Select = top,
) -> Tensor:
    r"""Ideal DCG of every list at every cut-off: the DCG of its labels in descending order.

    $\mathrm{IDCG@}k = \sum_{r \le k} g(y^*_{(r)}) \, d(r)$ over the real items' labels
    sorted descending (`ideal_ranked_gains`, their top selected by ``select``). Reads nothing
    back. With ``levels`` (integer labels in ``[0, levels)`` on real items and a monotone gain,
    non-decreasing, so that the ideal order is the label order) it comes from the count of each
    label instead, with no sort: in the ideal order the items with label $\ge v$ take ranks
    $1..n_{\ge v}$, so with $D_k(m) = \sum_{r \le \min(m, k)} d(r)$:

    $$
    \mathrm{IDCG@}k = \sum_{v \ge 0} \big(g(v) - g(v - 1)\big) \, D_k(n_{\ge v}),
    \qquad g(-1) = 0.
    $$

    Args:
        lists: the ``[N, L]`` labels and the real items (``mask``): every real item counts.
        options: the checked options: their cut-offs, gain and discount.
        dtype: the dtype gains are computed in.
        item_gains: ``[N, L]`` gains if already computed (0 for padding).
        levels: the number of label values (max label + 1) where the labels are counted.
        select: picks the ``kmax`` largest values of each row (`top` by default).

    Returns:
        ``[N, len(ks)]`` in the accumulation dtype.
    """
    target, mask = lists.target, lists.mask
    n, length = target.shape
    ks, kmax = options.cutoffs.resolve(length)
    gain, discount = options.gain, options.discount
    if levels is None:
        if not _options.monotone(gain) and item_gains is None:
            item_gains = list_gains(target, mask, gain, dtype)
        ideal_gains = ideal_ranked_gains(lists, item_gains, kmax, gain, dtype, select)
        return cumulative_dcg(ideal_gains, ks, discount)
    device = target.device
    acc = accumulate_dtype(device)
    # Per row, bin v counts the label v; padding goes to the extra bin `levels`.
    labels = target.to(torch.int64)
    bins = labels if mask is None else torch.where(mask, labels, levels)
    ones = torch.ones((1, 1), dtype=torch.int64, device=device).expand(n, length)
    counts = torch.zeros((n, levels + 1), dtype=torch.int64, device=device)
    counts.scatter_add_(1, bins, ones)
    # Column j: the items with label >= levels - 1 - j, at most kmax (the table's last row).
    at_least = counts.narrow(1, 0, levels).flip(-1).cumsum(-1).clamp_(max=kmax)
    table = cutoff_matrix(kmax, ks, discount, acc, device, cumulative=True)
    credited = table.index_select(0, at_least.view(-1)).view(n, levels, len(ks))
    return _level_gain_steps(levels, gain, dtype, acc, device).matmul(credited)


def empty_lists(ideal: Tensor, mask: Tensor | None) -> Tensor:
    """``[N, len(k)]``: lists with real items but no relevant one (ideal DCG 0).

    A list made only of padding is no list at all: it is not an empty target.
    """
    empty = ideal == 0
    return empty if mask is None else empty & mask.any(-1, keepdim=True)


def normalize(
    dcg: Tensor, ideal: Tensor, empty_target_action: EmptyTargetAction, gain: Gain
) -> Tensor:
    """Divide DCG by ideal DCG; lists whose ideal DCG is 0 get 0 (``"neg"``), 1 (``"pos"``) or NaN.

    ``"error"`` must be checked by the caller before; here it behaves like ``"neg"``. With a
    declared gain (never negative) nDCG cannot exceed 1; the ideal DCG from label counts sums in
    another order than the DCG, so a perfect ranking may come out a rounding error above 1,
    which is clamped away.
    """
    fill = _EMPTY_VALUES.get(empty_target_action, 0.0)
    if not _options.declared(gain):
        return torch.where(ideal != 0, dcg / ideal, fill)  # x / 0 is computed, then not taken
    # Declared gains are never negative: the DCG is at most the ideal DCG, so a quotient is
    # infinite or NaN only where the ideal DCG is 0 (x / 0), and only those take the fill.
    return (dcg / ideal).nan_to_num_(fill, fill, fill).clamp_(max=1.0)


# The value of a list with no relevant item, by `empty_target_action` ("neg" and "error": 0).
_EMPTY_VALUES = {"pos": 1.0, "skip": float("nan")}


def weighted_gains(gains: Tensor, weight: Tensor, mask: Tensor | None) -> Tensor:
    r"""Gains times weights, $w_i G_i$, in the gains' dtype; 0 on padded items.

    The losses call it on gains already divided by the ideal DCG of the unweighted gains: the
    weights re-weight the evidence for each item (``1 / propensity``), not what an ideal
    ranking would gain. Dividing by the ideal DCG of the weighted gains instead would cancel the
    weight of a list with one click (the usual click log), turning inverse-propensity weighting
    back into naive training.
    """
    scaled = gains * weight.to(dtype=gains.dtype)
    return scaled if mask is None else torch.where(mask, scaled, 0)


def full_precision(device: torch.device) -> contextlib.AbstractContextManager[None]:
    """Autocast and, on CUDA, TF32 switched off: the kernels' products run in their own dtypes.

    Under ``torch.autocast`` a float32 matrix product would run in float16/bfloat16, which
    cannot even count ranks past 256 exactly; with ``torch.set_float32_matmul_precision("high")``
    (common with Lightning) a CUDA float32 product runs in TF32, about 1e-3 relative error,
    which Sinkhorn's tolerance of 1e-6 cannot meet. Every product of the package runs inside
    this. (Under ``torch.compile`` the matmul precision is the caller's: it cannot be switched
    inside a graph.)
    """
    compiling = torch.compiler.is_compiling()  # then autocast is switched off unread
    autocast = device.type in _AUTOCAST_DEVICES and (
        compiling or torch.is_autocast_enabled(device.type)
    )
    if device.type == "cuda" and not compiling:
        precision, set_precision, full = cuda_matmul_precision()
        if autocast or precision != full:
            return _cuda_full_precision(precision, set_precision, full)
    if autocast:
        return torch.autocast(device.type, enabled=False)
    # Eager: nothing to switch (the usual case) costs no context manager, a few microseconds of
    # host time that a GPU step, bound by the host, would otherwise pay for every product.
    return contextlib.nullcontext() if compiling else _NOTHING_TO_SWITCH


# The context of `full_precision` where nothing is switched: one object, entered again and again.
_NOTHING_TO_SWITCH: contextlib.AbstractContextManager[None] = contextlib.nullcontext()


def cuda_matmul_precision() -> tuple[str, Callable[[str], None], str]:
    """The CUDA float32 matmul precision as the caller set it: ``(current, set, full)``.

    Through the legacy ``torch.get/set_float32_matmul_precision`` (full: ``"highest"``), or,
    where the caller used the newer ``torch.backends[.cuda.matmul].fp32_precision`` (torch
    refuses to mix the two), through ``torch.backends.cuda.matmul.fp32_precision`` (full:
    ``"ieee"``).
    """
    with contextlib.suppress(RuntimeError):  # the legacy getter raises where the newer API set it
        return torch.get_float32_matmul_precision(), torch.set_float32_matmul_precision, "highest"
    matmul = torch.backends.cuda.matmul
    return str(matmul.fp32_precision), functools.partial(setattr, matmul, "fp32_precision"), "ieee"


@contextlib.contextmanager
def _cuda_full_precision(
    previous: str, set_precision: Callable[[str], None], full: str
) -> Iterator[None]:
    """No CUDA autocast and full float32 matrix products, then ``previous`` again.

    The arguments are those of `cuda_matmul_precision`, read once by the caller.
    """
    set_precision(full)
    try:
        with torch.autocast("cuda", enabled=False):
            yield
    finally:
        set_precision(previous)


# Device types with an autocast, read once: `torch.amp.is_autocast_available` cannot be traced
# by every torch.compile (2.11's fails on it), a set lookup can.
_AUTOCAST_DEVICES = frozenset(
    device
    for device in ("cpu", "cuda", "xpu", "mps", "hpu", "mtia", "xla", "ipu", "maia")
    if torch.amp.is_autocast_available(device)
)
