"""The partitioned-rows protocol: a retrieval metric's rows, one rank per query, under DDP.

Query ``q`` belongs to rank ``q mod world``. Each rank sends every other rank the rows of its
queries with one ``all_to_all_single`` per dtype (split sizes exchanged first, each beside the
sender's options digest, so that ranks with other options raise together), so that after
the exchange a rank holds all the rows of its queries and nothing else: per-rank memory and
work fall as ``1 / world``, where gathering every row on every rank would not. Received rows
come in source-rank order (rank 0's rows, then rank 1's, ...), each source's in their own
order, which is the row order that ``ties="first"`` documents.

`PartitionedRows` is that protocol for a torchmetrics metric storing rows: its sync exchanges
the rows (instead of gathering every row to every rank), its ``compute`` scores this rank's
queries and finishes with one sum all-reduce or a gather of the per-query values, and an error
on one rank is raised on every rank together (one more all-reduce, of a flag), so that no rank
waits alone.

`SummedStates` is the sync of a metric of constant-size sums (`torch_ndcg.NDCG`): all its
states and its options' digest in one all-reduce, with no other collective.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor
from torchmetrics import Metric
from torchmetrics.utilities.data import dim_zero_cat
from torchmetrics.utilities.distributed import gather_all_tensors

from torch_ndcg._options import compute_dtype
from torch_ndcg._validation import check_same_options_on_every_rank

# The options every rank of a `PartitionedRows` metric must share.
_OPTIONS = (
    "`k`, `aggregation`, `confidence` (and its bootstrap's resamples and seed), gain, discount, "
    "`ties`, `empty_target_action`, `ignore_index` and dtype"
)


def all_reduce_sum(tensor: Tensor, group: Any | None) -> Tensor:
    """``tensor`` summed over the ranks of ``group`` (in place, returned)."""
    dist.all_reduce(tensor, op=dist.ReduceOp.SUM, group=group)
    return tensor


class PartitionedRows(Metric):
    """A metric of rows in list states ``preds``, ``target``, ``indexes``, partitioned under DDP.

    After a sync with torchmetrics' default ``dist_sync_fn`` this rank holds the rows of its own
    queries only (the exchange of the module's docstring); a custom ``dist_sync_fn`` gets
    torchmetrics' gather.
    ``compute`` goes through `score_on_every_rank` (which gathers the per-query values where
    asked) and `sum_over_ranks`, no-ops where the rows are not partitioned.
    """

    preds: list[Tensor]
    target: list[Tensor]
    indexes: list[Tensor]
    # Whether the last sync exchanged the rows (the states hold this rank's share of the queries
    # while synced: `partitioned`), and its process group (None is the default group).
    _partitioned = False
    _partition_group: Any = None

    def _rank_key(self) -> Tensor:
        """``[4]`` uint8 bytes that must be equal on every rank: the options' digest.

        The options that change the result (and the stored rows' dtype), each callable by
        name only; `_sync_dist` checks them on every rank.
        """
        raise NotImplementedError

    def stored_rows(self) -> tuple[Tensor, Tensor, Tensor]:
        """The stored rows as three flat tensors."""
        if isinstance(self.preds, list) and not self.preds:
            empty = torch.empty(0, dtype=compute_dtype(self.dtype), device=self.device)
            return empty, empty, torch.empty(0, dtype=torch.int64, device=self.device)
        return dim_zero_cat(self.preds), dim_zero_cat(self.target), dim_zero_cat(self.indexes)

    @property
    def partitioned(self) -> bool:
        """Whether this rank holds its own queries' rows only, now.

        Only while synced: torchmetrics' ``unsync`` restores this rank's rows, its ``reset``
        forgets them, and its forward ends unsynced (``dist_sync_on_step``).
        """
        return self._partitioned and self._is_synced

    def score_on_every_rank(
        self, score: Callable[[], tuple[Tensor, Tensor]], gather: bool
    ) -> tuple[Tensor, Tensor]:
        """``score()``'s per-query values and ids; where partitioned, every rank's.

        An error of any rank is raised on every rank together: raising skips torchmetrics'
        unsync, so this rank's rows are restored first and the metric stays usable. With
        ``gather`` every rank gets the values of all the queries, by id.
        """
        if not self.partitioned:
            return score()
        group = self._partition_group
        failure: Exception | None = None
        try:
            values, ids = score()
        except Exception as error:
            failure = error
        failed = torch.tensor([float(failure is not None)], device=self.device)
        if all_reduce_sum(failed, group).item() > 0:
            self.unsync()
            raise failure or ValueError(
                "Found an invalid query on another rank (see its error): "
                f"`{type(self).__name__}.compute` raises on every rank."
            )
        if not gather:
            return values, ids
        values, ids = (dim_zero_cat(gather_all_tensors(part, group)) for part in (values, ids))
        order = ids.argsort()  # each query was scored on one rank: ids are distinct
        return values.index_select(0, order), ids.index_select(0, order)

    def sum_over_ranks(self, totals: Tensor) -> Tensor:
        """``totals`` summed over the ranks where partitioned (one all-reduce)."""
        return all_reduce_sum(totals, self._partition_group) if self.partitioned else totals

    def _sync_dist(
        self,
        dist_sync_fn: Callable[..., Any] = gather_all_tensors,
        process_group: Any | None = None,
    ) -> None:
        """Exchange rows between ranks so that each query lands on one rank (see the class)."""
        group = process_group if process_group is not None else self.process_group
        # torchmetrics syncs only where torch.distributed is initialised.
        world = dist.get_world_size(group) if dist_sync_fn is gather_all_tensors else 1
        self._partitioned = world > 1
        if self._partitioned:
            # Each row to the rank that owns its query: the split sizes first (each beside this
            # rank's options digest), then the score and label pairs and the ids, each by one
            # all_to_all_single, in source-rank order.
            preds, target, indexes = self.stored_rows()
            owner = torch.remainder(indexes, world)
            order = torch.argsort(owner, stable=True)
            send_counts = torch.bincount(owner, minlength=world)
            key = self._rank_key().to(send_counts)
            sent = torch.cat([send_counts[:, None], key.expand(world, -1)], dim=1)
            got = torch.empty_like(sent)
            dist.all_to_all_single(got, sent, group=group)  # row r to rank r, row s from rank s
            # Each rank sees every rank's digest: where any two differ, every rank sees one
            # unlike its own, and all raise together, before any row moves.
            same = (got[:, 1:] == key).all()
            flat = torch.cat([send_counts, got[:, 0], same.to(key)[None]]).tolist()  # one read
            send, recv, agreed = flat[:world], flat[world:-1], bool(flat[-1])
            check_same_options_on_every_rank(agreed, type(self).__name__, key, _OPTIONS)
            received = []
            for column in (torch.stack([preds, target], dim=-1), indexes):
                out = column.new_empty((sum(recv), *column.shape[1:]))
                dist.all_to_all_single(out, column.index_select(0, order), recv, send, group=group)
                received.append(out)
            pairs, owned = received
            self.preds, self.target, self.indexes = [pairs[:, 0]], [pairs[:, 1]], [owned]
            self._partition_group = group
            return
        # One tensor per state, as torchmetrics concatenates them before its gather, also where
        # a state is empty: torchmetrics would stand in an empty tensor of the metric's own
        # dtype, and the other ranks' int64 ids, and their float32 rows in a half-precision
        # metric, would then meet another dtype in the gather (gloo aborts).
        self.preds, self.target, self.indexes = ([rows] for rows in self.stored_rows())
        super()._sync_dist(dist_sync_fn, process_group)


class SummedStates(Metric):
    """A metric of constant-size states summed over the ranks by one all-reduce (`torch_ndcg.NDCG`).

    ``_summed`` names the states (the first floating: the buffer's dtype), ``options_key`` the
    bytes that must be equal on every rank (bytes 0-3 travel with the states).
    """

    _summed: tuple[str, ...]
    options_key: Tensor

    def _sync_dist(
        self,
        dist_sync_fn: Callable[..., Any] = gather_all_tensors,
        process_group: Any | None = None,
    ) -> None:
        """Sum the states over the ranks by one all-reduce, checking the options on every rank.

        With torchmetrics' default ``dist_sync_fn``: the sums, the counts and bytes 0-3 of
        ``options_key`` (the named options; bytes 4-7, a callable's identity, differ between
        processes) in one buffer, one sum all-reduce, and the states replaced by the totals
        (``unsync`` restores this rank's from torchmetrics' cache). ``options_key`` stays this
        rank's: equal on every rank, or the sync raises on every rank together instead of
        adding unlike sums (``ValueError`` on the CPU, a device-side assertion on an
        accelerator, where nothing is read back). A custom ``dist_sync_fn`` gets torchmetrics'
        gather of each state, reduced by its ``dist_reduce_fx`` (sums, and the largest key),
        without the options check.

        The buffer is in the first state's dtype (float64 for `torch_ndcg.NDCG`'s sums):
        integer states (counts) travel in it and come back in their own dtype, exact while the
        totals stay below 2**53. Beside them go the bytes ``b`` of the key and their squares:
        over ``n`` ranks the sums ``S`` of ``b`` and ``Q`` of ``b**2`` satisfy ``n * Q == S**2``
        exactly when every rank holds the same byte (Cauchy-Schwarz), and these integers are
        exact in the buffer, so every rank reaches the same verdict from the same sums, with no
        other collective and nothing read back here.
        """
        if dist_sync_fn is not gather_all_tensors:
            super()._sync_dist(dist_sync_fn, process_group)
            return
        group = process_group or self.process_group  # as torchmetrics chooses it
        states = [getattr(self, name) for name in self._summed]
        key = self.options_key[:4].to(states[0].dtype)
        parts = [key, key * key, *(state.reshape(-1).to(key.dtype) for state in states)]
        buffer = all_reduce_sum(torch.cat(parts), group)
        key_sum, key_squares, *summed = torch.split(buffer, [part.numel() for part in parts])
        same = (dist.get_world_size(group) * key_squares == key_sum * key_sum).all()
        check_same_options_on_every_rank(same, type(self).__name__, self.options_key)
        for name, total, state in zip(self._summed, summed, states, strict=True):
            setattr(self, name, total.reshape(state.shape).to(state.dtype))
