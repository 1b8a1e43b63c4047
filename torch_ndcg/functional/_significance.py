"""How sure a mean nDCG is, and whether two models differ: intervals and paired tests.

The metrics' confidence interval needs only constant-size sums (`normal_interval`); the
paired tests take per-query values, such as ``RetrievalNDCG(aggregation="none")`` gives for two
models on the same queries.
"""

from __future__ import annotations

import math
from statistics import NormalDist

import torch
from torch import Tensor

from torch_ndcg import _validation

# Lentz's continued fraction for the regularised incomplete beta function: stop when a step
# changes the value by less than this relative amount (float64 resolution), or after this many.
_BETA_TOLERANCE = 1e-15
_BETA_MAX_STEPS = 10_000
_TINY = 1e-300  # stands in for a zero denominator in Lentz's method

# Sign flips drawn per chunk of the randomisation test: bounds its memory to a quarter as many
# int64 indices and float64 gathered sums (about 16 MiB), whatever the number of resamples.
_FLIP_CHUNK_ELEMENTS = 1 << 22
# The flips are drawn four at a time, as one of the 16 values of a random nibble.
_FLIPS_PER_NIBBLE = 4
_NIBBLE_VALUES = 1 << _FLIPS_PER_NIBBLE


def normal_interval(
    total: Tensor, total_of_squares: Tensor, count: Tensor, confidence: float
) -> tuple[Tensor, Tensor, Tensor]:
    r"""Mean and two-sided normal-approximation interval from running sums.

    $$
    \bar x = \frac{\sum x}{n}, \qquad
    s^2 = \frac{\sum x^2 - n \bar x^2}{n - 1}, \qquad
    \bar x \pm z_{(1 + c)/2} \, \frac{s}{\sqrt n}
    $$

    with $z_q$ the standard normal quantile. Elementwise over any shape; float64 sums.
    The mean is 0 where ``count`` is 0 (as the metrics' mean); the bounds are NaN where
    ``count`` < 2, as the sample standard deviation is then undefined.

    Args:
        total: $\sum x$.
        total_of_squares: $\sum x^2$.
        count: $n$, integer.
        confidence: the interval's coverage $c$, in (0, 1).

    Returns:
        ``(mean, low, high)``, float64.

    Example:
        Values 0.2, 0.4, 0.6: mean 0.4, s = 0.2, 95 % half-width 1.96 · 0.2 / √3 = 0.2263.

        >>> import torch
        >>> from torch_ndcg.functional._significance import normal_interval
        >>> x = torch.tensor([0.2, 0.4, 0.6], dtype=torch.float64)
        >>> mean, low, high = normal_interval(x.sum(), (x * x).sum(), torch.tensor(3), 0.95)
        >>> print(f"{mean:.4f} {low:.4f} {high:.4f}")
        0.4000 0.1737 0.6263
    """
    n = count.to(torch.float64)
    mean = total.to(torch.float64) / n.clamp(min=1)
    spread = (total_of_squares.to(torch.float64) - n * mean * mean).clamp(min=0)
    variance = spread / (n - 1).clamp(min=1)
    z = NormalDist().inv_cdf((1 + confidence) / 2)  # two-sided standard normal quantile
    half_width = z * (variance / n.clamp(min=1)).sqrt()
    half_width = torch.where(n >= 2, half_width, torch.nan)
    return mean, mean - half_width, mean + half_width


def _paired_differences(a: Tensor, b: Tensor) -> Tensor:
    """``a - b`` over the pairs where neither is NaN (queries skipped by ``"skip"``)."""
    _validation.check_paired_values(a, b)
    kept = ~(a.isnan() | b.isnan())
    if not bool((a[kept].isfinite() & b[kept].isfinite()).all()):
        raise ValueError("Expected finite values in `a` and `b` (NaN marks a skipped query).")
    differences = (a.to(torch.float64) - b.to(torch.float64))[kept]
    if differences.numel() < 2:
        raise ValueError(
            f"Expected at least 2 pairs of values that are not NaN, but got {differences.numel()}."
        )
    return differences


