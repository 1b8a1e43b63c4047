"""How sure an nDCG is, and whether two models differ: intervals and paired tests.

The metrics' interval of the mean needs only constant-size sums (`normal_interval`); other
aggregations get a percentile bootstrap over queries (`bootstrap_interval`). The paired tests
take per-query values, such as ``RetrievalNDCG(aggregation="none")`` gives for two models on the
same queries, and pair them by query id when the ids come with them.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from statistics import NormalDist
from typing import Literal, TypeAlias, get_args

import torch
from torch import Tensor

from torch_ndcg import _validation

PerQueryValues: TypeAlias = "Tensor | Mapping[str, Tensor]"
"""``[Q]`` values, or a dict of them per cut-off (``{"ndcg@5": [Q], ...}``)."""
PairedSample: TypeAlias = "PerQueryValues | tuple[PerQueryValues, Tensor]"
"""Values in query order, or ``(values, ids)`` as ``RetrievalNDCG(aggregation="none")`` gives."""
UnmatchedIds: TypeAlias = Literal["raise", "intersect"]

# Lentz's continued fraction for the regularised incomplete beta function: stop when a step
# changes the value by less than this relative amount (float64 resolution), or after this many.
_BETA_TOLERANCE = 1e-15
_BETA_MAX_STEPS = 10_000
_TINY = 1e-300  # stands in for a zero denominator in Lentz's method

# Resampled values per chunk, whatever the number of resamples: the bootstrap holds as many
# int64 indices and gathered values (about 64 MiB), the randomisation test's sign flips a
# quarter as many int64 indices and float64 gathered sums (about 16 MiB).
_CHUNK_ELEMENTS = 1 << 22
# The flips are drawn four at a time, as one of the 16 values of a random nibble.
_FLIPS_PER_NIBBLE = 4
_NIBBLE_VALUES = 1 << _FLIPS_PER_NIBBLE
# Bisection steps for the Student t quantile: halves [0, upper] to float64 resolution.
_QUANTILE_STEPS = 200


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


REDUCE_LAST_DIM: dict[str, Callable[[Tensor], Tensor]] = {
    "median": lambda values: values.median(dim=-1).values,  # the lower median, as torchmetrics'
    "min": lambda values: values.amin(dim=-1),
    "max": lambda values: values.amax(dim=-1),
}
"""The named aggregations over the last dimension: of one ``[n]`` column or ``[R, n]`` resamples."""


def bootstrap_interval(
    values: Tensor,
    statistic: str | Callable[[Tensor], Tensor],
    confidence: float,
    *,
    n_resamples: int = 1000,
    seed: int = 0,
) -> tuple[Tensor, Tensor]:
    r"""Percentile bootstrap interval of a statistic of per-query values, per column.

    For each column of ``values`` (a cut-off), the counted queries $x_1, \dots, x_n$
    (NaN marks a query left out by ``empty_target_action="skip"``) are resampled with
    replacement $R$ times; the interval is the $(1 - c)/2$ and $(1 + c)/2$ quantiles
    (linear interpolation) of the statistic over the resamples:

    $$
    \bigl[\, Q_{(1-c)/2}(\{\theta(x^{*}_r)\}_{r=1}^{R}),\;
            Q_{(1+c)/2}(\{\theta(x^{*}_r)\}_{r=1}^{R}) \,\bigr]
    $$

    ``"median"`` (the lower median, as ``torch.median``), ``"min"`` and ``"max"`` are
    computed on all the resamples of a chunk at once: the cost is $R \cdot n$ gathered values
    and one reduction over them (1,000 resamples of 10,000 queries: ``torch.median`` over a
    ``[1000, 10000]`` tensor, taken in chunks of $2^{22}$ values). A callable is applied to
    each resample in turn ($R$ calls). The resamples are drawn on the values' device by a
    generator seeded with ``seed``: the same values and seed give the same interval. NaN
    bounds where a column has no counted query.

    Args:
        values: ``[Q, C]`` per-query values, NaN for left-out queries.
        statistic: ``"median"``, ``"min"``, ``"max"`` or a callable of a ``[n]`` tensor that
            returns a scalar (as ``RetrievalNDCG``'s ``aggregation``).
        confidence: the interval's coverage $c$, in (0, 1).
        n_resamples: number of bootstrap resamples $R$.
        seed: seed of the resampling.

    Returns:
        ``(low, high)``: ``[C]`` tensors of the values' dtype.

    Example:
        The median of 1, ..., 9 resampled: the 90 % interval spans the middle values.

        >>> import torch
        >>> from torch_ndcg.functional._significance import bootstrap_interval
        >>> x = torch.arange(1.0, 10.0).unsqueeze(-1)
        >>> low, high = bootstrap_interval(x, "median", 0.9, n_resamples=2000, seed=0)
        >>> print(f"{low.item():.0f} {high.item():.0f}")
        3 7
    """
    _validation.check_resampling(n_resamples, seed)
    device = values.device

    def reduce_rows(rows: Tensor) -> Tensor:
        if isinstance(statistic, str):
            return REDUCE_LAST_DIM[statistic](rows)
        return torch.stack([torch.as_tensor(statistic(row), device=device) for row in rows])

    generator = torch.Generator(device=device).manual_seed(seed)
    quantiles = torch.tensor(
        [(1 - confidence) / 2, (1 + confidence) / 2], dtype=torch.float64, device=device
    )
    bounds = []
    for column in values.unbind(-1):
        counted = column[~column.isnan()]
        n = counted.numel()
        if n == 0:
            bounds.append(quantiles.new_full((2,), math.nan))
            continue
        chunk = max(1, _CHUNK_ELEMENTS // n)
        statistics = []
        for start in range(0, n_resamples, chunk):
            rows = min(chunk, n_resamples - start)
            picks = torch.randint(0, n, (rows, n), generator=generator, device=device)
            statistics.append(reduce_rows(counted[picks]))
        bounds.append(torch.quantile(torch.cat(statistics).to(torch.float64), quantiles))
    low, high = torch.stack(bounds, dim=-1).to(values.dtype)
    return low, high


@dataclass(frozen=True, eq=False)
class PairedTestResult:
    r"""The outcome of a paired test of two models' per-query values.

    Unpacks as ``(statistic, pvalue)``, as scipy's result objects do, so
    ``t, p = paired_t_test(a, b)`` reads as before; every field is also an attribute.

    Attributes:
        statistic: the test statistic: $t$ for `paired_t_test`, the mean difference for
            `paired_randomization_test`.
        pvalue: two-sided p-value.
        mean_difference: $\bar d$, the mean of $a_q - b_q$ over the pairs used.
        low: lower bound of the confidence interval of the mean difference
            ($\bar d - t_{(1+c)/2,\, n-1}\, s_d / \sqrt n$).
        high: its upper bound.
        df: degrees of freedom of that interval (and of the t-test), $n - 1$.
        n_pairs: number of pairs used (NaN pairs and, with ``unmatched_ids="intersect"``,
            unmatched queries dropped).
        confidence: the interval's coverage $c$.

    Example:
        >>> import torch
        >>> from torch_ndcg import paired_t_test
        >>> result = paired_t_test(torch.tensor([0.5, 0.7, 0.9]), torch.tensor([0.4, 0.5, 0.6]))
        >>> print(f"t = {result.statistic:.4f}, p = {result.pvalue:.4f}, df = {result.df}")
        t = 3.4641, p = 0.0742, df = 2
    """

    statistic: Tensor
    pvalue: Tensor
    mean_difference: Tensor
    low: Tensor
    high: Tensor
    df: int
    n_pairs: int
    confidence: float

    def __iter__(self) -> Iterator[Tensor]:
        """``(statistic, pvalue)``: ``t, p = paired_t_test(a, b)``."""
        return iter((self.statistic, self.pvalue))

    def __getitem__(self, index: int) -> Tensor:
        """``result[0]`` is the statistic, ``result[1]`` the p-value (as scipy's results)."""
        return (self.statistic, self.pvalue)[index]

    def __len__(self) -> int:
        """2: the result unpacks as ``(statistic, pvalue)``."""
        return 2


def _paired_columns(
    a: object, b: object, unmatched_ids: UnmatchedIds
) -> dict[str | None, tuple[Tensor, Tensor]]:
    """The two samples' values in one query order, per cut-off name (``None``: no dict).

    Pairs by id when both samples carry ids: each side sorted by id, the common ids kept
    (an error if the id sets differ, unless ``unmatched_ids="intersect"``).
    """
    a_values, a_ids, b_values, b_ids = _validation.check_paired_samples(
        a, b, unmatched_ids, get_args(UnmatchedIds)
    )
    columns: dict[str | None, tuple[Tensor, Tensor]] = (
        {name: (a_values[name], b_values[name]) for name in a_values}
        if isinstance(a_values, Mapping)
        else {None: (a_values, b_values)}
    )
    if a_ids is None or b_ids is None:
        return columns
    # Positions in `a` and in `b` of the ids both have, in ascending id order.
    a_sorted, a_order = a_ids.sort()
    b_sorted, b_order = b_ids.sort()
    a_common = torch.isin(a_sorted, b_sorted)
    b_common = torch.isin(b_sorted, a_sorted)
    _validation.check_paired_ids((a_sorted, a_common), (b_sorted, b_common), unmatched_ids)
    a_order, b_order = a_order[a_common], b_order[b_common]
    return {name: (first[a_order], second[b_order]) for name, (first, second) in columns.items()}


def _paired_test(
    a: PairedSample,
    b: PairedSample,
    confidence: float,
    unmatched_ids: UnmatchedIds,
    resampling: tuple[int, int] | None = None,
) -> PairedTestResult | dict[str, PairedTestResult]:
    """Pair the samples, then test each cut-off: a t-test, or a sign-flip test with ``resampling``.

    ``resampling`` is ``(n_resamples, seed)`` of the sign-flip test, ``None`` for the t-test.
    """
    _validation.check_confidence(confidence)
    results = {}
    for name, (first, second) in _paired_columns(a, b, unmatched_ids).items():
        kept = ~(first.isnan() | second.isnan())  # NaN: a query skipped by "skip"
        if not bool((first[kept].isfinite() & second[kept].isfinite()).all()):
            raise ValueError("Expected finite values in `a` and `b` (NaN marks a skipped query).")
        differences = (first.to(torch.float64) - second.to(torch.float64))[kept]
        n = differences.numel()
        if n < 2:
            raise ValueError(
                "Expected at least 2 pairs of values (of queries both have, neither NaN), but got "
                f"{n}."
            )
        mean = differences.mean()
        standard_error = differences.std() / math.sqrt(n)
        if resampling is None:
            statistic = mean / standard_error
            pvalue = mean.new_tensor(_two_sided_t_p_value(float(statistic), n - 1))
        else:
            statistic, pvalue = mean, _sign_flip_p_value(differences, *resampling)
        half_width = student_t_quantile((1 + confidence) / 2, n - 1) * standard_error
        results[name] = PairedTestResult(
            statistic=statistic,
            pvalue=pvalue,
            mean_difference=mean,
            low=mean - half_width,
            high=mean + half_width,
            df=n - 1,
            n_pairs=n,
            confidence=confidence,
        )
    if None in results:
        return results[None]
    return {name: result for name, result in results.items() if name is not None}


def _two_sided_t_p_value(t: float, df: int) -> float:
    r"""$P(|T_{df}| \ge |t|)$ by the incomplete beta function."""
    if math.isnan(t):  # every difference 0: no evidence of any
        return 1.0
    return _regularized_incomplete_beta(df / (df + t * t), df / 2.0, 0.5)


def student_t_quantile(q: float, df: int) -> float:
    r"""The quantile $t_{q, df}$ of Student's t, for $q \ge 1/2$, by bisection.

    Solves $P(|T_{df}| \ge t) = 2(1 - q)$ on the incomplete-beta tail that the t-test uses,
    to float64 resolution.

    Example:
        >>> from torch_ndcg.functional._significance import student_t_quantile
        >>> print(f"{student_t_quantile(0.975, 10):.4f}")  # scipy.stats.t.ppf(0.975, 10)
        2.2281
    """
    tail = 2 * (1 - q)
    low, high = 0.0, 1.0
    while _two_sided_t_p_value(high, df) > tail:
        high *= 2
    for _ in range(_QUANTILE_STEPS):
        middle = (low + high) / 2
        low, high = (middle, high) if _two_sided_t_p_value(middle, df) > tail else (low, middle)
        if high - low <= 1e-15 * high:
            break
    return (low + high) / 2


def _regularized_incomplete_beta(x: float, a: float, b: float) -> float:
    """$I_x(a, b)$ by Lentz's continued fraction (the standard expansion of the function)."""
    if x <= 0.0:
        return 0.0
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


def paired_t_test(
    a: PairedSample,
    b: PairedSample,
    *,
    confidence: float = 0.95,
    unmatched_ids: UnmatchedIds = "raise",
) -> PairedTestResult | dict[str, PairedTestResult]:
    r"""Paired t-test of two models' per-query values: whether their mean difference is 0.

    $$
    d_q = a_q - b_q, \qquad t = \frac{\bar d}{s_d / \sqrt n}, \qquad
    p = P(|T_{n-1}| \ge |t|) = I_{(n-1)/(n-1+t^2)}\Bigl(\frac{n-1}{2}, \frac12\Bigr)
    $$

    with $T_{n-1}$ Student's t with $n - 1$ degrees of freedom and $I$ the
    regularised incomplete beta function (two-sided, as ``scipy.stats.ttest_rel``), and the
    interval $\bar d \pm t_{(1+c)/2,\, n-1}\, s_d / \sqrt n$ (as scipy's
    ``confidence_interval``). Pairs where either value is NaN (queries left out by
    ``empty_target_action="skip"``) are dropped. Equal values everywhere give ``t`` NaN and
    ``p`` 1.

    Args:
        a: the first model's per-query values: a ``[Q]`` tensor, a dict of them per
            cut-off, or a ``(values, ids)`` pair as ``RetrievalNDCG(aggregation="none")``
            returns it (ids ``[Q]``, integer, distinct).
        b: the second model's, in the same form. Values alone are paired by position (the
            same queries in the same order); ``(values, ids)`` pairs are paired by id, in any
            order.
        confidence: coverage of the interval of the mean difference.
        unmatched_ids: with ids, ``"raise"`` (the default) when the two id sets differ,
            ``"intersect"`` to test on the queries both have.

    Returns:
        A `PairedTestResult` (``statistic`` = $t$; unpacks as ``(t, p)``), or a dict of them
        per cut-off when the values are dicts.

    Raises:
        ValueError: shapes that differ or are not 1-D, repeated ids, id sets that differ
            (with ``unmatched_ids="raise"``), fewer than 2 usable pairs, infinite values.
        TypeError: non-tensor or non-floating values, non-integer ids, ids on one side only.

    Example:
        Differences 0.1, 0.2, 0.3: mean 0.2, s = 0.1, t = 0.2 / (0.1 / √3) = 3.4641,
        p = 0.0742 with 2 degrees of freedom, and the interval
        0.2 ± 4.3027 · 0.1 / √3. Given with query ids, the order does not matter.

        >>> import torch
        >>> from torch_ndcg import paired_t_test
        >>> a = torch.tensor([0.5, 0.7, 0.9])
        >>> b = torch.tensor([0.4, 0.5, 0.6])
        >>> t, p = paired_t_test(a, b)
        >>> print(f"t = {t:.4f}, p = {p:.4f}")
        t = 3.4641, p = 0.0742
        >>> shuffled_b = (b.flip(0), torch.tensor([2, 1, 3]))
        >>> result = paired_t_test((a, torch.tensor([3, 1, 2])), shuffled_b)
        >>> d = result.mean_difference
        >>> print(f"{d:.4f} [{result.low:.4f}, {result.high:.4f}], df = {result.df}")
        0.2000 [-0.0484, 0.4484], df = 2
    """
    return _paired_test(a, b, confidence, unmatched_ids)


def paired_randomization_test(
    a: PairedSample,
    b: PairedSample,
    *,
    n_resamples: int = 10_000,
    seed: int = 0,
    confidence: float = 0.95,
    unmatched_ids: UnmatchedIds = "raise",
) -> PairedTestResult | dict[str, PairedTestResult]:
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
    the same inputs and seed give the same p-value. With ids, the pairs are taken in ascending
    id order, so the same queries in any order give the same p-value; values without ids are
    taken in the order given (another order draws other flips: a p-value within Monte-Carlo
    error of the same). Pairs where either value is NaN are
    dropped. The reported interval of the mean difference is the t-interval (as
    `paired_t_test`'s); the p-value makes no normality assumption. Each random byte draws
    eight flips, and a flip set's sum is gathered from a table of the sums of every subset of
    four pairs. Time grows as $R \cdot Q$: on one CPU thread
    about 10 ms per resample of $10^6$ queries (the default 10,000 resamples then take about
    two minutes; pass fewer, or use `paired_t_test`), well under a second in all for
    10,000 queries.

    Args:
        a: the first model's per-query values, as in `paired_t_test`.
        b: the second model's, in the same form, paired as in `paired_t_test`.
        n_resamples: number of random sign flips $R$.
        seed: seed of the flips.
        confidence: coverage of the interval of the mean difference.
        unmatched_ids: as in `paired_t_test` (``"raise"`` or ``"intersect"``).

    Returns:
        A `PairedTestResult` (``statistic`` = the mean difference; unpacks as
        ``(mean_difference, p)``), or a dict of them per cut-off when the values are dicts.

    Raises:
        ValueError: as `paired_t_test`, and a non-positive ``n_resamples``.
        TypeError: as `paired_t_test`, and a non-int ``n_resamples`` or ``seed``.

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
    return _paired_test(a, b, confidence, unmatched_ids, (n_resamples, seed))


def _sign_flip_p_value(differences: Tensor, n_resamples: int, seed: int) -> Tensor:
    """The sign-flip test's p-value of the observed mean of ``differences``."""
    n = differences.numel()
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
    chunk = max(1, _CHUNK_ELEMENTS // (_FLIPS_PER_NIBBLE * groups))
    for start in range(0, n_resamples, chunk):
        rows = min(chunk, n_resamples - start)
        drawn = torch.randint(
            0, 256, (rows, n_bytes), generator=generator, device=device, dtype=torch.uint8
        )
        nibbles = torch.cat([drawn.bitwise_and(15), drawn.bitwise_right_shift(4)], dim=-1)
        picked = nibbles.narrow(-1, 0, groups).to(torch.int64).add_(offsets)
        sums = total - 2 * table.take(picked).sum(-1)
        extreme += (sums.abs() >= threshold).sum()
    return (extreme + 1).to(torch.float64) / (n_resamples + 1)
