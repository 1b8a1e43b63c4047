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

The state per user is therefore the ``K`` best items seen so far (score and global index,
ordered by score descending, then index ascending), the number of items seen whose score
equals the ``K``-th best (ties may spill past ``K``), and the score of each relevant item once
its block has been seen. A block is absorbed by selecting its candidates and merging them
with the top ``K``. Selection costs about one read of the block: the maxima of groups of
`GROUP` items (one pass), then only the groups whose maximum reaches the current ``K``-th
best score (after the first blocks, almost none), then only their items that reach it. In
the first blocks, where many groups pass, the ``K`` best groups hold the block's top ``K``;
where the ``K``-th and ``(K+1)``-th group maxima are equal an unselected group may hold an
item tied with the boundary, and that block is absorbed whole. States of item shards merge
exactly (`merge_states`): the top ``K`` of the union is the top ``K`` of the shards' top
``K``s, and the boundary counts add up.

Excluded items take no rank: a candidate that is excluded becomes a placeholder (score
``-inf``, index `PLACEHOLDER`), which ranks after every real item and which the counts never
include, so that a genuine ``-inf`` score still ranks. (An excluded item may be the maximum
of its group: the best-groups selection takes one more group per excluded item.)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from torch_ndcg import _fast_paths, _host, _kernels
from torch_ndcg._options import Discount, Gain, Ties, accumulate_dtype

# Index of an empty slot of the top K (and of an excluded candidate): above every item index,
# so that it ranks after every real item of equal score; the low 32 bits of a 64-bit sort key
# hold `PLACEHOLDER - index`, hence the bound on catalog sizes.
PLACEHOLDER = (1 << 32) - 1
# The one-pass candidate selection splits a block into slices of SLICE items (2048 items of 256
# users: 2 MiB of float32, which stays in a core's cache between the product that writes it and
# the reduction that reads it), each into GROUPS_PER_SLICE groups of GROUP items: K + 1 groups
# of 32 are a few hundred candidates.
SLICE = 2048
GROUP = 32
GROUPS_PER_SLICE = SLICE // GROUP


@dataclass
class TopState:
    """The running top ``K`` of a block of users, with what the DCG needs besides.

    Attributes:
        scores: ``[B, K]`` best scores, descending (``-inf`` in empty slots).
        index: ``[B, K]`` their global item indices (`PLACEHOLDER` in empty slots).
        boundary_count: ``[B]`` int64, real items seen whose score equals ``scores[:, -1]``.
        rel_scores: ``[B, P]`` scores of the relevant items (``-inf`` until seen).
        rel_seen: ``[B, P]`` bool, whether a relevant item's block was seen.
    """

    scores: Tensor
    index: Tensor
    boundary_count: Tensor
    rel_scores: Tensor
    rel_seen: Tensor


def new_state(
    users: int, kmax: int, n_relevant: int, dtype: torch.dtype, device: torch.device
) -> TopState:
    """An empty state: ``K`` empty slots per user, no relevant score seen."""
    return TopState(
        scores=torch.full((users, kmax), float("-inf"), dtype=dtype, device=device),
        index=torch.full((users, kmax), PLACEHOLDER, dtype=torch.int64, device=device),
        boundary_count=torch.zeros(users, dtype=torch.int64, device=device),
        rel_scores=torch.full((users, n_relevant), float("-inf"), dtype=dtype, device=device),
        rel_seen=torch.zeros((users, n_relevant), dtype=torch.bool, device=device),
    )


def _sort_keys(scores: Tensor, index: Tensor) -> Tensor:
    """int64 keys ordered as (score descending, index ascending): float32 scores only."""
    score_bits = _fast_paths.ordered_int32(scores).to(torch.int64)
    return score_bits.bitwise_left_shift(32).add_(PLACEHOLDER - index)


def best_k(scores: Tensor, index: Tensor, kmax: int) -> tuple[Tensor, Tensor]:
    """The ``kmax`` best of ``[B, M]`` (score, index) pairs: score descending, index ascending."""
    if scores.dtype == torch.float32:
        order = _sort_keys(scores, index).topk(kmax, dim=-1, sorted=True).indices
    else:  # float64 keys do not fit beside an index: two stable sorts (index, then score)
        by_index = index.sort(dim=-1, stable=True).indices
        by_score = scores.gather(-1, by_index).sort(dim=-1, descending=True, stable=True).indices
        order = by_index.gather(-1, by_score).narrow(-1, 0, kmax)
    return scores.gather(-1, order), index.gather(-1, order)


