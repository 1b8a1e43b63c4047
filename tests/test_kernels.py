"""The shared kernels on their own: gains, discounts, orderings, tie averaging."""

from __future__ import annotations

import math

import pytest
import torch

from torch_ndcg import _kernels as kernels


def test_gains() -> None:
    labels = torch.tensor([0.0, 1.0, 2.0, 4.0])
    torch.testing.assert_close(kernels.gains(labels, "exponential"), torch.tensor([0.0, 1, 3, 15]))
    torch.testing.assert_close(kernels.gains(labels, "linear"), labels)
    torch.testing.assert_close(kernels.gains(labels, lambda y: y + 1), labels + 1)


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
    assert torch.equal(kernels.stable_descending_order(scores, kmax), expected[:, :kmax])


def test_ordered_int64_preserves_float_order() -> None:
    values = torch.tensor(
        [float("-inf"), -3.5e38, -2.0, -1e-30, -0.0, 0.0, 1e-30, 1.0, 3.5e38, float("inf")]
    )
    keys = kernels._ordered_int64(values)
    assert torch.all(keys[1:] >= keys[:-1])
    assert keys[4] == keys[5]  # -0.0 == 0.0


def test_tie_averaged_gains_credit_the_boundary_group_over_the_whole_list() -> None:
    scores = torch.tensor([[3.0, 1.0, 2.0, 1.0, 1.0]])
    item_gains = torch.tensor([[1.0, 6.0, 2.0, 0.0, 3.0]])
    # Ranked: 3.0 (gain 1), 2.0 (gain 2), then three tied at 1.0 with mean gain 3.
    expected = torch.tensor([[1.0, 2.0, 3.0]], dtype=torch.float64)
    keys, top_keys, top_index, tied = kernels.top_items(scores, 3, padded=False)
    assert tied
    torch.testing.assert_close(
        kernels.tie_averaged_gains(keys, top_keys, top_index, item_gains), expected
    )
    keys, top_keys, top_index, tied = kernels.top_items(scores, 5, padded=False)
    torch.testing.assert_close(
        kernels.tie_averaged_gains(keys, top_keys, top_index, item_gains),
        torch.tensor([[1.0, 2, 3, 3, 3]], dtype=torch.float64),
    )


def test_top_items_reports_only_ties_that_touch_the_top() -> None:
    # The tie at 1.0 lies below the 3rd item; at k = 2 the boundary pair (2.0, 1.5) is distinct.
    scores = torch.tensor([[3.0, 1.0, 2.0, 1.0, 1.5]])
    assert not kernels.top_items(scores, 2, padded=False)[3]
    assert kernels.top_items(scores, 4, padded=False)[3]  # 4th and 5th tie across the cut-off
    # Ties among padding (-inf) do not count; a tie between real items does.
    padded = torch.tensor([[2.0, float("-inf"), 1.0, float("-inf")]])
    assert not kernels.top_items(padded, 3, padded=True)[3]
    assert kernels.top_items(padded, 3, padded=False)[3]
    assert kernels.top_items(padded.double(), 3, padded=False)[3]
    assert not kernels.top_items(padded.double(), 3, padded=True)[3]


def test_ideal_ranked_gains_with_padding_and_custom_gain() -> None:
    target = torch.tensor([[2, 0, 3, 1]])
    mask = torch.tensor([[True, True, False, True]])
    item_gains = kernels.list_gains(target, mask, "exponential", torch.float32)
    best = kernels.ideal_ranked_gains(target, item_gains, mask, 4, "exponential", torch.float32)
    torch.testing.assert_close(best, torch.tensor([[3.0, 1.0, 0.0, 0.0]]))
    negated = kernels.list_gains(target, mask, lambda y: -y, torch.float32)
    best = kernels.ideal_ranked_gains(target, negated, mask, 4, lambda y: -y, torch.float32)
    torch.testing.assert_close(best, torch.tensor([[0.0, -1.0, -2.0, 0.0]]))


def test_normalize() -> None:
    dcg = torch.tensor([1.0, 0.0, 0.0])
    ideal = torch.tensor([2.0, 0.0, 0.0])
    torch.testing.assert_close(kernels.normalize(dcg, ideal, "neg"), torch.tensor([0.5, 0, 0]))
    torch.testing.assert_close(kernels.normalize(dcg, ideal, "pos"), torch.tensor([0.5, 1, 1]))
    assert kernels.normalize(dcg, ideal, "skip").isnan().tolist() == [False, True, True]


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
