"""The paths a DCG takes, and the speed tricks they use: same numbers as the formulas, sooner.

`torch_ndcg._kernels` says what is computed; this module says how, for a given input:

- integer ranking keys of the float scores (`ranking_keys`), cheaper to compare than floats;
- one ``topk`` that both selects the top items and tells whether a tie touches them
  (`top_items`), so that tie-free batches skip the averaging;
- the ideal DCG of small integer labels from their counts (`label_range_probe`,
  `counted_levels`, then `torch_ndcg._kernels.ideal_dcg` with ``levels``);
- for long rows (`long_rows`, decided from the shape), the top ``k + 1`` and the ``k`` largest
  labels selected from group maxima (`grouped_top`), the float scores as their own keys, and
  the general path only where a tie touches the top ``k`` (`_position_gains`).

The tie averaging itself, in memory bounded for large inputs, is
`torch_ndcg._kernels.tie_averaged_gains`.

`dcg_and_ideal` (and `ranked_dcg`, its DCG alone) chooses among them from metadata and, on
the CPU only, from the kernel's one read-back (`torch_ndcg._host`; the checks, at the edge,
read their own). On an accelerator nothing is read back: ties are always averaged (the same
numbers, branch-free).
So the dense lists take four paths: the general one, long rows, the branch-free one of the
accelerators, and the small one (`small_ndcg`) for the usual small CPU batch, which one
predicate (`small_batch`, the bounded `dense_batch`) admits from metadata alone for `ndcg` and
`NDCG.update`; the losses check any `dense_batch` in one read of its extremes. Each earns
its place (`python benchmarks/bench_paths.py`: the call with the path against the same call
with it switched off, one thread of a 2-core CPU, torch 2.13; a test holds each equal to the
plain formula):

| path | input | saving |
|---|---|---|
| small batch (`small_ndcg`) | `ndcg` / `NDCG.update` ``[8, 10]``, k=10 / 1, 5, 10 | 1.88x / 1.78x |
| tie-free skip of the averaging | `ndcg` ``[256, 100]`` / ``[64, 10_000]``, k=10 | 2.4x / 4.3x |
| long rows (`long_rows`) | `ndcg` ``[16, 100_000]``, ``k=10`` | 2.7x |
| ideal DCG from label counts | `ndcg` ``[256, 100]`` / ``[256, 300]``, ``k=10`` | 1.01x / 1.23x |

The branch-free path is the only one that reads nothing back (an accelerator's stream, a
compiled graph). The ideal DCG from label counts saves less than 1.2x at ``[256, 100]``, but
without it `ndcg` and `NDCG.update` there take 1.11x / 1.15x of the library of 2026-11-24
(`python benchmarks/bench_host.py --baseline`), past the 1.1x the host time may grow: it stays.
A small CPU batch padded so that ATen's ``topk`` used two threads went for saving less than
1.2x.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor

from torch_ndcg import _host, _kernels, _options
from torch_ndcg._kernels import SMALL_ELEMENTS as SMALL_ELEMENTS
from torch_ndcg._options import LONG_ROW_LENGTH, ListOptions, compute_dtype


def ordered_int32(scores: Tensor) -> Tensor:
    """Float32 scores mapped to int32 keys with the same order and equalities (``-0.0 == 0.0``).

    A non-negative float keeps its bits; a negative one has its magnitude bits flipped, so the
    signed integer order is the float order. Every non-NaN float's key lies above the int32
    minimum plus one. Float64 scores map to int64 keys the same way.
    """
    int_dtype = torch.int64 if scores.dtype == torch.float64 else torch.int32
    bits = scores.add(0.0).view(int_dtype)
    # The sign bit spread over the word, and with it the magnitude bits (the dtype's maximum).
    magnitude = bits.bitwise_right_shift(bits.element_size() * 8 - 1)
    return bits.bitwise_xor_(magnitude.bitwise_and_(torch.iinfo(int_dtype).max))


def padding_key(keys: Tensor) -> int:
    """The key of padded items: the key dtype's minimum plus one (the minimum pads ``topk``)."""
    return int(torch.iinfo(keys.dtype).min) + 1