def _count_equal(scores: Tensor, index: Tensor, value: Tensor) -> Tensor:
    """``[B]``: real entries (index not `PLACEHOLDER`) whose score equals ``value[b]``."""
    return (scores.eq(value[:, None]) & index.ne(PLACEHOLDER)).sum(-1)


def _merge(state: TopState, cand_scores: Tensor, cand_index: Tensor) -> None:
    """Merge candidates of unseen items into the top ``K``; keep the boundary count exact.

    The candidates must hold every unseen item whose score is at least the new boundary.
    """
    kmax = state.scores.shape[-1]
    old_boundary = state.scores[:, -1]
    scores, index = best_k(
        torch.cat([state.scores, cand_scores], dim=-1),
        torch.cat([state.index, cand_index], dim=-1),
        kmax,
    )
    boundary = scores[:, -1]
    same = boundary.eq(old_boundary)
    # Items equal to a higher boundary all sit in the old top K or the candidates; items equal
    # to an unchanged one were counted before, or are candidates now.
    before = torch.where(
        same, state.boundary_count, _count_equal(state.scores, state.index, boundary)
    )
    state.boundary_count = before + _count_equal(cand_scores, cand_index, boundary)
    state.scores, state.index = scores, index


def _in_block(ids: Tensor, start: int, width: int) -> tuple[Tensor, Tensor]:
    """Block-local columns of global ``ids`` (clamped into the block) and which lie in it."""
    local = ids - start
    inside = (local >= 0) & (local < width)
    return local.clamp_(0, width - 1), inside


def _excluded(candidates: Tensor, excluded_sorted: Tensor) -> Tensor:
    """``[B, M]`` bool: candidate indices found in the ascending per-user ``excluded_sorted``."""
    at = torch.searchsorted(excluded_sorted, candidates.contiguous())
    at = at.clamp_(max=excluded_sorted.shape[-1] - 1)
    return excluded_sorted.gather(-1, at).eq(candidates)


_NAN_MESSAGE = "Expected the scores to have no NaN, but a block of scores has one."


