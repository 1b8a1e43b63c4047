"""The shared kernels and their fast paths on their own: gains, discounts, ranking, ties.

A ``budget`` module: it calls the private kernels directly (tests/README.md).
"""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from torch_ndcg import _dcg_paths as fast_paths
from torch_ndcg import _kernels as kernels
from torch_ndcg import _tables as tables
from torch_ndcg._validation import check_list_options

# Pins internals: see tests/README.md ("budget").
pytestmark = pytest.mark.budget


def small_integer_labels(
    target: torch.Tensor, mask: torch.Tensor | None
) -> tuple[torch.Tensor, int] | None:
    """The labels as int64 and their number of levels, as the kernel decides it from its probe."""
    probe = fast_paths.label_range_probe(target, mask)
    levels = fast_paths.counted_levels(target, None if probe is None else [probe.item()])
    return None if levels is None else (target.to(torch.int64), levels)


def test_gains() -> None:
    labels = torch.tensor([0.0, 1.0, 2.0, 4.0])
    exponential = kernels.gains(labels, "exponential", torch.float32)
    torch.testing.assert_close(exponential, torch.tensor([0.0, 1, 3, 15]))
    torch.testing.assert_close(kernels.gains(labels, "linear", torch.float32), labels)
    torch.testing.assert_close(kernels.gains(labels, lambda y: y + 1, torch.float32), labels + 1)
    # Integer labels are taken in the dtype asked for, a table's gains too.
    as_float64 = kernels.gains(torch.tensor([0, 1, 3]), (0.0, 0.5, 2.0, 9.0), torch.float64)
    torch.testing.assert_close(as_float64, torch.tensor([0.0, 0.5, 9.0], dtype=torch.float64))


def test_discounts() -> None:
    ranks = torch.tensor([1.0, 2.0, 3.0, 4.0], dtype=torch.float64)
    log2 = torch.tensor([1, 1 / math.log2(3), 1 / 2, 1 / math.log2(5)], dtype=torch.float64)
    jarvelin = torch.tensor([1, 1, 1 / math.log2(3), 1 / 2], dtype=torch.float64)
    torch.testing.assert_close(kernels.discounts(ranks, "log2"), log2)
    torch.testing.assert_close(kernels.discounts(ranks, "jarvelin"), jarvelin)
    torch.testing.assert_close(
        kernels.position_discounts(4, "log2", dtype=torch.float64, device=torch.device("cpu")), log2
    )


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("kmax", [1, 3, 6])
def test_stable_descending_order_keeps_order_of_appearance(dtype: torch.dtype, kmax: int) -> None:
    scores = torch.tensor([[0.5, -0.0, 2.0, 0.5, 0.0, -1.0]], dtype=dtype)
    # 2.0 first; then 0.5 at positions 0 and 3; then -0.0 and 0.0 tie (equal floats), in order.
    expected = torch.tensor([[2, 0, 3, 1, 4, 5]])
    keys = fast_paths.ranking_keys(scores, None)
    assert torch.equal(fast_paths.stable_descending_order(keys, kmax), expected[:, :kmax])


# The kernels' dtypes: half-precision scores are ranked in float32 (`test_preds_dtypes`).
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_ranking_keys_preserve_float_order_and_put_padding_last(dtype: torch.dtype) -> None:
    info = torch.finfo(dtype)
    values = torch.tensor(
        [
            [
                float("-inf"),
                info.min,
                -2.0,
                -info.tiny,
                -0.0,
                0.0,
                info.tiny,
                1.0,
                info.max,
                float("inf"),
            ]
        ],
        dtype=dtype,
    )
    keys = fast_paths.ranking_keys(values, None)
    assert keys.dtype == (torch.int64 if dtype == torch.float64 else torch.int32)
    assert bool((keys[0, 1:] > keys[0, :-1]).sum() == 8)  # strictly increasing but for one pair
    assert keys[0, 4] == keys[0, 5]  # -0.0 == 0.0
    # Padding lies below every real key, real -inf included, and above the dtype's minimum.
    mask = torch.ones_like(values, dtype=torch.bool)
    mask[0, 3] = False
    padded = fast_paths.ranking_keys(values, mask)
    assert padded[0, 3] == fast_paths.padding_key(padded) == torch.iinfo(keys.dtype).min + 1
    assert bool((padded[0, 3] < padded[0, [0, 1, 2, 4, 5, 6, 7, 8, 9]]).all())


