"""Gains, discounts and tie-aware DCG kernels: the only place the package computes them.

Everything here assumes validated input (see `torch_ndcg._validation`). Lists live on the
last dimension of 2-D ``[N, L]`` tensors; ``mask`` is ``True`` for real items. Items are ranked
by integer keys of their scores (`ranking_keys`), in which padded items lie below every
real item, a real ``-inf`` included; padded items have a gain of 0, so they never count.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator, Sequence
from typing import Concatenate, Literal, ParamSpec, TypeVar

import torch
from torch import Tensor

from torch_ndcg import _host
from torch_ndcg._host import DeferredCheck, read_together
from torch_ndcg._options import (
    Discount,
    EmptyTargetAction,
    Gain,
    Ties,
    accumulate_dtype,
    compute_dtype,
)

# Bits 0..30 of an IEEE-754 float32: flipping them for negative floats makes the signed int32
# order of the bit patterns equal the float order.
_FLOAT32_MAGNITUDE_BITS = 0x7FFFFFFF
_FLOAT64_MAGNITUDE_BITS = 0x7FFFFFFFFFFFFFFF


def full_precision(device: torch.device) -> contextlib.AbstractContextManager[None]:
    """Autocast and, on CUDA, TF32 switched off: the kernels' products run in their own dtypes.

    Under ``torch.autocast`` a float32 matrix product would run in float16/bfloat16, which
    cannot even count ranks past 256 exactly; with ``torch.set_float32_matmul_precision("high")``
    (common with Lightning) a CUDA float32 product runs in TF32, about 1e-3 relative error,
    which Sinkhorn's tolerance of 1e-6 cannot meet. Every product of the package runs inside
    this. (Under ``torch.compile`` the matmul precision is the caller's: it cannot be switched
    inside a graph.)
    """
    if torch.compiler.is_compiling():
        if device.type in _AUTOCAST_DEVICES:
            return torch.autocast(device.type, enabled=False)
        return contextlib.nullcontext()
    # Eager: nothing to switch (the usual case) costs no context manager, a few microseconds of
    # host time that a GPU step, bound by the host, would otherwise pay for every product.
    autocast = device.type in _AUTOCAST_DEVICES and torch.is_autocast_enabled(device.type)
    if device.type == "cuda":
        precision, set_precision, full = cuda_matmul_precision()
        if autocast or precision != full:
            return _cuda_full_precision(precision, set_precision, full)
    if autocast:
        return torch.autocast(device.type, enabled=False)
    return contextlib.nullcontext()


def _legacy_matmul_precision() -> str | None:
    """``torch.get_float32_matmul_precision()``, or ``None`` under the newer API.

    ``None`` where the caller set the precision through ``torch.backends[.cuda.matmul]
    .fp32_precision``: the legacy getter then raises (torch refuses to read one API's state
    after the other's was set).
    """
    try:
        return torch.get_float32_matmul_precision()
    except RuntimeError:
        return None


def cuda_matmul_precision() -> tuple[str, Callable[[str], None], str]:
    """The CUDA float32 matmul precision as the caller set it: ``(current, set, full)``.

    Through the legacy ``torch.get/set_float32_matmul_precision`` (full: ``"highest"``), or,
    where the caller used the newer ``torch.backends[.cuda.matmul].fp32_precision`` (torch
    refuses to mix the two), through ``torch.backends.cuda.matmul.fp32_precision`` (full:
    ``"ieee"``).
    """
    legacy = _legacy_matmul_precision()
    if legacy is not None:
        return legacy, torch.set_float32_matmul_precision, "highest"
    matmul = torch.backends.cuda.matmul

    def set_precision(value: str) -> None:
        matmul.fp32_precision = value

    return str(matmul.fp32_precision), set_precision, "ieee"


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


def gains(target: Tensor, gain: Gain) -> Tensor:
    r"""Gain of each label: $2^y - 1$, $y$ or ``gain(y)``.

    Args:
        target: relevance labels, floating.
        gain: ``"exponential"``, ``"linear"`` or an element-wise callable.

    Returns:
        A tensor of the shape of ``target``.
    """
    if gain == "exponential":
        return torch.exp2(target) - 1
    if gain == "linear":
        return target
    assert callable(gain)
    return gain(target)


def discounts(ranks: Tensor, discount: Discount) -> Tensor:
    r"""Discount at 1-based ``ranks``.

    ``"log2"`` is $1 / \log_2(1 + r)$; ``"jarvelin"`` is $1 / \max(1, \log_2 r)$
    (Järvelin & Kekäläinen 2002); a callable receives the ranks as a floating tensor.
    """
    if discount == "log2":
        return torch.log2(ranks + 1).reciprocal()
    if discount == "jarvelin":
        return torch.log2(ranks).clamp(min=1).reciprocal()
    assert callable(discount)
    return discount(ranks)


def position_discounts(
    n: int, discount: Discount, *, dtype: torch.dtype, device: torch.device
) -> Tensor:
    """Discounts of ranks ``1..n`` as a 1-D tensor of length ``n``."""
    ranks = torch.arange(1, n + 1, dtype=dtype, device=device)
    return discounts(ranks, discount).to(dtype)  # a callable may answer in another dtype


def _top(values: Tensor, kmax: int) -> tuple[Tensor, Tensor]:
    """The ``kmax`` largest values of each row, sorted descending, and their indices."""
    if kmax >= values.shape[-1]:
        return values.sort(dim=-1, descending=True)
    return values.topk(kmax, dim=-1, sorted=True)


# ATen splits a CPU ``topk`` between threads in blocks of ``32768 // row length`` rows
# (``at::internal::GRAIN_SIZE``), so a batch of fewer elements runs on one thread.
_CPU_TOPK_GRAIN = 32768
# Longest padding of the rows (as a fraction of their length) worth a second thread.
_MAX_TOPK_PADDING = 0.5


def _top_keys(keys: Tensor, kmax: int) -> tuple[Tensor, Tensor]:
    """`_top` of integer sort keys that are all above their dtype's minimum.

    A small CPU batch, which ATen would select on one thread, is first padded with the dtype's
    minimum to just past the row length at which ATen uses two threads, when that costs less
    than half the length again: about 1.6x faster on ``[256, 100]`` with two threads. The
    padding is below every key, so it is never selected and the result is the same.
    """
    rows, length = keys.shape
    eager_cpu = keys.device.type == "cpu" and not torch.compiler.is_compiling()
    if kmax < length and eager_cpu and torch.get_num_threads() > 1:
        two_thread_length = _CPU_TOPK_GRAIN // max(rows, 1) + 1
        if length < two_thread_length <= length * (1 + _MAX_TOPK_PADDING):
            padding = keys.new_full((rows, two_thread_length - length), torch.iinfo(keys.dtype).min)
            keys = torch.cat([keys, padding], dim=-1)
    return _top(keys, kmax)


def _ordered_int32(scores: Tensor) -> Tensor:
    """Float32 scores mapped to int32 keys with the same order and equalities (``-0.0 == 0.0``).

    A non-negative float keeps its bits; a negative one has its magnitude bits flipped, so the
    signed integer order is the float order. Every non-NaN float's key lies above the int32
    minimum plus one.
    """
    bits = scores.add(0.0).view(torch.int32)
    return bits.bitwise_xor_(bits.bitwise_right_shift(31).bitwise_and_(_FLOAT32_MAGNITUDE_BITS))


def _ordered_int64_of_float64(scores: Tensor) -> Tensor:
    """`_ordered_int32` for float64 scores: int64 keys."""
    bits = scores.add(0.0).view(torch.int64)
    return bits.bitwise_xor_(bits.bitwise_right_shift(63).bitwise_and_(_FLOAT64_MAGNITUDE_BITS))


def padding_key(keys: Tensor) -> int:
    """The key of padded items: the key dtype's minimum plus one (the minimum pads ``topk``)."""
    return int(torch.iinfo(keys.dtype).min) + 1


def ranking_keys(preds: Tensor, mask: Tensor | None) -> Tensor:
    """Integer sort keys of the scores, with the order and equalities of the floats.

    float32 (and half-precision) scores map to int32 keys, float64 scores to int64 keys; ``-0.0``
    equals ``0.0``. Padded items get `padding_key`, below every real key (real ``-inf``
    included), so padding ranks last and never ties with a real item. Integer comparisons are
    cheaper than float ones (no NaN handling): ``topk`` on these keys is about a quarter faster.

    Args:
        preds: ``[N, L]`` floating scores, no NaN on real items.
        mask: ``[N, L]`` bool, ``True`` for real items, or ``None``.
    """
    scores = preds.to(compute_dtype(preds.dtype)).contiguous()
    if scores.dtype == torch.float64:
        keys = _ordered_int64_of_float64(scores)
    else:
        keys = _ordered_int32(scores)
    if mask is not None:
        keys = torch.where(mask, keys, padding_key(keys))
    return keys


def stable_descending_order(keys: Tensor, kmax: int) -> Tensor:
    """Indices of the ``kmax`` best items per row: key descending, ties in order of appearance.

    For int32 keys and ``kmax`` below the list length this is one ``topk`` over a unique int64
    key ``(key, -position)``, not a full sort.

    Args:
        keys: ``[N, L]`` keys from `ranking_keys`.
        kmax: number of positions, ``1 <= kmax <= L``.
    """
    length = keys.shape[-1]
    if keys.dtype == torch.int32 and kmax < length:
        positions = torch.arange(length - 1, -1, -1, device=keys.device)
        # key * length + positions: above the int64 minimum, which _top_keys pads with.
        unique_key = torch.add(positions, keys.to(torch.int64), alpha=length)
        return _top_keys(unique_key, kmax)[1]
    order = keys.sort(dim=-1, descending=True, stable=True).indices
    return order.narrow(-1, 0, kmax)


def top_items(
    keys: Tensor, kmax: int, *, padded: bool, detect_ties: bool = True
) -> tuple[Tensor, Tensor, Tensor | None]:
    """The best ``kmax`` items of each row, and whether a tie touches them.

    One ``topk`` selects the best ``min(kmax + 1, L)`` items: a tie within the top ``kmax`` or
    across the cut-off shows as two equal neighbours there. Ties among padding do not count:
    padded gains are all 0.

    Args:
        keys: ``[N, L]`` keys from `ranking_keys`.
        kmax: number of positions, ``1 <= kmax <= L``.
        padded: whether some items may be padding.
        detect_ties: whether to look for ties at all (``False``: the flag is ``None``, and only
            the top ``kmax`` are selected).

    Returns:
        ``(top_keys, top_index, tied)``: the ``[N, kmax]`` best keys (descending) and their
        indices, and a bool scalar tensor: whether any row has a tie that touches its top
        ``kmax`` (left on the device: reading it is the caller's choice).
    """
    if not detect_ties:
        top_keys, top_index = _top_keys(keys, kmax)
        return top_keys, top_index, None
    top_keys, top_index = _top_keys(keys, min(kmax + 1, keys.shape[-1]))
    # Tensor methods throughout: Python slicing costs several microseconds a call.
    lower = top_keys.narrow(-1, 1, top_keys.shape[-1] - 1)
    equal_neighbours = lower.eq(top_keys.narrow(-1, 0, lower.shape[-1]))
    if padded:
        equal_neighbours.logical_and_(lower.ne(padding_key(keys)))
    return top_keys.narrow(-1, 0, kmax), top_index.narrow(-1, 0, kmax), equal_neighbours.any()


# Top positions times items up to which `tie_averaged_gains` compares every top position with
# every item (a few kernels); larger batches group the runs of equal keys of the top instead.
DENSE_TIE_ELEMENTS = 1 << 22


def tie_averaged_gains(
    keys: Tensor, top_keys: Tensor, top_index: Tensor, item_gains: Tensor
) -> Tensor:
    """Mean gain of the tie group covering each of the top ``kmax`` positions, ``[N, kmax]``.

    Returned in the accumulation dtype (float64 where the device has it).

    The tie-aware DCG of McSherry & Najork (2008): every item of a group of equal scores is
    credited the mean gain of its group. The group at the ``kmax`` boundary is averaged over all
    its members in the whole list, including those below the cut-off, so that one group is the
    only thing looked at beyond the top ``kmax``. Without ties this is the gains of the top
    items, which is what `dcg_and_ideal` reads instead when `top_items` finds none.
    Up to `DENSE_TIE_ELEMENTS` top positions times items, each position is compared with
    every item of its list (a few kernels, the fewest launches on an accelerator); above, the
    runs of equal keys in the top are grouped and only the boundary group is looked up in the
    whole list.

    Args:
        keys: ``[N, L]`` keys from `ranking_keys`.
        top_keys: ``[N, kmax]`` best keys, descending, from `top_items`.
        top_index: ``[N, kmax]`` their indices.
        item_gains: ``[N, L]`` gains, 0 for padded items.
    """
    # Sums of up to L exponential gains (2^127 each in float32) are taken in float64.
    acc = accumulate_dtype(item_gains.device)
    n_lists, kmax = top_keys.shape
    if n_lists * kmax * keys.shape[-1] <= DENSE_TIE_ELEMENTS:
        # Each top position against every item of its list: its group is the items with its
        # key, wherever they rank (the position's own item is one of them).
        same_key = keys[:, None, :] == top_keys[:, :, None]
        group_gain = torch.where(same_key, item_gains[:, None, :], 0).sum(-1, dtype=acc)
        return group_gain / same_key.sum(-1)
    top_gains = item_gains.gather(-1, top_index).to(acc)
    starts_group = torch.ones_like(top_keys, dtype=torch.bool)
    starts_group[..., 1:] = top_keys[..., 1:] != top_keys[..., :-1]
    group_id = starts_group.cumsum(dim=-1) - 1
    group_gain = torch.zeros_like(top_gains).scatter_add_(-1, group_id, top_gains)
    group_size = torch.zeros_like(top_gains).scatter_add_(-1, group_id, torch.ones_like(top_gains))
    mean_gain = (group_gain / group_size.clamp(min=1)).gather(-1, group_id)
    if top_keys.shape[-1] == keys.shape[-1]:
        return mean_gain
    boundary = top_keys[..., -1:]
    in_boundary_group = keys == boundary
    boundary_gain = torch.where(in_boundary_group, item_gains, 0).sum(-1, keepdim=True, dtype=acc)
    boundary_size = in_boundary_group.sum(dim=-1, keepdim=True).clamp(min=1)
    return torch.where(top_keys == boundary, boundary_gain / boundary_size, mean_gain)


def _lowest(dtype: torch.dtype) -> float | int:
    """The smallest value of ``dtype``: a sentinel below every valid label or gain."""
    if dtype.is_floating_point:
        return float("-inf")
    return int(torch.iinfo(dtype).min)


def ideal_ranked_gains(
    target: Tensor,
    item_gains: Tensor | None,
    mask: Tensor | None,
    kmax: int,
    gain: Gain,
    dtype: torch.dtype,
) -> Tensor:
    """Gains of the ideal ranking's top ``kmax`` positions, ``[N, kmax]``; 0 past the real items.

    The built-in gains never decrease with the label, so the ideal order is the label order and
    the top ``kmax`` labels are selected in the labels' own dtype (cheaper for integer labels);
    a callable gain is ranked by the gains themselves (``item_gains``, required then), and so
    are labels whose gains are at hand (the same order; no gain is taken twice).
    """
    by_gain = callable(gain) or item_gains is not None
    if by_gain:
        assert item_gains is not None
        values = item_gains
    else:
        values = target.to(torch.uint8) if target.dtype == torch.bool else target
    if mask is not None:
        values = torch.where(mask, values, _lowest(values.dtype))
    best = _top(values, kmax)[0]
    best_gains = best.to(dtype) if by_gain else gains(best.to(dtype), gain)
    if mask is not None:
        best_gains = torch.where(best == _lowest(values.dtype), 0, best_gains)
    return best_gains


# Label histograms are used for the ideal DCG while the labels take at most this many integer
# values: the per-level work is [N, levels, len(k)].
_MAX_COUNTED_LEVELS = 64


def label_range_probe(target: Tensor, mask: Tensor | None) -> Tensor | None:
    """``[2]`` on the device: whether a real label is no integer, and the largest real label.

    What `counted_levels` needs to choose the label-count ideal DCG, left on the device
    so that the caller reads it together with its other values. ``None`` for bool labels
    (always two levels) and for an empty input.
    """
    if target.dtype == torch.bool or target.numel() == 0:
        return None
    real_labels = target if mask is None else torch.where(mask, target, 0)
    if not target.is_floating_point():
        fractional = torch.zeros((), dtype=torch.float64, device=target.device)
    else:
        # A fractional label, or one past int64, does not survive the round trip.
        fractional = (real_labels.to(torch.int64) != real_labels).any().to(torch.float64)
    return torch.stack([fractional, real_labels.max().to(torch.float64)])


def counted_levels(target: Tensor, probe_values: Sequence[float] | None) -> int | None:
    """The number of label values (max label + 1) if the labels may be counted, else ``None``.

    Bool labels have 2 levels; other labels need the values of `label_range_probe`
    (``None``: not read, so not counted). At most 64 levels (`_MAX_COUNTED_LEVELS`).
    """
    if target.dtype == torch.bool:
        return 2
    if not probe_values:
        return None
    fractional, high = probe_values
    if fractional or not high < _MAX_COUNTED_LEVELS:
        return None
    return int(high) + 1


@functools.lru_cache(maxsize=64)
def _level_gain_steps(
    levels: int,
    gain: Literal["exponential", "linear"],
    dtype: torch.dtype,
    acc: torch.dtype,
    device: torch.device,
) -> Tensor:
    """``[levels]``: $g(v) - g(v - 1)$ for ``v = levels - 1`` down to 0; $g(-1) = 0$.

    The gains are computed in ``dtype``, as the DCG's are, and differenced in ``acc``: the
    steps then add up to the very gains the DCG credits.
    """
    with torch.inference_mode(False), torch.no_grad():
        levels_down = torch.arange(levels - 1, -1, -1, dtype=dtype, device=device)
        level_gains = gains(levels_down, gain).to(acc)
        return level_gains - torch.cat([level_gains[1:], level_gains.new_zeros(1)])


def ideal_dcg_from_label_counts(
    labels: Tensor,
    mask: Tensor | None,
    levels: int,
    ks: Sequence[int],
    kmax: int,
    gain: Literal["exponential", "linear"],
    discount: Discount,
    dtype: torch.dtype,
) -> Tensor:
    r"""Ideal DCG at every cut-off from the count of each integer label, with no sort.

    In the ideal order the items with label $\ge v$ take ranks $1..n_{\ge v}$, so
    with $D_k(m) = \sum_{r \le \min(m, k)} d(r)$:

    $$
    \mathrm{IDCG@}k = \sum_{v \ge 0} \big(g(v) - g(v - 1)\big) \, D_k(n_{\ge v}),
    \qquad g(-1) = 0.
    $$

    Args:
        labels: ``[N, L]`` int64 labels in ``[0, levels)`` on real items.
        mask: ``[N, L]`` bool, ``True`` for real items, or ``None``.
        levels: number of label values (max label + 1), from `counted_levels`.
        ks: cut-offs.
        kmax: number of ranks the cut-offs need.
        gain: a named gain (non-decreasing, so the ideal order is the label order).
        discount: discount name or callable.
        dtype: the dtype gains are computed in (`compute_dtype` of the scores).

    Returns:
        ``[N, len(ks)]`` in the accumulation dtype.
    """
    n, length = labels.shape
    device = labels.device
    acc = accumulate_dtype(device)
    # Per row, bin v counts the label v; padding goes to the extra bin `levels`.
    bins = labels if mask is None else torch.where(mask, labels, levels)
    ones = torch.ones((1, 1), dtype=torch.int64, device=device).expand(n, length)
    counts = torch.zeros((n, levels + 1), dtype=torch.int64, device=device)
    counts.scatter_add_(1, bins, ones)
    # Column j: the items with label >= levels - 1 - j, at most kmax (the table's last row).
    at_least = counts.narrow(1, 0, levels).flip(-1).cumsum(-1).clamp_(max=kmax)
    table = cutoff_matrix(kmax, ks, discount, acc, device, cumulative=True)
    credited = table.index_select(0, at_least.view(-1)).view(n, levels, len(ks))
    with full_precision(device):
        return _level_gain_steps(levels, gain, dtype, acc, device).matmul(credited)


_Params = ParamSpec("_Params")
_Table = TypeVar("_Table")


def cached_for_named_discounts(
    maxsize: int,
) -> Callable[
    [Callable[Concatenate[Discount, _Params], _Table]],
    Callable[Concatenate[Discount, _Params], _Table],
]:
    """Decorate a builder of constant tables whose first argument is the discount.

    The builder runs outside inference mode and without autograd, so that its tables can serve
    autograd code later, and the last ``maxsize`` results are kept for named discounts: a metric
    or a training loop asks for the same tables at every call. A callable discount (possibly
    unhashable, or changing between calls) is built every time. Kept tables are read-only:
    never modify one in place.
    """

    def decorate(
        build: Callable[Concatenate[Discount, _Params], _Table],
    ) -> Callable[Concatenate[Discount, _Params], _Table]:
        def built(discount: Discount, /, *args: _Params.args, **kwargs: _Params.kwargs) -> _Table:
            with torch.inference_mode(False), torch.no_grad():
                return build(discount, *args, **kwargs)

        kept = functools.lru_cache(maxsize=maxsize)(built)

        @functools.wraps(build)
        def table(discount: Discount, /, *args: _Params.args, **kwargs: _Params.kwargs) -> _Table:
            if callable(discount) or torch.compiler.is_compiling():  # a graph keeps its own
                return built(discount, *args, **kwargs)
            return kept(discount, *args, **kwargs)  # type: ignore[arg-type]

        return table

    return decorate


@cached_for_named_discounts(maxsize=64)
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
    # synchronise a CUDA stream at every call with a callable discount, never cached).
    positions = torch.arange(kmax, device=device)
    inside = torch.stack([positions < cutoff for cutoff in ks], dim=1)
    matrix = torch.where(inside, weights[:, None], 0)
    if cumulative:
        matrix = torch.cat([matrix.new_zeros(1, len(ks)), matrix.cumsum(0)])
    return matrix


def cumulative_dcg(position_gains: Tensor, ks: Sequence[int], discount: Discount) -> Tensor:
    r"""DCG at each cut-off from per-position gains: $\sum_{r \le k} g_r \, d(r)$.

    One matrix product with the cached ``[kmax, len(ks)]`` cut-off discount matrix.

    Args:
        position_gains: ``[..., kmax]`` gains credited to ranks ``1..kmax``.
        ks: cut-offs; values above ``kmax`` mean ``kmax``.
        discount: discount name or callable.

    Returns:
        ``[..., len(ks)]`` in the accumulation dtype (float64 where the device has it).
    """
    kmax = position_gains.shape[-1]
    acc = accumulate_dtype(position_gains.device)
    weights = cutoff_matrix(kmax, ks, discount, acc, position_gains.device)
    with full_precision(position_gains.device):
        return position_gains.to(acc) @ weights


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
    rows: $D_k(m) = \sum_{r \le \min(m, k)} d(r)$ in column ``k``.
    """
    return _cutoff_weights(discount, kmax, tuple(ks), dtype, device, cumulative)


def resolve_cutoffs(k: Sequence[int] | None, length: int) -> tuple[list[int], int]:
    """Cut-offs as a list (``None`` = the whole list) and the number of positions they need."""
    ks = [length] if k is None else list(k)
    return ks, min(max(ks), length)


def list_gains(target: Tensor, mask: Tensor | None, gain: Gain, dtype: torch.dtype) -> Tensor:
    """Gains of every item in ``dtype``, 0 for padded items."""
    item_gains = gains(target.to(dtype), gain)
    if mask is not None:
        item_gains = torch.where(mask, item_gains, 0)
    return item_gains


def ranked_gains(
    target: Tensor, mask: Tensor | None, order: Tensor, gain: Gain, dtype: torch.dtype
) -> Tensor:
    """Gains of the items at ``order`` (``[N, kmax]`` indices), 0 for padded ones.

    Only the selected labels are gathered and turned into gains.
    """
    ranked_mask = None if mask is None else mask.gather(-1, order)
    return list_gains(target.gather(-1, order), ranked_mask, gain, dtype)


def _position_gains(
    keys: Tensor,
    target: Tensor,
    mask: Tensor | None,
    top: tuple[Tensor, Tensor] | None,
    order: Tensor,
    tied: bool,
    gain: Gain,
    dtype: torch.dtype,
) -> tuple[Tensor, Tensor | None]:
    """Gains credited to the top positions, tie-averaged where ``tied``; and the item gains."""
    if top is None or not tied:
        return ranked_gains(target, mask, order, gain, dtype), None
    item_gains = list_gains(target, mask, gain, dtype)
    return tie_averaged_gains(keys, top[0], top[1], item_gains), item_gains


def _ranked(
    preds: Tensor,
    target: Tensor,
    mask: Tensor | None,
    *,
    k: Sequence[int] | None,
    gain: Gain,
    ties: Ties,
    check: DeferredCheck | None,
    probe_labels: bool,
) -> tuple[Tensor, tuple[Tensor, Tensor] | None, Tensor, bool, list[float] | None]:
    """Keys, the top items, and the host values: the call's one read-back, where allowed.

    Where a read-back is allowed, the input ``check``, the tie flag and (``probe_labels``) the
    labels' range are read together; the tie flag then spares tie-free batches the averaging.
    Elsewhere nothing is read: ties are always averaged (the same numbers, branch-free).
    """
    keys = ranking_keys(preds, mask)
    kmax = resolve_cutoffs(k, preds.shape[-1])[1]
    top: tuple[Tensor, Tensor] | None = None
    tie_flag: Tensor | None = None
    read_back = _host.may_read_back(preds.device)
    if ties == "first":
        order = stable_descending_order(keys, kmax)
    else:
        top_keys, order, tie_flag = top_items(
            keys, kmax, padded=mask is not None, detect_ties=read_back
        )
        top = (top_keys, order)
    if not read_back:  # ties are averaged whether there are any or not
        return keys, top, order, True, None
    # The checks' largest label serves integer labels; float labels need their own probe.
    label_max_checked = check is not None and not target.is_floating_point()
    probe = label_range_probe(target, mask) if probe_labels and not label_max_checked else None
    checked, tie_value, probe_values = read_together(
        [None if check is None else check.values, tie_flag, probe]
    )
    if check is not None:
        max_label = check.judge(checked).max_label
        if probe_labels and label_max_checked:
            probe_values = [0.0, float(max_label)]
    tied = bool(tie_value and tie_value[0])
    return keys, top, order, tied, probe_values


def ranked_dcg(
    preds: Tensor,
    target: Tensor,
    mask: Tensor | None,
    *,
    k: Sequence[int] | None,
    gain: Gain,
    discount: Discount,
    ties: Ties,
    check: DeferredCheck | None = None,
) -> Tensor:
    """DCG of every list at every cut-off.

    Args:
        preds: ``[N, L]`` scores, floating.
        target: ``[N, L]`` labels.
        mask: ``[N, L]`` bool, ``True`` for real items, or ``None``.
        k: cut-offs, or ``None`` for the whole list.
        gain: gain name or callable.
        discount: discount name or callable.
        ties: ``"average"`` or ``"first"``.
        check: input checks to read back with the kernel's own values (see `._host`).

    Returns:
        ``[N, len(k)]`` (``len(k)`` is 1 for ``k=None``) in the accumulation dtype.
    """
    keys, top, order, tied, _ = _ranked(
        preds, target, mask, k=k, gain=gain, ties=ties, check=check, probe_labels=False
    )
    dtype = compute_dtype(preds.dtype)
    position_gains, _ = _position_gains(keys, target, mask, top, order, tied, gain, dtype)
    return cumulative_dcg(position_gains, resolve_cutoffs(k, preds.shape[-1])[0], discount)


def dcg_and_ideal(
    preds: Tensor,
    target: Tensor,
    mask: Tensor | None,
    *,
    k: Sequence[int] | None,
    gain: Gain,
    discount: Discount,
    ties: Ties,
    check: DeferredCheck | None = None,
) -> tuple[Tensor, Tensor]:
    """DCG (`ranked_dcg`) and ideal DCG (`ideal_dcg`) of every list at every cut-off.

    At most one host read-back, and only on the CPU (see `torch_ndcg._host`): the input
    ``check``, whether a tie touches the top k, and the labels' range (for the label-count
    ideal DCG of integer labels) are read together.

    Args:
        preds: as `ranked_dcg`; so are ``target``, ``mask``, ``k``, ``gain``,
            ``discount``, ``ties`` and ``check``.
        target: ``[N, L]`` labels.
        mask: ``[N, L]`` real items, or ``None``.
        k: cut-offs, or ``None``.
        gain: gain name or callable.
        discount: discount name or callable.
        ties: ``"average"`` or ``"first"``.
        check: input checks to read back with the kernel's own values.

    Returns:
        Two ``[N, len(k)]`` tensors (``len(k)`` is 1 for ``k=None``) in the accumulation dtype.
    """
    keys, top, order, tied, probe_values = _ranked(
        preds, target, mask, k=k, gain=gain, ties=ties, check=check, probe_labels=not callable(gain)
    )
    ks, kmax = resolve_cutoffs(k, preds.shape[-1])
    dtype = compute_dtype(preds.dtype)
    position_gains, item_gains = _position_gains(keys, target, mask, top, order, tied, gain, dtype)
    dcg = cumulative_dcg(position_gains, ks, discount)
    levels = None if callable(gain) else counted_levels(target, probe_values)
    ideal = ideal_dcg(
        target, mask, ks, kmax, gain, discount, dtype, item_gains=item_gains, levels=levels
    )
    return dcg, ideal


def ideal_dcg(
    target: Tensor,
    mask: Tensor | None,
    ks: Sequence[int],
    kmax: int,
    gain: Gain,
    discount: Discount,
    dtype: torch.dtype,
    *,
    item_gains: Tensor | None = None,
    levels: int | None = None,
) -> Tensor:
    """Ideal DCG of every list at every cut-off: from label counts where ``levels`` is known.

    With ``levels`` (the number of integer label values, from `counted_levels`) and a
    named gain, `ideal_dcg_from_label_counts` (no sort); otherwise the top ``kmax``
    labels (or gains, for a callable gain) of `ideal_ranked_gains`. Neither reads
    anything back.

    Args:
        target: ``[N, L]`` labels.
        mask: ``[N, L]`` bool, ``True`` for real items, or ``None``.
        ks: cut-offs.
        kmax: number of ranks the cut-offs need.
        gain: gain name or callable.
        discount: discount name or callable.
        dtype: the dtype gains are computed in.
        item_gains: ``[N, L]`` gains if already computed (0 for padding).
        levels: the number of label values, if the labels are small integers.

    Returns:
        ``[N, len(ks)]`` in the accumulation dtype.
    """
    if levels is not None and not callable(gain):
        labels = target.to(torch.int64)
        return ideal_dcg_from_label_counts(labels, mask, levels, ks, kmax, gain, discount, dtype)
    if callable(gain) and item_gains is None:
        item_gains = list_gains(target, mask, gain, dtype)
    ideal_gains = ideal_ranked_gains(target, item_gains, mask, kmax, gain, dtype)
    return cumulative_dcg(ideal_gains, ks, discount)


def counted_sum(values: Tensor, counted: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """Sum over dim 0 of the counted values and their number: the two terms of every mean.

    ``counted`` marks the values to count (default: those that are not NaN, which
    ``empty_target_action="skip"`` gives); the others add nothing. The mean is then
    ``sum / count.clamp(min=1)``: 0 where nothing is counted, never NaN.
    """
    if counted is None:
        counted = ~values.isnan()
    return torch.where(counted, values, 0).sum(0), counted.sum(0)


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
    named gain (never negative) nDCG cannot exceed 1; the ideal DCG from label counts sums in
    another order than the DCG, so a perfect ranking may come out a rounding error above 1,
    which is clamped away.
    """
    fill = {"pos": 1.0, "skip": float("nan")}.get(empty_target_action, 0.0)
    values = torch.where(ideal != 0, dcg / ideal, fill)  # x / 0 is computed, then not taken
    return values if callable(gain) else values.clamp_(max=1.0)