def group_maxima(block: Tensor) -> Tensor | None:
    """``[B, C / GROUP]`` maxima of a block's candidate groups, or ``None`` if it has none.

    A block of whole slices (`SLICE` items) whose rows are contiguous: one reduction. Group
    ``j`` of slice ``s`` holds the items ``s * SLICE + j + m * GROUPS_PER_SLICE``,
    ``m < GROUP``: strided groups make the reduction an element-wise maximum of vectors.
    """
    users, width = block.shape
    if width % SLICE or block.stride(-1) != 1 or width == 0:
        return None
    slices = block.view(users, width // SLICE, GROUP, GROUPS_PER_SLICE)
    return slices.amax(2).flatten(1)


def group_items(groups: Tensor) -> Tensor:
    """``[B, G * GROUP]`` block columns of the items of groups ``[B, G]`` (see `group_maxima`)."""
    first = (groups // GROUPS_PER_SLICE) * SLICE + groups % GROUPS_PER_SLICE
    offsets = torch.arange(GROUP, device=groups.device) * GROUPS_PER_SLICE
    return first[:, :, None].add(offsets).flatten(1)


def absorb(
    state: TopState,
    block: Tensor,
    start: int,
    rel_ids: Tensor,
    excluded_sorted: Tensor | None,
    *,
    maxima: Tensor | None = None,
) -> None:
    """Absorb the scores ``block`` (``[B, C]``, never modified) of items ``start .. start + C - 1``.

    Args:
        state: the users' state (updated in place).
        block: the users' scores of the block's items (any strides).
        start: global index of the block's first item.
        rel_ids: ``[B, P]`` global ids of the relevant items (negative: padding).
        excluded_sorted: ``[B, E]`` excluded ids, ascending per user, padded with the int64
            maximum; or ``None``.
        maxima: the block's `group_maxima`, if already taken.
    """
    users, width = block.shape
    local, inside = _in_block(rel_ids, start, width)
    seen = block.gather(1, local)
    state.rel_scores = torch.where(inside, seen, state.rel_scores)
    state.rel_seen = state.rel_seen | inside
    candidates = None
    if _host.may_read_back(block.device):  # the selection reads counts back: CPU only
        if maxima is None:
            maxima = group_maxima(block)
        if maxima is not None:
            # An excluded item may be its group's maximum: each can stand in for one group.
            excluded_here = None
            if excluded_sorted is not None:
                excluded_here = _in_block(excluded_sorted, start, width)[1].sum(1).max()
            candidates = _passing_groups(state, block, maxima, start, excluded_here)
            if candidates is not None and candidates[0].shape[1] == 0:
                return  # no item of the block reaches the top K
    if candidates is None:  # the whole block is the candidate set
        candidates = (
            block,
            torch.arange(start, start + width, device=block.device).expand(users, width),
        )
        if _host.may_read_back(block.device) and bool(block.isnan().any()):
            raise ValueError(_NAN_MESSAGE)
    cand_scores, cand_index = candidates
    if excluded_sorted is not None:
        excluded = _excluded(cand_index, excluded_sorted)
        cand_scores = torch.where(excluded, float("-inf"), cand_scores)
        cand_index = torch.where(excluded, PLACEHOLDER, cand_index)
    _merge(state, cand_scores, cand_index)


def _best_groups(
    block: Tensor, maxima: Tensor, start: int, n_groups: int
) -> tuple[Tensor, Tensor] | None:
    """The items of the ``n_groups`` groups with the largest maxima.

    With ``n_groups = K + e`` (``e`` excluded items in the block, each of which may be the
    maximum of a group that holds nothing as good) they hold the block's top ``K``, and every
    other item lies below the new boundary, except where the ``n_groups``-th and
    ``(n_groups + 1)``-th maxima are equal: another group may then hold an item tied with it,
    and the answer is ``None`` (take the whole block).
    """
    if maxima.shape[1] <= n_groups + 1:
        return None
    best = maxima.topk(n_groups + 1, dim=-1, sorted=True)
    if bool(best.values[:, n_groups].eq(best.values[:, n_groups - 1]).any()):
        return None
    columns = group_items(best.indices[:, :n_groups])
    return block.gather(1, columns), columns + start


def _compacted(
    mask: Tensor, counts: Tensor, width: int, *values: tuple[Tensor, float | int]
) -> list[Tensor]:
    """The ``True`` entries of ``[B, M]`` ``mask`` packed to the left of ``[B, width]`` rows.

    Each ``(tensor, fill)`` of ``values`` gives a ``[B, width]`` tensor of its entries where
    ``mask`` holds, in order, and ``fill`` after them. ``counts`` is ``mask.sum(1)``.
    """
    users = mask.shape[0]
    rows, columns = mask.nonzero().unbind(1)
    position = torch.arange(rows.numel(), device=rows.device) - (counts.cumsum(0) - counts)[rows]
    packed = []
    for tensor, fill in values:
        out = torch.full((users, width), fill, dtype=tensor.dtype, device=tensor.device)
        out[rows, position] = tensor[rows, columns]
        packed.append(out)
    return packed


def _passing_groups(
    state: TopState, block: Tensor, maxima: Tensor, start: int, excluded_here: Tensor | None
) -> tuple[Tensor, Tensor] | None:
    """The items at or above the current ``K``-th best score, found through group maxima.

    Every such item is in a group whose maximum reaches the boundary, and the new boundary is
    not below it: these candidates are all the merge needs, ties included. The groups are
    selected first, then their items. Where more than ``K + 1 + e`` groups pass (early blocks),
    the `_best_groups` instead. Reads back the largest numbers of groups and items per user:
    CPU only.

    Returns:
        ``(scores, global index)`` of the ``[B, m]`` candidates (padding: a placeholder at
        ``-inf``); no candidate (``m = 0``) when no item passes; ``None`` when the whole block is to
        be taken.
    """
    boundary = state.scores[:, -1:]
    passing = maxima.ge(boundary)
    counts = passing.sum(1)
    extra = counts.new_zeros(()) if excluded_here is None else excluded_here
    flags = torch.stack([counts.max(), extra, maxima.isnan().any().to(counts.dtype)])
    most, spare, nan = flags.tolist()
    if nan:
        raise ValueError(_NAN_MESSAGE)
    kmax = state.scores.shape[-1]
    if most > kmax + 1 + spare:
        return _best_groups(block, maxima, start, kmax + spare)
    if most == 0:
        return block.new_empty((block.shape[0], 0)), maxima.new_empty((0, 0), dtype=torch.int64)
    (groups,) = _compacted(
        passing,
        counts,
        most,
        (torch.arange(maxima.shape[1], device=maxima.device).expand_as(maxima), -1),
    )
    columns = group_items(groups.clamp(min=0))
    scores = block.gather(1, columns)
    kept = scores.ge(boundary) & groups.ge(0).repeat_interleave(GROUP, dim=1)
    kept_counts = kept.sum(1)
    width = int(kept_counts.max())
    if width == 0:
        return scores[:, :0], columns[:, :0]
    cand_scores, cand_index = _compacted(
        kept, kept_counts, width, (scores, float("-inf")), (columns + start, PLACEHOLDER)
    )
    return cand_scores, cand_index


def merge_states(states: Sequence[TopState]) -> TopState:
    """The state of the union of disjoint item sets (shards) from the state of each."""
    first = states[0]
    kmax = first.scores.shape[-1]
    scores, index = best_k(
        torch.cat([s.scores for s in states], dim=-1),
        torch.cat([s.index for s in states], dim=-1),
        kmax,
    )
    boundary = scores[:, -1]
    # A full shard's boundary is never above the union's; where equal, its count holds the
    # items past its own top K too; where lower, its items at the union's boundary are all in
    # its top K.
    count = sum(
        (
            torch.where(
                s.scores[:, -1].eq(boundary),
                s.boundary_count,
                _count_equal(s.scores, s.index, boundary),
            )
            for s in states
        ),
        torch.zeros_like(first.boundary_count),
    )
    rel_scores = first.rel_scores
    for s in states[1:]:
        rel_scores = torch.where(s.rel_seen, s.rel_scores, rel_scores)
    rel_seen = torch.stack([s.rel_seen for s in states]).any(0)
    return TopState(scores, index, count, rel_scores, rel_seen)


def state_dcg(
    state: TopState,
    rel_ids: Tensor,
    rel_gains: Tensor,
    *,
    ks: Sequence[int],
    discount: Discount,
    ties: Ties,
) -> Tensor:
    """``[B, len(ks)]`` DCG of the users from their final state (see the module docstring).

    Args:
        state: the state after every item of the catalog was absorbed (or merged).
        rel_ids: ``[B, P]`` global ids of the relevant items (negative: padding).
        rel_gains: ``[B, P]`` their gains (0 for padding), any floating dtype.
        ks: cut-offs.
        discount: discount name or callable.
        ties: ``"average"`` or ``"first"``.

    Returns:
        ``[B, len(ks)]`` in the accumulation dtype.
    """
    kmax = state.scores.shape[-1]
    acc = accumulate_dtype(rel_gains.device)
    real = state.index.ne(PLACEHOLDER)[:, None, :]
    top, rel = state.scores[:, None, :], state.rel_scores[:, :, None]
    boundary = state.scores[:, -1:]
    above = (top.gt(rel) & real).sum(-1)
    if ties == "first":
        top_index, rel_index = state.index[:, None, :], rel_ids[:, :, None]
        before = above + (top.eq(rel) & top_index.lt(rel_index) & real).sum(-1)
        last = state.index[:, -1:]
        inside = state.rel_scores.gt(boundary) | (state.rel_scores.eq(boundary) & rel_ids.le(last))
        tied = torch.ones_like(before)
    else:
        before = above
        inside = state.rel_scores.ge(boundary)
        equal = (top.eq(rel) & real).sum(-1)
        tied = torch.where(state.rel_scores.eq(boundary), state.boundary_count[:, None], equal)
    counted = inside & state.rel_seen & rel_ids.ge(0)
    before = torch.where(counted, before, kmax)
    tied = torch.where(counted, tied, 1).clamp_(min=1)
    table = _kernels.cutoff_matrix(kmax, ks, discount, acc, rel_gains.device, cumulative=True)
    upper = table.index_select(0, (before + tied).clamp_(max=kmax).view(-1))
    lower = table.index_select(0, before.view(-1))
    users, n_rel = rel_ids.shape
    spanned = (upper - lower).view(users, n_rel, len(ks))
    share = torch.where(counted, rel_gains.to(acc) / tied, 0)
    return (share[:, :, None] * spanned).sum(1)


def relevant_gains(grades: Tensor, valid: Tensor, gain: Gain, dtype: torch.dtype) -> Tensor:
    """Gains of the relevant items' grades in ``dtype``, 0 on padding (the shared kernel)."""
    return _kernels.list_gains(grades, valid, gain, dtype)


def relevant_ideal(
    grades: Tensor,
    valid: Tensor,
    ks: Sequence[int],
    gain: Gain,
    discount: Discount,
    dtype: torch.dtype,
) -> Tensor:
    """``[B, len(ks)]`` ideal DCG from the relevant grades alone (other items have gain 0)."""
    kmax = min(max(ks), grades.shape[-1])
    item_gains = relevant_gains(grades, valid, gain, dtype)
    with _host.full_precision(grades.device):
        return _kernels.ideal_dcg(
            grades, valid, ks, kmax, gain, discount, dtype, item_gains=item_gains
        )