def _regularized_incomplete_beta(x: float, a: float, b: float) -> float:
    """$I_x(a, b)$ by Lentz's continued fraction (the standard expansion of the function)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    if x > (a + 1.0) / (a + b + 2.0):  # the fraction converges fast on this side only
        return 1.0 - _regularized_incomplete_beta(1.0 - x, b, a)
    log_front = a * math.log(x) + b * math.log1p(-x) - math.log(a)
    log_front -= math.lgamma(a) + math.lgamma(b) - math.lgamma(a + b)
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1.0)
    d = 1.0 / (d if abs(d) > _TINY else _TINY)
    fraction = d
    for m in range(1, _BETA_MAX_STEPS):
        for numerator in (
            m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
            -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1)),
        ):
            d = 1.0 + numerator * d
            d = 1.0 / (d if abs(d) > _TINY else _TINY)
            c = 1.0 + numerator / c
            c = c if abs(c) > _TINY else _TINY
            step = c * d
            fraction *= step
        if abs(step - 1.0) < _BETA_TOLERANCE:
            break
    return math.exp(log_front) * fraction


def paired_t_test(a: Tensor, b: Tensor) -> tuple[Tensor, Tensor]:
    r"""Paired t-test of two models' per-query values: whether their mean difference is 0.

    $$
    d_q = a_q - b_q, \qquad t = \frac{\bar d}{s_d / \sqrt n}, \qquad
    p = P(|T_{n-1}| \ge |t|) = I_{(n-1)/(n-1+t^2)}\Bigl(\frac{n-1}{2}, \frac12\Bigr)
    $$

    with $T_{n-1}$ Student's t with $n - 1$ degrees of freedom and $I$ the
    regularised incomplete beta function (two-sided, as ``scipy.stats.ttest_rel``). Pairs
    where either value is NaN (queries left out by ``empty_target_action="skip"``) are dropped.
    Equal values everywhere give ``t`` NaN and ``p`` 1.

    Args:
        a: ``[Q]`` per-query values of the first model.
        b: ``[Q]`` values of the second, for the same queries in the same order (two
            ``RetrievalNDCG(aggregation="none")`` results on the same queries have equal ids).

    Returns:
        ``(t, p)``: float64 scalar tensors.

    Raises:
        ValueError: shapes that differ or are not 1-D, fewer than 2 usable pairs, infinite
            values.
        TypeError: non-tensor or non-floating values.

    Example:
        Differences 0.1, 0.2, 0.3: mean 0.2, s = 0.1, t = 0.2 / (0.1 / √3) = 3.4641, and
        p = 0.0742 with 2 degrees of freedom.

        >>> import torch
        >>> from torch_ndcg import paired_t_test
        >>> a = torch.tensor([0.5, 0.7, 0.9])
        >>> b = torch.tensor([0.4, 0.5, 0.6])
        >>> t, p = paired_t_test(a, b)
        >>> print(f"t = {t:.4f}, p = {p:.4f}")
        t = 3.4641, p = 0.0742
    """
    differences = _paired_differences(a, b)
    n = differences.numel()
    mean = differences.mean()
    deviation = differences.std(unbiased=True)
    statistic = mean / (deviation / math.sqrt(n))
    t = float(statistic)
    if math.isnan(t):  # every difference 0: no evidence of any
        p = 1.0
    elif math.isinf(t):
        p = 0.0
    else:
        df = n - 1
        p = _regularized_incomplete_beta(df / (df + t * t), df / 2.0, 0.5)
    return statistic, torch.tensor(p, dtype=torch.float64, device=differences.device)


def paired_randomization_test(
    a: Tensor, b: Tensor, *, n_resamples: int = 10_000, seed: int = 0
) -> tuple[Tensor, Tensor]:
    r"""Sign-flip randomisation test of two models' per-query values, seeded and vectorised.

    Under the null hypothesis that the two models are exchangeable on every query, each
    difference $d_q = a_q - b_q$ is as likely to have either sign. The p-value is the
    share of random sign flips whose mean difference is at least as far from 0 as the
    observed one, counting the observed one (so it is never 0):

    $$
    p = \frac{1 + \#\{r : |\tfrac1n \sum_q \epsilon_{rq} d_q| \ge |\bar d|\}}{1 + R},
    \qquad \epsilon_{rq} \in \{-1, 1\} \text{ uniform}
    $$

    The flips are drawn in chunks on the values' device, with a generator seeded by ``seed``:
    the same inputs and seed give the same p-value. Pairs where either value is NaN are
    dropped. Each random byte draws eight flips, and a flip set's sum is gathered from a table
    of the sums of every subset of four pairs. Time grows as $R \cdot Q$: on one CPU thread
    about 10 ms per resample of $10^6$ queries (the default 10,000 resamples then take about
    two minutes; pass fewer, or use `paired_t_test`), well under a second in all for
    10,000 queries.

    Args:
        a: ``[Q]`` per-query values of the first model.
        b: ``[Q]`` values of the second, for the same queries in the same order.
        n_resamples: number of random sign flips $R$.
        seed: seed of the flips.

    Returns:
        ``(mean_difference, p)``: float64 scalar tensors.

    Raises:
        ValueError: shapes that differ or are not 1-D, fewer than 2 usable pairs, infinite
            values, a non-positive ``n_resamples``.
        TypeError: non-tensor or non-floating values, a non-int ``n_resamples`` or ``seed``.

    Example:
        Every one of 12 queries is better by 0.1 under ``a``: only the flips that keep all
        signs or flip them all are as extreme, $2 / 2^{12}$, so p is about 0.0005.

        >>> import torch
        >>> from torch_ndcg import paired_randomization_test
        >>> b = torch.linspace(0.2, 0.8, 12)
        >>> difference, p = paired_randomization_test(b + 0.1, b, n_resamples=20_000)
        >>> print(f"{difference:.2f} {p:.4f}")
        0.10 0.0005
    """
    _validation.check_resampling(n_resamples, seed)
    differences = _paired_differences(a, b)
    n = differences.numel()
    observed = differences.mean()
    # Compare sums rather than means, with a relative margin for rounding: a flip that merely
    # reorders the same sum must count as "as extreme".
    threshold = differences.sum().abs() * (1 - 1e-12)
    device = differences.device
    generator = torch.Generator(device=device).manual_seed(seed)
    extreme = torch.zeros((), dtype=torch.int64, device=device)
    # A flip set F turns the sum S into S - 2 sum_{q in F} d_q. The pairs are taken four at a
    # time (padded with zeros): a table holds, for each group, the sum of its d_q over each of
    # the 16 subsets, and a random nibble picks one. One random byte thus draws 8 flips, and
    # a resample is a gather and a sum over Q/4 entries instead of a select over Q.
    groups = -(-n // _FLIPS_PER_NIBBLE)
    padded = torch.cat([differences, differences.new_zeros(_FLIPS_PER_NIBBLE * groups - n)])
    subsets = torch.arange(_NIBBLE_VALUES, device=device)[:, None]
    members = subsets.bitwise_right_shift(torch.arange(_FLIPS_PER_NIBBLE, device=device)) & 1
    table = (padded.view(groups, _FLIPS_PER_NIBBLE) @ members.T.to(padded.dtype)).reshape(-1)
    offsets = torch.arange(groups, device=device) * _NIBBLE_VALUES
    total, n_bytes = differences.sum(), -(-groups // 2)
    chunk = max(1, _FLIP_CHUNK_ELEMENTS // (_FLIPS_PER_NIBBLE * groups))
    for start in range(0, n_resamples, chunk):
        rows = min(chunk, n_resamples - start)
        drawn = torch.randint(
            0, 256, (rows, n_bytes), generator=generator, device=device, dtype=torch.uint8
        )
        nibbles = torch.cat([drawn.bitwise_and(15), drawn.bitwise_right_shift(4)], dim=-1)
        picked = nibbles.narrow(-1, 0, groups).to(torch.int64).add_(offsets)
        sums = total - 2 * table.take(picked).sum(-1)
        extreme += (sums.abs() >= threshold).sum()
    p = (extreme + 1).to(torch.float64) / (n_resamples + 1)
    return observed, p
