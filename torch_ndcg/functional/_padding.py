"""Flat rows with query ids (as learning-to-rank files hold them) as padded lists, and back."""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor

from torch_ndcg import _grouping, _validation

__all__ = ["PaddedQueries", "pad_by_query", "unpad_by_query"]


class PaddedQueries(NamedTuple):
    """Flat rows laid out as padded lists by `pad_by_query`.

    Attributes:
        values: each ``[N, ...]`` input as ``[Q, L, ...]`` lists, in the order of the input.
        mask: ``[Q, L]`` bool, ``True`` for a real row, ``False`` for padding.
        query_ids: ``[Q]`` int64 query id of each list, ascending.
        slots: ``[N]`` int64 position of each input row in the lists flattened to ``[Q * L]``
            (row ``i`` is ``padded.flatten(0, 1)[slots[i]]``): what `unpad_by_query` takes.
    """

    values: tuple[Tensor, ...]
    mask: Tensor
    query_ids: Tensor
    slots: Tensor


def pad_by_query(
    query_ids: Tensor, *values: Tensor, padding_value: float | None = None
) -> PaddedQueries:
    r"""Lay flat rows with query ids out as padded ``[Q, L, ...]`` lists, one query per list.

    With $x_i$ the ``i``-th row of a value, $i_{q,0} < i_{q,1} < \dots < i_{q,n_q - 1}$ the rows
    whose id is the $q$-th smallest distinct id and $L = \max_q n_q$ the longest query:

    $$
    \mathrm{padded}[q, j] = x_{i_{q,j}} \ \text{ for } j < n_q, \qquad
    \mathrm{padded}[q, j] = \mathrm{padding\_value} \ \text{ for } n_q \le j < L.
    $$

    Labels are padded with -1 by default, as allRank and TF-Ranking pad them: with the
    ``mask`` (or ``ignore_index=-1``) the padding is no item; without either, `ndcg`, `NDCG`
    and the losses refuse the label -1 and say so, where a padding of 0 would count as items
    of grade 0 and silently lower the number.

    This is the layout `ndcg`, `NDCG` and the losses take, from the flat rows that
    learning-to-rank files hold (svmlight ``qid:`` rows, as
    ``sklearn.datasets.load_svmlight_file(..., query_id=True)`` reads them). Ids may be any
    integers (compared as int64: huge, negative, sparse), in any order; the rows of a query
    keep their input order. The work is one stable sort of the ids (as `RetrievalNDCG`
    groups rows) and one scatter per value, on the device of the ids, with no loop over
    queries; gradients flow through to the values. The output's shape depends on the data,
    so a few values are read back to the host (on an accelerator, synchronisations): the id
    range, the number of queries and ``L`` (the unique ids too when they span 2^31 or more).

    Args:
        query_ids: ``[N]`` integer query id of each row.
        *values: tensors of a row per id, ``[N, ...]`` (scores, labels, features), on the
            device of ``query_ids``.
        padding_value: the value of padded slots, in every value. Default ``None``: -1,
            for values of signed dtypes (signed integers, floating, complex); unsigned and
            bool values, which cannot hold it, need an explicit one (and the ``mask``).

    Returns:
        `PaddedQueries`: the padded ``values`` (a tuple, one per input), the ``[Q, L]``
        ``mask``, the ascending ``[Q]`` ``query_ids`` and the ``[N]`` ``slots`` that
        `unpad_by_query` takes to give flat rows back. No row gives ``[0, 1]`` lists (``L``
        is 1), which the metrics and losses take as a batch of no list.

    Raises:
        TypeError: ``query_ids`` not an integer tensor, a value not a tensor, ``padding_value``
            not a real number.
        ValueError: ``query_ids`` not 1-D; a value without a row per id or on another device;
            a ``padding_value`` that a value's dtype does not hold (-1 in uint8 or bool, 0.5 in
            an integer dtype, 1e6 in float16), or none given for an unsigned or bool value.

    Example:
        >>> import torch
        >>> from torch_ndcg import ndcg, pad_by_query, unpad_by_query
        >>> qid = torch.tensor([7, -2, 7, -2, -2])
        >>> scores = torch.tensor([0.9, 0.2, 0.8, 0.1, 0.7])
        >>> labels = torch.tensor([1, 1, 0, 0, 0])
        >>> (preds, target), mask, ids, slots = pad_by_query(qid, scores, labels)
        >>> preds
        tensor([[ 0.2000,  0.1000,  0.7000],
                [ 0.9000,  0.8000, -1.0000]])
        >>> mask
        tensor([[ True,  True,  True],
                [ True,  True, False]])
        >>> ids
        tensor([-2,  7])
        >>> ndcg(preds, target, k=2, mask=mask)  # or ignore_index=-1
        tensor([0.6309, 1.0000])
        >>> unpad_by_query(preds, slots)  # back to the flat rows, in their input order
        tensor([0.9000, 0.2000, 0.8000, 0.1000, 0.7000])
    """
    _validation.check_rows_by_query(query_ids, values, padding_value)
    grouping = _grouping.group_rows(query_ids.to(torch.int64))
    n_rows, sizes, device = query_ids.numel(), grouping.sizes, query_ids.device
    # L, the longest query: the output's shape. No row gives [0, 1] lists, a batch of none
    # that every entry point scores ([0, 0] would be lists of no item).
    width = int(sizes.max()) if n_rows else 1
    # The p-th grouped row, of query q, goes to slot q * L + p - first_row[q].
    shift = torch.arange(sizes.numel(), device=device) * width - grouping.first_row
    grouped = torch.arange(n_rows, device=device) + shift.repeat_interleave(
        sizes, output_size=n_rows
    )
    slots = torch.empty_like(grouped).index_copy_(0, grouping.order, grouped)
    mask = torch.arange(width, device=device) < sizes[:, None]
    fill = -1 if padding_value is None else padding_value  # -1: signed values only (checked)
    padded = tuple(
        value.new_full((mask.numel(), *value.shape[1:]), fill)
        .index_copy(0, slots, value)
        .view(*mask.shape, *value.shape[1:])
        for value in values
    )
    return PaddedQueries(padded, mask, grouping.ids, slots)


