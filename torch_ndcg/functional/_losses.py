"""Functional ranking losses on the shared kernels: LambdaLoss, ApproxNDCG and NeuralNDCG.

Gains, discounts, current ranks and the ideal DCG@k all come from `torch_ndcg._kernels`, so a
loss optimises the same nDCG that `torch_ndcg.ndcg` reports. The pairwise work runs blockwise
in `torch_ndcg._pairwise` and the NeuralSort/Sinkhorn work in `torch_ndcg._sinkhorn`,
with memory ``O(B L)`` plus a fixed block (or a kept kernel of at most a fixed size).

Also the computations of `torch_ndcg.UnbiasedLambdaRankLoss` (LambdaRank on clicks, debiased by
position: Hu et al., WWW 2019): its loss, its pair statistics by position and the closed-form
update of its biases, summed over the ranks under ``torch.distributed``.
"""

import functools
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

import torch
import torch.distributed as dist
from torch import Tensor

from torch_ndcg import (
    _fast_paths,
    _gains,
    _host,
    _kernels,
    _options,
    _pairwise,
    _sinkhorn,
    _validation,
)
from torch_ndcg._options import WEIGHTINGS, Discount, Gain, Reduction, Weighting
from torch_ndcg._small_batch import SCORE_DTYPES, small_cpu_pair

__all__ = [
    "approx_ndcg_loss",
    "lambdarank_loss",
    "neural_ndcg_loss",
    "softmax_loss",
    "xe_ndcg_loss",
]


class LossOptions:
    """A loss's checked options, each by its keyword's name (``options.k``, ``options.sigma``).

    Made once by `Loss.check` (at a function call, or in a module's ``__init__``) and frozen:
    internals check nothing again, and a module's option setter checks them all into new ones.
    (A plain class, not a ``types.SimpleNamespace``: ``torch.compile`` traces its making.)
    """

    k: int | None
    gain: Gain
    discount: Discount
    reduction: Reduction
    ignore_index: int | None
    validate_args: bool

    def __init__(self, **options: Any) -> None:
        self.__dict__.update(options)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"Checked options are frozen: set `{name}` on the loss module.")

    def __repr__(self) -> str:
        shown = ", ".join(f"{name}={value!r}" for name, value in vars(self).items())
        return f"LossOptions({shown})"

    if TYPE_CHECKING:  # the options of each loss: `Loss.own`

        def __getattr__(self, name: str) -> Any: ...


class _LossInput(NamedTuple):
    """Validated input as ``[N, L]`` tensors in the compute dtype, and the shape to return.

    A named tuple: made at every loss step, where a frozen dataclass's ``__init__`` costs more.

    Attributes:
        scores: ``[N, L]`` scores, 0 on padding.
        mask: ``[N, L]`` real items, or ``None``.
        kmax: positions the cut-off needs: ``k`` capped at the list length (``None``: all).
        scaled_gains: ``[N, L]`` gains divided by the list's ideal DCG@k, 0 on padding and in
            lists with no relevant item: each at most 1, whatever the labels' scale.
        has_relevant: ``[N]`` lists whose ideal DCG@k is positive.
        leading_shape: the shape of the input without its list dimension.
        score_range: largest minus smallest real score, when the input was checked.
        gain_scale: the largest real ``weight``, when one was given and the input is checked
            (a float read back with the checks on the CPU, else a 0-d tensor): the scaled gains
            are at most this, so the value bounds grow by it.
        ideal: ``[N, 1]`` ideal DCG@k of each list (in the accumulation dtype).
    """

    scores: Tensor
    mask: Tensor | None
    kmax: int
    scaled_gains: Tensor
    has_relevant: Tensor
    leading_shape: torch.Size
    score_range: float | None
    gain_scale: float | Tensor | None
    ideal: Tensor


def _prepare(
    preds: Tensor,
    target: Tensor,
    mask: Tensor | None,
    options: LossOptions,
    weight: Tensor | None = None,
    extra_checks: _host.DeferredCheck | None = None,
    weigh: bool = True,
) -> _LossInput:
    """Check a loss's tensors, flatten them to ``[N, L]``, take their gains over ideal DCG.

    The options are checked already (``options``).

    Gains and ideal DCG are computed in the accumulation dtype (float64), where the largest
    gains validation admits (2^127 - 1 in float32) still sum finitely, and only their ratio, at
    most 1, is brought to the compute dtype: no overflow to 0 or NaN, and no ``1/IDCG`` of inf
    for tiny labels. A ``weight`` scales each item's gain after the ideal DCG of the unweighted
    gains is taken (see `torch_ndcg._kernels.weighted_gains`), unless not ``weigh`` (the caller
    does); the largest real weight is ``gain_scale``. ``extra_checks`` of the caller are
    read back with the input's and judged before them, in the order of their device-side
    assertions (made by the caller before this call).
    """
    gain, validate_args = options.gain, options.validate_args
    score_range: float | None
    small = (
        _small_checks(preds, target, options)
        if mask is None and weight is None and extra_checks is None
        else None
    )
    largest_weight = None
    if small is not None:
        real = None
        score_range, target = small  # the labels in float64, as the gains take them
    else:
        real, check = _validation.check_lists(
            # Checked detached: the checks' operations on the scores would be recorded by autograd
            # otherwise (a few microseconds each, for nothing). Any other type meets its TypeError.
            preds.detach() if isinstance(preds, Tensor) else preds,
            target,
            mask,
            gain=gain,
            ignore_index=options.ignore_index,
            validate_args=validate_args,
            finite_preds=True,
        )
        # A loss step reads back only the input checks, and only on the CPU (see _host), at once.
        # The caller's checks were made before these (as device-side assertions they fire
        # first): judged first, they name the same error eagerly as there.
        weight_check = _validation.check_weight(weight, preds, real, validate_args=validate_args)
        _, checked, largest_weight = _validation.resolve_all(extra_checks, check, weight_check)
        score_range = None if checked is None else checked.score_range
    length = preds.shape[-1]
    dtype = _options.compute_dtype(preds.dtype)
    acc = _options.accumulate_dtype(preds.device)
    # Batches of lists as they come are not reshaped: a view would be one more autograd node
    # (and, for any tensor, one more operation to dispatch).
    scores = _options.as_dtype(preds if preds.ndim == 2 else preds.reshape(-1, length), dtype)
    flat_target = target if target.ndim == 2 else target.reshape(-1, length)
    flat_mask = real if real is None or real.ndim == 2 else real.reshape(-1, length)
    if flat_mask is not None:
        # Padded scores may be anything (NaN, inf): they must not reach any arithmetic.
        scores = torch.where(flat_mask, scores, 0)
    kmax = length if options.k is None else min(options.k, length)
    item_gains = _kernels.list_gains(flat_target, flat_mask, gain, acc)
    # From the top gains (the label counts would need the labels' range): no read-back.
    if preds.numel() <= _fast_paths.SMALL_ELEMENTS and _gains.declared(gain):
        # Padding's gain of 0 is the least: it never displaces a real item (as in the metric's
        # small path), so the gains are selected as they are, in one operation.
        best = item_gains.topk(kmax, dim=-1, sorted=True).values
    else:
        best = _kernels.ideal_ranked_gains(flat_target, item_gains, flat_mask, kmax, gain, acc)
    if acc == torch.float64:  # autocast and TF32 never touch a float64 product
        # `_kernels.cumulative_dcg` at the one cut-off, ``best`` in float64 already.
        ideal = best @ _kernels.cutoff_matrix(kmax, (kmax,), options.discount, acc, preds.device)
    else:
        with _host.full_precision(preds.device):
            ideal = _kernels.cumulative_dcg(best, (kmax,), options.discount)
    has_relevant = ideal > 0
    # Where the ideal DCG is not positive (no relevant item, or a callable gain or discount
    # that makes it 0) the list counts for nothing, whatever its gains; the quotient computed
    # there (inf or NaN) is not taken, and no gradient flows through gains.
    scaled_gains = torch.where(has_relevant, item_gains / ideal, 0)
    gain_scale: float | Tensor | None = None
    if weight is not None:
        flat_weight = weight.reshape(-1, length).detach()
        if weigh:
            scaled_gains = _kernels.weighted_gains(scaled_gains, flat_weight, flat_mask)
        if largest_weight is not None:  # read back with the checks
            gain_scale = largest_weight
        elif validate_args and flat_weight.numel() > 0:
            real_weight = flat_weight if flat_mask is None else flat_weight.where(flat_mask, 0)
            gain_scale = real_weight.amax().double()
    return _LossInput(
        scores=scores,
        mask=flat_mask,
        kmax=kmax,
        scaled_gains=scaled_gains.to(dtype),
        has_relevant=has_relevant.squeeze(1),
        leading_shape=preds.shape[:-1],
        score_range=score_range,
        gain_scale=gain_scale,
        ideal=ideal,
    )


