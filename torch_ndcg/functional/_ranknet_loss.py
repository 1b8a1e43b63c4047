"""RankNet (Burges et al., ICML 2005): the pairwise logistic loss of every pair whose labels differ.

The pairs are visited in blocks of rows, ``[N, rows, L]`` with about
`torch_ndcg._pairwise.BLOCK_ELEMENTS` elements, by one autograd Function that computes the loss
and its gradient together: memory ``O(B L)`` plus a block, and one block (one autograd node)
for a small batch.
"""

from typing import Any

import torch
from torch import Tensor
from torch.nn import functional as F

from torch_ndcg import _kernels, _options, _pairwise, _validation
from torch_ndcg._options import Reduction
from torch_ndcg.functional import _loss_input
from torch_ndcg.functional._loss_input import Checks, LossOptions

__all__ = ["ranknet_loss"]

RANKNET_CHECKS: Checks = {"sigma": _validation.check_positive}  # and those every loss shares
RANKNET_PORTED_NAMES = {
    "padded_value_indicator": "`ignore_index` (allRank's `padded_value_indicator`, e.g. -1)",
    "weight_by_diff": "`lambdarank_loss` (allRank's `weight_by_diff` weighs pairs by label gaps)",
}


def ranknet_options(
    *, sigma: Any, reduction: Any, ignore_index: Any, validate_args: Any
) -> LossOptions:
    """The options of `ranknet_loss`, checked (no cut-off and no gain: every pair counts)."""
    # The labels are checked as linear gains are: non-negative and finite, as elsewhere.
    return _loss_input.check_options(
        RANKNET_CHECKS, sigma=sigma, gain="linear", reduction=reduction,
        ignore_index=ignore_index, validate_args=validate_args,
    )


@_validation.names_ported_keywords(RANKNET_PORTED_NAMES)
def ranknet_loss(
    preds: Tensor,
    target: Tensor,
    *,
    mask: Tensor | None = None,
    weight: Tensor | None = None,
    sigma: float = 1.0,
    reduction: Reduction = "mean",
    ignore_index: int | None = None,
    validate_args: bool = True,
) -> Tensor:
    r"""RankNet (Burges et al., ICML 2005): a logistic loss on every pair of differing labels.

    For each list, over the ordered pairs of real items whose labels differ, $w$ the item of
    the larger label (the winner) and $l$ the other, with the weights $v$ (1 without
    ``weight``):

    $$
    \ell = \sum_{y_w > y_l} v_w \, \log\bigl(1 + e^{-\sigma (s_w - s_l)}\bigr),
    $$

    the cross-entropy of RankNet's $P_{wl} = \operatorname{sigmoid}(\sigma (s_w - s_l))$
    against the target 1, computed stably as a softplus. It is `lambdarank_loss` without the
    $|\Delta \mathrm{nDCG}|$ weight: every pair counts alike, wherever it is ranked. Items of
    equal labels form no pair (tied scores need no rule: no rank is taken).

    A pair is weighted by its winner's weight, as propensity-weighted pairwise learning does
    (Joachims, Swaminathan & Schnabel, WSDM 2017): with ``weight = 1 / propensity`` on clicks,
    each clicked item's pairs are scaled by the inverse of its chance of being seen, which makes
    the expected loss that of the true relevance; the weights of the items it is preferred to do
    not enter (they carry no click). Normalisation: a list's loss is the plain sum over its
    pairs, and ``"mean"`` averages over the lists with at least one pair; lists without one
    (one real item, all labels equal, only padding) have loss 0 and gradient 0. Memory is
    ``O(B L)`` plus a fixed block: the pairs are visited in blocks of rows, with the gradient
    computed as they are, never as a ``[B, L, L]`` tensor kept for backward.

    Parity recipes (proved in ``tests/test_ranknet_listmle.py``): allRank's
    ``rankNet(s, y)`` (a mean over every pair of the batch) is
    ``ranknet_loss(s, y, ignore_index=-1, reduction="sum")`` divided by the batch's number of
    pairs; sentence-transformers' ``RankNetLoss`` is the same mean over pairs.

    Args:
        preds: ``[..., L]`` floating scores; float16/bfloat16 are computed in float32.
        target: ``[..., L]`` non-negative relevance labels.

    Keyword Args:
        mask: ``[..., L]`` bool, ``True`` for real items; padded items are in no pair.
            Default ``None``: every item is real.
        weight: ``[..., L]`` non-negative, finite weights; a pair takes its winner's.
            ``None`` (the default) is every weight 1.
        sigma: positive slope $\sigma$ of the logistic loss; default 1.
        reduction: ``"mean"`` (the default: over lists with a pair; 0 if none), ``"sum"`` or
            ``"none"``.
        ignore_index: label value that marks padded items (for example ``-1``); default
            ``None``.
        validate_args: check the values (the default ``True``), as `lambdarank_loss`.

    Returns:
        A scalar, or ``[...]`` per list with ``reduction="none"``; float32 (float64 for float64
        ``preds``).

    Raises:
        ValueError: bad ``sigma`` or ``reduction``, shape mismatch, NaN or infinite scores,
            negative labels, a ``weight`` of another shape, with a negative, NaN or infinite
            value, or so large that the loss or its gradient could overflow (naming
            ``weight``).
        TypeError: non-floating ``preds`` or ``weight``, non-bool ``mask``, non-int
            ``ignore_index``; allRank's ``padded_value_indicator``, naming ours.
        RuntimeError: a value check as a device-side assertion (on an accelerator and under
            ``torch.compile``), with the same message.

    Example:
        Labels 2, 1, 0 scored 0, 1, 2: three pairs, each winner scored below its loser, by 1,
        2 and 1: $\ell = 2 \log(1 + e) + \log(1 + e^2) = 4.7535$.

        >>> import torch
        >>> from torch_ndcg import ranknet_loss
        >>> ranknet_loss(torch.tensor([0.0, 1.0, 2.0]), torch.tensor([2, 1, 0]))
        tensor(4.7535)
    """
    options = ranknet_options(
        sigma=sigma, reduction=reduction, ignore_index=ignore_index, validate_args=validate_args
    )
    return _ranknet(preds, target, mask, weight, options)


