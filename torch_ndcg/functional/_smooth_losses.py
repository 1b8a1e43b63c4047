"""Losses of smooth ranks: ApproxNDCG (sigmoid-smoothed ranks) and NeuralNDCG (a relaxed sort).

ApproxNDCG's pairwise sums run blockwise in `torch_ndcg._pairwise`, NeuralNDCG's NeuralSort and
Sinkhorn scaling in `torch_ndcg._sinkhorn`, with memory ``O(B L)`` plus a fixed block (or a kept
kernel of at most a fixed size).
"""

import functools

import torch
from torch import Tensor

from torch_ndcg import _kernels, _options, _pairwise, _sinkhorn, _validation
from torch_ndcg._options import Discount, Gain, Reduction
from torch_ndcg.functional import _loss_input
from torch_ndcg.functional._loss_input import Checks, LossOptions

__all__ = ["approx_ndcg_loss", "neural_ndcg_loss"]

APPROX_CHECKS: Checks = {"temperature": _validation.check_positive}
NEURAL_CHECKS: Checks = {
    "temperature": _validation.check_positive,
    "max_iter": functools.partial(_validation.check_positive_int, allow_zero=True),
    "tol": functools.partial(_validation.check_positive, allow_zero=True),
}


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
    options = _loss_input.check_options(
        APPROX_CHECKS, k=k, temperature=temperature, gain=gain, discount=discount,
        reduction=reduction, ignore_index=ignore_index, validate_args=validate_args)
    return _approx(preds, target, mask, weight, options)


def _approx(
    preds: Tensor, target: Tensor, mask: Tensor | None, weight: Tensor | None, options: LossOptions
) -> Tensor:
    """`approx_ndcg_loss` with checked ``options``, reduced."""
    lists = _loss_input.prepare(preds, target, mask, weight, options)
    temperature, discount = options.temperature, options.discount
    scores, real, length, kmax = lists.scores, lists.mask, lists.scores.shape[-1], lists.kmax
    # An item's gradient sums L sigmoid slopes (at most 1/4 each) of rank terms whose own slope
    # is at most about 1 + 1/T: it stays finite while L^2 (1 + 1/T) / T does.
    bound = (1 + 1 / temperature) / temperature
    _loss_input.check_scale(lists, "temperature", temperature, bound, length * length)
    has_relevant, gains = lists.has_relevant, lists.scaled_gains
    if lists.weight is not None:  # each item's gain times its weight
        gains = _kernels.weighted_gains(gains, lists.weight, real)
    # Lists with more than k real items are cut (padding changes nothing); None: all of them.
    cut = None if real is None or kmax >= length else real.sum(-1, keepdim=True) > kmax
    # A small batch: one autograd node, where the slope of a named discount is known.
    if not callable(discount) and _pairwise.dense_pairs_fit(scores.shape[0], length):
        grad = torch.is_grad_enabled() and scores.requires_grad
        return _pairwise.DenseApproxNDCG.apply(  # type: ignore[no-untyped-call,no-any-return]
            scores,
            (real, gains, cut, has_relevant, discount, temperature, kmax, options.reduction,
             lists.leading_shape, grad),
        )
    weights = None if real is None else real.to(scores.dtype)
    ranks: Tensor = _pairwise.SmoothRanks.apply(  # type: ignore[no-untyped-call]
        scores, weights, temperature
    )
    if real is not None:
        ranks = torch.where(real, ranks, 1)
    terms = _kernels.discounted(gains, ranks, discount)
    if kmax < length:
        smooth_cut = torch.sigmoid((kmax + 0.5 - ranks) / temperature)
        if cut is not None:
            smooth_cut = torch.where(cut, smooth_cut, 1)
        terms = terms * smooth_cut
    per_list = torch.where(has_relevant, 1 - terms.sum(dim=-1), 0)
    return _loss_input.reduce(per_list, has_relevant, options.reduction, lists.leading_shape)


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
    options = _loss_input.check_options(
        NEURAL_CHECKS, k=k, temperature=temperature, max_iter=max_iter, tol=tol, gain=gain,
        discount=discount, reduction=reduction, ignore_index=ignore_index,
        validate_args=validate_args)
    return _neural(preds, target, mask, weight, options)


def _neural(
    preds: Tensor, target: Tensor, mask: Tensor | None, weight: Tensor | None, options: LossOptions
) -> Tensor:
    """`neural_ndcg_loss` with checked ``options``, reduced."""
    lists = _loss_input.prepare(preds, target, mask, weight, options)
    temperature, discount = options.temperature, options.discount
    scores, real, length, kmax = lists.scores, lists.mask, lists.scores.shape[-1], lists.kmax
    if options.validate_args and scores.numel() > 0:
        # Logits are at most 2 L (range) / T apart in a row; a gradient sums L^2 such slopes.
        bound = 2 * (_loss_input.score_range(lists) + 1) / temperature
        _loss_input.check_scale(lists, "temperature", temperature, bound, length * length * length)
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
    gains = lists.scaled_gains
    if lists.weight is not None:  # each item's gain times its weight
        gains = _kernels.weighted_gains(gains, lists.weight, real)
    dcg_relaxed: Tensor = _sinkhorn.NeuralSortSinkhorn.apply(  # type: ignore[no-untyped-call]
        centred / temperature, gaps / temperature, (coef, rows, real),
        (gains.detach(), position_discounts), (int(options.max_iter), float(options.tol)),
    )
    per_list = torch.where(lists.has_relevant, 1 - dcg_relaxed, 0)
    return _loss_input.reduce(per_list, lists.has_relevant, options.reduction, lists.leading_shape)