def _small_checks(preds: Any, target: Any, options: LossOptions) -> tuple[float, Tensor] | None:
    """The value checks of a small plain CPU batch: ``(score range, float64 labels)``, or None.

    The checks `_prepare` makes through `torch_ndcg._validation.check_lists`, with the same
    rules (`torch_ndcg._validation.small_batch_holds`) and the same one read-back, in three
    operations and a few lines: the extremes of the scores and labels. Decided from metadata
    alone: checked options without ``ignore_index`` and with a named gain, a pair of dense CPU
    tensors of one shape (float32 or float64 scores, integer or bool labels, at most
    `torch_ndcg._fast_paths.SMALL_ELEMENTS` items), eager. ``None`` where the general checks
    must run: for other input, and for input that breaks a rule (they raise its error).
    """
    if not (
        options.validate_args
        and options.ignore_index is None
        and _gains.named(options.gain)
        and small_cpu_pair(preds, target)
        and preds.dtype in SCORE_DTYPES
        and not target.is_floating_point()  # float labels may call for the swap hint
        and not target.is_complex()
    ):
        return None
    labels = target.to(torch.float64)
    extremes = torch.stack([*torch.aminmax(preds.detach()), *torch.aminmax(labels)])
    values = extremes.tolist()
    if not _validation.small_batch_holds(values, options.gain, preds, target, finite_preds=True):
        return None
    return values[1] - values[0], labels


def _score_range(lists: _LossInput) -> float | Tensor:
    """Largest minus smallest real score: the checks' value, else on the device (0 if none)."""
    if lists.score_range is not None:  # read back with the checks on the CPU
        return lists.score_range
    scores, real = lists.scores.detach(), lists.mask
    high = scores if real is None else torch.where(real, scores, -torch.inf)
    low = scores if real is None else torch.where(real, scores, torch.inf)
    return (high.amax().double() - low.amin().double()).clamp(min=0)


def _check_scale(
    lists: _LossInput, name: str, value: float, bound: float | Tensor, count: int
) -> None:
    """``name``'s bound on a loss's values or slopes stays finite, times the largest weight too.

    `torch_ndcg._validation.check_finite_scale` names the hyper-parameter where its bound
    overflows alone; where the largest weight (given and checked) takes it past, ``weight`` is
    named (`torch_ndcg._validation.check_weight_scale`).
    """
    dtype = lists.scores.dtype
    _validation.check_finite_scale(name, value, bound, dtype, count=count)
    if lists.gain_scale is not None:
        _validation.check_weight_scale(bound, lists.gain_scale, dtype, count=count)


def _reduce(per_list: Tensor, counted: Tensor, reduction: str, leading_shape: torch.Size) -> Tensor:
    """``"none"``: per list; ``"sum"``; ``"mean"`` over the lists in ``counted`` (0 if none).

    See `torch_ndcg._pairwise.reduce_losses`.
    """
    return _pairwise.reduce_losses(per_list, counted, reduction, leading_shape)[0]


@dataclass(frozen=True)
class Loss:
    """A loss as its function and its module share it: the checks of its options and its core.

    The function checks the options it is given (``check(locals())``), the module its own once,
    in ``__init__``; both call `loss`, which checks and prepares the tensors (`_prepare`) for
    the core.

    Attributes:
        core: the loss of checked input, reduced (`_reduce`).
        own: the options only this loss takes, each with its check (called with the name and
            the value, it returns the value checked), in the order they are checked: before
            the options every loss shares (`torch_ndcg._validation.check_loss_options`).
    """

    core: Callable[[_LossInput, Any], Tensor]
    own: Mapping[str, Callable[[str, Any], Any]] = field(default_factory=dict)

    def check(self, given: Mapping[str, Any]) -> LossOptions:
        """The options in ``given`` (the keywords of the loss's function, or more), checked.

        A loss without ``k`` and ``discount`` (the softmax losses) gets 1 and ``"log2"``: then
        `_prepare`'s ideal DCG is the largest gain, the cheapest test of a positive one.
        """
        own = {name: check(name, given[name]) for name, check in self.own.items()}
        # A check that returns nothing (`check_option`, `check_bool`) leaves the value as given.
        own = {name: given[name] if value is None else value for name, value in own.items()}
        shared = _validation.check_loss_options(
            given.get("k", 1),
            given["gain"],
            given.get("discount", "log2"),
            given["reduction"],
            given["ignore_index"],
            given["validate_args"],
        )
        return LossOptions(**own, **shared)

    def loss(
        self,
        preds: Tensor,
        target: Tensor,
        mask: Tensor | None,
        options: LossOptions,
        weight: Tensor | None = None,
    ) -> Tensor:
        """The loss with checked ``options``: only the tensors are checked."""
        return self.core(_prepare(preds, target, mask, options, weight), options)


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
        gain: ``"exponential"`` (the default), ``"linear"`` or an element-wise callable.
        discount: ``"log2"`` (the default), ``"jarvelin"`` or a callable of 1-based float
            ranks (differentiable for `approx_ndcg_loss`).
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
    return LAMBDARANK.loss(preds, target, mask, LAMBDARANK.check(locals()), weight)


def _lambdarank(lists: _LossInput, options: LossOptions) -> Tensor:
    """`lambdarank_loss` of checked input, reduced (see `lambda_pairs`)."""
    return lambda_pairs(lists, options, reduction=options.reduction)[0]


_non_negative = functools.partial(_validation.check_positive, allow_zero=True)
_weighting = functools.partial(_validation.check_option, allowed=WEIGHTINGS, callable_ok=False)
LAMBDARANK = Loss(
    _lambdarank, {"sigma": _validation.check_positive, "weighting": _weighting, "mu": _non_negative}
)


def lambda_pairs(
    lists: _LossInput,
    options: LossOptions,
    *,
    item_factor: Tensor | None = None,
    item_losses: bool = False,
    reduction: str | None = None,
) -> tuple[Tensor, Tensor | None]:
    r"""The LambdaLoss of every list of checked input: ``([N]`` losses, item shares or ``None)``.

    ``item_factor`` (``[N, L]``, non-negative, 0 on every item outside the lists' mask: it is
    the mask then) multiplies each pair's weight by the factors of both its items,
    $\omega_{wl} f_w f_l$; with ``item_losses`` each item's sum over its pairs of the pair
    loss times the other item's factor (``[N, L]``, in the input's item order) is returned too.
    Lists with no relevant item have loss 0. With a ``reduction`` the losses come reduced so
    (`_reduce`).
    """
    sigma, weighting, mu = options.sigma, options.weighting, options.mu
    scores, real, length, kmax = lists.scores, lists.mask, lists.scores.shape[-1], lists.kmax
    if options.validate_args and scores.numel() > 0:
        # A pair's weight is at most 1 (+ mu with NDCG-Loss2 terms), times the largest weight
        # and the factors of its items; its loss at most the weight times sigma * range + log 2,
        # its slope the weight times sigma; at most L^2 pairs.
        score_range = _score_range(lists)
        weight_bound: float | Tensor = 1 + (mu if weighting != "lambdarank" else 0)
        if item_factor is not None:
            weight_bound = weight_bound * item_factor.amax().double().square()
        pair_bound = weight_bound * (sigma * (score_range + 1) + 1)
        _check_scale(lists, "sigma", sigma, pair_bound, length * length)

    # Current ranking: position = rank (ties in order of appearance, padding last). Every
    # position is wanted: `stable_descending_order` of the whole length is this one sort.
    keys = _fast_paths.sort_keys(scores.detach(), real)
    order = keys.sort(dim=-1, descending=True, stable=True).indices
    ranked_gains = lists.scaled_gains.detach().gather(-1, order)
    factor = real if item_factor is None else item_factor  # the factors are the mask too
    ranked_real = None if factor is None else factor.gather(-1, order).to(scores.dtype)

    rows = min(kmax, length - 1)
    dense = item_factor is None and _pairwise.dense_pairs_fit(scores.shape[0], length)
    tables = _pairwise.lambda_tables(
        options.discount, rows, length, kmax, weighting, mu, dense, scores.dtype, scores.device
    )
    if dense:
        loss: Tensor = _pairwise.DensePairwiseLogistic.apply(  # type: ignore[no-untyped-call]
            scores,
            (
                order,
                ranked_gains,
                ranked_real,
                tables[3],  # the square table, built for the dense paths only
                # Checked scores are finite: a list with no relevant item, whose gains are all
                # 0, sums finite terms times 0 weights, which is 0 already.
                None if options.validate_args else lists.has_relevant,
                lists.has_relevant,
                sigma,
                reduction,  # given: only the factors' loss (unreduced) takes the blocks
                lists.leading_shape,
                torch.is_grad_enabled() and scores.requires_grad,
            ),
        )
        return loss, None
    shares = None
    ranked_scores = scores.gather(-1, order)
    if item_factor is not None:
        per_list, shares = _pairwise.FactoredPairwiseLogistic.apply(  # type: ignore[no-untyped-call]
            ranked_scores, ranked_gains, ranked_real, tables[:3], rows, sigma
        )
        # Back to the input's item order.
        shares = shares.scatter(-1, order, shares) if item_losses else None
    else:
        per_list = _pairwise.PairwiseLogistic.apply(  # type: ignore[no-untyped-call]
            ranked_scores,
            ranked_gains,
            ranked_real,
            tables[:3],
            rows,
            torch.is_grad_enabled() and ranked_scores.requires_grad,
            sigma,
        )
    per_list = torch.where(lists.has_relevant, per_list, 0)
    if reduction is not None:
        per_list = _reduce(per_list, lists.has_relevant, reduction, lists.leading_shape)
    return per_list, shares


