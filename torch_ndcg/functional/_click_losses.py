"""The computations of `torch_ndcg.UnbiasedLambdaRankLoss`: LambdaRank on clicks, debiased.

Hu et al., WWW 2019: its loss (`lambda_pairs` with each item's factor the inverse of its position
bias), its pair statistics by position and the closed-form update of its biases, summed over the
ranks under ``torch.distributed``; and the loss of sessions summed per item and position.
"""

import functools
from typing import NamedTuple

import torch
import torch.distributed as dist
from torch import Tensor

from torch_ndcg import _dcg_paths, _kernels, _options, _validation
from torch_ndcg.functional import _loss_input
from torch_ndcg.functional._loss_input import Checks, LossOptions
from torch_ndcg.functional._pairwise_losses import LAMBDARANK_CHECKS, lambda_pairs

# The debiased loss: LambdaRank's options (its weighting and mu fixed) and those of its biases.
UNBIASED_CHECKS: Checks = {
    **LAMBDARANK_CHECKS,
    "num_positions": _validation.check_positive_int,
    "bias_norm": functools.partial(_validation.check_positive, allow_zero=True),
    "momentum": _validation.check_fraction,
    "match_exposure": _validation.check_bool,
}


class ClickBiases(NamedTuple):
    """The buffers of `torch_ndcg.UnbiasedLambdaRankLoss`, as they are at the call.

    Attributes:
        t_plus: ``[num_positions]`` biases of clicks by position, updated in place.
        t_minus: ``[num_positions]`` biases of non-clicks by position, updated in place.
        statistics: ``[4, num_positions]``: the sums over the steps of S+, S-, R+, R-.
        edge: ``[1]`` ``inf``, the bias of the items not shown.
        learn: whether the biases are updated after the loss (the module's training mode).
    """

    t_plus: Tensor
    t_minus: Tensor
    statistics: Tensor
    edge: Tensor
    learn: bool


def _unbiased_lambdarank(
    preds: Tensor,
    clicks: Tensor,
    positions: Tensor,
    mask: Tensor | None,
    options: LossOptions,
    biases: ClickBiases,
) -> Tensor:
    """`torch_ndcg.UnbiasedLambdaRankLoss.forward` with checked ``options``.

    With ``biases.learn`` the biases are updated in place after the loss is computed (the loss
    uses the biases from before the step).

    The update adds this batch's statistics to their sums over the steps: each item's share of
    the debiased losses (``shares``: its sum of its pairs' losses divided by the other item's
    bias) summed by bin, times the list's ideal DCG (so that every click counts alike), gives
    each list's ``S+`` and ``S-`` per position; its top position's sums count towards the
    reference of each position it shows (`_add_statistics`). Six launches, all into one buffer.
    """
    # Types and shapes: checked with or without the values (`validate_args`).
    _validation.check_preds_target(preds, clicks, target_name="clicks")
    _validation.check_mask(mask, preds)
    real = _validation.real_items(clicks, mask, options.ignore_index)
    extra = _validation.check_positions(
        positions, preds, options.num_positions, real, validate_args=options.validate_args
    )
    if options.validate_args:
        extra += _validation.check_binary("clicks", clicks, real)
    shown = positions != _options.NOT_SHOWN
    taken = shown if real is None else real & shown
    checks = _validation.defer(extra)  # None where there is none
    lists = _loss_input.prepare(preds, clicks, taken, None, options, checks)
    n, length = options.num_positions, preds.shape[-1]
    # Each item's bin: 1 + its position if clicked, n + 2 + its position if not. Items not
    # shown fall in bins 0 and n + 1, which weigh nothing and are dropped from the sums.
    unclicked = clicks.reshape(-1, length) <= 0
    shown_bins = positions.reshape(-1, length).long() + 1  # 0: not shown
    if real is not None:  # padded items' positions are never checked: any value
        shown_bins = torch.where(taken.reshape(-1, length), shown_bins, 0)
    bins = torch.add(shown_bins, unclicked, alpha=n + 1)
    # 1 / t+ and 1 / t- by bin (1 / inf = 0 in the bins of the items not shown), in the scores'
    # dtype: float64 scores take the inverse of a float32 bias below 1 / 3.4e38 finitely.
    biases_by_bin = torch.cat([biases.edge, biases.t_plus, biases.edge, biases.t_minus])
    item_factor = biases_by_bin.to(lists.scores.dtype).reciprocal()[bins]
    per_list, shares = lambda_pairs(
        lists, options, item_factor=item_factor, item_losses=biases.learn
    )
    if shares is not None:
        # Each click counts alike in the statistics, whatever the other clicks of its session:
        # without LambdaRank's 1 / Z of the session (its clicks' ideal DCG), which would weigh
        # down the clicks of sessions with many, where the deep clicks mostly come from.
        with torch.no_grad():
            # One zeroed buffer: per list [statistic or reference, S+ or S-, 1 + position],
            # then whether it shows each position; bin 0 holds the items not shown. In the
            # wider of the statistics' and the scores' dtypes: float64 scores' shares are not
            # rounded to the statistics' float32 (past its largest value) before they are summed.
            rows = bins.shape[0]
            dtype = torch.float64 if shares.dtype == torch.float64 else biases.statistics.dtype
            buffer = shares.new_zeros(rows, 5 * (n + 1), dtype=dtype)
            sums = buffer[:, : 4 * (n + 1)].view(rows, 2, 2, n + 1)
            sums[:, 0].view(rows, 2 * (n + 1)).scatter_add_(1, bins, shares.to(dtype))
            sums[:, 0].mul_(lists.ideal[:, :, None])
            exposed = buffer[:, 4 * (n + 1) :]
            if options.match_exposure:
                exposed.scatter_(1, shown_bins, 1.0)
            else:
                exposed.fill_(1.0)
            torch.mul(sums[:, 0, :, 1:2], exposed[:, None, :], out=sums[:, 1])
            _add_statistics(biases, sums.sum(dim=0)[..., 1:].reshape(4, n), options)
    # The lists "mean" counts: those with a click on an item that takes part. A named gain is 0
    # without a click and positive with one, and a named discount positive at the top: the
    # ideal DCG of the items taking part is positive on exactly those lists (no launch more). A
    # callable gain positive at 0 makes it positive on a list without a click too, and a
    # callable discount 0 at the top makes it 0 on a list with one click: there the clicks of
    # the items shown tell them apart.
    counted = lists.has_relevant
    named = _options.named(options.gain) and not callable(options.discount)
    if options.reduction == "mean" and not named:
        counted = shown_bins.masked_fill(unclicked, 0).any(dim=-1)
    return _loss_input.reduce(per_list, counted, options.reduction, lists.leading_shape)


