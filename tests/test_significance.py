"""Confidence intervals of the metrics and paired tests, against their definitions and scipy."""

from __future__ import annotations

import itertools
import statistics
from typing import Any

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from torchmetrics import MetricCollection

from torch_ndcg import (
    NDCG,
    PairedTestResult,
    RetrievalNDCG,
    ndcg,
    paired_randomization_test,
    paired_t_test,
    retrieval_ndcg,
)

KS = [1, 5]


def lists(seed: int = 0, n: int = 40) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    preds = torch.rand(n, 9, generator=gen)
    target = torch.randint(0, 3, (n, 9), generator=gen)
    target[::6] = 0  # lists with no relevant item
    mask = torch.rand(n, 9, generator=gen) > 0.2
    mask[:, 0] = True
    return preds, target, mask


def definition(values: list[float], confidence: float) -> tuple[float, float, float]:
    """Mean ± z·s/√n, with the standard library's normal quantile and sample deviation."""
    z = statistics.NormalDist().inv_cdf((1 + confidence) / 2)
    mean, half = statistics.fmean(values), z * statistics.stdev(values) / len(values) ** 0.5
    return mean, mean - half, mean + half


@pytest.mark.parametrize("confidence", [0.5, 0.9, 0.95, 0.99])
@pytest.mark.parametrize("empty_target_action", ["neg", "skip"])
def test_ndcg_interval_equals_the_definition(confidence: float, empty_target_action: str) -> None:
    preds, target, mask = lists()
    metric = NDCG(k=KS, confidence=confidence, empty_target_action=empty_target_action)  # type: ignore[arg-type]
    for part in (slice(0, 13), slice(13, 14), slice(14, None)):
        metric.update(preds[part], target[part], mask[part])
    result = metric.compute()
    per_list = ndcg(preds, target, k=KS, mask=mask, empty_target_action=empty_target_action)  # type: ignore[arg-type]
    assert list(result) == [
        "ndcg@1",
        "ndcg@1_low",
        "ndcg@1_high",
        "ndcg@5",
        "ndcg@5_low",
        "ndcg@5_high",
    ]
    for column, k in enumerate(KS):
        kept = [v for v in per_list[:, column].double().tolist() if v == v]
        mean, low, high = definition(kept, confidence)
        assert result[f"ndcg@{k}"].item() == pytest.approx(mean, abs=1e-6)
        assert result[f"ndcg@{k}_low"].item() == pytest.approx(low, abs=1e-6)
        assert result[f"ndcg@{k}_high"].item() == pytest.approx(high, abs=1e-6)


def test_single_cut_off_with_confidence_is_a_dict_and_splits_per_cut_off() -> None:
    preds, target, mask = lists()
    metric = NDCG(k=5, confidence=0.95)
    metric.update(preds, target, mask)
    result = metric.compute()
    assert set(result) == {"ndcg@5", "ndcg@5_low", "ndcg@5_high"}
    collection = NDCG(k=5, confidence=0.95).per_cutoff(prefix="val_")
    collection.update(preds, target, mask)
    logged = collection.compute()
    assert set(logged) == {"val_ndcg@5", "val_ndcg@5_low", "val_ndcg@5_high"}
    for name, value in result.items():
        assert logged[f"val_{name}"].item() == pytest.approx(value.item(), abs=1e-7)


def test_bounds_are_nan_below_two_lists_and_the_mean_stays() -> None:
    metric = NDCG(k=3, confidence=0.95)
    assert metric.compute()["ndcg@3"].item() == 0  # before any update, as without confidence
    metric.update(torch.tensor([[0.3, 0.2, 0.1]]), torch.tensor([[0, 1, 0]]))
    result = metric.compute()
    assert result["ndcg@3"].item() == pytest.approx(0.63093, abs=1e-5)
    assert result["ndcg@3_low"].isnan()
    assert result["ndcg@3_high"].isnan()


