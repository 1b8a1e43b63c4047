"""ListMLE (Xia et al., ICML 2008) and position-aware ListMLE (Lan et al., UAI 2014).

The negative Plackett-Luce log-likelihood of the labels' order: one sort and a reversed
``logcumsumexp``, ``O(L log L)`` time and ``O(B L)`` memory, in one autograd Function that
computes the loss and its gradient together.
"""

import math
from typing import Any

import torch
from torch import Tensor

from torch_ndcg import _kernels, _options, _pairwise, _validation
from torch_ndcg._options import Reduction
from torch_ndcg.functional import _loss_input
from torch_ndcg.functional._loss_input import Checks, LossOptions
from torch_ndcg.functional._ranknet_loss import has_pair

__all__ = ["listmle_loss"]

LISTMLE_CHECKS: Checks = {"position_aware": _validation.check_bool}  # and the shared ones
LISTMLE_PORTED_NAMES = {
    "padded_value_indicator": "`ignore_index` (allRank's `padded_value_indicator`, e.g. -1)",
    "eps": "nothing: no epsilon is needed (allRank's `eps`)",
    "lambda_weight": "`position_aware=True` (sentence-transformers' PListMLELoss `lambda_weight`)",
}


def listmle_options(
    *, position_aware: Any, reduction: Any, ignore_index: Any, validate_args: Any
) -> LossOptions:
    """The options of `listmle_loss`, checked (its labels are checked as linear gains are)."""
    return _loss_input.check_options(
        LISTMLE_CHECKS, position_aware=position_aware, gain="linear",
        reduction=reduction, ignore_index=ignore_index, validate_args=validate_args,
    )


