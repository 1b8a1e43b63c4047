"""Rows of a retrieval metric exchanged between DDP ranks so that each query lands on one rank.

Query ``q`` belongs to rank ``q mod world``. Each rank sends every other rank the rows of its
queries with one ``all_to_all_single`` per dtype (split sizes exchanged first), so that after
the exchange a rank holds all the rows of its queries and nothing else: per-rank memory and
work fall as ``1 / world``, where gathering every row on every rank would not. Received rows
come in source-rank order (rank 0's rows, then rank 1's, ...), each source's in their own
order, which is the row order that ``ties="first"`` documents.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor

from torch_ndcg._host import read_together


def world_size(group: Any | None) -> int:
    """The number of ranks of ``group`` (1 when torch.distributed is not initialised)."""
    if not (dist.is_available() and dist.is_initialized()):
        return 1
    return int(dist.get_world_size(group))


def exchange_by_query(
    columns: Sequence[Tensor], indexes: Tensor, group: Any | None
) -> tuple[list[Tensor], Tensor]:
    """Send each row to the rank that owns its query; return the rows this rank owns.

    Args:
        columns: ``[N, ...]`` row tensors (scores, labels) of this rank, on one device.
        indexes: ``[N]`` int64 query ids of the rows.
        group: the process group (``None``: the default group).

    Returns:
        The received ``columns`` and ``indexes``, in source-rank order.
    """
    world = world_size(group)
    owner = torch.remainder(indexes, world)
    order = torch.argsort(owner, stable=True)
    send_counts = torch.bincount(owner, minlength=world)
    recv_counts = torch.empty_like(send_counts)
    dist.all_to_all_single(recv_counts, send_counts, group=group)
    send, recv = (
        [int(count) for count in counts] for counts in read_together([send_counts, recv_counts])
    )
    received = []
    for column in (*columns, indexes):
        out = column.new_empty((sum(recv), *column.shape[1:]))
        dist.all_to_all_single(
            out,
            column.index_select(0, order).contiguous(),
            output_split_sizes=recv,
            input_split_sizes=send,
            group=group,
        )
        received.append(out)
    return received[:-1], received[-1]


def all_reduce_sum(tensor: Tensor, group: Any | None) -> Tensor:
    """``tensor`` summed over the ranks of ``group`` (in place, returned)."""
    dist.all_reduce(tensor, op=dist.ReduceOp.SUM, group=group)
    return tensor