@pytest.fixture(params=["dense", "grouped"])
def tie_path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Both ways of averaging ties: every top position against every item, or grouped runs."""
    if request.param == "grouped":
        monkeypatch.setattr(kernels, "DENSE_TIE_ELEMENTS", 0)
    return str(request.param)


def test_tie_averaged_gains_credit_the_boundary_group_over_the_whole_list(tie_path: str) -> None:
    scores = torch.tensor([[3.0, 1.0, 2.0, 1.0, 1.0]])
    item_gains = torch.tensor([[1.0, 6.0, 2.0, 0.0, 3.0]])
    # Ranked: 3.0 (gain 1), 2.0 (gain 2), then three tied at 1.0 with mean gain 3.
    expected = torch.tensor([[1.0, 2.0, 3.0]], dtype=torch.float64)
    keys = fast_paths.ranking_keys(scores, None)
    top_keys, top_index, tied = fast_paths.top_items(keys, 3, padded=False)
    assert tied
    torch.testing.assert_close(
        kernels.tie_averaged_gains(keys, top_keys, top_index, item_gains), expected
    )
    top_keys, top_index, tied = fast_paths.top_items(keys, 5, padded=False)
    torch.testing.assert_close(
        kernels.tie_averaged_gains(keys, top_keys, top_index, item_gains),
        torch.tensor([[1.0, 2, 3, 3, 3]], dtype=torch.float64),
    )


@settings(max_examples=60)
@given(
    st.integers(1, 6),
    st.integers(1, 12),
    st.integers(1, 13),
    st.integers(0, 2**16),
    st.booleans(),
)
def test_tie_averaging_dense_equals_grouped(
    n: int, length: int, k: int, seed: int, padded: bool
) -> None:
    generator = torch.Generator().manual_seed(seed)
    scores = torch.randint(0, 4, (n, length), generator=generator).float()  # many ties
    item_gains = torch.randint(0, 8, (n, length), generator=generator).float()
    mask = torch.rand(n, length, generator=generator) < 0.7 if padded else None
    if mask is not None:
        item_gains = torch.where(mask, item_gains, 0)
    keys = fast_paths.ranking_keys(scores, mask)
    top_keys, top_index, _ = fast_paths.top_items(keys, min(k, length), padded=padded)
    dense = kernels.tie_averaged_gains(keys, top_keys, top_index, item_gains)
    try:
        kernels.DENSE_TIE_ELEMENTS, saved = 0, kernels.DENSE_TIE_ELEMENTS
        grouped = kernels.tie_averaged_gains(keys, top_keys, top_index, item_gains)
    finally:
        kernels.DENSE_TIE_ELEMENTS = saved
    torch.testing.assert_close(dense, grouped, rtol=1e-12, atol=1e-12)


def test_top_items_reports_only_ties_that_touch_the_top() -> None:
    # The tie at 1.0 lies below the 3rd item; at k = 2 the boundary pair (2.0, 1.5) is distinct.
    keys = fast_paths.ranking_keys(torch.tensor([[3.0, 1.0, 2.0, 1.0, 1.5]]), None)
    assert not fast_paths.top_items(keys, 2, padded=False)[2]
    assert fast_paths.top_items(keys, 4, padded=False)[2]  # 4th and 5th tie across the cut-off
    # Ties among padding do not count; a tie between real items does, real -inf included.
    for dtype in (torch.float32, torch.float64):
        scores = torch.tensor([[2.0, float("-inf"), 1.0, float("-inf")]], dtype=dtype)
        mask = torch.tensor([[True, False, True, False]])
        assert not fast_paths.top_items(fast_paths.ranking_keys(scores, mask), 3, padded=True)[2]
        assert fast_paths.top_items(fast_paths.ranking_keys(scores, None), 3, padded=False)[2]
        assert fast_paths.top_items(fast_paths.ranking_keys(scores, None), 3, padded=True)[2]


def test_ideal_ranked_gains_with_padding_and_custom_gain() -> None:
    target = torch.tensor([[2, 0, 3, 1]])
    mask = torch.tensor([[True, True, False, True]])
    item_gains = kernels.list_gains(target, mask, "exponential", torch.float32)
    lists = kernels.Lists(target, mask)
    best = kernels.ideal_ranked_gains(lists, item_gains, 4, "exponential", torch.float32)
    torch.testing.assert_close(best, torch.tensor([[3.0, 1.0, 0.0, 0.0]]))
    negated = kernels.list_gains(target, mask, lambda y: -y, torch.float32)
    best = kernels.ideal_ranked_gains(lists, negated, 4, lambda y: -y, torch.float32)
    torch.testing.assert_close(best, torch.tensor([[0.0, -1.0, -2.0, 0.0]]))


def test_normalize() -> None:
    dcg = torch.tensor([1.0, 0.0, 0.0])
    ideal = torch.tensor([2.0, 0.0, 0.0])
    torch.testing.assert_close(
        kernels.normalize(dcg, ideal, "neg", "linear"), torch.tensor([0.5, 0, 0])
    )
    torch.testing.assert_close(
        kernels.normalize(dcg, ideal, "pos", "linear"), torch.tensor([0.5, 1, 1])
    )
    assert kernels.normalize(dcg, ideal, "skip", "linear").isnan().tolist() == [False, True, True]


def test_cutoff_weights_follow_a_callable_discount_each_call() -> None:
    class Power:
        def __init__(self, p: float) -> None:
            self.p = p

        def __call__(self, ranks: torch.Tensor) -> torch.Tensor:
            return 1 / ranks**self.p

    discount = Power(1.0)
    gains = torch.tensor([[0.0, 1.0]])
    assert kernels.cumulative_dcg(gains, [2], discount).item() == pytest.approx(1 / 2)
    discount.p = 2.0
    assert kernels.cumulative_dcg(gains, [2], discount).item() == pytest.approx(1 / 4)


def test_kept_tables_are_reused_and_bounded_per_device(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tables, "_kept", {})
    monkeypatch.setattr(tables, "TABLES_PER_DEVICE", 3)
    monkeypatch.setattr(tables, "ELEMENTS_PER_DEVICE", 40)
    cpu, meta = torch.device("cpu"), torch.device("meta")
    first = kernels.cutoff_matrix(4, [2, 4], "log2", torch.float64, cpu)
    assert kernels.cutoff_matrix(4, [2, 4], "log2", torch.float64, cpu) is first  # kept
    for kmax in range(5, 9):  # four more tables on the CPU: only the last three stay
        kernels.cutoff_matrix(kmax, [2], "log2", torch.float64, cpu)
    kernels.cutoff_matrix(8, [2], "log2", torch.float64, meta)  # counts against `meta` only
    assert len(tables._kept[cpu]) == 3
    assert len(tables._kept[meta]) == 1
    assert kernels.cutoff_matrix(4, [2, 4], "log2", torch.float64, cpu) is not first  # dropped
    kept = tables._kept[cpu]
    assert sum(table.numel() for table in kept.values()) <= 40
    kernels.cutoff_matrix(41, [1], "log2", torch.float64, cpu)  # above the element bound
    assert sum(table.numel() for table in kept.values()) <= 40
    assert all(t.numel() < 41 for t in kept.values())
    kernels.cutoff_matrix(4, [2], lambda ranks: 1 / ranks, torch.float64, cpu)  # never kept
    assert all(t.shape[0] != 4 or t.shape[1] != 1 for t in kept.values())


# ---------------------------------------------------------------------------------------------
# The fast paths against the general ones they replace


@settings(max_examples=60, deadline=None)
@given(
    rows=st.integers(1, 5),
    length=st.integers(2, 30),
    kmax=st.integers(1, 30),
    n_scores=st.integers(1, 1000),
    padded=st.booleans(),
    dtype=st.sampled_from([torch.float32, torch.float64]),
    seed=st.integers(0, 2**16),
)
def test_tie_free_fast_path_equals_tie_averaged_gains(
    rows: int,
    length: int,
    kmax: int,
    n_scores: int,
    padded: bool,
    dtype: torch.dtype,
    seed: int,
) -> None:
    """Whether or not a tie is found, the general tie averaging gives the gains read directly."""
    gen = torch.Generator().manual_seed(seed)
    kmax = min(kmax, length)
    preds = torch.randint(0, n_scores, (rows, length), generator=gen).to(dtype)
    mask = torch.rand(rows, length, generator=gen) < 0.7 if padded else None
    keys = fast_paths.ranking_keys(preds, mask)
    scores = preds if mask is None else torch.where(mask, preds, float("-inf"))
    item_gains = kernels.list_gains(
        torch.randint(0, 4, (rows, length), generator=gen), mask, "exponential", torch.float32
    )
    top_keys, top_index, tied = fast_paths.top_items(keys, kmax, padded=padded)
    averaged = kernels.tie_averaged_gains(keys, top_keys, top_index, item_gains)
    if not tied:
        direct = item_gains.gather(-1, top_index).double()
        torch.testing.assert_close(averaged, direct)
    else:
        # A real tie touches the top: some pair of neighbours among the best kmax + 1 is equal.
        sorted_scores = scores.sort(dim=-1, descending=True).values[:, : kmax + 1]
        real_pair = sorted_scores[:, 1:] == sorted_scores[:, :-1]
        if padded:
            real_pair &= sorted_scores[:, 1:] != float("-inf")
        assert bool(real_pair.any())


@pytest.mark.parametrize("dtype", [torch.int64, torch.uint8, torch.float32])
def test_checked_and_unchecked_inputs_give_the_same_values(dtype: torch.dtype) -> None:
    """The largest label known from the input checks replaces the kernel's own pass over them."""
    from torch_ndcg import ndcg

    gen = torch.Generator().manual_seed(5)
    preds = torch.rand(16, 30, generator=gen)
    target = torch.randint(0, 5, (16, 30), generator=gen).to(dtype)
    mask = torch.rand(16, 30, generator=gen) < 0.8
    options: Any = {"k": [1, 5, 40], "mask": mask}
    checked = ndcg(preds, target, validate_args=True, **options)
    assert torch.equal(checked, ndcg(preds, target, validate_args=False, **options))
    # Large labels (past the label counts) on padding only: the checked maximum is the real one.
    target_with_large_padding = torch.where(mask, target, 100 if dtype != torch.uint8 else 200)
    torch.testing.assert_close(
        ndcg(preds, target_with_large_padding, gain="linear", **options),
        ndcg(preds, target, gain="linear", **options),
    )