@_validation.names_ported_keywords(LISTMLE_PORTED_NAMES)
def listmle_loss(
    preds: Tensor,
    target: Tensor,
    *,
    mask: Tensor | None = None,
    weight: Tensor | None = None,
    position_aware: bool = False,
    reduction: Reduction = "mean",
    ignore_index: int | None = None,
    validate_args: bool = True,
) -> Tensor:
    r"""ListMLE (Xia et al., ICML 2008): the negative log-likelihood of the labels' order.

    The $n$ real items of a list are ordered by label, largest first: $\pi_1, \dots, \pi_n$.
    Under the Plackett-Luce model of the scores, with the weights $v$ (1 without ``weight``),

    $$
    \ell = -\sum_{i=1}^{n} \alpha_i \, v_{\pi_i}
        \log \frac{e^{s_{\pi_i}}}{\sum_{j=i}^{n} e^{s_{\pi_j}}},
    $$

    with $\alpha_i = 1$ (ListMLE: allRank's ``listMLE``, Rax's ``listmle_loss``, TF-Ranking's
    ``ListMLELoss``), or with ``position_aware`` the position weights of position-aware ListMLE
    (p-ListMLE, Lan et al., UAI 2014), decreasing from the top as their consistency with nDCG
    asks: those of sentence-transformers' ``PListMLELoss`` by default,
    $2^{n - i + 1} - 1$ normalised to sum 1 over the list,

    $$
    \alpha_i = \frac{2^{1-i} - 2^{-n}}{2 - (n + 2) \, 2^{-n}},
    $$

    computed in this form, which stays finite for long lists (the unnormalised weights
    overflow float32 past 127 items).

    Ties of labels are ordered by the current scores, *ascending*. Without ``weight`` that is
    the least likely order the labels allow, so that the loss is the largest of the losses of
    all those orders. Each of them is convex in the scores (Xia et al.), and so is their
    maximum: the loss stays convex, it bounds from above the expected loss of a random order of
    the ties (allRank's and TF-Ranking's, drawn at every call), and like that expectation it is
    smallest, within a tie, where the tied scores are equal. The most likely order (scores
    descending) would instead make the loss a minimum of convex functions, not convex, smallest
    where tied items are pushed apart, in whatever order they happen to be. Either way the rule
    is deterministic and (without ``weight``) independent of the items' input order, and the
    loss is continuous (at a swap the two orders are equally likely). With ``weight`` the same
    order is taken: its loss need not be the largest, and items of equal label and equal score
    that weigh differently are in no set order (their order then tells). A list whose labels are
    all equal (or with fewer than two real items) states no order: loss 0, gradient 0, and
    ``"mean"`` averages over the other lists.

    Labels are compared in the scores' compute dtype (float32, or float64 for float64 scores).
    ``weight`` multiplies the term of each item's position. Padded items take no part. Memory
    ``O(B L)``; one sort and a ``logcumsumexp``, no read-back on an accelerator.

    Parity recipes (proved in ``tests/test_ranknet_listmle.py``), on lists without tied labels:
    allRank's ``listMLE(s, y)`` is ``listmle_loss(s, y, ignore_index=-1)`` (allRank adds
    $10^{-10}$ inside its log; on lists with ties it draws a random order);
    sentence-transformers' ``PListMLELoss(lambda_weight=PListMLELambdaWeight(),
    respect_input_order=False)`` is ``listmle_loss(s, y, mask=m, position_aware=True)``.

    Args:
        preds: ``[..., L]`` floating scores; float16/bfloat16 are computed in float32.
        target: ``[..., L]`` non-negative relevance labels.

    Keyword Args:
        mask: ``[..., L]`` bool, ``True`` for real items; padded items take no part.
            Default ``None``: every item is real.
        weight: ``[..., L]`` non-negative, finite weights of the items' terms; ``None`` (the
            default) is every weight 1.
        position_aware: the position weights $\alpha$ of p-ListMLE (default ``False``: 1).
        reduction: ``"mean"`` (the default: over lists with two different labels; 0 if none),
            ``"sum"`` or ``"none"``.
        ignore_index: label value that marks padded items (for example ``-1``); default
            ``None``.
        validate_args: check the values (the default ``True``), as `lambdarank_loss`.

    Returns:
        A scalar, or ``[...]`` per list with ``reduction="none"``; float32 (float64 for float64
        ``preds``).

    Raises:
        ValueError: bad ``reduction``, shape mismatch, NaN or infinite scores, scores that span
            too much for a finite loss, negative labels, a ``weight`` of another shape, with a
            negative, NaN or infinite value, or so large that the loss could overflow (naming
            ``weight``).
        TypeError: non-bool ``position_aware`` or ``mask``, non-floating ``preds`` or
            ``weight``, non-int ``ignore_index``; a keyword name from another library
            (``padded_value_indicator``, ``lambda_weight``, ...), naming ours.
        RuntimeError: a value check as a device-side assertion (on an accelerator and under
            ``torch.compile``), with the same message.

    Example:
        Labels 1, 0 scored 0, 1: the order is (first, second), whose likelihood is
        $\frac{e^0}{e^0 + e^1} \cdot 1$, so $\ell = \log(1 + e) = 1.3133$. With position
        weights ($n = 2$: $\alpha = (3, 1) / 4$) the first term is weighed by $3/4$: $0.9849$.

        >>> import torch
        >>> from torch_ndcg import listmle_loss
        >>> preds, target = torch.tensor([0.0, 1.0]), torch.tensor([1, 0])
        >>> listmle_loss(preds, target)
        tensor(1.3133)
        >>> listmle_loss(preds, target, position_aware=True)
        tensor(0.9849)
    """
    options = listmle_options(
        position_aware=position_aware,
        reduction=reduction,
        ignore_index=ignore_index,
        validate_args=validate_args,
    )
    return _listmle(preds, target, mask, weight, options)


