r"""Streaming nDCG@k over a whole catalog: score blocks in, a running top ``k`` and counts out.

Only ranks up to ``K = max(k)`` earn a discount, so a user's DCG needs, per relevant item
``i`` of score ``s_i``, two counts over the non-excluded catalog: ``a_i`` the items ranked
before it and (for ``ties="average"``) ``t_i`` the items tied with it, itself included. Then

$$
\mathrm{DCG@}k = \sum_i \frac{g_i}{t_i} \big(D_k(a_i + t_i) - D_k(a_i)\big),
\qquad D_k(m) = \sum_{r \le \min(m, k)} d(r),
$$

which is the tie-averaged DCG of McSherry & Najork (every member of a tie group is credited
its group's mean gain, also when the group straddles ``k``), and with ``t_i = 1`` and ``a_i``
counting equal scores of smaller item index the ``ties="first"`` DCG (ties ordered by item
index). Items not relevant have gain 0 and add nothing. If ``a_i >= K`` the item adds nothing
either, so the counts are needed only for items ranked inside the top ``K``, and for those
they are counts over the top ``K`` itself.

The state per user is therefore the ``K`` best items seen so far (score and global index, ordered by
score descending, then index ascending), the number of items seen whose score equals the ``K``-th
best (ties may spill past ``K``), and the score of each relevant item seen. A block is absorbed by
selecting its candidates and merging them with the top ``K``. Selection costs about one read of the
block: the maxima of groups of `GROUP` items (one pass), then only the groups whose maximum reaches
the threshold (the current ``K``-th best score; after the first blocks almost no group does), then
only their items that reach it. Where too many groups pass (the first block of a user block, when
the top ``K`` is still empty), the ``(K + e)``-th best group maximum of the block itself raises the
threshold: those groups hold ``K + e`` distinct items, ``K`` of them ranked even if ``e`` are
excluded; if nearly every group still passes (scores tied with that maximum), the block is merged
whole. A user whose best item in a block only ties with the last of its full top ``K`` (zero
embeddings, integer scores) is not selected at all: blocks come in item order and ties rank by
index, so those items cannot enter the top ``K`` and are only counted (`Stream._tally_ties`). The
survivors of a few blocks are merged at once (`MERGE_EVERY`): until then the threshold lags, which
lets a few more items through but pays the merge's fixed cost less often. The relevant items' scores
are read off each block as it comes. States of item shards merge exactly (`merge_states`): the top
``K`` of the union is the top ``K`` of the shards' top ``K``s, and the boundary counts add up.

Excluded items take no rank: a selected survivor that is excluded is dropped, and in a block
merged whole an excluded item becomes a placeholder (score ``-inf``, index `PLACEHOLDER`),
which ranks after every real item and which the counts never include, so that a genuine
``-inf`` score still ranks. (An excluded item may be the maximum of its group, which then
passes for nothing: harmless, the survivors are filtered again.)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from torch_ndcg import _dcg_paths, _host, _kernels
from torch_ndcg._dcg_paths import group_maxima, group_members
from torch_ndcg._options import CATALOG_PLACEHOLDER, ListOptions, accumulate_dtype

PLACEHOLDER = CATALOG_PLACEHOLDER  # an empty slot of the top K (see `torch_ndcg._options`)

# Blocks whose survivors are merged into the top K at once (sooner if they are many): the
# threshold then lags a few blocks, which lets a few more items survive, and the merge's
# fixed cost is paid a few times less often.
MERGE_EVERY = 16
# Pending groups per user that trigger a merge before `MERGE_EVERY` blocks: the first blocks
# pass many groups, and merging them soon raises the threshold for the next ones.
FLUSH_GROUPS = 2
# Items per group of the selection's maxima pass (64-item groups measured no faster: their
# maxima are read a little faster, but each passing group brings twice the items).
GROUP = 32


@dataclass
class TopState:
    """The running top ``K`` of a block of users, with what the DCG needs besides.

    Attributes:
        scores: ``[B, K]`` best scores, descending (``-inf`` in empty slots).
        index: ``[B, K]`` their global item indices (`PLACEHOLDER` in empty slots).
        boundary_count: ``[B, 1]`` int64, real items seen whose score equals ``scores[:, -1]``.
        rel_scores: ``[B, P]`` scores of the relevant items (``-inf`` until recorded).
        rel_seen: ``[B, P]`` bool, whether a relevant item's score was recorded (its block
            was seen).
    """

    scores: Tensor
    index: Tensor
    boundary_count: Tensor
    rel_scores: Tensor
    rel_seen: Tensor


def new_state(rel_ids: Tensor, kmax: int, dtype: torch.dtype) -> TopState:
    """An empty state of the users of ``[B, P]`` ``rel_ids``: ``K`` empty slots, no score."""
    scores = rel_ids.new_full((rel_ids.shape[0], kmax), float("-inf"), dtype=dtype)
    return TopState(
        scores=scores,
        index=torch.full_like(scores, PLACEHOLDER, dtype=torch.int64),
        boundary_count=rel_ids.new_zeros((rel_ids.shape[0], 1)),
        rel_scores=torch.full_like(rel_ids, float("-inf"), dtype=dtype),
        rel_seen=torch.zeros_like(rel_ids, dtype=torch.bool),
    )


def cat_states(states: Sequence[TopState]) -> TopState:
    """The state of the users of every state, in turn (blocks of users)."""
    return TopState(
        *(torch.cat(parts) for parts in zip(*(vars(s).values() for s in states), strict=True))
    )


def pad_rows(
    rows: Tensor, counts: Tensor, longest: int, *columns: tuple[Tensor, float]
) -> list[Tensor]:
    """Entries laid out per user: ``[B, longest]`` of each ``(values, fill)`` column.

    ``rows`` (ascending) are the entries' users, ``counts`` the ``[B]`` entries per user.
    """
    position = torch.arange(rows.shape[0], device=rows.device) - (counts.cumsum(0) - counts)[rows]
    return [
        values.new_full((counts.shape[0], longest), fill).index_put_((rows, position), values)
        for values, fill in columns
    ]


def best_k(scores: Tensor, index: Tensor, kmax: int) -> tuple[Tensor, Tensor]:
    """The ``kmax`` best of ``[B, M]`` (score, index) pairs: score descending, index ascending."""
    if scores.dtype == torch.float32:  # int64 keys: the score's order bits, then the index
        keys = _dcg_paths.ordered_int32(scores).to(torch.int64).bitwise_left_shift(32)
        order = keys.add_(PLACEHOLDER - index).topk(kmax, dim=-1, sorted=True).indices
    else:  # float64 keys do not fit beside an index: two stable sorts (index, then score)
        by_index = index.sort(dim=-1, stable=True).indices
        by_score = scores.gather(-1, by_index).sort(dim=-1, descending=True, stable=True).indices
        order = by_index.gather(-1, by_score).narrow(-1, 0, kmax)
    return scores.gather(-1, order), index.gather(-1, order)


def _union(parts: Sequence[tuple[Tensor, Tensor, Tensor | None]]) -> tuple[Tensor, Tensor, Tensor]:
    """The top ``K`` (scores, index) of disjoint item sets and its boundary count.

    Each part is ``(scores, index, count)``: a top ``K`` with its boundary count, or with
    ``count=None`` candidates holding every item of their set at least the new boundary. A
    top ``K``'s boundary is never above the union's; where equal, its count holds the items past
    it too; where lower, its items at the union's boundary are all in it.
    """
    everything = [torch.cat(column, dim=-1) for column in list(zip(*parts, strict=True))[:2]]
    scores, index = best_k(everything[0], everything[1], parts[0][0].shape[-1])
    boundary = scores[:, -1:]
    counts = []
    for part, ids, count in parts:  # the real items at the boundary
        equal = (part.eq(boundary) & ids.ne(PLACEHOLDER)).sum(-1, keepdim=True)
        counts.append(
            equal if count is None else torch.where(part[:, -1:].eq(boundary), count, equal)
        )
    return scores, index, torch.stack(counts).sum(0)


def _in_block(ids: Tensor, start: int, width: int) -> tuple[Tensor, Tensor]:
    """Block-local columns of global ``ids`` (clamped into the block) and which lie in it."""
    local = ids - start
    inside = (local >= 0) & (local < width)
    return local.clamp_(0, width - 1), inside


def excluded(candidates: Tensor, excluded_sorted: Tensor) -> Tensor:
    """``[B, M]`` bool: candidate indices found in the ascending per-user ``excluded_sorted``."""
    at = torch.searchsorted(excluded_sorted, candidates.contiguous())
    at = at.clamp_(max=excluded_sorted.shape[-1] - 1)
    return excluded_sorted.gather(-1, at).eq(candidates)


class Stream:
    """The running top ``K`` of a block of users while their blocks of scores stream in.

    On the CPU each block's candidates are selected (`group_maxima`, then the groups and items
    that reach the threshold), and the survivors of up to `MERGE_EVERY` blocks are merged into
    the top ``K`` at once; elsewhere every block is merged whole, branch-free (no read-back).

    Args:
        rel_ids: ``[B, P]`` global ids of the relevant items (negative: padding).
        excluded_sorted: ``[B, E]`` excluded ids, ascending per user, padded with the int64
            maximum; or ``None``.
        kmax: ``K``.
        dtype: the scores' compute dtype (blocks are cast to it).

    Attributes:
        state: the users' `TopState` (final once `result` merged what is pending).
        nan: on the CPU, whether a score that takes a rank was NaN (the caller raises; the
            values are then meaningless); elsewhere always ``False``.
    """

    def __init__(
        self, rel_ids: Tensor, excluded_sorted: Tensor | None, kmax: int, dtype: torch.dtype
    ) -> None:
        self.state = state = new_state(rel_ids, kmax, dtype)
        self.rel_ids = rel_ids
        self.excluded = excluded_sorted
        self.select = _host.may_read_back(state.scores.device)
        self.nan = False
        self.excluded_keys = None  # the selection's exclusion test: ascending `row << 32 | id`
        if self.select and excluded_sorted is not None:  # (padding: `PLACEHOLDER`, no item)
            rows = torch.arange(excluded_sorted.shape[0], device=excluded_sorted.device)
            keys = rows[:, None].bitwise_left_shift(32) + excluded_sorted.clamp(max=PLACEHOLDER)
            self.excluded_keys = keys.view(-1)
        self.pending: list[tuple[Tensor, Tensor, Tensor]] = []
        self.pending_groups = 0
        # [B, 1]: the highest pruning threshold of the pending blocks, below the next K-th best.
        self.threshold: Tensor | None = None

    def absorb(self, block: Tensor, start: int) -> None:
        """Absorb ``block`` (``[B, C]``, any strides, never modified): items ``start ..``."""
        block, state = block.to(self.state.scores.dtype), self.state
        local, inside = _in_block(self.rel_ids, start, block.shape[1])  # relevant scores first
        state.rel_scores = torch.where(inside, block.gather(1, local), state.rel_scores)
        state.rel_seen = state.rel_seen | inside
        if not self.select or block.shape[1] % GROUP:
            self._absorb_whole(block, start)
        else:
            self._select(block, start)
        if len(self.pending) >= MERGE_EVERY or self.pending_groups >= FLUSH_GROUPS * len(block):
            self._flush()

    def _absorb_whole(self, block: Tensor, start: int) -> None:
        """Merge every item of ``block`` (branch-free: no read-back but on the CPU).

        An excluded item becomes a placeholder, which the merge neither ranks nor counts.
        """
        self._flush()
        users, width = block.shape
        index = torch.arange(start, start + width, device=block.device).expand(users, width)
        scores = block
        if self.excluded is not None:
            dropped = excluded(index, self.excluded)
            scores = torch.where(dropped, float("-inf"), block)
            index = torch.where(dropped, PLACEHOLDER, index)
        # Excluded (and padded) items' scores never count: only the others may not be NaN.
        self.nan = self.nan or (self.select and bool(scores.isnan().any()))
        self._merge(scores, index)

    def _merge(self, scores: Tensor, index: Tensor) -> None:
        """Merge candidates (every item of their set at least the new boundary) into the top K."""
        state = self.state
        top = (state.scores, state.index, state.boundary_count)
        state.scores, state.index, state.boundary_count = _union([top, (scores, index, None)])

    def result(self) -> TopState:
        """The state once every block was absorbed."""
        self._flush()
        return self.state

    def _select(self, block: Tensor, start: int) -> None:
        """Add the block's groups whose maximum reaches the pruning threshold to the pending ones.

        The threshold is the current ``K``-th best score, or where too many groups pass (the
        first block) the ``(K + e)``-th largest group maximum ``t`` of the block when that is
        higher (``e``: the user's excluded items in the block): ``t`` is the maximum of
        ``K + e`` distinct items, at least ``K`` of them ranked, so the new ``K``-th best is at
        least ``t``. Every item that reaches the threshold is in such a group. Pending: the
        ``[n]`` rows (users, ascending), ``[n, GROUP]`` item indices and scores of the ``n``
        passing groups, and the ``[B, 1]`` threshold.
        """
        users, width = block.shape
        kmax = self.state.scores.shape[-1]
        maxima = group_maxima(block, GROUP)
        # A pending block's threshold (at least the K-th best, which changes only at merges)
        # holds for this one too.
        last = self.state.scores[:, -1:]
        threshold = last if self.threshold is None else self.threshold
        best = maxima.amax(1, keepdim=True)  # (NaN: it passes, to be reported)
        # The users whose best item only ties with the last of their full top K are counted,
        # not selected (`_tally_ties`): blocks come in item order and ties rank by item index,
        # so such an item ranks after every item of the top K and never enters it.
        full = self.state.index[:, -1:].ne(PLACEHOLDER)
        selected = ~(best.eq(threshold) & threshold.eq(last) & full)
        # Groups reaching the threshold pass (NaN too: it is reported after the merge).
        pairs = (~maxima.lt(threshold) & selected).nonzero()
        if pairs.shape[0] > users * (kmax + 1):  # many groups pass: a higher threshold
            excluded_here = maxima.new_zeros((users, 1), dtype=torch.int64)
            if self.excluded is not None:
                excluded_here = _in_block(self.excluded, start, width)[1].sum(1, keepdim=True)
            most = kmax + int(excluded_here.max())
            if maxima.shape[1] > most:  # (the tallied users' threshold stays: none above)
                top = maxima.topk(most, dim=1).values.gather(1, excluded_here + (kmax - 1))
                threshold = torch.maximum(threshold, top)
                pairs = (~maxima.lt(threshold) & selected).nonzero()
            if 4 * pairs.shape[0] > 3 * maxima.numel():
                # Nearly every group still passes (scores tied at the threshold, or k about
                # the number of groups): selecting them would cost more than a merge.
                self._absorb_whole(block, start)
                return
        self._tally_ties(block, start, threshold, ~selected)
        if not pairs.shape[0]:  # nothing passes: the block added its ties at most
            return
        rows, groups = pairs.unbind(1)
        columns = groups[:, None] + group_members(maxima.shape[1], block.device, GROUP)
        self.pending.append((rows, columns + start, block[rows[:, None], columns]))
        self.pending_groups += rows.shape[0]
        self.threshold = threshold

    def _tally_ties(self, block: Tensor, start: int, threshold: Tensor, tallied: Tensor) -> None:
        """Count, and do not select, the items of the ``tallied`` users (``[B, 1]`` bool).

        Their best item in the block ties with the last of their full top ``K``: the items equal to
        it (excluded items left out) add to the boundary count. Tied scores (zero embeddings,
        integer scores) then cost a pass over their rows, not a merge of every item. (A user with an
        item above the threshold too is selected as usual: its ties are candidates, counted by the
        merge; never counted twice.)
        """
        rows = tallied.view(-1).nonzero().squeeze(1)
        if not rows.shape[0]:
            return
        width = block.shape[1]
        values = threshold.index_select(0, rows)
        counted = block.index_select(0, rows).eq(values)
        if self.excluded is not None:  # excluded items take no rank, nor a place in a tie
            local, inside = _in_block(self.excluded.index_select(0, rows), start, width)
            row, at = inside.nonzero().unbind(1)
            counted[row, local[row, at]] = False
        self.state.boundary_count.index_add_(0, rows, counted.sum(1, keepdim=True))

    def _flush(self) -> None:
        """Merge the pending groups' items that reach the threshold: packed per user, one merge.

        The new ``K``-th best is at least every pending block's threshold: items below the
        highest of them cannot enter, nor tie with it.
        """
        if not self.pending:
            return
        pending, threshold = self.pending, self.threshold
        self.pending, self.pending_groups, self.threshold = [], 0, None
        state = self.state
        rows, index, scores = (torch.cat(part) for part in zip(*pending, strict=True))
        assert threshold is not None
        kept = (~scores.lt(threshold.index_select(0, rows))).nonzero().unbind(1)
        rows, index, scores = rows.index_select(0, kept[0]), index[kept], scores[kept]
        at = rows.argsort(stable=True)  # by user (each pending block lists its users in turn)
        if self.excluded_keys is not None:  # excluded items take no rank: dropped here
            at = at[~excluded(rows[at].bitwise_left_shift(32) + index[at], self.excluded_keys)]
        rows, index, scores = rows[at], index[at], scores[at]
        counts = torch.bincount(rows, minlength=state.scores.shape[0])
        longest, nan = torch.stack([counts.max(), scores.isnan().any()]).tolist()
        self.nan = self.nan or bool(nan)
        if longest:
            columns = (scores, float("-inf")), (index, PLACEHOLDER)
            self._merge(*pad_rows(rows, counts, longest, *columns))


def merge_states(states: Sequence[TopState]) -> TopState:
    """The state of the union of disjoint item sets (shards) from the state of each."""
    top = _union([(s.scores, s.index, s.boundary_count) for s in states])
    seen = torch.stack([s.rel_seen for s in states])  # (by one shard at most: they tile)
    rel_scores = torch.stack([s.rel_scores for s in states]).where(seen, -torch.inf).amax(0)
    return TopState(*top, rel_scores, seen.any(0))


def catalog_dcg(
    state: TopState, rel_ids: Tensor, grades: Tensor, ks: Sequence[int], options: ListOptions
) -> tuple[Tensor, Tensor]:
    """DCG of the users from their final state (see the module docstring), and ideal DCG.

    Args:
        state: the state after every item of the catalog was absorbed (or merged).
        rel_ids: ``[B, P]`` global ids of the relevant items (negative: padding).
        grades: ``[B, P]`` their grades (0 for padding), in the compute dtype.
        ks: cut-offs.
        options: checked options: their gain, discount and ties.

    Returns:
        ``[B, len(ks)]`` DCG and ideal DCG (from the relevant grades alone: other items have
        gain 0) in the accumulation dtype.
    """
    kmax, dtype, device = state.scores.shape[-1], grades.dtype, grades.device
    gain, discount, valid = options.gain, options.discount, rel_ids.ge(0)
    rel_gains = _kernels.list_gains(grades, valid, gain, dtype)
    acc = accumulate_dtype(device)
    real = state.index.ne(PLACEHOLDER)[:, None, :]
    top, rel = state.scores[:, None, :], state.rel_scores[:, :, None]
    before = (top.gt(rel) & real).sum(-1)
    equal = top.eq(rel) & real
    if options.ties == "first":  # equal scores rank by item index
        before += (equal & state.index[:, None, :].lt(rel_ids[:, :, None])).sum(-1)
        tied = torch.ones_like(before)
    else:  # a tie with the K-th best spills past K: the boundary count is its size
        at_boundary = state.rel_scores.eq(state.scores[:, -1:])
        tied = torch.where(at_boundary, state.boundary_count, equal.sum(-1))
    # Ranked inside the top K (fewer than K items before it; NaN never is) and seen.
    counted = before.lt(kmax) & state.rel_scores.eq(state.rel_scores) & state.rel_seen & valid
    tied = tied.clamp(min=1)  # (items not counted: share nothing below)
    table = _kernels.cutoff_matrix(kmax, ks, discount, acc, device, cumulative=True)
    spanned = table[(before + tied).clamp_(max=kmax)] - table[before]  # [B, P, len(ks)]
    share = torch.where(counted, rel_gains.to(acc) / tied, 0)
    value = (share[:, :, None] * spanned).sum(1)
    with _kernels.full_precision(device):
        lists = _kernels.Lists(grades, valid)
        ideal = _kernels.ideal_dcg(lists, options, dtype, item_gains=rel_gains)
    return value, ideal
