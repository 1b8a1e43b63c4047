"""Flat rows grouped by query id into padded ``[Q, W]`` lists, for ``RetrievalNDCG``.

One stable sort of small integer query codes puts each query's rows next to each other, in
their order of appearance. Queries are then laid out one per row of a padded matrix, in
buckets of similar size (sizes in ``(2^(b-1), 2^b]`` share a bucket), so that padding never
more than doubles the data however skewed the query sizes are. Each bucket goes through the
dense kernel `torch_ndcg._dcg_paths.dcg_and_ideal`: the grouped metric has no math of its own.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import torch
from torch import Tensor

from torch_ndcg import _dcg_paths, _options
from torch_ndcg._host import read_together
from torch_ndcg._options import ListOptions

# Query codes are sorted in the narrowest integer dtype that holds them: ATen's CPU radix sort
# makes one pass per byte of the dtype, so int16 codes sort about twice as fast as int32 ones.
_INT16_CODES = 2**15
_INT32_CODES = 2**31
# Size classes of queries: (2^(b-1), 2^b] for b < 63 covers every int64 size.
_SIZE_CLASSES = 63


def _narrow(codes: Tensor, n_codes: int) -> Tensor:
    """``codes`` (all in ``[0, n_codes)``) in int16 or int32 when they fit, else int64."""
    if n_codes <= _INT16_CODES:
        return codes.to(torch.int16)
    if n_codes <= _INT32_CODES:
        return codes.to(torch.int32)
    return codes


@dataclass(frozen=True)
class Grouping:
    """Rows sorted by query: ``order`` lists the rows of query 0, then query 1, and so on.

    Attributes:
        ids: ``[Q]`` sorted unique query ids.
        order: ``[N]`` row indices, grouped by query, rows of a query in order of appearance.
        first_row: ``[Q]`` position in ``order`` of each query's first row.
        sizes: ``[Q]`` number of rows of each query.
    """

    ids: Tensor
    order: Tensor
    first_row: Tensor
    sizes: Tensor

    def buckets(self) -> Iterator[tuple[Tensor, Tensor, Tensor | None]]:
        """Queries of similar size as padded lists: ``(queries, rows, mask)`` per bucket.

        ``queries`` are ``[B]`` query positions (into ``ids``), ``rows`` the ``[B, W]`` row
        indices of their items (padding points at some real row), and ``mask`` the ``[B, W]``
        real items, or ``None`` when the bucket has no padding. A bucket spans sizes in
        ``(2^(b-1), 2^b]``; ``W`` is its largest size.
        """
        n_queries = self.sizes.numel()
        if n_queries == 0:
            return
        n_rows = self.order.numel()
        # Class b holds the sizes in (2^(b-1), 2^b]: the number of powers of two below the size.
        powers_of_two = torch.pow(2, torch.arange(_SIZE_CLASSES, device=self.sizes.device))
        size_class = torch.searchsorted(powers_of_two, self.sizes)
        # What every bucket needs on the host, in one read-back: its number of queries and
        # its smallest and largest size.
        per_class = torch.zeros(_SIZE_CLASSES, dtype=torch.int64, device=self.sizes.device)
        counts = per_class.index_add(0, size_class, torch.ones_like(size_class))
        widths = per_class.scatter_reduce(0, size_class, self.sizes, "amax", include_self=False)
        lows = per_class.scatter_reduce(0, size_class, self.sizes, "amin", include_self=False)
        counts_host, widths_host, lows_host = read_together([counts, widths, lows])
        classes = [c for c, count in enumerate(counts_host) if count > 0]
        if len(classes) == 1 and lows_host[classes[0]] == widths_host[classes[0]]:
            # Every query has the same size: the sorted rows are the lists.
            width = int(widths_host[classes[0]])
            yield (
                torch.arange(n_queries, device=self.order.device),
                self.order.view(n_queries, width),
                None,
            )
            return
        by_class = torch.argsort(size_class, stable=True)
        start = 0
        for size_bits in classes:
            count, width = int(counts_host[size_bits]), int(widths_host[size_bits])
            queries = by_class.narrow(0, start, count)
            start += count
            sizes = self.sizes.index_select(0, queries)
            columns = torch.arange(width, device=sizes.device)
            mask = columns < sizes[:, None]
            positions = self.first_row.index_select(0, queries)[:, None] + columns
            positions = positions.clamp_(max=n_rows - 1)  # padding: any real row
            rows = self.order.index_select(0, positions.view(-1)).view(positions.shape)
            padded = lows_host[size_bits] < width
            yield queries, rows, mask if padded else None


def group_rows(indexes: Tensor) -> Grouping:
    """Group flat rows by their int64 query ids (any values, any order): one stable sort.

    Ids spanning less than 2^31 are coded as their offset from the smallest id; wider ones
    as their rank among the unique ids (one more sort, in ``torch.unique``).
    """
    n_rows = indexes.numel()
    device = indexes.device
    if n_rows == 0:
        empty = torch.zeros(0, dtype=torch.int64, device=device)
        return Grouping(ids=indexes.reshape(0), order=empty, first_row=empty, sizes=empty)
    low, high = (int(v) for v in torch.stack(torch.aminmax(indexes)).tolist())
    unique_ids: Tensor | None = None
    offset = 0 if low >= 0 and high < _INT32_CODES else low  # non-negative ids are codes
    if high - offset < _INT32_CODES:
        codes = _narrow(indexes - offset if offset else indexes, high - offset + 1)
    else:
        unique_ids, inverse = torch.unique(indexes, sorted=True, return_inverse=True)
        codes = _narrow(inverse, unique_ids.numel())
    sorted_codes, order = codes.sort(stable=True)
    starts = torch.ones(n_rows, dtype=torch.bool, device=device)
    torch.ne(sorted_codes[1:], sorted_codes[:-1], out=starts[1:])
    first_row = starts.nonzero().squeeze(1)
    sizes = torch.diff(first_row, append=first_row.new_tensor([n_rows]))
    if unique_ids is None:
        unique_ids = sorted_codes.index_select(0, first_row).to(torch.int64) + offset
    return Grouping(ids=unique_ids, order=order, first_row=first_row, sizes=sizes)


def grouped_dcg_and_ideal(
    preds: Tensor,
    target: Tensor,
    indexes: Tensor,
    options: ListOptions,
    ranked: Tensor | None = None,
) -> tuple[Tensor, Tensor, Tensor]:
    """DCG and ideal DCG of every query of flat rows grouped by ``indexes``, at every cut-off.

    The numbers of `torch_ndcg._dcg_paths.dcg_and_ideal` on the queries laid out one per
    row (rows of a query in order of appearance, which is what ``ties="first"`` follows), with
    no loop over queries and nothing sized by the largest query id.

    Args:
        preds: ``[N]`` floating scores, no NaN.
        target: ``[N]`` non-negative labels.
        indexes: ``[N]`` int64 query ids, any values, in any order.
        options: the checked options (``k=None``: each whole query).
        ranked: ``[N]`` bool, ``False`` for rows that take no rank (judged, not retrieved:
            in the ideal DCG only), or ``None`` (all rank).

    Returns:
        ``(ids, dcg, ideal)``: the ``[Q]`` sorted unique query ids and two ``[Q, len(k)]``
        tensors (``len(k)`` is 1 for ``k=None``) in the accumulation dtype.
    """
    grouping = group_rows(indexes)
    acc = _options.accumulate_dtype(preds.device)
    shape = (grouping.ids.numel(), options.cutoffs.count)
    dcg = torch.zeros(shape, dtype=acc, device=preds.device)
    ideal = torch.zeros(shape, dtype=acc, device=preds.device)
    for queries, rows, mask in grouping.buckets():
        flat_rows = rows.view(-1)
        bucket_dcg, bucket_ideal = _dcg_paths.dcg_and_ideal(
            preds.index_select(0, flat_rows).view(rows.shape),
            target.index_select(0, flat_rows).view(rows.shape),
            mask,
            options,
            ranked=None if ranked is None else ranked.index_select(0, flat_rows).view(rows.shape),
        )
        dcg.index_copy_(0, queries, bucket_dcg)
        ideal.index_copy_(0, queries, bucket_ideal)
    return grouping.ids, dcg, ideal