def _listmle(
    preds: Tensor, target: Tensor, mask: Tensor | None, weight: Tensor | None, options: LossOptions
) -> Tensor:
    """`listmle_loss` with checked ``options``: the tensors are checked and prepared here."""
    lists = _loss_input.checked_lists(preds, target, mask, weight, options)
    scores, real = lists.scores, lists.mask
    span = None
    if options.validate_args and scores.numel() > 0:
        span = _loss_input.score_range(lists)
    dtype, length = scores.dtype, scores.shape[-1]
    largest = 1.0 if lists.largest_weight is None else lists.largest_weight
    if span is not None:
        _validation.check_score_span(span, length, length, largest, dtype)
    labels = _kernels.as_dtype(lists.labels, dtype)  # compared in the scores' compute dtype
    order = _label_order(scores.detach(), labels, real)
    ranked_real = None if real is None else real.gather(-1, order)
    factor = None if ranked_real is None else ranked_real.to(dtype=dtype)
    if options.position_aware:
        count = torch.full_like(scores[:, :1], length) if factor is None else factor.sum(-1, True)
        # The positions from the top, of the order taken last first.
        positions = torch.arange(length, 0, -1, dtype=dtype, device=scores.device)
        low = torch.exp2(-count)
        alpha = (torch.exp2(1 - positions) - low) / (2 - (count + 2) * low)
        factor = torch.where(positions <= count, alpha, 0)
    if lists.weight is not None:
        ranked_weight = lists.weight.gather(-1, order)
        factor = ranked_weight if factor is None else factor * ranked_weight
    # Sums of exponentials relative to the top item, where the checked span keeps them (and
    # their products with the weights) within the square root of the largest float: one
    # cumulative sum instead of a logcumsumexp, about five times slower on the CPU.
    direct = (
        isinstance(span, float)
        and isinstance(largest, float)
        and span + math.log(length * max(largest, 1.0)) < _DIRECT_LOG_BOUND[dtype]
    )
    counted = has_pair(labels, real)  # a list of one label states no order: 0
    return _PlackettLuce.apply(  # type: ignore[no-untyped-call,no-any-return]
        scores,
        (
            order,
            ranked_real,
            factor,
            (counted, options.reduction, lists.leading_shape),
            torch.is_grad_enabled() and scores.requires_grad,
            direct,
        ),
    )


KEY_ELEMENTS = 1 << 12
# Half the natural log of each compute dtype's largest value.
_DIRECT_LOG_BOUND = {torch.float32: math.log(torch.finfo(torch.float32).max) / 2}
_DIRECT_LOG_BOUND[torch.float64] = math.log(torch.finfo(torch.float64).max) / 2


def _label_order(scores: Tensor, labels: Tensor, real: Tensor | None) -> Tensor:
    """``[N, L]`` order of the items, last first: labels ascending, ties by score descending.

    Padding comes first: this is the labels' order reversed, whose suffix sums are prefix sums.

    Batches of float32 scores of more than `KEY_ELEMENTS` items: one sort of an int64 key, the
    label's float32 bits (monotone for non-negative floats) above the score's (made monotone);
    else a stable sort by score, then a stable sort by label, whose two sorts cost more on long
    lists (3.96 against 2.14 ms at 16 x 1,024 on the CPU, one thread) but whose few operations
    cost less on small batches (54 against 173 us at 8 x 10).
    """
    if scores.dtype == torch.float32 and scores.numel() > KEY_ELEMENTS:
        bits = scores.view(torch.int32)
        # The scores' order in int32: the bits of a negative float, but its sign, flipped.
        ascending = bits ^ ((bits >> 31) & (2**31 - 1))
        label_bits = labels.view(torch.int32).clamp(min=0)  # -0.0 is +0.0
        if real is not None:  # padding below every label
            label_bits = label_bits.where(real, -1)
        # Descending scores within a label: its bits subtracted (a constant would not reorder).
        key = (label_bits.long() << 32).sub_(ascending)
        return key.argsort(dim=-1)
    by_score = scores.argsort(dim=-1, descending=True, stable=True)
    keys = labels
    if real is not None:
        keys = keys.where(real, -torch.inf)
    by_label = keys.gather(-1, by_score).argsort(dim=-1, stable=True)
    return by_score.gather(-1, by_label)