def test_interval_does_not_change_the_mean_nor_share_state_with_plain_metrics() -> None:
    preds, target, mask = lists()
    collection = MetricCollection(
        {"plain": NDCG(k=KS), "interval": NDCG(k=KS, confidence=0.9)}, compute_groups=True
    )
    for part in (slice(0, 20), slice(20, None)):
        collection.update(preds[part], target[part], mask[part])
    assert len(collection.compute_groups) == 2
    plain, interval = collection["plain"].compute(), collection["interval"].compute()
    for k in KS:
        name = f"ndcg@{k}"
        assert interval[name].item() == pytest.approx(plain[name].item(), abs=1e-7)
        assert interval[f"{name}_low"] < interval[name] < interval[f"{name}_high"]


def test_retrieval_interval_equals_the_definition() -> None:
    gen = torch.Generator().manual_seed(4)
    preds, target = torch.rand(600, generator=gen), torch.randint(0, 3, (600,), generator=gen)
    indexes = torch.randint(-50, 50, (600,), generator=gen)
    metric = RetrievalNDCG(k=KS, confidence=0.9, empty_target_action="skip")
    metric.update(preds[:200], target[:200], indexes[:200])
    metric.update(preds[200:], target[200:], indexes[200:])
    result = metric.compute()
    values, _ = retrieval_ndcg(preds, target, indexes, k=KS, empty_target_action="skip")
    for column, k in enumerate(KS):
        kept = [v for v in values[:, column].double().tolist() if v == v]
        for got, want in zip(
            (result[f"ndcg@{k}"], result[f"ndcg@{k}_low"], result[f"ndcg@{k}_high"]),
            definition(kept, 0.9),
            strict=True,
        ):
            assert got.item() == pytest.approx(want, abs=1e-6)


@pytest.mark.parametrize("confidence", [0, 1, 1.5, -0.1])
def test_bad_confidence_is_named(confidence: float) -> None:
    with pytest.raises(ValueError, match=r"`confidence` to be between 0 and 1 \(e.g. 0.95\)"):
        NDCG(confidence=confidence)
    with pytest.raises(TypeError, match="`confidence` to be a float or None"):
        NDCG(confidence="0.95")  # type: ignore[call-overload]


def test_retrieval_interval_is_not_for_per_query_values() -> None:
    with pytest.raises(ValueError, match=r"aggregated `aggregation` with `confidence`.*'none'"):
        RetrievalNDCG(confidence=0.9, aggregation="none")  # type: ignore[call-overload]
    with pytest.raises(ValueError, match="`bootstrap_resamples` to be positive, but got 0"):
        RetrievalNDCG(confidence=0.9, aggregation="median", bootstrap_resamples=0)
    with pytest.raises(TypeError, match="`bootstrap_seed` to be an int"):
        RetrievalNDCG(confidence=0.9, aggregation="max", bootstrap_seed=1.5)  # type: ignore[arg-type]


def squared_mean(values: torch.Tensor) -> torch.Tensor:
    return (values * values).mean()


@pytest.mark.parametrize("aggregation", ["median", "min", "max", squared_mean])
@pytest.mark.budget
def test_retrieval_bootstrap_interval_for_other_aggregations(aggregation: Any) -> None:
    """The aggregate as without ``confidence``, and the bounds of `bootstrap_interval` on the
    per-query values (the same seed), around it."""
    from torch_ndcg.functional import _significance

    gen = torch.Generator().manual_seed(6)
    preds, target = torch.rand(800, generator=gen), torch.randint(0, 3, (800,), generator=gen)
    indexes = torch.randint(0, 80, (800,), generator=gen)
    metric = RetrievalNDCG(
        k=KS, aggregation=aggregation, confidence=0.9, bootstrap_resamples=300, bootstrap_seed=2
    )
    metric.update(preds[:300], target[:300], indexes[:300])
    metric.update(preds[300:], target[300:], indexes[300:])
    result = metric.compute()
    plain = RetrievalNDCG(k=KS, aggregation=aggregation)(preds, target, indexes)
    values, _ = retrieval_ndcg(preds, target, indexes, k=KS)
    low, high = _significance.bootstrap_interval(
        values,
        aggregation if isinstance(aggregation, str) else squared_mean,
        0.9,
        n_resamples=300,
        seed=2,
    )
    for column, k in enumerate(KS):
        name = f"ndcg@{k}"
        assert result[name].item() == pytest.approx(plain[name].item(), abs=1e-7)
        assert result[f"{name}_low"].item() == pytest.approx(low[column].item(), abs=1e-6)
        assert result[f"{name}_high"].item() == pytest.approx(high[column].item(), abs=1e-6)
        assert result[f"{name}_low"] <= result[f"{name}_high"]