def ranking_keys(preds: Tensor, mask: Tensor | None) -> Tensor:
    """Integer sort keys of the scores, with the order and equalities of the floats.

    float32 scores map to int32 keys, float64 scores to int64 keys; ``-0.0`` equals ``0.0``.
    Padded items get `padding_key`, below every real key (real ``-inf`` included), so padding
    ranks last and never ties with a real item. Integer comparisons are cheaper than float ones
    (no NaN handling): ``topk`` on these keys is about a quarter faster.

    Args:
        preds: ``[N, L]`` float32 or float64 scores (the kernels' dtypes), no NaN on real items.
        mask: ``[N, L]`` bool, ``True`` for real items, or ``None``.
    """
    keys = ordered_int32(preds.contiguous())
    if mask is not None:
        keys = torch.where(mask, keys, padding_key(keys))
    return keys


def sort_keys(preds: Tensor, mask: Tensor | None) -> Tensor:
    """`ranking_keys`, or for an unpadded small batch (`SMALL_ELEMENTS`) its scores themselves.

    Float scores have the order and equalities of their integer keys (no NaN is ranked), so
    where no padding must rank below a real ``-inf`` they serve as keys without an operation.
    ``preds`` are float32 or float64, as `ranking_keys` takes them.
    """
    return preds if mask is None and preds.numel() <= SMALL_ELEMENTS else ranking_keys(preds, mask)


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
        # key * length + positions: above the int64 minimum, which `top_items` pads with.
        unique_key = torch.add(positions, keys.to(torch.int64), alpha=length)
        return _kernels.top(unique_key, kmax)[1]
    order = keys.sort(dim=-1, descending=True, stable=True).indices
    return order.narrow(-1, 0, kmax)


def top_items(keys: Tensor, kmax: int, *, padded: bool) -> tuple[Tensor, Tensor, Tensor]:
    """The best ``kmax`` items of each row, and whether a tie touches them.

    One ``topk`` selects the best ``min(kmax + 1, L)`` items: a tie within the top ``kmax`` or
    across the cut-off shows as two equal neighbours there. Ties among padding do not count:
    padded gains are all 0.

    Args:
        keys: ``[N, L]`` keys from `ranking_keys`.
        kmax: number of positions, ``1 <= kmax <= L``.
        padded: whether some items may be padding.

    Returns:
        ``(top_keys, top_index, tied)``: the ``[N, kmax]`` best keys (descending) and their
        indices, and a bool scalar tensor: whether any row has a tie that touches its top
        ``kmax`` (left on the device: reading it is the caller's choice).
    """
    selected = min(kmax + 1, keys.shape[-1])
    top_keys, top_index = _kernels.top(keys, selected)
    # Tensor methods throughout: Python slicing costs several microseconds a call.
    lower = top_keys.narrow(-1, 1, selected - 1)
    equal_neighbours = lower.eq(top_keys.narrow(-1, 0, selected - 1))
    if padded:
        equal_neighbours.logical_and_(lower.ne(padding_key(keys)))
    return top_keys.narrow(-1, 0, kmax), top_index.narrow(-1, 0, kmax), equal_neighbours.any()


# Batches of more items than this, in lists of at most `COUNT_LABELS_UP_TO`, take the ideal DCG
# from label counts where they may: past ~500 items a `topk` of the labels costs less (0.91x at
# [256, 1000], 0.88x at [64, 10_000]).
COUNT_LABELS_PAST = SMALL_ELEMENTS
COUNT_LABELS_UP_TO = 512
# Label histograms are used for the ideal DCG while the labels take at most this many integer
# values: the per-level work is [N, levels, len(k)].
_MAX_COUNTED_LEVELS = 64


def label_range_probe(target: Tensor, mask: Tensor | None) -> Tensor | None:
    """A scalar on the device: the largest real label, ``inf`` where a real label is no integer.

    What `counted_levels` needs to choose the label-count ideal DCG, left on the device
    so that the caller reads it together with its other values. ``None`` for bool labels
    (always two levels). For a non-empty input (the label counts serve large batches only).
    """
    if target.dtype == torch.bool:
        return None
    real_labels = target if mask is None else torch.where(mask, target, 0)
    high = real_labels.max().to(torch.float64)
    if target.is_floating_point():
        # A fractional label, or one past int64, does not survive the round trip.
        high = torch.where((real_labels.to(torch.int64) != real_labels).any(), torch.inf, high)
    return high