class _PlackettLuce(_pairwise.KeptGradient):
    r"""ListMLE per list: $\sum_i a_i (\mathrm{lse}_i - u_i)$ (lse: log-sum-exp of the suffix).

    ``u`` are the ``[N, L]`` scores ``s`` taken in ``order``, the labels' order last first
    (`_label_order`); ``given`` holds ``order``, ``real``, the real items in that order
    (``None``: all; the others take no part),
    ``factor``, the terms' factors $a$ in that order (``None``: 1 on the real items), what
    ``KeptGradient.reduced`` takes (its ``[N]`` counted lists: the others are 0), whether to
    compute the gradient, and ``direct``: whether the sums may be taken of plain exponentials
    relative to the top item (else by ``logcumsumexp``, on the CPU in float64: the log-sums of
    float32 scores far apart round by their magnitude's spacing, which the gradient's
    exponentials would multiply by up to e). The gradient, computed in forward
    and kept, is
    $\partial \ell / \partial u_m = e^{u_m} \sum_{i \le m} a_i e^{-\mathrm{lse}_i} - a_m$.
    """

    @staticmethod
    def forward(ctx: Any, s: Tensor, given: tuple[Any, ...]) -> Tensor:
        order, real, factor, reducing, need_grad, direct = given
        u = s.gather(-1, order)  # last first: padding (0) first, the top item last
        ranked = s.new_empty(0)
        if direct:
            # S_i = sum of e^(u_j - u_top) over i and the items below it: a prefix sum here;
            # lse_i = u_top + log S_i, e^(-lse_i) = e^(-u_top) / S_i.
            shifted = u - u[:, -1:]
            e = shifted.exp() if real is None else shifted.exp().where(real, 0)
            sums = e.cumsum(-1)
            if real is not None:  # 0 on padding
                sums.clamp_(min=torch.finfo(s.dtype).tiny)
            terms = sums.log().sub_(shifted)  # finite on padding, whose factor is 0
            per_list = (terms if factor is None else terms.mul_(factor)).sum(-1)
            if need_grad:
                inverse = sums.reciprocal_() if factor is None else factor / sums
                above = inverse.flip(-1).cumsum(-1).flip(-1)  # over i and the items above it
                ranked = above.mul_(e).sub_(1 if factor is None else factor)
        else:
            # On the CPU in the accumulation dtype: a log-sum of wide-apart scores (past e^44 in
            # float32) rounds to their magnitude's spacing, which `u + above` would take into
            # exp. (An accelerator takes this branch at every step: there in the scores' dtype.)
            wide = _options.accumulate_dtype(s.device) if s.is_cpu else s.dtype
            u = _kernels.as_dtype(u, wide)
            factor = None if factor is None else _kernels.as_dtype(factor, wide)
            if real is not None:
                u = u.masked_fill(~real, -torch.inf)
            lse = u.logcumsumexp(-1)
            terms = lse - u  # NaN on padding (-inf - -inf): not taken
            if real is not None:
                terms = torch.where(real, terms, 0)
            per_list = (terms if factor is None else terms.mul_(factor)).sum(-1)
            per_list = _kernels.as_dtype(per_list, s.dtype)
            if need_grad:
                logs = lse.neg() if factor is None else factor.log().sub_(lse)
                if factor is not None:  # -inf where the factor is 0 (padding: NaN there)
                    logs = torch.where(factor > 0, logs, -torch.inf)
                above = logs.flip(-1).logcumsumexp(-1).flip(-1)
                ranked = torch.exp(u + above).sub_(1 if factor is None else factor)
                ranked = _kernels.as_dtype(ranked, s.dtype)
        grad = ranked.scatter(-1, order, ranked) if need_grad else ranked  # the input's order
        counted = reducing[0]  # the lists of one label count for nothing
        per_list = torch.where(counted, per_list, 0)
        if need_grad:
            grad = torch.where(counted[:, None], grad, 0)
        return _pairwise.KeptGradient.reduced(ctx, s, per_list, grad, reducing)