def _aggregated_unbiased_lambdarank(
    preds: Tensor,
    clicks: Tensor,
    views: Tensor,
    mask: Tensor | None,
    options: LossOptions,
    biases: ClickBiases,
) -> Tensor:
    """`torch_ndcg.UnbiasedLambdaRankLoss.aggregated` with checked ``options``."""
    _validation.check_click_tensor("preds", preds, kind="floating")
    length, n = preds.shape[-1], options.num_positions
    counts = preds.detach()[..., None].expand(*preds.shape, n)  # a view: the counts' shape
    of = "preds` and `num_positions"
    for name, value in (("clicks", clicks), ("views", views)):
        _validation.check_click_tensor(name, value, counts, kind="floating", of=of)
    _validation.check_mask(mask, preds)  # metadata: checked with or without values
    dtype = _options.compute_dtype(preds.dtype)  # half precision: float32, as `forward`
    if options.validate_args:
        _validation.check_discount(options, length, dtype)
    won = clicks.reshape(-1, length, n).to(dtype)
    shown_counts = views.reshape(-1, length, n).to(dtype)
    # The items ranked: real ones that were shown (as `forward` ranks its shown items).
    real = views.reshape(-1, length, n).detach().sum(-1) > 0
    flat_mask = None if mask is None else mask.reshape(-1, length)
    if flat_mask is not None:
        real = real & flat_mask
    # The scores of the others never count: they may be anything (NaN, inf).
    scores = torch.where(real, _kernels.as_dtype(preds.reshape(-1, length), dtype), 0)
    if options.validate_args and won.numel() > 0:
        given_counts = (won.detach(), shown_counts.detach())
        _validation.check_click_counts(scores.detach(), real, given_counts, flat_mask)
    if flat_mask is not None:  # padded counts may be anything too: selected, not multiplied
        won = torch.where(real[..., None], won, 0)
        shown_counts = torch.where(real[..., None], shown_counts, 0)
    lost = shown_counts - won
    inverse = torch.stack([biases.t_plus, biases.t_minus]).to(dtype).reciprocal()
    winner = won @ inverse[0]  # A_w: [N, L]
    loser = lost @ inverse[1]  # B_l
    # Current ranking: 1-based ranks, ties in order of appearance, items not ranked last.
    keys = _dcg_paths.ranking_keys(scores.detach(), real)
    order = _dcg_paths.stable_descending_order(keys, length)
    ranks = order.argsort(dim=-1) + 1  # the inverse permutation
    kmax = length if options.k is None else min(options.k, length)
    discount = _kernels.discounts(ranks.to(dtype), options.discount).to(dtype)
    discount = torch.where(ranks <= kmax, discount, 0)
    delta = (discount[:, :, None] - discount[:, None, :]).abs()
    difference = scores[:, :, None] - scores[:, None, :]
    pair = delta * torch.nn.functional.softplus(-options.sigma * difference)  # L_wl: [N, L, L]
    per_list = torch.einsum("nw,nwl,nl->n", winner, pair, loser)
    if biases.learn:
        with torch.no_grad():
            plus = torch.einsum("nwi,nwl,nl->ni", won, pair, loser)
            minus = torch.einsum("nlj,nwl,nw->nj", lost, pair, winner)
            by_position = torch.stack([plus, minus], dim=1)  # [N, 2, n]: each list's S+, S-
            # Finite: a list's S past the largest float, times a share 0 of its sessions, would
            # be NaN (a NaN one, from unchecked input, counts for nothing).
            by_position.nan_to_num_(0.0)
            if options.match_exposure:  # the share of each list's sessions that show a position
                views_by_position = (won + lost).sum(dim=1)  # [N, n]
                top = views_by_position[:, :1]
                shown = torch.where(top > 0, views_by_position / top.clamp(min=1e-30), 0)
            else:
                shown = torch.ones_like(plus)
            references = by_position[:, :, :1] * shown[:, None, :]
            _add_statistics(biases, torch.cat([by_position, references], dim=1).sum(dim=0), options)
    # The lists with a click, as `forward` counts them: a positive click count on an item
    # ranked (checked counts: a click is on an item with views, and no count is negative).
    has_click = won.sum(dim=(-1, -2)) > 0
    per_list = torch.where(has_click, per_list, 0)
    return _loss_input.reduce(per_list, has_click, options.reduction, preds.shape[:-1])