@_validation.names_ported_keywords(_validation.APPROX_PORTED_NAMES)
def approx_ndcg_loss(
    preds: Tensor,
    target: Tensor,
    *,
    mask: Tensor | None = None,
    weight: Tensor | None = None,
    k: int | None = None,
    temperature: float = 1.0,
    gain: Gain = "exponential",
    discount: Discount = "log2",
    reduction: Reduction = "mean",
    ignore_index: int | None = None,
    validate_args: bool = True,
) -> Tensor:
    r"""ApproxNDCG (Qin, Liu & Li 2010): one minus a smooth approximation of nDCG@k.

    Ranks are replaced by a sigmoid-smoothed count over the real items of the list,

    $$
    \hat r_i = 1 + \sum_{j \ne i} \operatorname{sigmoid}\Bigl(\frac{s_j - s_i}{T}\Bigr),
    \qquad
    \ell = 1 - \frac{1}{Z} \sum_i G_i \, D(\hat r_i) \, c_i,
    $$

    with the gains $G$, discount $D$ and ideal DCG@k $Z$ of the metric. Without
    ``k``, or in a list with at most ``k`` real items, $c_i = 1$; otherwise the cut-off is
    smooth in rank space, $c_i = \operatorname{sigmoid}((k + \tfrac12 - \hat r_i) / T)$, so
    $1 - \ell$ tends to the exact nDCG@k as $T \to 0$ on tie-free scores.

    The default temperature $T = 1$ (allRank's $\alpha = 1$) is the one that reached
    nDCG@10 0.77 on the real data of ``examples/train_ranker.py``; smaller temperatures (TF-Ranking
    uses 0.1) approximate the ranks more closely but give flatter gradients away from ties. As
    the scorer can scale its outputs, $T$ mostly sets how smooth training starts.
    Lists with no relevant item (or only padding) have loss 0 and gradient 0; ``"mean"``
    averages over the other lists. The pairwise sums and their gradient are computed in blocks of
    rows (memory ``O(B L)`` plus a fixed block), never as a ``[B, L, L]`` tensor (except, with a
    named discount, in batches of at most 32,768 pairs, ``B L^2``, which take whole pair tensors:
    fewer operations).

    Args:
        preds: ``[..., L]`` floating scores, as `lambdarank_loss`'s.
        target: ``[..., L]`` non-negative relevance labels.

    Keyword Args:
        mask: ``[..., L]`` bool, ``True`` for real items; padded items take part in no rank.
        weight: ``[..., L]`` weights of the items' gains, as `lambdarank_loss`'s.
        temperature: positive $T$ of the sigmoid; default 1.
        k: smooth cut-off, a positive int, or ``None`` (the default) for the whole list.
        gain: as `lambdarank_loss`.
        discount: as `lambdarank_loss`.
        reduction: as `lambdarank_loss`.
        ignore_index: as `lambdarank_loss`.
        validate_args: as `lambdarank_loss`.

    Returns:
        As `lambdarank_loss`: a scalar, or ``[...]`` per list with ``reduction="none"``.

    Raises:
        ValueError: bad ``temperature``; otherwise as `lambdarank_loss`.
        TypeError: as `lambdarank_loss`.
        RuntimeError: as `lambdarank_loss`.

    Example:
        The relevant item scores 1 below the other: at $T = 1$ its smooth rank is
        $1 + \operatorname{sigmoid}(1) = 1.7311$, so the loss is $1 - 1/\log_2 2.7311 = 0.31009$.
        Far-apart scores make the ranks exact: rank 2, loss $1 - 1/\log_2 3 = 0.36907$.

        >>> import torch
        >>> from torch_ndcg import approx_ndcg_loss
        >>> target = torch.tensor([1, 0])
        >>> approx_ndcg_loss(torch.tensor([0.0, 1.0]), target)
        tensor(0.3101)
        >>> approx_ndcg_loss(torch.tensor([0.0, 50.0]), target)
        tensor(0.3691)
    """
    return APPROX.loss(preds, target, mask, APPROX.check(locals()), weight)


def _approx(lists: _LossInput, options: LossOptions) -> Tensor:
    """`approx_ndcg_loss` of checked input, reduced."""
    temperature, discount = options.temperature, options.discount
    scores, real, length, kmax = lists.scores, lists.mask, lists.scores.shape[-1], lists.kmax
    # An item's gradient sums L sigmoid slopes (at most 1/4 each) of rank terms whose own slope
    # is at most about 1 + 1/T: it stays finite while L^2 (1 + 1/T) / T does.
    bound = (1 + 1 / temperature) / temperature
    _check_scale(lists, "temperature", temperature, bound, length * length)
    has_relevant = lists.has_relevant
    # Lists with more than k real items are cut (padding changes nothing); None: all of them.
    cut = None if real is None or kmax >= length else real.sum(-1, keepdim=True) > kmax
    # A small batch: one autograd node, where the slope of a named discount is known.
    if not callable(discount) and _pairwise.dense_pairs_fit(scores.shape[0], length):
        return _pairwise.DenseApproxNDCG.apply(  # type: ignore[no-untyped-call,no-any-return]
            scores,
            (
                real,
                lists.scaled_gains,
                cut,
                has_relevant,
                discount,
                temperature,
                kmax,
                options.reduction,
                lists.leading_shape,
                torch.is_grad_enabled() and scores.requires_grad,
            ),
        )
    weights = None if real is None else real.to(scores.dtype)
    ranks: Tensor = _pairwise.SmoothRanks.apply(  # type: ignore[no-untyped-call]
        scores, weights, temperature
    )
    if real is not None:
        ranks = torch.where(real, ranks, 1)
    terms = _kernels.discounted(lists.scaled_gains, ranks, discount)
    if kmax < length:
        smooth_cut = torch.sigmoid((kmax + 0.5 - ranks) / temperature)
        if cut is not None:
            smooth_cut = torch.where(cut, smooth_cut, 1)
        terms = terms * smooth_cut
    per_list = torch.where(has_relevant, 1 - terms.sum(dim=-1), 0)
    return _reduce(per_list, has_relevant, options.reduction, lists.leading_shape)


APPROX = Loss(_approx, {"temperature": _validation.check_positive})

# --- Softmax cross-entropy: ListNet / softmax loss and XE-NDCG ----------------------------------

# Other libraries' names for the options of the softmax losses (they take no cut-off).
_CROSS_ENTROPY_PORTED_NAMES = {
    **{
        name: hint
        for name, hint in _validation.APPROX_PORTED_NAMES.items()
        if name in ("padded_value_indicator", "label_gain", "eps")
    },
    "where": "`mask` (Rax's `where`)",
    "label_fn": "`gain` (Rax's `label_fn=rax.utils.normalize_probabilities` is gain='linear')",
    "objective_seed": "`generator` (LightGBM's `objective_seed`) or `noise`",
}


@_validation.names_ported_keywords(_CROSS_ENTROPY_PORTED_NAMES)
def softmax_loss(
    preds: Tensor,
    target: Tensor,
    *,
    mask: Tensor | None = None,
    weight: Tensor | None = None,
    gain: Gain = "exponential",
    reduction: Reduction = "mean",
    ignore_index: int | None = None,
    validate_args: bool = True,
) -> Tensor:
    r"""Softmax cross-entropy with the list's normalised gains as target (ListNet, softmax loss).

    Over the real items of a list, with the gains $G$ of the metric and weights $w$ (1 without
    ``weight``):

    $$
    p_i = \frac{G_i}{\sum_j G_j}, \qquad
    \ell = -\sum_i w_i \, p_i \log \frac{e^{s_i}}{\sum_j e^{s_j}}.
    $$

    ListNet's top-one probabilities (Cao et al., ICML 2007) are ``gain=torch.exp``; with
    ``gain="linear"`` it is TF-Ranking's ``SoftmaxLoss`` and Rax's ``softmax_loss`` with
    normalised labels. Bruch, Wang, Bendersky & Najork (ICTIR 2019) show that with binary labels
    it bounds MRR and nDCG: minimising it maximises a lower bound of both.

    ``weight`` multiplies each item's term while the target stays the normalised unweighted
    gains, so inverse-propensity weights do not cancel on a list with one click (Rax and
    TF-Ranking multiply the labels by the weights before normalising them). Lists without a
    positive gain (or only padding) have loss 0 and gradient 0; ``"mean"`` averages over the
    other lists. Memory ``O(B L)``; nothing is read back on an accelerator.

    Parity recipes (each proved in ``tests/test_softmax_losses.py``), on lists with a relevant
    item:

    - Rax: ``rax.softmax_loss(s, y, where=m, label_fn=rax.utils.normalize_probabilities)`` is
      ``softmax_loss(s, y, mask=m, gain="linear")`` (Rax gives a list of zeros a uniform target);
    - TF-Ranking: ``SoftmaxLoss`` (reduction ``SUM_BY_NONZERO_WEIGHTS``, its default) is
      ``softmax_loss(s, y, gain="linear", ignore_index=-1, weight=S)`` with $S$ each list's
      label sum on each of its items (TF-Ranking weights each list by its label sum; it gives
      padded items the logit $\log 10^{-10}$, which we leave out of the softmax);
    - allRank: ``listNet(s, y)`` is ``softmax_loss(s, y, gain=torch.exp, ignore_index=-1)``
      (allRank adds $10^{-10}$ to the softmax inside its log).

    Args:
        preds: ``[..., L]`` floating scores; float16/bfloat16 are computed in float32.
        target: ``[..., L]`` non-negative relevance labels.

    Keyword Args:
        mask: ``[..., L]`` bool, ``True`` for real items; padded items take no part.
        weight: ``[..., L]`` non-negative, finite weights of the items' terms; ``None`` (the
            default) is every weight 1.
        gain: ``"exponential"`` (the default, $2^y - 1$), ``"linear"`` or a callable of the
            labels with non-negative values.
        reduction: ``"mean"`` (the default: over lists with a positive gain; 0 if none),
            ``"sum"`` or ``"none"``.
        ignore_index: label value that marks padded items (for example ``-1``).
        validate_args: check the values (the default ``True``), as `lambdarank_loss`.

    Returns:
        A scalar, or ``[...]`` per list with ``reduction="none"``; float32 (float64 for float64
        ``preds``).

    Raises:
        ValueError: bad ``reduction`` or ``gain``, shape mismatch, NaN or infinite scores,
            negative labels, a ``weight`` of another shape, with a negative, NaN or infinite
            value, or so large that the loss could overflow (naming ``weight``).
        TypeError: non-floating ``preds`` or ``weight``, non-bool ``mask``, non-int
            ``ignore_index``; a keyword name from another library (``where``, ``label_fn``,
            ``eps``, ...), naming ours.

    Example:
        One relevant item of two, scored 1 below the other: $\ell = \log(1 + e) = 1.3133$.

        >>> import torch
        >>> from torch_ndcg import softmax_loss
        >>> softmax_loss(torch.tensor([0.0, 1.0]), torch.tensor([1, 0]))
        tensor(1.3133)
    """
    return SOFTMAX.loss(preds, target, mask, SOFTMAX.check(locals()), weight)