def _ranknet(
    preds: Tensor, target: Tensor, mask: Tensor | None, weight: Tensor | None, options: LossOptions
) -> Tensor:
    """`ranknet_loss` with checked ``options``: the tensors are checked and prepared here."""
    lists = _loss_input.checked_lists(preds, target, mask, weight, options)
    scores, real, sigma = lists.scores, lists.mask, options.sigma
    length = scores.shape[-1]
    if options.validate_args and scores.numel() > 0:
        # A pair's loss is at most sigma * span + log 2, its slope sigma, times its weight.
        bound = sigma * (_loss_input.score_range(lists) + 1) + 1
        _loss_input.check_scale(lists, "sigma", sigma, bound, count=length * length)
    # Labels exactly (float64 holds every integer label), NaN on padding: in no pair.
    labels = _kernels.as_dtype(lists.labels, _options.accumulate_dtype(scores.device))
    if real is not None:
        labels = labels.where(real, torch.nan)
    # A list without a pair sums softplus(-inf) = 0 only, whatever its scores: "mean" alone
    # needs to know which lists have one.
    counted = has_pair(labels, real) if options.reduction == "mean" else None
    return _RankNetPairs.apply(  # type: ignore[no-untyped-call,no-any-return]
        scores,
        (
            labels,
            lists.weight,
            sigma,
            (counted, options.reduction, lists.leading_shape),
            torch.is_grad_enabled() and scores.requires_grad,
        ),
    )


def has_pair(labels: Tensor, real: Tensor | None) -> Tensor:
    """``[N]``: the lists with two real items of different labels (NaN on padding)."""
    if real is None:  # two reductions: `aminmax` along a dimension costs several times more
        return labels.amax(-1) > labels.amin(-1)
    return labels.where(real, -torch.inf).amax(-1) > labels.where(real, torch.inf).amin(-1)


class _RankNetPairs(_pairwise.KeptGradient):
    r"""RankNet's $\sum_{y_i > y_j} v_i \, \mathrm{softplus}(\sigma (s_j - s_i))$, blockwise.

    ``s`` the ``[N, L]`` scores; ``given`` holds the labels (NaN on padding: in no pair), the
    winners' weights (or ``None``), sigma, what ``KeptGradient.reduced`` takes and whether to
    compute the gradient. A block of rows ``i`` against every column ``j``; the slope
    $S_{ij} = v_i \operatorname{sigmoid}(z_{ij})$ of each pair gives
    $\partial \ell / \partial s_m = \sigma (\sum_i S_{im} - \sum_j S_{mj})$.
    """

    @staticmethod
    def forward(ctx: Any, s: Tensor, given: tuple[Any, ...]) -> Tensor:
        labels, weight, sigma, reducing, need_grad = given
        n_lists, length = s.shape
        loss = s.new_zeros(n_lists)
        grad = torch.zeros_like(s) if need_grad else s.new_empty(0)
        for i0, i1 in _pairwise._row_blocks(s, length):
            # z = -sigma (s_w - s_l) on the pairs row i wins, -inf elsewhere: softplus and
            # sigmoid are 0 there. The difference is taken before scaling: sigma * s may
            # overflow where it does not.
            z = torch.sub(s[:, None, :], s[:, i0:i1, None])
            if sigma != 1:
                z.mul_(sigma)
            z = torch.where(labels[:, i0:i1, None] > labels[:, None, :], z, -torch.inf)
            row_losses = F.softplus(z).sum(-1)
            rows = None if weight is None else weight[:, i0:i1]
            loss += (row_losses if rows is None else row_losses.mul_(rows)).sum(-1)
            if need_grad:
                slope = z.sigmoid_() if rows is None else z.sigmoid_().mul_(rows[:, :, None])
                grad[:, i0:i1].sub_(slope.sum(-1))
                grad.add_(slope.sum(1))
            del z
        if need_grad and sigma != 1:
            grad.mul_(sigma)
        return _pairwise.KeptGradient.reduced(ctx, s, loss, grad, reducing)