# ---------------------------------------------------------------------------------------------
# Paired tests


@pytest.fixture(scope="module")
def scipy_stats() -> Any:
    """scipy.stats, for the tests that compare with it: only they skip where it is missing."""
    return pytest.importorskip("scipy.stats")


@pytest.mark.parametrize("n", [2, 3, 10, 57, 400])
@pytest.mark.parametrize("seed", [0, 1])
def test_paired_t_test_equals_scipy(n: int, seed: int, scipy_stats: Any) -> None:
    gen = torch.Generator().manual_seed(seed)
    a = torch.rand(n, generator=gen, dtype=torch.float64)
    b = (a + 0.05 * torch.randn(n, generator=gen, dtype=torch.float64) + 0.01).clamp(0, 1)
    t, p = paired_t_test(a, b)
    expected = scipy_stats.ttest_rel(a.numpy(), b.numpy())
    assert t.item() == pytest.approx(expected.statistic, rel=1e-9)
    assert p.item() == pytest.approx(expected.pvalue, rel=1e-7, abs=1e-14)


def test_paired_t_test_drops_nan_pairs(scipy_stats: Any) -> None:
    a = torch.tensor([0.5, float("nan"), 0.7, 0.9, 0.1])
    b = torch.tensor([0.4, 0.3, 0.5, float("nan"), 0.3])
    t, p = paired_t_test(a, b)
    expected = scipy_stats.ttest_rel([0.5, 0.7, 0.1], [0.4, 0.5, 0.3])
    assert t.item() == pytest.approx(expected.statistic, rel=1e-6)
    assert p.item() == pytest.approx(expected.pvalue, rel=1e-6)


def test_equal_models_and_a_constant_shift() -> None:
    a = torch.tensor([0.25, 0.5, 0.625])  # dyadic: the shift below is exact
    t, p = paired_t_test(a, a)
    assert t.isnan()
    assert p.item() == 1.0
    t, p = paired_t_test(a + 0.25, a)
    assert t.isinf()
    assert p.item() == 0.0


def exact_sign_flip_p(differences: list[float]) -> float:
    """All 2^n sign flips, the observed one included: the test's exact p-value."""
    observed = abs(sum(differences))
    flips = itertools.product((1, -1), repeat=len(differences))
    extreme = sum(
        abs(sum(s * d for s, d in zip(signs, differences, strict=True))) >= observed - 1e-12
        for signs in flips
    )
    return extreme / 2 ** len(differences)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_randomization_test_approaches_the_exact_enumeration(seed: int) -> None:
    gen = torch.Generator().manual_seed(seed)
    a = torch.rand(11, generator=gen, dtype=torch.float64)
    b = a - 0.1 * torch.randn(11, generator=gen, dtype=torch.float64)
    difference, p = paired_randomization_test(a, b, n_resamples=40_000, seed=seed)
    assert difference.item() == pytest.approx((a - b).mean().item(), abs=1e-12)
    exact = exact_sign_flip_p((a - b).tolist())
    assert p.item() == pytest.approx(exact, abs=0.01)


@pytest.mark.budget
def test_randomization_test_is_seeded_and_chunked(monkeypatch: pytest.MonkeyPatch) -> None:
    from torch_ndcg.functional import _significance

    gen = torch.Generator().manual_seed(7)
    a, b = torch.rand(30, generator=gen), torch.rand(30, generator=gen)
    first = paired_randomization_test(a, b, n_resamples=5000, seed=3)
    again = paired_randomization_test(a, b, n_resamples=5000, seed=3)
    assert tuple(again) == tuple(first)
    monkeypatch.setattr(_significance, "_CHUNK_ELEMENTS", 30 * 7)  # 7 flips per chunk
    chunked = paired_randomization_test(a, b, n_resamples=5000, seed=3)
    assert chunked[1].item() == pytest.approx(first[1].item(), abs=0.03)
    assert chunked[1].item() == pytest.approx(exact_p_by_normal(a - b), abs=0.05)