def counted_levels(target: Tensor, probe_values: Sequence[float] | None) -> int | None:
    """The number of label values (max label + 1) if the labels may be counted, else ``None``.

    Bool labels have 2 levels; other labels need the value of `label_range_probe`
    (``None``: not read, so not counted). At most 64 levels (`_MAX_COUNTED_LEVELS`).
    """
    if target.dtype == torch.bool:
        return 2
    if not probe_values or not probe_values[0] < _MAX_COUNTED_LEVELS:
        return None
    return int(probe_values[0]) + 1


# Items per group of the one-pass candidate selection (`group_maxima`): a row of L items has
# L / 32 groups, few enough that selecting among their maxima costs little beside the one read
# of the row, small enough that a selected group brings few items with it.
GROUP = 32


def group_maxima(block: Tensor, group: int = GROUP) -> Tensor:
    """``[B, C // group]`` maxima of the item groups of a ``[B, C]`` block (``C >= group``).

    Group ``j`` holds the columns ``j + m * (C // group)``, ``m < group``: strided groups make
    the reduction an element-wise maximum of ``group`` vectors, one read of the block. The last
    ``C % group`` columns are in no group. A NaN score makes its group's maximum NaN.
    """
    users, width = block.shape
    n_groups = width // group
    grouped = block.narrow(1, 0, n_groups * group)
    if grouped.stride(-1) != 1:
        grouped = grouped.contiguous()
    return grouped.view(users, group, n_groups).amax(1)


def group_members(n_groups: int, device: torch.device, group: int = GROUP) -> Tensor:
    """``[group]`` column offsets of group 0 in `group_maxima`'s strided layout.

    Group ``j`` of a block with ``n_groups`` groups holds the columns ``j + group_members``.
    """
    return torch.arange(0, n_groups * group, n_groups, device=device)


# Rows of at least `LONG_ROW_LENGTH` items (declared in `torch_ndcg._options`), with at most
# 1/`_LONG_ROW_SHARE` of their groups wanted, are long (`long_rows`): their top items and labels
# are selected from group maxima, and their scores serve as their own keys.
_LONG_ROW_SHARE = 4


def long_rows(length: int, kmax: int) -> bool:
    """Whether rows of ``length`` items with ``kmax`` wanted positions take the long-row path.

    Decided from the shape alone: at least `LONG_ROW_LENGTH` items, and the ``kmax + 1``
    groups `grouped_top` gathers hold at most a `_LONG_ROW_SHARE`-th of the row.
    """
    return length >= LONG_ROW_LENGTH and (kmax + 1) * GROUP * _LONG_ROW_SHARE <= length


def grouped_top(values: Tensor, count: int) -> tuple[Tensor, Tensor]:
    """The ``count`` largest values of each ``[N, L]`` row, descending, and their indices.

    The values equal ``topk``'s (the indices of equal values may differ), for about a third
    of its time on long rows: one pass takes the maxima of groups of `GROUP` items
    (`group_maxima`), and ``topk`` runs on the ``count`` best groups' items (with the
    ``L % GROUP`` items in no group). An item outside them is at most its group's maximum, at
    most the ``count``-th best group's maximum, and each of the ``count`` best groups holds an
    item at least that large: no value it holds is missed. A NaN value makes its group's
    maximum NaN, which ``topk`` selects first, so it is among the candidates. For rows of at
    least `_LONG_ROW_SHARE` ``* count`` groups, as `long_rows` admits.
    """
    rows, length = values.shape
    n_groups = length // GROUP
    best_groups = group_maxima(values).topk(count, dim=-1, sorted=False).indices
    members = group_members(n_groups, values.device)
    columns = best_groups.unsqueeze(-1).add(members).view(rows, count * GROUP)
    if length % GROUP:
        rest = torch.arange(n_groups * GROUP, length, device=values.device)
        columns = torch.cat([columns, rest.expand(rows, -1)], dim=-1)
    best, at = values.gather(-1, columns).topk(count, dim=-1, sorted=True)
    return best, columns.gather(-1, at)


