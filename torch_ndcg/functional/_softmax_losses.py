r"""Softmax cross-entropies of a list's scores against a target from its gains.

The softmax loss (ListNet) takes the normalised gains as target, XE-NDCG (Bruch, WWW 2021) the
normalised gains plus noise. Their targets come from the labels (and noise), not from `prepare`'s
ideal DCG; ``weight`` multiplies each item's term.

Fast path: the exact gains. Where `_loss_input.dense_checks` proved a plain batch's gains and
their sums exact in the scores' dtype (`Lists.exact_gains`), the gains are computed in it, not
in float64, and XE-NDCG's numerators are $2^y - \gamma$ (`_noisy_gains`): 1.04-1.27x at 8 x 10
to 16 x 1,024 (``python benchmarks/bench_paths.py``), less than 1.2x on the shortest lists but
kept for the peer: without it both losses fall behind allRank's ``listNet``
(``python benchmarks/bench_losses.py --peers``).
"""

import torch
from torch import Tensor

from torch_ndcg import _kernels, _options, _pairwise, _validation
from torch_ndcg._kernels import as_dtype
from torch_ndcg._options import Gain, Reduction
from torch_ndcg.functional import _loss_input
from torch_ndcg.functional._loss_input import Checks, Lists, LossOptions

__all__ = ["softmax_loss", "xe_ndcg_loss"]

SOFTMAX_CHECKS: Checks = {}  # the options every loss shares, but `k` and `discount`

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
        gain: ``"exponential"`` (the default, $2^y - 1$), ``"linear"``, a callable of the
            labels with non-negative values, or a sequence of non-negative per-label gains.
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
    options = _loss_input.check_options(
        SOFTMAX_CHECKS,
        gain=gain,
        reduction=reduction,
        ignore_index=ignore_index,
        validate_args=validate_args,
    )
    return _softmax(preds, target, mask, weight, options)


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
        gain: ``"exponential"`` (the default), ``"linear"``, a non-negative callable or a
            sequence of per-label gains.
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
    options = _loss_input.check_options(
        SOFTMAX_CHECKS,
        gain=gain,
        reduction=reduction,
        ignore_index=ignore_index,
        validate_args=validate_args,
    )
    return _xe_ndcg(preds, target, mask, weight, options, (noise, generator))


def _softmax(
    preds: Tensor, target: Tensor, mask: Tensor | None, weight: Tensor | None, options: LossOptions
) -> Tensor:
    """`softmax_loss` with checked ``options``, reduced: the target is the gains over their sum."""
    lists = _loss_input.checked_lists(preds, target, mask, weight, options)
    gains, totals = _plain_gains(lists, options)
    # Where the sum is 0 every gain is (the list is not counted): 0 over the smallest normal.
    floored = totals.clamp(min=torch.finfo(totals.dtype).tiny)
    return _cross_entropy(lists, gains, floored, totals > 0, options)


def _plain_gains(lists: Lists, options: LossOptions) -> tuple[Tensor, Tensor]:
    """The ``[N, L]`` gains (0 on padding) and their ``[N, 1]`` sums, exact where they can be.

    In ``lists.exact_gains`` where that holds them exactly, else in the accumulation dtype.
    """
    dtype = lists.exact_gains or _options.accumulate_dtype(lists.scores.device)
    gains = _kernels.list_gains(lists.labels, lists.mask, options.gain, dtype)
    return gains, gains.sum(-1, keepdim=True)


def _xe_ndcg(
    preds: Tensor,
    target: Tensor,
    mask: Tensor | None,
    weight: Tensor | None,
    options: LossOptions,
    draw: tuple[Tensor | None, torch.Generator | None],
) -> Tensor:
    r"""`xe_ndcg_loss` with checked ``options``, reduced.

    ``draw`` is ``(noise, generator)`` as given: the noise $\gamma$, or (``None``) the generator
    it is drawn from, in the scores' dtype. The target is $\phi = G + 1 - \gamma$ over its sum,
    from the unweighted gains $G$.
    """
    noise, generator = draw
    _validation.check_generator("generator", generator)
    checks = _validation.noise_checks(noise, preds, target, mask, options)
    lists = _loss_input.checked_lists(preds, target, mask, weight, options, checks)
    scores = lists.scores
    # Drawn noise, checked labels and a declared gain (a callable's may be inf): phi is finite.
    drawn_checked = noise is None and options.validate_args and _options.declared(options.gain)
    if noise is None:
        # The values of `torch.rand(scores.shape, ...)` at half its host time.
        noise = torch.rand_like(scores, generator=generator, memory_format=torch.contiguous_format)
    else:
        noise = noise.detach().reshape(scores.shape)
    phi, has_relevant = _noisy_gains(lists, noise, options)
    # A list with no gain is divided by -inf: its targets are 0 (phi is finite where checked).
    totals = torch.where(has_relevant, phi.sum(-1, keepdim=True), torch.inf)
    # Unchecked noise may be NaN: its list then has no target (loss 0), as a list of no gain.
    return _cross_entropy(lists, phi, totals, has_relevant, options, finite=drawn_checked)