def exact_p_by_normal(differences: torch.Tensor) -> float:
    """For 30 pairs the sign-flip distribution of the sum is close to normal."""
    d = differences.double()
    z = abs(d.sum().item()) / (d * d).sum().sqrt().item()
    return 2 * (1 - statistics.NormalDist().cdf(z))


@given(
    st.lists(st.floats(0, 1), min_size=2, max_size=12),
    st.lists(st.floats(0, 1), min_size=2, max_size=12),
)
def test_randomization_p_is_a_probability_and_symmetric(x: list[float], y: list[float]) -> None:
    n = min(len(x), len(y))
    a, b = torch.tensor(x[:n], dtype=torch.float64), torch.tensor(y[:n], dtype=torch.float64)
    _, p_ab = paired_randomization_test(a, b, n_resamples=200)
    _, p_ba = paired_randomization_test(b, a, n_resamples=200)
    assert 0 < p_ab.item() <= 1
    assert p_ab.item() == p_ba.item()


# Values of the bad-input tests (which never depend on them), drawn from one seeded generator.
VALUES_GEN = torch.Generator().manual_seed(8)


def values(*shape: int) -> torch.Tensor:
    return torch.rand(*shape, generator=VALUES_GEN)


@pytest.mark.parametrize(
    ("a", "b", "error", "match"),
    [
        (values(3), values(4), ValueError, r"1-D tensors of one shape.*\(3,\) and \(4,\)"),
        (values(2, 3), values(2, 3), ValueError, r"`a` to be a 1-D tensor .* \(2, 3\)"),
        (torch.ones(3, dtype=torch.long), values(3), TypeError, "`a` to be a floating"),
        ([0.1, 0.2], values(2), TypeError, "`a` to be a torch.Tensor"),
        (torch.tensor([0.1, float("nan")]), values(2), ValueError, "at least 2 pairs"),
        (torch.tensor([0.1, float("inf"), 0.3]), values(3), ValueError, "finite values"),
    ],
)
def test_paired_tests_name_bad_input(a: object, b: object, error: type, match: str) -> None:
    for test in (paired_t_test, paired_randomization_test):
        with pytest.raises(error, match=match):
            test(a, b)  # type: ignore[arg-type]


def test_randomization_arguments_are_checked() -> None:
    a, b = values(4), values(4)
    with pytest.raises(ValueError, match="`n_resamples` to be positive, but got 0"):
        paired_randomization_test(a, b, n_resamples=0)
    with pytest.raises(TypeError, match="`seed` to be an int"):
        paired_randomization_test(a, b, seed=1.5)  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------------------
# Pairing by query id, per cut-off, the named result


def two_models(seed: int = 0, n: int = 80) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    a = torch.rand(n, generator=gen, dtype=torch.float64)
    b = (a - 0.03 + 0.1 * torch.randn(n, generator=gen, dtype=torch.float64)).clamp(0, 1)
    ids = torch.randperm(10 * n, generator=gen)[:n] - 3 * n  # sparse, some negative
    return a, b, ids


@pytest.mark.parametrize("confidence", [0.9, 0.95, 0.99])
def test_t_test_result_has_scipys_interval_and_degrees_of_freedom(
    confidence: float, scipy_stats: Any
) -> None:
    a, b, _ = two_models()
    result = paired_t_test(a, b, confidence=confidence)
    assert isinstance(result, PairedTestResult)
    expected = scipy_stats.ttest_rel(a.numpy(), b.numpy())
    interval = expected.confidence_interval(confidence_level=confidence)
    assert result.statistic.item() == pytest.approx(expected.statistic, rel=1e-9)
    assert result.pvalue.item() == pytest.approx(expected.pvalue, rel=1e-7)
    assert result.df == expected.df == 79
    assert result.n_pairs == 80
    assert result.mean_difference.item() == pytest.approx((a - b).mean().item(), abs=1e-12)
    assert result.low.item() == pytest.approx(interval.low, rel=1e-9)
    assert result.high.item() == pytest.approx(interval.high, rel=1e-9)