def test_perfect_float64_ranking_gives_one_and_never_more() -> None:
    """The label-count ideal DCG sums in another order than the DCG: never 1 + 2e-16."""
    from torch_ndcg import ndcg

    gen = torch.Generator().manual_seed(0)
    target = torch.randint(0, 5, (500, 12), generator=gen)
    preds = target.double() + torch.rand(500, 12, generator=gen, dtype=torch.float64) / 2
    for gain in ("linear", "exponential"):
        values = ndcg(preds, target, gain=gain)  # type: ignore[arg-type]
        assert values.dtype == torch.float64
        perfect = values[target.amax(-1) > 0]
        assert bool((perfect <= 1.0).all())
        torch.testing.assert_close(perfect, torch.ones_like(perfect), rtol=0, atol=1e-15)


@pytest.mark.filterwarnings("ignore::UserWarning")  # CUDA autocast named on a CPU-only build
def test_cuda_full_precision_switches_through_the_api_the_caller_uses() -> None:
    # The flags are process state, settable without a GPU. torch refuses to read the legacy
    # precision once the newer per-backend API was set: each must be switched through its own.
    matmul = torch.backends.cuda.matmul
    before = torch.get_float32_matmul_precision()
    try:
        torch.set_float32_matmul_precision("high")
        precision, set_precision, full = kernels.cuda_matmul_precision()
        assert (precision, full) == ("high", "highest")
        with kernels._cuda_full_precision(precision, set_precision, full):
            assert torch.get_float32_matmul_precision() == "highest"
        assert torch.get_float32_matmul_precision() == "high"
    finally:
        torch.set_float32_matmul_precision(before)
    try:
        matmul.fp32_precision = "tf32"
        with pytest.raises(RuntimeError):
            torch.get_float32_matmul_precision()  # what full_precision must not call blindly
        precision, set_precision, full = kernels.cuda_matmul_precision()
        assert (precision, full) == ("tf32", "ieee")
        with kernels._cuda_full_precision(precision, set_precision, full):
            assert matmul.fp32_precision == "ieee"
        assert matmul.fp32_precision == "tf32"
    finally:
        matmul.fp32_precision = "none"
    assert torch.get_float32_matmul_precision() == before