def _noisy_gains(lists: Lists, noise: Tensor, options: LossOptions) -> tuple[Tensor, Tensor]:
    r"""XE-NDCG's $\phi = G + 1 - \gamma$ (0 on padding), and the ``[N, 1]`` lists with a gain.

    Where the exponential gains are exact in the scores' dtype (`Lists`), $\phi = 2^y - \gamma$
    and a list has a positive gain where it has a label other than 0 (none is negative): a
    few operations of a step's 20 fewer. With the float32 gains it is the exact-gains path,
    1.1-1.3x at 8 x 10 to 16 x 1,024 (``python benchmarks/bench_paths.py``), which keeps
    XE-NDCG near allRank's ``listNet``. Else $1 - \gamma$ in the noise's dtype is added to the
    gains in theirs (float64 gains promote it).
    """
    if lists.exact_gains is not None and options.gain == "exponential":
        labels = lists.labels  # checked integers in the scores' dtype, never negative; no padding
        # The largest label as bool, not `any`: float `any` grows with the length (about 3x
        # slower at 1,024 items), a float maximum barely does.
        return torch.exp2(labels).sub_(noise), labels.amax(-1, keepdim=True).bool()
    gains, sums = _plain_gains(lists, options)
    phi = torch.add(gains, torch.rsub(noise, 1))  # `1 - noise` would add a Python call
    return (phi if lists.mask is None else phi.where(lists.mask, 0)), sums > 0


def _cross_entropy(
    lists: Lists,
    numerators: Tensor,
    totals: Tensor,
    has_relevant: Tensor,
    options: LossOptions,
    finite: bool = True,
) -> Tensor:
    r"""$-\sum_i t_i \log q_i$ per list, $q = \operatorname{softmax}(s)$ of the real items; reduced.

    The targets $t$ are the ``[N, L]`` ``numerators`` (0 on padding) over their list's ``[N, 1]``
    ``totals``, times the weights here (NaN made 0 unless ``finite``); ``"mean"`` averages over
    the lists with a positive gain (``[N, 1]`` ``has_relevant``). The sign, and for exact gains
    (`Lists`) the divisor of the reduction, go into the totals: one division of the lists, in
    the numerators' dtype. Other sums may come near the dtype's largest value, so their ratios
    (at most 1) are divided by the divisor after.
    Plain autograd, three nodes: they cost less than one `torch.autograd.Function` that
    computes its gradient with the loss (``python benchmarks/bench_losses.py --peers``).
    Padding is left out of the softmax, and its log-softmax, $-\infty$, never meets arithmetic.
    """
    scores, real = lists.scores, lists.mask
    if options.validate_args and scores.numel() > 0:
        # -log q_i is at most the score range + log L, so a list's loss is at most that
        # times its largest weight (targets sum to 1), and its slopes at most the weight.
        span = _loss_input.score_range(lists)
        _validation.check_score_span(span, scores.shape[-1], 1, lists.largest_weight, scores.dtype)
    # The sign and the divisor of "mean" go into the targets, constants: two autograd nodes
    # fewer than a negated loss divided after its sum.
    if options.reduction != "mean":
        targets = numerators / totals.neg()
    else:  # over the lists with a positive gain (0 if none)
        divisor = _pairwise.mean_divisor(has_relevant, totals.dtype).neg_()
        if lists.exact_gains is not None:  # sums below 2^53: times the count, still finite
            targets = numerators / (totals * divisor)
        else:  # a sum may come near the dtype's largest value: the ratios (at most 1) first
            targets = numerators / totals / divisor
    targets = as_dtype(targets, scores.dtype)
    if not finite:
        targets = targets.nan_to_num_(0)
    if lists.weight is not None:
        targets = _kernels.weighted_gains(targets, lists.weight, real)
    if real is None:
        log_q = scores.log_softmax(-1)
    else:
        padded = ~real
        log_q = scores.masked_fill(padded, -torch.inf).log_softmax(-1).masked_fill(padded, 0)
    terms = targets * log_q
    if options.reduction != "none":
        return terms.sum()
    per_list, shape = terms.sum(-1), lists.leading_shape
    # Reshaped only where needed: a view is one more autograd node.
    return per_list if per_list.shape == shape else per_list.reshape(shape)