@pytest.mark.parametrize("q", [0.55, 0.9, 0.975, 0.995, 0.9999])
@pytest.mark.parametrize("df", [1, 2, 7, 30, 1000])
@pytest.mark.budget
def test_student_t_quantile_equals_scipy(q: float, df: int, scipy_stats: Any) -> None:
    from torch_ndcg.functional import _significance

    assert _significance.student_t_quantile(q, df) == pytest.approx(
        scipy_stats.t.ppf(q, df), rel=1e-9
    )


@pytest.mark.parametrize("test", [paired_t_test, paired_randomization_test])
def test_shuffled_values_with_ids_give_the_aligned_answer(test: Any) -> None:
    a, b, ids = two_models(seed=3)
    noise = torch.randn(80, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    b = a - 0.02 + 0.1 * noise  # a small effect: p well above its floor
    by_id = ids.argsort()
    aligned = test(a[by_id], b[by_id])  # the pairs in ascending id order, as ids pair them
    assert 0.01 < aligned.pvalue.item() < 0.5
    gen = torch.Generator().manual_seed(9)
    order_a, order_b = torch.randperm(80, generator=gen), torch.randperm(80, generator=gen)
    paired = test((a[order_a], ids[order_a]), (b[order_b], ids[order_b]))
    for field in ("statistic", "pvalue", "mean_difference", "low", "high"):
        assert getattr(paired, field).item() == pytest.approx(
            getattr(aligned, field).item(), rel=1e-12, abs=1e-15
        )
    # Position pairing of the shuffled values is another, wrong, answer: ids are what save it.
    shuffled = paired_t_test(a[order_a], b[order_b])
    assert abs(shuffled.statistic.item() - paired_t_test(a, b).statistic.item()) > 0.5


def test_ids_that_differ_raise_unless_the_intersection_is_asked_for(scipy_stats: Any) -> None:
    a, b, ids = two_models(seed=4)
    other_ids = ids.clone()
    other_ids[:3] = 10_000 + torch.arange(3)  # three queries only the second model scored
    with pytest.raises(ValueError, match=r"same query ids, but 3 are only in `a`.*3 only in `b`"):
        paired_t_test((a, ids), (b, other_ids))
    result = paired_t_test((a, ids), (b, other_ids), unmatched_ids="intersect")
    assert isinstance(result, PairedTestResult)
    expected = scipy_stats.ttest_rel(a[3:].numpy(), b[3:].numpy())
    assert result.n_pairs == 77
    assert result.statistic.item() == pytest.approx(expected.statistic, rel=1e-9)


@pytest.mark.parametrize(
    ("a", "b", "error", "match"),
    [
        (
            (values(3), torch.tensor([1, 1, 2])),
            (values(3), torch.tensor([1, 2, 3])),
            ValueError,
            r"ids of `a` to be distinct .* repeated ids \[1\]",
        ),
        ((values(3), torch.arange(3)), values(3), TypeError, "ids with `a` only"),
        (
            (values(3), torch.arange(3.0)),
            (values(3), torch.arange(3)),
            TypeError,
            r"`a\[1\]` \(query ids\) to be an integer tensor",
        ),
        (
            (values(3), torch.arange(4)),
            (values(3), torch.arange(3)),
            ValueError,
            r"ids of `a` to have the shape of its values, \(3,\), but got \(4,\)",
        ),
        ((values(3), torch.arange(3), 0), values(3), ValueError, "tuple of 3 items"),
        ({"ndcg@5": values(3)}, values(3), TypeError, "both to be dicts"),
        (
            {"ndcg@5": values(3)},
            {"ndcg@10": values(3)},
            ValueError,
            r"same cut-offs, but got \['ndcg@5'\] and \['ndcg@10'\]",
        ),
    ],
)
def test_mispaired_input_is_named(a: object, b: object, error: type, match: str) -> None:
    for test in (paired_t_test, paired_randomization_test):
        with pytest.raises(error, match=match):
            test(a, b)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="`unmatched_ids`"):
        paired_t_test(values(3), values(3), unmatched_ids="union")  # type: ignore[arg-type]


