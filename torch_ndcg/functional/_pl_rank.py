"""PL-Rank: the gradient of the expected nDCG@k of a Plackett-Luce policy, and its sampler."""

import torch
from torch import Tensor

from torch_ndcg import _host, _kernels, _options, _validation
from torch_ndcg._options import Discount, Gain, Reduction
from torch_ndcg.functional import _loss_input
from torch_ndcg.functional._loss_input import Checks, LossOptions

__all__ = ["pl_rank_loss", "sample_rankings"]

PL_RANK_PORTED_NAMES = {
    **_validation.UNBIASED_PORTED_NAMES,
    "n_samples": "`num_samples` (PL-Rank's `n_samples`)",
    "cutoff": "`k` (PL-Rank's `cutoff`)",
}
PL_RANK_CHECKS: Checks = {
    "num_samples": _validation.check_positive_int,
    "generator": _validation.check_generator,
}


def _gumbel_top_k(
    scores: Tensor,
    real: Tensor | None,
    kmax: int,
    num_samples: int,
    generator: torch.Generator | None,
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
    _validation.check_generator("generator", generator)
    _validation.check_mask(mask, preds)
    length = preds.shape[-1]
    kmax = length if kmax is None else min(kmax, length)
    flat_mask = None if mask is None else mask.reshape(-1, length)
    # Drawn in the losses' compute dtype: the same noise, so the same rankings, as they draw.
    scores = preds.detach().to(_options.compute_dtype(preds.dtype))
    scores = scores.reshape(-1, length)
    if flat_mask is not None:
        scores = torch.where(flat_mask, scores, 0)
    _validation.check_finite_scores(scores)  # a NaN or infinite key would be drawn first
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
    options = _loss_input.check_options(
        PL_RANK_CHECKS,
        k=k,
        num_samples=num_samples,
        generator=generator,
        gain=gain,
        discount=discount,
        reduction=reduction,
        ignore_index=ignore_index,
        validate_args=validate_args,
    )
    return _pl_rank(preds, target, mask, weight, options)


def _pl_rank(
    preds: Tensor, target: Tensor, mask: Tensor | None, weight: Tensor | None, options: LossOptions
) -> Tensor:
    """`pl_rank_loss` with checked ``options``, reduced: its value plus a surrogate of value 0.

    PL-Rank-3's ``[N, L]`` estimate of the expected DCG's gradient and the ``[N]`` mean DCG
    come from ``[N, S, K]`` rankings drawn (``order``): every tensor is ``O(N S L)``.
    """
    lists = _loss_input.prepare(preds, target, mask, weight, options)
    scores, real = lists.scores, lists.mask
    if lists.largest_weight is not None:
        # The value is at most the largest weight, a slope L + 1 times it.
        count = scores.shape[-1] + 1
        _validation.check_weight_scale(1, lists.largest_weight, scores.dtype, count=count)
    detached = scores.detach()
    order = _gumbel_top_k(detached, real, lists.kmax, options.num_samples, options.generator)
    n, samples, kmax = order.shape
    length, acc = scores.shape[-1], _options.accumulate_dtype(scores.device)
    with torch.no_grad():
        keyed = (detached if real is None else detached.masked_fill(~real, -torch.inf)).to(acc)
        top = keyed.amax(-1, keepdim=True).nan_to_num(0.0, 0.0, 0.0)  # -inf in a list of padding
        logits = (keyed - top)[:, None, :]  # the gaps to the list's best, -inf on padding
        theta = _kernels.position_discounts(kmax, options.discount, dtype=acc, device=scores.device)
        gains = lists.scaled_gains
        if lists.weight is not None:  # each item's gain times its weight
            gains = _kernels.weighted_gains(gains, lists.weight, real)
        gains = gains.to(acc)[:, None, :]  # rho
        reward = gains.expand(n, samples, length).gather(-1, order).mul_(theta)
        to_go = reward.flip(-1).cumsum_(-1).flip(-1)  # sum_{j >= i} theta_j rho_{y_j}
        # The estimate's second sum: in linear space where every list's scores lie within
        # `LINEAR_SPAN` of its best (the faster way: 1.6-2.4x on the CPU), in log space
        # elsewhere. The span is the checks' where they read it; else, where a value may be
        # read back (the CPU), the kernel's one fast-path read-back; else unknown (log space).
        span = lists.score_range
        if span is None and _host.may_read_back(scores.device):
            span = float(_loss_input.score_range(lists))
        if span is not None and span <= LINEAR_SPAN and acc == torch.float64:
            space = "linear"
        elif not _options.declared(options.gain) or callable(options.discount):
            space = "signed"  # values of both signs
        else:
            space = "log"
        estimate = _probability_terms(theta, to_go, gains, logits, order, space)
        following = torch.nn.functional.pad(to_go[..., 1:], (0, 1))  # sum_{j > i}
        estimate.scatter_add_(-1, order, following)
    # (s.detach() - s) is 0 with slope -1: the loss's gradient is minus the estimate.
    surrogate = (estimate.mean(1).to(scores.dtype) * (detached - scores)).sum(-1)
    value = (1 - reward.sum(-1).mean(1)).to(scores.dtype)  # 1 - the mean nDCG@k drawn
    per_list = torch.where(lists.has_relevant, value + surrogate, 0)
    return _loss_input.reduce(per_list, lists.has_relevant, options.reduction, lists.leading_shape)


# Scores at most this far below their list's best keep e^{-gap} and 1 / Sigma well inside
# float64's range (e^-600 = 2.6e-261): PL-Rank's sums may be taken in linear space.
LINEAR_SPAN = 600.0


def _probability_terms(
    theta: Tensor, to_go: Tensor, gains: Tensor, logits: Tensor, order: Tensor, space: str
) -> Tensor:
    r"""$\sum_{i \le r_d} \pi(d \mid y_{1:i-1}) (\theta_i \rho_d - T_i)$ of every item $d$.

    The discounts $\theta$ (``[K]``) and rewards to go $T_i = \sum_{j \ge i} \theta_j
    \rho_{y_j}$ (``to_go``, ``[N, S, K]``) of the rankings drawn (``order``, ``[N, S, K]``),
    the rewards $\rho$ (``gains``) and ``logits`` $s$ (``[N, 1, L]``, centred on each list's
    best, ``-inf`` on padding) of the items; ``[N, S, L]`` back. Each item's sums run to its
    position $r_d$ in each ranking (to the last position where it was not drawn: it was still
    to be drawn there). $\pi(d \mid y_{1:i-1}) = e^{s_d} / \Sigma_i$, with
    $\Sigma_i$ the sum of $e^s$ over the items drawn at ``i`` or below and those not drawn.

    Both sums over positions, of $\theta_i / \Sigma_i$ and $T_i / \Sigma_i$, are taken in log
    space (``logcumsumexp``) and only their products with $e^{s_d}$ exponentiated, each term at
    most $|\theta_i|$ or $|T_i|$: no $1 / \Sigma_i$ overflows and no $e^{s_d}$ underflows
    however far the scores trail their best (e^-800 is 0 in float64, e^-800 / e^-805 is not).
    ``space`` ``"linear"``: as they read, where the caller knows every gap to be at most
    `LINEAR_SPAN` (in float64); ``"signed"``: the positive and negative values summed apart in
    log space; ``"log"``: none is negative.
    """
    n, samples, kmax = order.shape
    # Each item's position in each ranking, kmax where it was not drawn.
    positions = torch.arange(kmax, device=order.device).expand_as(order)
    slot = order.new_full((n, samples, logits.shape[-1]), kmax).scatter_(-1, order, positions)
    last = slot.clamp(max=kmax - 1)  # the last position an item was still to be drawn at
    rest = None if kmax == slot.shape[-1] else slot == kmax  # the items not drawn
    if space == "linear":
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
    signed = space == "signed"
    if signed:
        values = torch.cat([values.clamp(min=0), values.clamp(max=0).neg_()])
    log_sums = (values.log_() + log_inverse).logcumsumexp(-1)
    sums = (log_sums.gather(-1, last.expand(len(values), -1, -1, -1)) + logits).exp_()
    if signed:
        sums = sums[:2] - sums[2:]
    return sums[0].mul_(gains).sub_(sums[1])  # weight sums times rho_d, less the reward sums
