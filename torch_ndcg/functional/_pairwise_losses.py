"""LambdaLoss (LambdaRank, NDCG-Loss2, NDCG-Loss2++): pairwise logistic losses weighted by nDCG.

The pairs are visited blockwise in `torch_ndcg._pairwise` (memory ``O(B L)`` plus a fixed block),
or, in a small batch, as whole pair tensors under one autograd node.
"""

import functools

import torch
from torch import Tensor

from torch_ndcg import _dcg_paths, _kernels, _pairwise, _validation
from torch_ndcg._options import WEIGHTINGS, Discount, Gain, Reduction, Weighting
from torch_ndcg.functional import _loss_input
from torch_ndcg.functional._loss_input import Checks, LossInput, LossOptions

__all__ = ["lambdarank_loss"]

_non_negative = functools.partial(_validation.check_positive, allow_zero=True)
_weighting = functools.partial(_validation.check_option, allowed=WEIGHTINGS, callable_ok=False)
LAMBDARANK_CHECKS: Checks = {
    "sigma": _validation.check_positive, "weighting": _weighting, "mu": _non_negative
}


@_validation.names_ported_keywords(_validation.LAMBDARANK_PORTED_NAMES)
def lambdarank_loss(
    preds: Tensor,
    target: Tensor,
    *,
    mask: Tensor | None = None,
    weight: Tensor | None = None,
    k: int | None = None,
    sigma: float = 1.0,
    weighting: Weighting = "lambdarank",
    mu: float = 10.0,
    gain: Gain = "exponential",
    discount: Discount = "log2",
    reduction: Reduction = "mean",
    ignore_index: int | None = None,
    validate_args: bool = True,
) -> Tensor:
    r"""LambdaLoss (Wang et al. 2018): a pairwise logistic loss weighted by nDCG changes.

    For each list, over the pairs of real items whose gains differ (for the built-in gains: whose
    labels differ), with $w$ the item of larger gain and $l$ the other:

    $$
    \ell = \sum_{G_w > G_l} \omega_{wl} \, \log\bigl(1 + e^{-\sigma (s_w - s_l)}\bigr)
    $$

    computed stably as a softplus. The weights carry no gradient and use the current ranks
    $r$ (scores descending, ties in order of appearance), the gains $G$ and discounts
    $D(r)$ of the metric, and the ideal DCG@k $Z$:

    - ``"lambdarank"``: $|G_w - G_l| \, |D_k(r_w) - D_k(r_l)| / Z$, the
      $|\Delta \mathrm{nDCG@}k|$ of swapping the two items (Burges 2010), with
      $D_k(r) = D(r)$ for $r \le k$ and 0 below;
    - ``"ndcg2"``: NDCG-Loss2, $\delta_{|r_w - r_l|} \, |G_w - G_l| / Z$ with
      $\delta_m = |D(m) - D(m + 1)|$;
    - ``"ndcg2pp"``: NDCG-Loss2++, the ``"lambdarank"`` weight plus ``mu`` times the ``"ndcg2"``
      weight.

    With ``k``, only pairs with at least one item in the current top k count (LightGBM's
    ``lambdarank_truncation_level`` rule). Normalisation: the weights are already divided by the
    ideal DCG, a list's loss is the plain sum over its pairs, and ``"mean"`` averages over the
    lists that have a relevant item. Lists with no relevant item (or only padding) have no pair:
    loss 0, gradient 0. Memory is ``O(B L)`` plus a fixed block: the pairs are visited in blocks
    of rows and the gradient is computed blockwise, never as a ``[B, L, L]`` tensor (except in
    batches of at most 32,768 pairs, ``B L^2``, which take whole pair tensors: fewer operations).

    Args:
        preds: ``[..., L]`` floating scores; float16/bfloat16 are computed in float32.
        target: ``[..., L]`` non-negative relevance labels.

    Keyword Args:
        mask: ``[..., L]`` bool, ``True`` for real items; padded items are in no pair.
            Default ``None``: every item is real.
        weight: ``[..., L]`` non-negative, finite weights that scale each item's gain,
            $G_i \to w_i G_i$ (``1 / propensity`` on clicks is inverse-propensity weighting);
            the ideal DCG stays that of the unweighted gains (the guide "Learning from clicks"
            says why). ``None`` (the default) is every weight 1.
        k: truncation level, a positive int, or ``None`` (the default) for the whole list.
        sigma: positive slope $\sigma$ of the logistic loss; default 1.
        weighting: ``"lambdarank"`` (the default), ``"ndcg2"`` or ``"ndcg2pp"``.
        mu: non-negative weight of the NDCG-Loss2 term in ``"ndcg2pp"``; default 10.
        gain: ``"exponential"`` (the default), ``"linear"``, an element-wise callable, or a
            sequence of per-label gains (LightGBM's ``label_gain``: label i gains ``gain[i]``).
        discount: ``"log2"`` (the default), ``"jarvelin"`` or a callable of 1-based float
            ranks, as `torch_ndcg.ndcg`'s (differentiable for `approx_ndcg_loss`).
        reduction: ``"mean"`` (the default: over lists with a relevant item; 0 if none),
            ``"sum"`` or ``"none"``.
        ignore_index: label value that marks padded items (for example ``-1``); default
            ``None``.
        validate_args: check the values (the default ``True``): one read-back on the CPU,
            device-side assertions (``RuntimeError``, no read-back) on an accelerator and under
            ``torch.compile``.

    Returns:
        A scalar, or ``[...]`` per list with ``reduction="none"``; float32 (float64 for float64
        ``preds``).

    Raises:
        ValueError: bad ``k``, ``sigma``, ``mu``, ``weighting``, ``reduction``, ``gain``,
            ``discount``, shape mismatch, NaN, negative labels, overflowing exponential gain,
            a ``weight`` of another shape, with a negative, NaN or infinite value, or so large
            that the loss or its gradient could overflow (naming ``weight``).
        TypeError: non-floating ``preds`` or ``weight``, non-bool ``mask``, non-int
            ``ignore_index``; a keyword name from another library (``top_k``,
            ``weighing_scheme``, ...), naming ours.
        RuntimeError: a value check as a device-side assertion (on an accelerator and under
            ``torch.compile``), with the same message.

    Example:
        Two items, the relevant one (label 1) scored below the other: one pair, weight
        $|1 - 0| \cdot |1 - 1/\log_2 3| / 1 = 0.36907$, loss
        $0.36907 \cdot \log(1 + e^{1}) = 0.48469$.

        >>> import torch
        >>> from torch_ndcg import lambdarank_loss
        >>> preds = torch.tensor([1.0, 2.0])
        >>> target = torch.tensor([1, 0])
        >>> lambdarank_loss(preds, target)
        tensor(0.4847)
    """
    options = _loss_input.check_options(
        LAMBDARANK_CHECKS, k=k, sigma=sigma, weighting=weighting, mu=mu, gain=gain,
        discount=discount, reduction=reduction, ignore_index=ignore_index,
        validate_args=validate_args)
    return _lambdarank(preds, target, mask, weight, options)