@_validation.names_ported_keywords(_CROSS_ENTROPY_PORTED_NAMES)
def xe_ndcg_loss(
    preds: Tensor,
    target: Tensor,
    *,
    mask: Tensor | None = None,
    weight: Tensor | None = None,
    noise: Tensor | None = None,
    generator: torch.Generator | None = None,
    gain: Gain = "exponential",
    reduction: Reduction = "mean",
    ignore_index: int | None = None,
    validate_args: bool = True,
) -> Tensor:
    r"""XE-NDCG (Bruch, WWW 2021): softmax cross-entropy against noisy normalised gains.

    Each real item draws $\gamma_i \sim U[0, 1)$; with the gains $G$ of the metric,

    $$
    \phi_i = G_i + 1 - \gamma_i, \qquad \rho_i = \frac{\phi_i}{\sum_j \phi_j}, \qquad
    \ell = -\sum_i w_i \, \rho_i \log \frac{e^{s_i}}{\sum_j e^{s_j}}.
    $$

    With the default exponential gain $\phi_i = 2^{y_i} - \gamma_i$, the target of the
    paper ("An Alternative Cross Entropy Loss for Learning-to-Rank", arXiv 1911.09798) and of
    LightGBM's ``rank_xendcg``; items of label 0 take part. Bruch shows that it is a convex
    bound on nDCG, consistent with it. The gradient is this loss's own,
    $q_i \sum_j w_j \rho_j - w_i \rho_i$ with $q = \operatorname{softmax}(s)$; LightGBM's
    ``rank_xendcg`` adds higher-order terms to it for its trees, and truncates labels to
    integers before $2^y$.

    The noise is drawn at every call (from ``generator``, else torch's default generator)
    or passed in (``noise``). Lists without a positive gain (or only padding) have loss 0 and
    gradient 0, as in `softmax_loss`; LightGBM gives them the random target $1 - \gamma$ and
    trains on it. ``weight`` multiplies each item's term, the target staying unweighted.
    Memory ``O(B L)``; nothing is read back on an accelerator.

    Args:
        preds: ``[..., L]`` floating scores; float16/bfloat16 are computed in float32.
        target: ``[..., L]`` non-negative relevance labels.

    Keyword Args:
        mask: ``[..., L]`` bool, ``True`` for real items; padded items take no part.
        weight: ``[..., L]`` weights of the items' terms, as `softmax_loss`'s.
        noise: ``[..., L]`` floating $\gamma$ in $[0, 1]$; ``None`` (the default) draws it.
        generator: the ``torch.Generator`` (on ``preds``' device) the noise is drawn from;
            ``None`` (the default): torch's default generator.
        gain: ``"exponential"`` (the default), ``"linear"`` or a non-negative callable.
        reduction: as `softmax_loss`.
        ignore_index: as `softmax_loss`.
        validate_args: as `softmax_loss`; also checks ``noise``'s values.

    Returns:
        As `softmax_loss`.

    Raises:
        ValueError: as `softmax_loss`; ``noise`` of another shape, or a value of a real item
            outside $[0, 1]$.
        TypeError: as `softmax_loss`; non-floating ``noise``.

    Example:
        One relevant item of two, scored 1 below the other, $\gamma = (0.5, 0.5)$: the target
        is $\rho = (1.5, 0.5) / 2$, so $\ell = 0.75 \log(1 + e) + 0.25 \log(1 + e^{-1})
        = 1.0633$.

        >>> import torch
        >>> from torch_ndcg import xe_ndcg_loss
        >>> preds, target = torch.tensor([0.0, 1.0]), torch.tensor([1, 0])
        >>> xe_ndcg_loss(preds, target, noise=torch.full((2,), 0.5))
        tensor(1.0633)
    """
    return XENDCG.loss(preds, target, mask, XENDCG.check(locals()), weight, noise, generator)


def _softmax_cross_entropy(lists: _LossInput, options: LossOptions) -> Tensor:
    r"""Cross-entropy of the scores' softmax against ``lists.scaled_gains`` (targets), reduced.

    Padding is left out of the softmax; a term whose target is 0 is 0 (padding's log-softmax,
    $-\infty$, never meets arithmetic).
    """
    scores, real, targets = lists.scores, lists.mask, lists.scaled_gains
    log_q = (scores if real is None else scores.masked_fill(~real, -torch.inf)).log_softmax(-1)
    per_list = torch.where(targets > 0, -targets * log_q, 0).sum(-1)
    return _reduce(per_list, lists.has_relevant, options.reduction, lists.leading_shape)


@_validation.names_ported_keywords(_validation.NEURAL_PORTED_NAMES)
def neural_ndcg_loss(
    preds: Tensor,
    target: Tensor,
    *,
    mask: Tensor | None = None,
    weight: Tensor | None = None,
    k: int | None = None,
    temperature: float = 1.0,
    max_iter: int = 50,
    tol: float = 1e-6,
    gain: Gain = "exponential",
    discount: Discount = "log2",
    reduction: Reduction = "mean",
    ignore_index: int | None = None,
    validate_args: bool = True,
) -> Tensor:
    r"""NeuralNDCG (Pobrotyn & Białobrzeski 2021): one minus nDCG@k of a relaxed sort.

    The sorting permutation of the $n$ real items of a list is relaxed by deterministic
    NeuralSort (Grover et al. 2019) and made doubly stochastic by Sinkhorn scaling:

    $$
    \hat P_{ij} = \operatorname{softmax}_j\Bigl(
        \frac{(n + 1 - 2i) \, s_j - \sum_k |s_j - s_k|}{T}\Bigr),
    \qquad
    P = \operatorname{Sinkhorn}(\hat P),
    \qquad
    \ell = 1 - \frac{1}{Z} \sum_{i \le k} D(i) \sum_j P_{ij} \, G_j,
    $$

    rows $i = 1..n$ being rank positions, columns the items, with the gains $G$,
    discount $D$ and ideal DCG@k $Z$ of the metric: $\sum_j P_{ij} G_j$ is the
    approximate gain at rank $i$. As $T \to 0$, $P$ tends to the sorting
    permutation and $1 - \ell$ to the exact nDCG@k (on tie-free scores).

    Sinkhorn scaling follows allRank: each iteration normalises the columns, then the rows, and
    it stops once every column of the batch sums to 1 within ``tol``, or after ``max_iter``
    iterations. The stop is decided on the device without a read-back, so the ``max_iter``
    iterations' products always run (on random scores allRank's rule rarely stops before 50
    anyway). With ``gain="exponential"`` and ``ignore_index=-1`` the loss equals
    ``1 + allrank.models.losses.neuralNDCG(preds, target, temperature=T, k=k)`` on lists padded
    at their end (allRank reads its padding as the last positions).

    Lists with no relevant item (or only padding) have loss 0 and gradient 0; ``"mean"``
    averages over the other lists. The matrices are held only as their kernel
    $e^{a_{ij} - \max_j a_{ij}}$ and two scaling vectors: the kernel is kept while it takes
    at most 1 GiB (B x L = 4 x 8,192 in float32) and recomputed in blocks of rows for every
    product above that (memory ``O(B L)`` plus a block, but slower); backward runs the iterations
    in reverse from the stored vectors (memory ``O(\text{max\_iter} \, B L)``).

    Args:
        preds: ``[..., L]`` floating scores, as `lambdarank_loss`'s; ``target``, ``weight`` too.
        target: ``[..., L]`` non-negative relevance labels.

    Keyword Args:
        mask: ``[..., L]`` bool, ``True`` for real items; padded items take no part.
        weight: ``[..., L]`` weights of the items' gains.
        temperature: positive NeuralSort temperature $T$; default 1.
        k: cut-off, a positive int, or ``None`` (the default) for the whole list.
        max_iter: most Sinkhorn iterations, a non-negative int (0: NeuralSort alone); default
            50, as allRank.
        tol: Sinkhorn tolerance on the column sums, non-negative; default 1e-6, as allRank.
        gain: as `lambdarank_loss`.
        discount: as `lambdarank_loss`.
        reduction: as `lambdarank_loss`.
        ignore_index: as `lambdarank_loss`.
        validate_args: as `lambdarank_loss`.

    Returns:
        A scalar, or ``[...]`` per list with ``reduction="none"`` (dtypes as `lambdarank_loss`).

    Raises:
        ValueError: bad ``temperature``, ``max_iter`` or ``tol``; as `lambdarank_loss`.
        TypeError: as `lambdarank_loss`; a name from allRank (``padded_value_indicator``,
            ``powered_relevancies``, ...) names ours, or says there is none.
        RuntimeError: as `lambdarank_loss`.

    Example:
        The relevant item scores 1 below the other. At $T = 1$ the NeuralSort rows are
        $\operatorname{softmax}(-1, 0)$ and $\operatorname{softmax}(-1, -2)$, i.e.
        $[1 - \sigma(1), \sigma(1)]$ and $[\sigma(1), 1 - \sigma(1)]$: already doubly
        stochastic, so the relevant item's gain is split between ranks 1 and 2 and the loss is
        $1 - (1 - \sigma(1)) - \sigma(1)/\log_2 3 = 0.26981$.

        >>> import torch
        >>> from torch_ndcg import neural_ndcg_loss
        >>> target = torch.tensor([1, 0])
        >>> neural_ndcg_loss(torch.tensor([0.0, 1.0]), target)
        tensor(0.2698)
    """
    return NEURAL.loss(preds, target, mask, NEURAL.check(locals()), weight)