def unpad_by_query(padded: Tensor, slots: Tensor) -> Tensor:
    r"""The flat rows of padded ``[Q, L, ...]`` lists, in the input order of `pad_by_query`.

    $\mathrm{rows}[i] = \mathrm{padded.flatten}(0, 1)[\mathrm{slots}[i]]$: the inverse of
    `pad_by_query` for any tensor laid out as its lists (a model's ``[Q, L]`` scores of its
    ``[Q, L, F]`` features), one gather, differentiable; nothing is read back to the host
    (but for the error of slots outside the lists).

    Args:
        padded: ``[Q, L, ...]`` lists, as `pad_by_query` laid them out.
        slots: the ``[N]`` ``slots`` that `pad_by_query` returned.

    Returns:
        ``[N, ...]`` rows: row ``i`` is the row ``i`` given to `pad_by_query`.

    Raises:
        TypeError: ``padded`` not a tensor, ``slots`` not a 1-D integer tensor.
        ValueError: ``padded`` with fewer than 2 dims; on the CPU, ``slots`` outside
            ``[0, Q * L)`` (slots of other lists; on an accelerator the gather's device-side
            index assertion fails).

    Example:
        >>> import torch
        >>> from torch_ndcg import pad_by_query, unpad_by_query
        >>> qid = torch.tensor([3, 1, 3])
        >>> (lists,), mask, ids, slots = pad_by_query(qid, torch.tensor([10, 20, 30]))
        >>> lists
        tensor([[20, -1],
                [10, 30]])
        >>> unpad_by_query(lists * 2, slots)
        tensor([20, 40, 60])
    """
    _validation.check_padded(padded, slots)
    flat = padded.flatten(0, 1)
    try:
        return flat.index_select(0, slots.long())  # uint8/int16 too
    except IndexError:  # (the CPU's; an accelerator asserts on the device)
        raise _validation.slots_outside(slots, flat.shape[0]) from None