def _lambdarank(
    preds: Tensor, target: Tensor, mask: Tensor | None, weight: Tensor | None, options: LossOptions
) -> Tensor:
    """`lambdarank_loss` with checked ``options``, reduced (see `lambda_pairs`)."""
    lists = _loss_input.prepare(preds, target, mask, weight, options)
    return lambda_pairs(lists, options, reduction=options.reduction)[0]


def lambda_pairs(
    lists: LossInput, options: LossOptions, *, item_factor: Tensor | None = None,
    item_losses: bool = False, reduction: str | None = None,
) -> tuple[Tensor, Tensor | None]:
    r"""The LambdaLoss of every list of checked input: ``([N]`` losses, item shares or ``None)``.

    ``item_factor`` (``[N, L]``, non-negative, 0 on every item outside the lists' mask: it is
    the mask then) multiplies each pair's weight by the factors of both its items,
    $\omega_{wl} f_w f_l$; with ``item_losses`` each item's sum over its pairs of the pair
    loss times the other item's factor (``[N, L]``, in the input's item order) is returned too.
    Lists with no relevant item have loss 0. With a ``reduction`` the losses come reduced so
    (`reduce`).
    """
    sigma, weighting, mu = options.sigma, options.weighting, options.mu
    scores, real, length, kmax = lists.scores, lists.mask, lists.scores.shape[-1], lists.kmax
    if options.validate_args and scores.numel() > 0:
        # A pair's weight is at most 1 (+ mu with NDCG-Loss2 terms), times the largest weight
        # and the factors of its items; its loss at most the weight times sigma * range + log 2,
        # its slope the weight times sigma; at most L^2 pairs.
        span = _loss_input.score_range(lists)
        weight_bound: float | Tensor = 1 + (mu if weighting != "lambdarank" else 0)
        if item_factor is not None:
            weight_bound = weight_bound * item_factor.amax().double().square()
        pair_bound = weight_bound * (sigma * (span + 1) + 1)
        _loss_input.check_scale(lists, "sigma", sigma, pair_bound, length * length)

    # Current ranking: position = rank (ties in order of appearance, padding last). Every
    # position is wanted: `stable_descending_order` of the whole length is this one sort.
    keys = _dcg_paths.sort_keys(scores.detach(), real)
    order = keys.sort(dim=-1, descending=True, stable=True).indices
    gains = lists.scaled_gains
    if lists.weight is not None:  # each item's gain times its weight
        gains = _kernels.weighted_gains(gains, lists.weight, lists.mask)
    ranked_gains = gains.detach().gather(-1, order)
    factor = real if item_factor is None else item_factor  # the factors are the mask too
    ranked_real = None if factor is None else factor.gather(-1, order).to(scores.dtype)

    rows = min(kmax, length - 1)
    dense = item_factor is None and _pairwise.dense_pairs_fit(scores.shape[0], length)
    tables = _pairwise.lambda_tables(
        options.discount, (rows, length, kmax), (weighting, mu), dense, scores.dtype, scores.device
    )
    if dense:
        # The square table (tables[3]) is built for the dense paths only. Checked scores are
        # finite: a list with no relevant item, whose gains are all 0, sums finite terms times 0
        # weights, which is 0 already. The reduction is given: only the factors' loss (unreduced)
        # takes the blocks.
        unchecked = None if options.validate_args else lists.has_relevant
        grad = torch.is_grad_enabled() and scores.requires_grad
        loss: Tensor = _pairwise.DensePairwiseLogistic.apply(  # type: ignore[no-untyped-call]
            scores,
            (order, ranked_gains, ranked_real, tables[3], unchecked, lists.has_relevant, sigma,
             reduction, lists.leading_shape, grad),
        )
        return loss, None
    shares = None
    ranked_scores = scores.gather(-1, order)
    if item_factor is not None:
        per_list, shares = _pairwise.FactoredPairwiseLogistic.apply(  # type: ignore[no-untyped-call]
            ranked_scores, ranked_gains, ranked_real, _pairwise.Pairs(tables[:3], rows, sigma)
        )
        # Back to the input's item order.
        shares = shares.scatter(-1, order, shares) if item_losses else None
    else:
        grad = torch.is_grad_enabled() and ranked_scores.requires_grad
        per_list = _pairwise.PairwiseLogistic.apply(  # type: ignore[no-untyped-call]
            ranked_scores, ranked_gains, ranked_real, _pairwise.Pairs(tables[:3], rows, sigma), grad
        )
    per_list = torch.where(lists.has_relevant, per_list, 0)
    if reduction is not None:
        per_list = _loss_input.reduce(per_list, lists.has_relevant, reduction, lists.leading_shape)
    return per_list, shares