def settled_long_order(preds: Tensor, mask: Tensor | None, kmax: int) -> Tensor | None:
    """The ``[N, kmax]`` indices of the best items of `long_rows`, where they settle the ranking.

    Their scores are their own keys (padding ``-inf``): `grouped_top` selects the best
    ``kmax + 1``, and one read-back tells whether the selection settles the ranking: no two
    equal values among them (no tie touches the top ``kmax``, under either tie rule), no
    ``-inf`` among the top ``kmax`` (padding could be there) and no NaN. ``None`` where it
    does not (ties at the top, mostly). ``preds`` are float32 or float64.
    """
    keys = preds if mask is None else torch.where(mask, preds, -torch.inf)
    best, best_index = grouped_top(keys, kmax + 1)
    unsettled = best.narrow(-1, 1, kmax).eq(best.narrow(-1, 0, kmax)).any()
    unsettled |= best.narrow(-1, kmax - 1, 1).isneginf().any() | best.isnan().any()
    return None if bool(unsettled) else best_index.narrow(-1, 0, kmax)


def _position_gains(
    preds: Tensor,
    target: Tensor,
    mask: Tensor | None,
    options: ListOptions,
    probe: Tensor | None = None,
) -> tuple[Tensor, Tensor | None, list[float] | None]:
    """Gains credited to the top ``kmax`` positions (of `options`), by the path the input takes.

    Where a value may be read back (`torch_ndcg._host.may_read_back`: the CPU, eagerly), long
    rows (`long_rows`) take the gains of the items `settled_long_order` selects; where those
    do not settle the ranking (ties at the top, mostly) the whole batch takes the branch-free
    path below without a read. Other input takes the general path with the
    kernel's one read-back: whether a tie touches the top items, read together with ``probe``
    (the labels' range, `label_range_probe`); the tie flag spares tie-free batches the
    averaging. Elsewhere the branch-free path reads nothing: ties are always averaged (the same
    numbers). Returns the position gains, the item gains where they were computed (for the ideal
    DCG), and the probe's values (``None`` where nothing was read).
    """
    kmax = options.cutoffs.resolve(preds.shape[-1])[1]
    read_back = _host.may_read_back(preds.device)
    dtype = compute_dtype(preds.dtype)
    scores = preds.to(dtype=dtype)  # ranked in the kernels' dtype (half precision in float32)
    long = read_back and long_rows(preds.shape[-1], kmax)
    order = settled_long_order(scores, mask, kmax) if long else None
    top_keys = tie_flag = probe_values = None
    if order is None:  # not long rows, or long rows their selection does not settle
        read_back = read_back and not long
        keys = sort_keys(scores, mask)
        if options.ties == "first":
            order = stable_descending_order(keys, kmax)
        elif read_back:
            top_keys, order, tie_flag = top_items(keys, kmax, padded=mask is not None)
        else:  # branch-free: ties always averaged
            top_keys, order = _kernels.top(keys, kmax)
        if read_back:
            tie_value, probe_values = _host.read_together([tie_flag, probe])
            if not tie_value or not tie_value[0]:  # no tie touches the top: nothing to average
                top_keys = None
    if top_keys is None:
        return _kernels.ranked_gains(target, mask, order, options.gain, dtype), None, probe_values
    item_gains = _kernels.list_gains(target, mask, options.gain, dtype)
    averaged = _kernels.tie_averaged_gains(keys, top_keys, order, item_gains)
    return averaged, item_gains, probe_values


def ranked_dcg(preds: Tensor, target: Tensor, mask: Tensor | None, options: ListOptions) -> Tensor:
    """The DCG of `dcg_and_ideal` alone (no label probe, no ideal DCG), ``[N, len(k)]``.

    Computing the ideal DCG only to drop it would cost `dcg` 1.25x / 1.4x its time at
    ``[8, 10]`` / ``[256, 100]``.
    """
    ks = options.cutoffs.resolve(preds.shape[-1])[0]
    position_gains = _position_gains(preds, target, mask, options)[0]
    with _kernels.full_precision(preds.device):
        return _kernels.cumulative_dcg(position_gains, ks, options.discount)