@settings(max_examples=80, deadline=None)
@given(
    rows=st.integers(1, 6),
    length=st.integers(1, 40),
    top_label=st.integers(0, 70),
    k=st.lists(st.integers(1, 45), min_size=1, max_size=3, unique=True),
    gain=st.sampled_from(["exponential", "linear"]),
    discount=st.sampled_from(["log2", "jarvelin"]),
    dtype=st.sampled_from([torch.int64, torch.int32, torch.float32, torch.float64, torch.bool]),
    padded=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_label_count_ideal_equals_ideal_from_the_top_labels(
    rows: int,
    length: int,
    top_label: int,
    k: list[int],
    gain: str,
    discount: str,
    dtype: torch.dtype,
    padded: bool,
    seed: int,
) -> None:
    gen = torch.Generator().manual_seed(seed)
    target = torch.randint(0, top_label + 1, (rows, length), generator=gen).to(dtype)
    mask = torch.rand(rows, length, generator=gen) < 0.7 if padded else None
    if mask is not None and dtype.is_floating_point:
        target = torch.where(mask, target, float("nan"))  # padding may hold anything
    kmax = min(max(k), length)
    counted = small_integer_labels(target, mask)
    levels_limit = fast_paths._MAX_COUNTED_LEVELS
    real_max = int((target if mask is None else torch.where(mask, target, 0)).nan_to_num().max())
    assert (counted is not None) == (real_max < levels_limit)
    if counted is None:
        return
    labels, levels = counted
    assert levels == real_max + 1 or (dtype == torch.bool and levels == 2)
    options = check_list_options(
        k=k, gain=gain, discount=discount, ties="average", empty_target_action="neg",
        ignore_index=None, validate_args=True
    )
    by_counts = kernels.ideal_dcg(
        kernels.Lists(labels, mask), options, torch.float64, levels=levels
    )
    best = kernels.ideal_ranked_gains(kernels.Lists(target, mask), None, kmax, gain, torch.float64)
    by_top_labels = kernels.cumulative_dcg(best, k, discount)
    torch.testing.assert_close(by_counts, by_top_labels, rtol=1e-12, atol=1e-12)


def test_small_integer_labels_refuses_fractional_and_large_labels() -> None:
    assert small_integer_labels(torch.tensor([[0.0, 1.5]]), None) is None
    assert small_integer_labels(torch.tensor([[0.0, 3e9]]), None) is None  # past int32
    assert small_integer_labels(torch.tensor([[0, 64]]), None) is None  # 65 levels > 64
    counted = small_integer_labels(torch.tensor([[0, 63]], dtype=torch.uint8), None)
    assert counted is not None
    assert counted[0].dtype == torch.int64
    assert counted[1] == 64
    # A fractional label on padding does not count.
    mask = torch.tensor([[True, False]])
    assert small_integer_labels(torch.tensor([[2.0, 0.5]]), mask) is not None