def _neural(lists: _LossInput, options: LossOptions) -> Tensor:
    """`neural_ndcg_loss` of checked input, reduced."""
    temperature, discount = options.temperature, options.discount
    scores, real, length, kmax = lists.scores, lists.mask, lists.scores.shape[-1], lists.kmax
    if options.validate_args and scores.numel() > 0:
        # Logits are at most 2 L (range) / T apart in a row; a gradient sums L^2 such slopes.
        score_range = _score_range(lists)
        bound = 2 * (score_range + 1) / temperature
        _check_scale(lists, "temperature", temperature, bound, length * length * length)
    # The relaxed sort depends on score differences only: centring on the top real score
    # (a constant) keeps the logits small.
    keyed = scores.detach() if real is None else torch.where(real, scores.detach(), -torch.inf)
    top = keyed.amax(dim=-1, keepdim=True)  # lists are never empty (checked)
    centred = scores - top.nan_to_num(0.0, 0.0, 0.0)  # 0 for a list of none
    if real is not None:
        centred = torch.where(real, centred, 0)
    acc = _options.accumulate_dtype(scores.device)
    gaps = _sinkhorn.absolute_gap_sums(centred, real, acc).to(scores.dtype)
    positions = torch.arange(length, device=scores.device)
    count = torch.full_like(centred[:, :1], length) if real is None else real.sum(-1, keepdim=True)
    rows = None if real is None else positions < count
    coef = (count - 1 - 2 * positions).to(scores.dtype)
    if rows is not None:
        coef = torch.where(rows, coef, 0)
        gaps = torch.where(real, gaps, 0)  # type: ignore[arg-type]
    position_discounts = _kernels.position_discounts(
        length, discount, dtype=scores.dtype, device=scores.device
    )
    position_discounts[kmax:] = 0
    dcg_relaxed: Tensor = _sinkhorn.NeuralSortSinkhorn.apply(  # type: ignore[no-untyped-call]
        centred / temperature,
        gaps / temperature,
        coef,
        rows,
        real,
        lists.scaled_gains.detach(),
        position_discounts,
        int(options.max_iter),
        float(options.tol),
    )
    per_list = torch.where(lists.has_relevant, 1 - dcg_relaxed, 0)
    return _reduce(per_list, lists.has_relevant, options.reduction, lists.leading_shape)


@dataclass(frozen=True)
class ListwiseLoss(Loss):
    r"""A softmax cross-entropy loss: its targets come from the labels (and noise), not `_prepare`.

    `loss` prepares the input (`_prepare`), makes each list's target distribution from the
    unweighted gains $G$: $G / \sum G$, or with ``noisy`` $\phi = G + 1 - \gamma$ over its sum,
    times the weights, and hands it to the core as the scaled gains.
    """

    noisy: bool = False

    def loss(
        self,
        preds: Tensor,
        target: Tensor,
        mask: Tensor | None,
        options: LossOptions,
        weight: Tensor | None = None,
        noise: Tensor | None = None,
        generator: torch.Generator | None = None,
    ) -> Tensor:
        """The loss with checked ``options``; ``noise`` (or ``generator``) with ``noisy``."""
        checks = None
        _check_generator("generator", generator)  # None without noise (`softmax_loss`)
        if noise is not None:  # a floating tensor of preds' shape, in [0, 1] on real items
            _validation.check_preds_target(preds, target)
            _validation.check_mask(mask, preds)
            _validation.check_click_tensor("noise", noise, preds, kind="floating")
            if options.validate_args and noise.numel() > 0:
                real = _validation.real_items(target, mask, options.ignore_index)
                found = noise.detach()
                low, high = torch.aminmax(found if real is None else found.where(real, 0))
                message = "Expected `noise` to be in [0, 1] on real items, but found {found}."
                checks = _validation.value_checks(
                    [((low >= 0) & (high <= 1), low.where(low < 0, high), message)]
                )
        # The targets are weighted below, the weights checked there (`gain_scale`).
        lists = _prepare(preds, target, mask, options, weight, checks, weigh=False)
        length = preds.shape[-1]
        if options.validate_args and preds.numel() > 0:
            # -log q_i is at most the score range + log L, so a list's loss is at most that
            # times its largest weight (targets sum to 1), and its slopes at most the weight.
            bound = _score_range(lists) + math.log(length)
            dtype, largest = lists.scores.dtype, torch.finfo(lists.scores.dtype).max
            message = f"Expected `preds` to keep the loss finite in {dtype}, but the scores "
            if isinstance(bound, Tensor):
                _host.assert_on_device(bound < largest, message + "span too much; rescale them.")
            elif not bound < largest:
                raise ValueError(message + f"span {bound:.3g}; rescale them.")
            if lists.gain_scale is not None:
                _validation.check_weight_scale(bound + 1, lists.gain_scale, dtype)
        if self.noisy:  # phi = G + 1 - gamma, from the gains (`_prepare` divided them by the top)
            acc = _options.accumulate_dtype(preds.device)
            gains = _kernels.list_gains(target.reshape(-1, length), lists.mask, options.gain, acc)
            if noise is None:
                noise = torch.rand(gains.shape, generator=generator, dtype=acc, device=gains.device)
            gains = gains + 1 - _options.as_dtype(noise.detach().reshape(gains.shape), acc)
            gains = gains if lists.mask is None else gains.where(lists.mask, 0)
            targets = (gains / gains.sum(-1, keepdim=True)).where(lists.has_relevant[:, None], 0)
            targets = targets.to(lists.scores.dtype)
        else:  # the gains over the largest (1): their sum is at least 1 where one is positive
            scaled = lists.scaled_gains
            targets = scaled / scaled.sum(-1, keepdim=True).clamp(min=1)
        if weight is not None:
            flat_weight = weight.reshape(-1, length).detach()
            targets = _kernels.weighted_gains(targets, flat_weight, lists.mask)
        return self.core(lists._replace(scaled_gains=targets), options)


SOFTMAX = ListwiseLoss(_softmax_cross_entropy)
XENDCG = ListwiseLoss(_softmax_cross_entropy, noisy=True)


NEURAL = Loss(
    _neural,
    {
        "temperature": _validation.check_positive,
        "max_iter": functools.partial(_validation.check_positive_int, allow_zero=True),
        "tol": _non_negative,
    },
)


# --- Unbiased LambdaRank: the computations of `torch_ndcg.UnbiasedLambdaRankLoss` --------------