def test_per_cutoff_results_of_two_retrieval_metrics_pair_by_query(scipy_stats: Any) -> None:
    gen = torch.Generator().manual_seed(5)
    target = torch.randint(0, 3, (900,), generator=gen)
    indexes = torch.randint(0, 60, (900,), generator=gen)
    good = target + 0.8 * torch.rand(900, generator=gen)
    poor = torch.rand(900, generator=gen)
    first = RetrievalNDCG(k=[1, 5], aggregation="none")(good, target, indexes)
    order = torch.randperm(900, generator=gen)  # the second model saw the rows in another order
    second = RetrievalNDCG(k=[1, 5], aggregation="none")(poor[order], target[order], indexes[order])
    results = paired_t_test(first, second)
    assert isinstance(results, dict)
    assert set(results) == {"ndcg@1", "ndcg@5"}
    for name, result in results.items():
        expected = scipy_stats.ttest_rel(first[0][name].numpy(), second[0][name].numpy())
        assert result.statistic.item() == pytest.approx(expected.statistic, rel=1e-6)
        assert result.pvalue.item() == pytest.approx(expected.pvalue, rel=1e-5, abs=1e-300)


# ---------------------------------------------------------------------------------------------
# Bootstrap intervals


@pytest.mark.budget
def test_bootstrap_interval_covers_the_true_median_at_its_nominal_rate(scipy_stats: Any) -> None:
    """1,500 samples of 101 Beta(2, 5) values: the 90 % interval covers the median ~90 % of
    the time; the tolerance is 3.5 standard deviations of a binomial share over 1,500 trials
    (about ±0.027: an 85 % or 95 % interval would fall outside)."""
    from torch_ndcg.functional import _significance

    distribution = scipy_stats.beta(2, 5)
    trials, confidence = 1500, 0.9
    samples = torch.tensor(distribution.rvs(size=(101, trials), random_state=11))
    low, high = _significance.bootstrap_interval(
        samples, "median", confidence, n_resamples=400, seed=0
    )
    covered = ((low <= distribution.median()) & (distribution.median() <= high)).double()
    tolerance = 3.5 * (confidence * (1 - confidence) / trials) ** 0.5
    assert covered.mean().item() == pytest.approx(confidence, abs=tolerance)


@pytest.mark.budget
def test_bootstrap_statistics_by_name_equal_the_same_callables() -> None:
    from torch_ndcg.functional import _significance

    values = torch.rand(57, 2, generator=torch.Generator().manual_seed(2))
    values[::5, 1] = float("nan")  # skipped queries are left out of the resamples
    for name, function in (
        ("median", lambda x: x.median()),
        ("min", lambda x: x.min()),
        ("max", lambda x: x.max()),
    ):
        by_name = _significance.bootstrap_interval(values, name, 0.8, n_resamples=300, seed=4)
        by_callable = _significance.bootstrap_interval(
            values, function, 0.8, n_resamples=300, seed=4
        )
        assert torch.equal(by_name[0], by_callable[0])
        assert torch.equal(by_name[1], by_callable[1])
        counted = values[:, 1][~values[:, 1].isnan()]
        assert counted.min() <= by_name[0][1] <= by_name[1][1] <= counted.max()


@pytest.mark.budget
def test_bootstrap_is_seeded_chunked_and_nan_without_values(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from torch_ndcg.functional import _significance

    values = torch.rand(40, 1, generator=torch.Generator().manual_seed(3))
    first = _significance.bootstrap_interval(values, "median", 0.9, n_resamples=500, seed=1)
    monkeypatch.setattr(_significance, "_CHUNK_ELEMENTS", 40 * 7)
    chunked = _significance.bootstrap_interval(values, "median", 0.9, n_resamples=500, seed=1)
    assert torch.equal(first[0], chunked[0])  # one stream of draws, however it is cut
    assert torch.equal(first[1], chunked[1])
    empty = torch.full((5, 1), float("nan"))
    low, high = _significance.bootstrap_interval(empty, "max", 0.9)
    assert low.isnan().all()
    assert high.isnan().all()