@torch.no_grad()
def _add_statistics(biases: ClickBiases, batch: Tensor, options: LossOptions) -> None:
    r"""Sum ``batch`` (``[4, num_positions]``: S+, S-, R+, R-) over the ranks; update biases.

    Hu et al.'s closed form, $t_i = (S_i / R_i)^{1 / (p + 1)}$, where the reference
    $R_i$ is the top position's statistic summed over the lists that show position $i$
    (``match_exposure``; over every list, $R_i = S_0$, the paper's and XGBoost's form; the
    two agree when every list shows every position). The four rows are summed over the
    ranks (one all-reduce) and added to their sums over the steps, each earlier step's
    weighted by ``momentum`` per step since (1: every step alike). A position with no statistic
    or no reference keeps its bias: there is nothing to estimate it from. Branch-free and in
    place: a handful of launches per step.

    The sums stay finite and unclipped: a step that would take one of the sums past the
    largest value of its dtype (float64 scores so far apart that a pair's loss does not fit the
    float32 statistics) or to NaN (only from unchecked input, ``validate_args=False``) is left
    out of that sum, which stays as it was (``inf`` would make the biases NaN and every later
    step fail; a sum clipped to the largest value would skew them for good): one comparison
    and one select, a launch more than clipping.
    """
    batch = batch.to(biases.statistics.dtype)
    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        batch = batch.contiguous()
        dist.all_reduce(batch)
    summed = torch.add(batch, biases.statistics, alpha=options.momentum)
    counted = summed <= torch.finfo(summed.dtype).max  # False for inf and NaN
    averaged = torch.where(counted, summed, biases.statistics, out=biases.statistics)
    statistic, reference = averaged[:2], averaged[2:]
    known = torch.logical_and(statistic, reference)  # both positive: the sums are not negative
    estimate = (statistic / reference).pow_(1 / (1 + options.bias_norm)).to(biases.t_plus.dtype)
    for row, bias in enumerate((biases.t_plus, biases.t_minus)):
        torch.where(known[row], estimate[row], bias, out=bias)