def _unbiased_lambdarank(
    preds: Tensor,
    clicks: Tensor,
    positions: Tensor,
    mask: Tensor | None,
    options: LossOptions,
    biases: Any,
) -> Tensor:
    """`torch_ndcg.UnbiasedLambdaRankLoss.forward` with checked ``options``.

    ``biases`` is the module: its ``num_positions``, ``match_exposure``, ``bias_norm`` and
    ``momentum`` are read and its buffers ``t_plus``, ``t_minus`` (by position) and
    ``statistics`` (``[4, num_positions]``: the sums over the steps of S+, S-, R+, R-) updated
    in place; ``_edge`` is its ``[1]`` buffer of ``inf``, the bias of the items not shown. In
    training mode (``biases.training``) the biases are updated after the loss is computed (the
    loss uses the biases from before the step).

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
        positions, preds, biases.num_positions, real, validate_args=options.validate_args
    )
    if options.validate_args:
        extra += _validation.check_binary("clicks", clicks, real)
    shown = positions != _options.NOT_SHOWN
    taken = shown if real is None else real & shown
    lists = _prepare(
        preds,
        clicks,
        taken,
        options,
        extra_checks=_validation.value_checks(extra),  # None where there is none
    )
    n, length = biases.num_positions, preds.shape[-1]
    # Each item's bin: 1 + its position if clicked, n + 2 + its position if not. Items not
    # shown fall in bins 0 and n + 1, which weigh nothing and are dropped from the sums.
    unclicked = clicks.reshape(-1, length) <= 0
    shown_bins = positions.reshape(-1, length).long() + 1  # 0: not shown
    if real is not None:  # padded items' positions are never checked: any value
        shown_bins = torch.where(taken.reshape(-1, length), shown_bins, 0)
    bins = torch.add(shown_bins, unclicked, alpha=n + 1)
    # 1 / t+ and 1 / t- by bin (1 / inf = 0 in the bins of the items not shown), in the scores'
    # dtype: float64 scores take the inverse of a float32 bias below 1 / 3.4e38 finitely.
    biases_by_bin = torch.cat([biases._edge, biases.t_plus, biases._edge, biases.t_minus])
    item_factor = biases_by_bin.to(lists.scores.dtype).reciprocal()[bins]
    per_list, shares = lambda_pairs(
        lists, options, item_factor=item_factor, item_losses=biases.training
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
            if biases.match_exposure:
                exposed.scatter_(1, shown_bins, 1.0)
            else:
                exposed.fill_(1.0)
            torch.mul(sums[:, 0, :, 1:2], exposed[:, None, :], out=sums[:, 1])
            _add_statistics(biases, sums.sum(dim=0)[..., 1:].reshape(4, n))
    # The lists "mean" counts: those with a click on an item that takes part. A named gain is 0
    # without a click and positive with one, and a named discount positive at the top: the
    # ideal DCG of the items taking part is positive on exactly those lists (no launch more). A
    # callable gain positive at 0 makes it positive on a list without a click too, and a
    # callable discount 0 at the top makes it 0 on a list with one click: there the clicks of
    # the items shown tell them apart.
    counted = lists.has_relevant
    if options.reduction == "mean" and (
        not _gains.named(options.gain) or callable(options.discount)
    ):
        counted = shown_bins.masked_fill(unclicked, 0).any(dim=-1)
    return _reduce(per_list, counted, options.reduction, lists.leading_shape)


def _momentum(name: str, value: Any) -> Any:
    if _non_negative(name, value) > 1:
        raise ValueError(f"Expected `{name}` to be in [0, 1], but got {value!r}.")
    return value


# The debiased loss: LambdaRank's options (its weighting and mu fixed) and those of its biases.
UNBIASED = Loss(
    _lambdarank,
    {
        **LAMBDARANK.own,
        "num_positions": _validation.check_positive_int,
        "bias_norm": _non_negative,
        "momentum": _momentum,
        "match_exposure": _validation.check_bool,
    },
)


def _aggregated_unbiased_lambdarank(
    preds: Tensor,
    clicks: Tensor,
    views: Tensor,
    mask: Tensor | None,
    options: LossOptions,
    biases: Any,
) -> Tensor:
    """`torch_ndcg.UnbiasedLambdaRankLoss.aggregated` with checked ``options``."""
    if not isinstance(preds, Tensor) or not preds.is_floating_point():
        raise TypeError(f"Expected `preds` to be a floating tensor, but got {preds!r}.")
    length, n = preds.shape[-1], biases.num_positions
    counts_shape = (*preds.shape, n)
    for name, value in (("clicks", clicks), ("views", views)):
        if not isinstance(value, Tensor) or not value.is_floating_point():
            raise TypeError(
                f"Expected `{name}` to be a floating tensor, but got "
                f"{getattr(value, 'dtype', type(value).__name__)}."
            )
        if tuple(value.shape) != counts_shape:
            raise ValueError(
                f"Expected `{name}` to have shape {counts_shape} (`preds`' shape and "
                f"`num_positions`), but got {tuple(value.shape)}."
            )
        _validation.check_same_device(name, value, preds)
    _validation.check_mask(mask, preds)  # metadata: checked with or without values
    dtype = preds.dtype
    won = clicks.reshape(-1, length, n).to(dtype)
    shown_counts = views.reshape(-1, length, n).to(dtype)
    # The items ranked: real ones that were shown (as `forward` ranks its shown items).
    real = views.reshape(-1, length, n).detach().sum(-1) > 0
    flat_mask = None if mask is None else mask.reshape(-1, length)
    if flat_mask is not None:
        real = real & flat_mask
    # The scores of the others never count: they may be anything (NaN, inf).
    scores = torch.where(real, preds.reshape(-1, length), 0)
    if options.validate_args and won.numel() > 0:
        _check_click_counts(scores.detach(), real, won.detach(), shown_counts.detach(), flat_mask)
    if flat_mask is not None:  # padded counts may be anything too: selected, not multiplied
        won = torch.where(real[..., None], won, 0)
        shown_counts = torch.where(real[..., None], shown_counts, 0)
    lost = shown_counts - won
    inverse = torch.stack([biases.t_plus, biases.t_minus]).to(dtype).reciprocal()
    winner = won @ inverse[0]  # A_w: [N, L]
    loser = lost @ inverse[1]  # B_l
    # Current ranking: 1-based ranks, ties in order of appearance, items not ranked last.
    keys = _fast_paths.ranking_keys(scores.detach(), real)
    order = _fast_paths.stable_descending_order(keys, length)
    ranks = order.argsort(dim=-1) + 1  # the inverse permutation
    kmax = length if options.k is None else min(options.k, length)
    discount = _kernels.discounts(ranks.to(dtype), options.discount).to(dtype)
    discount = torch.where(ranks <= kmax, discount, 0)
    delta = (discount[:, :, None] - discount[:, None, :]).abs()
    difference = scores[:, :, None] - scores[:, None, :]
    pair = delta * torch.nn.functional.softplus(-options.sigma * difference)  # L_wl: [N, L, L]
    per_list = torch.einsum("nw,nwl,nl->n", winner, pair, loser)
    if biases.training:
        with torch.no_grad():
            plus = torch.einsum("nwi,nwl,nl->ni", won, pair, loser)
            minus = torch.einsum("nlj,nwl,nw->nj", lost, pair, winner)
            by_position = torch.stack([plus, minus], dim=1)  # [N, 2, n]: each list's S+, S-
            # Finite: a list's S past the largest float, times a share 0 of its sessions, would
            # be NaN (a NaN one, from unchecked input, counts for nothing).
            by_position.nan_to_num_(0.0)
            if biases.match_exposure:  # the share of each list's sessions that show a position
                views_by_position = (won + lost).sum(dim=1)  # [N, n]
                top = views_by_position[:, :1]
                shown = torch.where(top > 0, views_by_position / top.clamp(min=1e-30), 0)
            else:
                shown = torch.ones_like(plus)
            references = by_position[:, :, :1] * shown[:, None, :]
            _add_statistics(biases, torch.cat([by_position, references], dim=1).sum(dim=0))
    # The lists with a click, as `forward` counts them: a positive click count on an item
    # ranked (checked counts: a click is on an item with views, and no count is negative).
    has_click = won.sum(dim=(-1, -2)) > 0
    per_list = torch.where(has_click, per_list, 0)
    return _reduce(per_list, has_click, options.reduction, preds.shape[:-1])


def _check_click_counts(
    scores: Tensor, real: Tensor, clicks: Tensor, views: Tensor, mask: Tensor | None
) -> None:
    """`aggregated`'s value checks, each naming the argument at fault and the value found.

    The scores of the items ranked (``real``), then the counts of the real items (``mask``;
    those of an item without views too: negative views would drop it from the ranking
    unnoticed): no NaN, finite and non-negative, clicks at most views. One read-back on the
    CPU, device-side assertions elsewhere, before anything is computed or learnt.
    """
    counts = torch.stack([clicks, views])  # [2, N, L, n]
    if mask is not None:
        counts = counts.masked_fill(~mask[None, :, :, None], 0)
    low, high = counts.reshape(2, -1).aminmax(dim=1)  # both NaN where a count is
    # Rows `preds` (the scores ranked: inf and -inf where there are none), `clicks`, `views`.
    low = torch.cat([torch.where(real, scores, torch.inf).amin()[None], low])
    high = torch.cat([torch.where(real, scores, -torch.inf).amax()[None], high])
    floor = low.new_tensor([-torch.finfo(scores.dtype).max, 0, 0])
    found = torch.where(low < floor, low, high)
    excess = (counts[0] - counts[1]).amax()
    checks = []
    counted = "non-negative and finite"
    rows = [
        ("preds", "scores", "finite"),
        ("clicks", "counts", counted),
        ("views", "counts", counted),
    ]
    for row, (name, noun, expected) in enumerate(rows):
        checks += [
            (
                low[row] == low[row],
                low[row],
                f"Expected `{name}` to contain no NaN, but found NaN {noun}.",
            ),
            (
                (low[row] >= floor[row]) & (high[row] < torch.inf),
                found[row],
                f"Expected `{name}` to be {expected}, but found {{found}}.",
            ),
        ]
    checks.append(
        (
            ~(excess > 0),  # NaN (inf - inf): named by the checks above
            excess,
            "Expected `clicks` to be at most `views`, but found clicks above views by {found}.",
        )
    )
    _validation.resolve_checks(_validation.value_checks(checks))


@torch.no_grad()
def _add_statistics(biases: Any, batch: Tensor) -> None:
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
    summed = torch.add(batch, biases.statistics, alpha=biases.momentum)
    counted = summed <= torch.finfo(summed.dtype).max  # False for inf and NaN
    averaged = torch.where(counted, summed, biases.statistics, out=biases.statistics)
    statistic, reference = averaged[:2], averaged[2:]
    known = torch.logical_and(statistic, reference)  # both positive: the sums are not negative
    estimate = (statistic / reference).pow_(1 / (1 + biases.bias_norm)).to(biases.t_plus.dtype)
    for row, bias in enumerate((biases.t_plus, biases.t_minus)):
        torch.where(known[row], estimate[row], bias, out=bias)


# --- PL-Rank: the gradient of the expected nDCG@k of a Plackett-Luce policy ------------------


def _check_generator(name: str, generator: Any) -> Any:
    if generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(
            f"Expected `{name}` to be a torch.Generator or None, but got {generator!r}."
        )
    return generator


__all__ += ["pl_rank_loss", "sample_rankings"]

PL_RANK_PORTED_NAMES = {
    **_validation.UNBIASED_PORTED_NAMES,
    "n_samples": "`num_samples` (PL-Rank's `n_samples`)",
    "cutoff": "`k` (PL-Rank's `cutoff`)",
}


def _gumbel_top_k(
    scores: Tensor, real: Tensor | None, kmax: int, num_samples: int, generator: Any
) -> Tensor:
    """``[N, num_samples, kmax]`` rankings of ``[N, L]`` scores drawn from softmax(scores).

    Gumbel top-k: the top ``kmax`` of ``s_i - log E_i``, ``E_i ~ Exp(1)`` (``-log E`` is a
    standard Gumbel). Padded items get ``-inf`` keys: they come last, after every real item.
    """
    noise = scores.new_empty(scores.shape[0], num_samples, scores.shape[1])
    keys = noise.exponential_(generator=generator).log_().neg_().add_(scores[:, None, :])
    if real is not None:
        keys.masked_fill_(~real[:, None, :], -torch.inf)
    return keys.topk(kmax, dim=-1, sorted=True).indices


@_validation.names_ported_keywords(PL_RANK_PORTED_NAMES)
def sample_rankings(
    preds: Tensor,
    num_samples: int,
    *,
    k: int | None = None,
    mask: Tensor | None = None,
    generator: torch.Generator | None = None,
) -> Tensor:
    r"""Rankings drawn from the Plackett-Luce policy of the scores, by Gumbel top-k.

    Position by position, the next item is drawn among the items not yet placed with
    probability $\pi(d \mid y_{1:i-1}) = e^{s_d} / \sum_{d' \notin y_{1:i-1}} e^{s_{d'}}$:
    the policy whose expected nDCG@k `pl_rank_loss` optimises, for evaluating it (the mean
    `ndcg` of its rankings) or measuring the exposure each item gets. Sampled as the top
    ``k`` of $s_d + g_d$, $g_d$ standard Gumbel noise (Kool et al. 2019), in one sort of
    ``[..., num_samples, L]`` keys.

    Args:
        preds: ``[..., L]`` floating scores (the policy's logits), finite on real items.
        num_samples: rankings per list, a positive int.

    Keyword Args:
        k: positions drawn, a positive int (capped at ``L``), or ``None`` (the default) for all.
        mask: ``[..., L]`` bool, ``True`` for real items; padded items are never drawn.
        generator: the ``torch.Generator`` of the noise (on the scores' device), or ``None``
            for the default one.

    Returns:
        ``[..., num_samples, k]`` int64 item indices into the list, best first; ``-1`` at the
        positions past a list's real items. For the same generator state these are the
        rankings `pl_rank_loss` draws for the same scores, ``k`` and ``num_samples``.

    Raises:
        TypeError: ``preds`` not a floating tensor, a bad ``mask`` or ``generator``.
        ValueError: bad ``num_samples`` or ``k``, shapes that disagree, or NaN or infinite
            ``preds`` on real items.

    Example:
        >>> import torch
        >>> from torch_ndcg import sample_rankings
        >>> gen = torch.Generator().manual_seed(0)
        >>> preds = torch.tensor([[5.0, 0.0, 9.0, 1.0]])
        >>> mask = torch.tensor([[True, True, True, False]])
        >>> sample_rankings(preds, 2, mask=mask, generator=gen)
        tensor([[[ 2,  0,  1, -1],
                 [ 2,  0,  1, -1]]])
    """
    _validation.check_preds_target(preds, preds)
    num_samples = _validation.check_positive_int("num_samples", num_samples)
    kmax = _validation.check_loss_k(k)
    _check_generator("generator", generator)
    _validation.check_mask(mask, preds)
    length = preds.shape[-1]
    kmax = length if kmax is None else min(kmax, length)
    flat_mask = None if mask is None else mask.reshape(-1, length)
    # Drawn in the losses' compute dtype: the same noise, so the same rankings, as they draw.
    scores = _options.as_dtype(preds.detach(), _options.compute_dtype(preds.dtype))
    scores = scores.reshape(-1, length)
    if flat_mask is not None:
        scores = torch.where(flat_mask, scores, 0)
    if scores.numel() > 0:  # a NaN or infinite key would be drawn first, every time
        largest = scores.abs().amax()
        message = "Expected `preds` to be finite on real items, but found {found}."
        finite = _validation.value_checks([(largest < torch.inf, largest, message)])
        _validation.resolve_checks(finite)
    order = _gumbel_top_k(scores, flat_mask, kmax, num_samples, generator)
    if flat_mask is not None:
        drawn_real = flat_mask[:, None, :].expand(-1, num_samples, -1).gather(-1, order)
        order = torch.where(drawn_real, order, -1)
    return order.reshape(*preds.shape[:-1], num_samples, kmax)


@_validation.names_ported_keywords(PL_RANK_PORTED_NAMES)
def pl_rank_loss(
    preds: Tensor,
    target: Tensor,
    *,
    mask: Tensor | None = None,
    weight: Tensor | None = None,
    k: int | None = None,
    num_samples: int = 100,
    generator: torch.Generator | None = None,
    gain: Gain = "exponential",
    discount: Discount = "log2",
    reduction: Reduction = "mean",
    ignore_index: int | None = None,
    validate_args: bool = True,
) -> Tensor:
    r"""PL-Rank-3 (Oosterhuis, SIGIR 2021 and 2022): the expected nDCG@k of a Plackett-Luce policy.

    The scores define the policy $\pi$ of `sample_rankings`: $y_i$ is drawn among the items
    not yet placed with $\pi(d \mid y_{1:i-1}) \propto e^{s_d}$. Its expected nDCG@k,
    $\mathcal{R} = \mathbb{E}_{y \sim \pi}\bigl[\sum_{i \le k} \theta_i \rho_{y_i}\bigr]$,
    with $\theta_i = D(i)$ and $\rho_d = G_d / Z$ (the gains, discount and ideal DCG@k of the
    metric), has the gradient (Oosterhuis 2021, eq. for PL-Rank-2)

    $$
    \frac{\partial \mathcal{R}}{\partial s_d} = \mathbb{E}_y\Bigl[
        \sum_{i = r_d + 1}^{k} \theta_i \rho_{y_i}
        + \sum_{i = 1}^{\min(r_d, k)} \pi(d \mid y_{1:i-1})
        \Bigl(\theta_i \rho_d - \sum_{j = i}^{k} \theta_j \rho_{y_j}\Bigr)\Bigr],
    $$

    $r_d$ the rank of $d$ in $y$ ($> k$ when it is not in the top k). It is estimated by the
    mean over ``num_samples`` rankings drawn by Gumbel top-k, computed as PL-Rank-3 does
    (Oosterhuis 2022): with $\pi(d \mid y_{1:i-1}) = e^{s_d} / \Sigma_i$, both inner sums
    are cumulative sums over positions of $\theta_i / \Sigma_i$ and of the reward to go
    over $\Sigma_i$, so the cost is ``O(num_samples N L)`` time and memory for ``N`` lists
    of ``L`` items (one top-k of the noisy scores per sample), never ``L^2``.

    The loss's gradient with respect to the scores is minus that estimate, and its value is
    $1 - $ the mean nDCG@k of the sampled rankings: an unbiased estimate of
    $1 - \mathcal{R}$ (the value of the rankings drawn, not a function whose autograd
    gives the gradient; second derivatives are 0). The ranking-dependent parts are computed in
    float64 where the device has it, on scores centred on each list's best, and the
    probabilities $\pi(d \mid y_{1:i-1})$ in log space: the estimate holds however far the
    other scores trail the best (items 700 below it are ranked after it, and among themselves
    by their own scores). On the CPU, where every list lies within 600 of its best, the
    same sums are taken in linear space, which is faster there.

    ``weight`` multiplies each item's gain after the ideal DCG is taken (as for the other
    losses): $\rho_d = w_d G_d / Z$, e.g. inverse propensities of clicks. Lists with no
    relevant item (or only padding) have loss 0 and gradient 0; ``"mean"`` averages over the
    other lists. Padded items are never drawn and get gradient 0.

    Args:
        preds: ``[..., L]`` floating scores (the policy's logits); float16/bfloat16 are computed
            in float32.
        target: ``[..., L]`` non-negative relevance labels.

    Keyword Args:
        mask: ``[..., L]`` bool, ``True`` for real items.
        weight: ``[..., L]`` non-negative weights of the items' gains.
        k: cut-off of the nDCG, a positive int, or ``None`` (the default) for the whole list.
        num_samples: rankings drawn per list and step, a positive int; default 100.
        generator: the ``torch.Generator`` of the sampling (on the scores' device), or
            ``None`` (the default) for the default one.
        gain: as `lambdarank_loss`.
        discount: as `lambdarank_loss`.
        reduction: as `lambdarank_loss`.
        ignore_index: as `lambdarank_loss`.
        validate_args: as `lambdarank_loss`.

    Returns:
        A scalar, or ``[...]`` per list with ``reduction="none"``.

    Raises:
        ValueError: bad ``num_samples``; otherwise as `lambdarank_loss`.
        TypeError: a ``generator`` that is not a ``torch.Generator``; as `lambdarank_loss`.

    Example:
        With a single relevant item among two, it is ranked first with probability
        $p = \operatorname{sigmoid}(s_0 - s_1)$, so $\mathcal{R} = p + (1 - p) / \log_2 3$,
        $1 - \mathcal{R} = 0.1845$ and the loss's exact gradient
        $\mp (1 - 1/\log_2 3) \, p (1 - p) = \mp 0.0923$ at $s = (0, 0)$; the estimates
        from 10,000 rankings are close.

        >>> import torch
        >>> from torch_ndcg import pl_rank_loss
        >>> preds = torch.zeros(2, requires_grad=True)
        >>> gen = torch.Generator().manual_seed(0)
        >>> loss = pl_rank_loss(preds, torch.tensor([1, 0]), num_samples=10_000, generator=gen)
        >>> loss.backward()
        >>> round(loss.item(), 2), preds.grad.round(decimals=2)
        (0.19, tensor([-0.0900,  0.0900]))
    """
    return PL_RANK.loss(preds, target, mask, PL_RANK.check(locals()), weight)


def _pl_rank(lists: _LossInput, options: LossOptions) -> Tensor:
    """`pl_rank_loss` of checked input, reduced: its value plus a surrogate of value 0.

    PL-Rank-3's ``[N, L]`` estimate of the expected DCG's gradient and the ``[N]`` mean DCG
    come from ``[N, S, K]`` rankings drawn (``order``): every tensor is ``O(N S L)``.
    """
    scores, real = lists.scores, lists.mask
    if lists.gain_scale is not None:  # the value is at most the largest weight, a slope L + 1 times
        count = scores.shape[-1] + 1
        _validation.check_weight_scale(1, lists.gain_scale, scores.dtype, count=count)
    detached = scores.detach()
    order = _gumbel_top_k(detached, real, lists.kmax, options.num_samples, options.generator)
    n, samples, kmax = order.shape
    length, acc = scores.shape[-1], _options.accumulate_dtype(scores.device)
    with torch.no_grad():
        keyed = (detached if real is None else detached.masked_fill(~real, -torch.inf)).to(acc)
        top = keyed.amax(-1, keepdim=True).nan_to_num(0.0, 0.0, 0.0)  # -inf in a list of padding
        logits = (keyed - top)[:, None, :]  # the gaps to the list's best, -inf on padding
        theta = _kernels.position_discounts(kmax, options.discount, dtype=acc, device=scores.device)
        gains = lists.scaled_gains.to(acc)[:, None, :]  # rho
        reward = gains.expand(n, samples, length).gather(-1, order).mul_(theta)
        to_go = reward.flip(-1).cumsum_(-1).flip(-1)  # sum_{j >= i} theta_j rho_{y_j}
        # Each item's position in each ranking, kmax where it was not drawn.
        positions = torch.arange(kmax, device=scores.device).expand_as(order)
        slot = order.new_full((n, samples, length), kmax).scatter_(-1, order, positions)
        # The estimate's second sum: in linear space where every list's scores lie within
        # `LINEAR_SPAN` of its best (the faster way: 1.6-2.4x on the CPU), in log space
        # elsewhere. The span is the checks' where they read it; else, where a value may be
        # read back (the CPU), the kernel's one fast-path read-back; else unknown (log space).
        span = lists.score_range
        if span is None and _host.may_read_back(scores.device):
            span = float(_score_range(lists))
        linear = span is not None and span <= LINEAR_SPAN
        estimate = _probability_terms(
            theta,
            to_go,
            gains,
            logits,
            order,
            slot,
            linear=linear and acc == torch.float64,
            signed=not _gains.declared(options.gain) or callable(options.discount),  # else >= 0
        )
        following = torch.nn.functional.pad(to_go[..., 1:], (0, 1))  # sum_{j > i}
        estimate.scatter_add_(-1, order, following)
    # (s.detach() - s) is 0 with slope -1: the loss's gradient is minus the estimate.
    surrogate = (estimate.mean(1).to(scores.dtype) * (detached - scores)).sum(-1)
    value = (1 - reward.sum(-1).mean(1)).to(scores.dtype)  # 1 - the mean nDCG@k drawn
    per_list = torch.where(lists.has_relevant, value + surrogate, 0)
    return _reduce(per_list, lists.has_relevant, options.reduction, lists.leading_shape)


# Scores at most this far below their list's best keep e^{-gap} and 1 / Sigma well inside
# float64's range (e^-600 = 2.6e-261): PL-Rank's sums may be taken in linear space.
LINEAR_SPAN = 600.0


def _probability_terms(
    theta: Tensor,
    to_go: Tensor,
    gains: Tensor,
    logits: Tensor,
    order: Tensor,
    slot: Tensor,
    *,
    linear: bool,
    signed: bool,
) -> Tensor:
    r"""$\sum_{i \le r_d} \pi(d \mid y_{1:i-1}) (\theta_i \rho_d - T_i)$ of every item $d$.

    The discounts $\theta$ (``[K]``) and rewards to go $T_i = \sum_{j \ge i} \theta_j
    \rho_{y_j}$ (``to_go``, ``[N, S, K]``) of the rankings drawn (``order``, ``[N, S, K]``),
    the rewards $\rho$ (``gains``) and ``logits`` $s$ (``[N, 1, L]``, centred on each list's
    best, ``-inf`` on padding) of the items, ``slot`` each item's position $r_d$ in each
    ranking (``K`` where it was not drawn: its sums run to the last position, where it was
    still to be drawn); ``[N, S, L]`` back. $\pi(d \mid y_{1:i-1}) = e^{s_d} / \Sigma_i$, with
    $\Sigma_i$ the sum of $e^s$ over the items drawn at ``i`` or below and those not drawn.

    Both sums over positions, of $\theta_i / \Sigma_i$ and $T_i / \Sigma_i$, are taken in log
    space (``logcumsumexp``) and only their products with $e^{s_d}$ exponentiated, each term at
    most $|\theta_i|$ or $|T_i|$: no $1 / \Sigma_i$ overflows and no $e^{s_d}$ underflows
    however far the scores trail their best (e^-800 is 0 in float64, e^-800 / e^-805 is not).
    ``linear``: as they read, where the caller knows every gap to be at most `LINEAR_SPAN` (in
    float64). With ``signed`` the positive and negative values are summed apart in log space;
    else none is negative.
    """
    kmax = order.shape[-1]
    last = slot.clamp(max=kmax - 1)  # the last position an item was still to be drawn at
    rest = None if kmax == slot.shape[-1] else slot == kmax  # the items not drawn
    if linear:
        exps = logits.exp()
        sigma = exps.expand_as(slot).gather(-1, order).flip(-1).cumsum_(-1).flip(-1)
        if rest is not None:
            sigma += torch.where(rest, exps, 0).sum(-1, keepdim=True)
        inverse = sigma.reciprocal_().nan_to_num_(0.0, 0.0, 0.0)  # 0 past the real items
        weight_sums = (inverse * theta).cumsum_(-1).gather(-1, last)
        reward_sums = inverse.mul_(to_go).cumsum_(-1).gather(-1, last)
        return weight_sums.mul_(gains).sub_(reward_sums).mul_(exps)
    log_sigma = logits.expand_as(slot).gather(-1, order).flip(-1).logcumsumexp(-1).flip(-1)
    if rest is not None:
        log_rest = torch.where(rest, logits, -torch.inf).logsumexp(-1, keepdim=True)
        log_sigma = torch.logaddexp(log_sigma, log_rest)
    # log(1 / Sigma_i); -inf past the real items (Sigma = 0: nothing real is left to draw).
    log_inverse = log_sigma.neg_().nan_to_num_(posinf=-torch.inf)
    values = torch.stack([theta.expand_as(to_go), to_go])
    if signed:
        values = torch.cat([values.clamp(min=0), values.clamp(max=0).neg_()])
    log_sums = (values.log_() + log_inverse).logcumsumexp(-1)
    sums = (log_sums.gather(-1, last.expand(len(values), -1, -1, -1)) + logits).exp_()
    if signed:
        sums = sums[:2] - sums[2:]
    return sums[0].mul_(gains).sub_(sums[1])  # weight sums times rho_d, less the reward sums


PL_RANK = Loss(
    _pl_rank,
    {"num_samples": _validation.check_positive_int, "generator": _check_generator},
)