def dcg_and_ideal(
    preds: Tensor,
    target: Tensor,
    mask: Tensor | None,
    options: ListOptions,
    max_label: float | None = None,
    ranked: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """DCG and ideal DCG of every list at every cut-off, each ``[N, len(k)]``.

    At most one host read-back, and only on the CPU (see `torch_ndcg._host`): whether a tie
    touches the top k and the labels' range, read together. Ties are averaged only where a
    tie touches the top k (always, where nothing is read back). The ideal DCG
    (`torch_ndcg._kernels.ideal_dcg`) comes from label counts for small integer labels and a
    named gain, on the CPU past `SMALL_ELEMENTS` items; for long rows (`long_rows`) from the
    ``kmax`` largest labels selected by `grouped_top`; else from the top labels.

    Args:
        preds: ``[N, L]`` scores, floating.
        target: ``[N, L]`` labels.
        mask: ``[N, L]`` bool, ``True`` for real items, or ``None``.
        options: the checked options (cut-offs, gain, discount, ties).
        max_label: the largest real label, where the checks read it (``None``: not known).
        ranked: ``[N, L]`` bool, ``True`` for the real items that take a rank, or ``None``
            (all): the others (judged, not retrieved) count in the ideal DCG only.

    Returns:
        Two ``[N, len(k)]`` tensors (``len(k)`` is 1 for ``k=None``) in the accumulation dtype.
    """
    judged = mask  # in the ideal DCG; `mask` from here on: the items that take a rank
    if ranked is not None:
        mask = ranked if mask is None else mask & ranked
    length = preds.shape[-1]
    ks, kmax = options.cutoffs.resolve(length)
    read_back = _host.may_read_back(preds.device)
    long = read_back and long_rows(length, kmax)
    count_labels = (  # never long rows: they are longer than `COUNT_LABELS_UP_TO`
        _options.monotone(options.gain)
        and preds.numel() > COUNT_LABELS_PAST
        and length <= COUNT_LABELS_UP_TO
    )
    # The checks' largest label (read on the CPU only) serves integer labels; float labels need
    # their own probe.
    checked = None if max_label is None or target.is_floating_point() else [float(max_label)]
    probe = None
    if count_labels and read_back and checked is None:
        probe = label_range_probe(target, judged)
    position_gains, gains, probe_values = _position_gains(preds, target, mask, options, probe)
    with _kernels.full_precision(preds.device):
        dcg = _kernels.cumulative_dcg(position_gains, ks, options.discount)
        ideal = _kernels.ideal_dcg(
            _kernels.Lists(target, judged),
            options,
            compute_dtype(preds.dtype),
            # The item gains of the ranked items only: the ideal DCG takes every judged one.
            item_gains=None if long or ranked is not None else gains,
            levels=counted_levels(target, checked or probe_values) if count_labels else None,
            select=grouped_top if long else _kernels.top,
        )
    return dcg, ideal


# Score dtypes of the small path (half precision is computed in float32: the general path).
_SMALL_SCORES = (torch.float32, torch.float64)


def dense_batch(preds: Any, target: Any, options: Any, most: int | None = None) -> bool:
    """Whether a batch's value checks are those of its four extremes, from metadata alone.

    ``preds`` and ``target`` may be anything; ``options`` are checked options (a metric's
    `torch_ndcg._options.ListOptions`, a loss's options), whose ``dense`` the checks set
    (`torch_ndcg._validation.dense_options`: a named gain and discount, no ``ignore_index``).
    A dense batch is a pair of dense tensors of one shape, with items in lists of at least 2,
    float32 or float64 scores, labels that are neither complex nor floats wider than the scores
    (they would round), where a value may be read back (`torch_ndcg._host.may_read_back`: the
    CPU, outside ``torch.compile``) outside autocast, of at most ``most`` items (``None``: any
    number). The losses check one in a single read of its extremes
    (`torch_ndcg._validation.small_batch_holds`), whatever its size.
    """
    if not (options.dense and type(preds) is type(target) is Tensor):
        return False  # `dense`: a named gain and discount, no ignore_index (`dense_options`)
    shape, scores, labels = preds.shape, preds.dtype, target.dtype  # each read once: hot
    return (
        preds.layout == target.layout == torch.strided
        and shape == target.shape
        and len(shape) > 0
        and shape[-1] > 1
        and preds.numel() > 0
        and (most is None or preds.numel() <= most)
        and scores in _SMALL_SCORES
        and target.is_cpu
        and _host.may_read_back(preds.device)
        and not torch.is_autocast_enabled("cpu")
        and not labels.is_complex
        and not (labels.is_floating_point and labels.itemsize > scores.itemsize)
    )


# Whether a batch takes the small path: the one test of its entry. `small_ndcg` computes the
# nDCG of such a batch (`torch_ndcg.ndcg` and `torch_ndcg.NDCG.update` also ask for averaged
# ties, no "error" on empty lists and no mask); anything else takes the general path, whose
# checks name what is wrong. A partial, not a function: one Python call fewer per update.
small_batch = functools.partial(dense_batch, most=SMALL_ELEMENTS)


def small_ndcg(
    preds: Tensor, target: Tensor, options: ListOptions
) -> tuple[Tensor, list[float] | None]:
    r"""The nDCG of a `small_batch` ``[..., L]``, ``[N, len(k)]`` float64, in one straight line.

    A metric update or an ``ndcg`` call on a few short lists costs its Python layers and its
    launches, not its arithmetic: these are the steps of `dcg_and_ideal` for such a batch, in
    the same order on the same values, without its dispatch among paths (its constants from
    the one table cache, `torch_ndcg._tables`):

    1. the top ``k + 1`` scores of each row (``topk``): the ranking, and whether a tie touches
       the top ``k`` (two equal neighbours among them);
    2. the extremes of the scores and labels, read back with the tie flag (the call's one
       read-back), handed to the caller for the input checks (`torch_ndcg._validation`, at
       the edge: the engine imports no check);
    3. the gains $g(y)$; the top positions' gains, tie-averaged where a tie was found
       (`torch_ndcg._kernels.tie_averaged_gains`); the ideal gains, the ``k`` largest;
    4. both DCGs by products with the cut-off discount matrix,
       $\mathrm{DCG@}k = \sum_{r \le k} g_r \, d(r)$, and nDCG as their quotient
       (`torch_ndcg._kernels.normalize`).

    The numbers agree with the general path's to rounding, not always to the last bit: the two
    DCG products may sum their terms in another order (seen: one float64 unit in the last
    place), so each nDCG is within $4 \varepsilon \max(1, |x|)$ of the general path's,
    $\varepsilon$ the machine epsilon of the result's dtype, and a metric's float64 sums
    within $4 \varepsilon$ times the lists added (`tests/test_small_batch.py` holds that
    bound). Float scores that look like graded labels, with float labels, take the general
    path after all (the caller's checks say so): their swapped-arguments hint needs passes of
    its own.

    Returns the values and, with ``validate_args``, the extremes the checks judge, read back
    with the tie flag: ``[smallest score, largest score, smallest label, largest label]``
    (``None`` without ``validate_args``). Where they break a check the caller discards the
    values and takes the general path, which raises the error.
    """
    scores, labels = preds, target
    length = preds.shape[-1]
    if preds.ndim != 2:  # a reshape costs a microsecond: not where it is not needed
        scores, labels = preds.reshape(-1, length), target.reshape(-1, length)
    ks, kmax = options.cutoffs.resolve(length)
    # Labels in the scores' dtype, as the gains take them: exact for the labels of the small
    # path, but for integers past 2^24 in float32, which round on the right side of every
    # limit the checks set.
    # `dtype=` by keyword here and below: `Tensor.to` parses it faster (`_kernels.as_dtype`).
    float_labels = labels.to(dtype=scores.dtype)
    top_scores, top_index = scores.topk(min(kmax + 1, length), dim=-1, sorted=True)
    # The largest step down between neighbours of the top k + 1, each best first: 0 where a
    # tie touches the top k, NaN where two equal infinite scores do, else negative.
    read = [top_scores.diff(dim=-1).amax()]
    if options.validate_args:  # the extremes of the scores and labels, in the one read-back
        read = [*torch.aminmax(scores), *torch.aminmax(float_labels), *read]
    *extremes, largest_step = torch.stack(read).tolist()
    item_gains = _kernels.gains(float_labels, options.gain, scores.dtype)
    top_index = top_index.narrow(-1, 0, kmax)
    if not largest_step < 0:  # a tie
        position_gains = _kernels.tie_averaged_gains(
            scores, top_scores.narrow(-1, 0, kmax), top_index, item_gains
        )
    else:
        position_gains = item_gains.gather(-1, top_index)
    ideal_gains = item_gains.topk(kmax, dim=-1, sorted=True).values
    weights = _kernels.cutoff_matrix(kmax, ks, options.discount, torch.float64, scores.device)
    # Two products, as the general path's: one of both stacked may sum in another order.
    dcg = position_gains.to(dtype=torch.float64).mm(weights)
    ideal = ideal_gains.to(dtype=torch.float64).mm(weights)
    values = _kernels.normalize(dcg, ideal, options.empty_target_action, options.gain)
    return values, extremes if options.validate_args else None
