"""Regression tests: ten wrong numbers, NaNs and crashes that users met (issue 8), one per case.

Each expected value comes from the loop references in ``tests/references.py``, a dense float64
reference of a loss, or a closed form; none from the code under test.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Any

import pytest
import torch
from torchmetrics import MetricCollection

from tests import references
from torch_ndcg import (
    NDCG,
    ApproxNDCGLoss,
    LambdaRankLoss,
    RetrievalNDCG,
    approx_ndcg_loss,
    dcg,
    lambdarank_loss,
    ndcg,
)


def reference_mean(
    preds: torch.Tensor, target: torch.Tensor, k: int | None, **options: Any
) -> float:
    """Mean loop-reference nDCG@k over the rows of dense ``[N, L]`` input."""
    real = [[True] * preds.shape[-1]] * preds.shape[0]
    values = references.ndcg_padded_batch(preds.tolist(), target.tolist(), real, k, **options)
    return sum(values) / len(values)


# --- 1. MetricCollection's compute groups ---------------------------------------------------


LINEAR = references.GAINS["linear"]


def test_collection_of_ndcg_at_5_and_10_reports_each_value() -> None:
    gen = torch.Generator().manual_seed(0)
    preds = torch.randn(50, 20, generator=gen)
    target = torch.randint(0, 3, (50, 20), generator=gen)
    target[0] = 0  # the first update scores 0 at every k: equal states
    collection = MetricCollection({"n5": NDCG(k=5), "n10": NDCG(k=10)})
    for i in range(50):
        collection.update(preds[i], target[i])
    values = collection.compute()
    assert values["n5"].item() == pytest.approx(reference_mean(preds, target, 5), abs=1e-6)
    assert values["n10"].item() == pytest.approx(reference_mean(preds, target, 10), abs=1e-6)


@pytest.mark.parametrize(
    ("first", "second"),
    [
        ({"gain": "linear"}, {"gain": "exponential"}),
        ({"ties": "average"}, {"ties": "first"}),
        ({"empty_target_action": "neg"}, {"empty_target_action": "pos"}),
    ],
    ids=["gain", "ties", "empty_target_action"],
)
def test_collection_members_with_other_options_keep_their_own_states(
    first: dict[str, Any], second: dict[str, Any]
) -> None:
    gen = torch.Generator().manual_seed(1)
    preds = torch.randint(0, 3, (30, 6), generator=gen).float()  # ties
    target = torch.randint(0, 4, (30, 6), generator=gen)
    target[:3] = torch.randint(0, 2, (3, 6), generator=gen)  # 0/1 labels: equal gains
    target[0] = 0
    preds[:3] = torch.arange(6.0)  # no tie in the first batch: equal DCG under both ties
    collection = MetricCollection({"a": NDCG(k=3, **first), "b": NDCG(k=3, **second)})
    for start in range(0, 30, 3):
        collection.update(preds[start : start + 3], target[start : start + 3])
    values = collection.compute()
    for name, options in (("a", first), ("b", second)):
        reference_options: dict[str, Any] = {
            "gain": references.GAINS[options.get("gain", "exponential")],
            "ties": options.get("ties", "average"),
            "empty_value": 1.0 if options.get("empty_target_action") == "pos" else 0.0,
        }
        expected = reference_mean(preds, target, 3, **reference_options)
        assert values[name].item() == pytest.approx(expected, abs=1e-6), name


def test_collection_shares_retrieval_rows_only_between_metrics_that_store_the_same_rows() -> None:
    gen = torch.Generator().manual_seed(4)
    preds = torch.rand(40, generator=gen, dtype=torch.float64)
    target = torch.randint(0, 3, (40,), generator=gen)
    ids = torch.arange(40) // 8
    collection = MetricCollection(
        {
            "k3": RetrievalNDCG(k=3),
            "k5": RetrievalNDCG(k=5, gain="linear"),
            "no_zero": RetrievalNDCG(k=3, ignore_index=0),
            "wide": RetrievalNDCG(k=3).set_dtype(torch.float64),
        }
    )
    for start in range(0, 40, 10):
        rows = slice(start, start + 10)
        collection.update(preds[rows], target[rows], ids[rows])
    groups = sorted(sorted(group) for group in collection.compute_groups.values())
    assert groups == [["k3", "k5"], ["no_zero"], ["wide"]]
    values = collection.compute()
    for name, k, options, keep in (
        ("k3", 3, {}, target >= 0),
        ("k5", 5, {"gain": LINEAR}, target >= 0),
        ("no_zero", 3, {}, target != 0),
        ("wide", 3, {}, target >= 0),
    ):
        per_query = references.ndcg_per_query(
            preds[keep].tolist(), target[keep].tolist(), ids[keep].tolist(), k, **options
        )
        expected = sum(per_query.values()) / len(per_query)
        assert values[name].item() == pytest.approx(expected, abs=1e-6), name


def test_options_keys_of_distinct_options_never_pass_torchmetrics_allclose() -> None:
    # torchmetrics compares states with allclose (relative tolerance 1e-5): large integer keys
    # 5,582 apart passed as equal, and NDCG(k=14, gain="linear") took NDCG(k=54)'s value.
    keys = torch.stack(
        [
            NDCG(k=k, gain=gain, ties=ties).options_key
            for k in range(1, 61)
            for gain in ("linear", "exponential")
            for ties in ("average", "first")
        ]
    )
    close = torch.isclose(keys[:, None, :], keys[None, :, :]).all(-1)
    assert int(close.sum()) == keys.shape[0]  # each key is close to itself only
    gen = torch.Generator().manual_seed(5)
    preds, target = torch.randn(20, 60, generator=gen), torch.randint(0, 2, (20, 60), generator=gen)
    collection = MetricCollection({"lin14": NDCG(k=14, gain="linear"), "exp54": NDCG(k=54)})
    collection.update(preds, target)
    assert collection.compute()["lin14"].item() == pytest.approx(
        reference_mean(preds, target, 14, gain=LINEAR), abs=1e-6
    )


def test_metrics_with_different_callable_gains_never_share_a_state() -> None:
    def squared(y: torch.Tensor) -> torch.Tensor:
        return y * y

    def cubed(y: torch.Tensor) -> torch.Tensor:
        return y**3

    first, second = NDCG(gain=squared), NDCG(gain=cubed)
    assert not torch.equal(first.options_key, second.options_key)
    # merge_state (possibly across processes, where a function's identity differs) compares
    # the named options only.
    assert torch.equal(first.options_key[:4], second.options_key[:4])


# --- 2. Half-precision module casts ---------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_ndcg_state_keeps_float64_through_a_half_precision_module(dtype: torch.dtype) -> None:
    gen = torch.Generator().manual_seed(2)
    preds = torch.randn(400, 10, generator=gen)
    target = torch.randint(0, 3, (400, 10), generator=gen)
    metric = NDCG(k=5)
    torch.nn.ModuleDict({"metric": metric}).to(dtype)  # what Lightning's "-true" plugins do
    for start in range(0, 400, 8):
        metric.update(preds[start : start + 8], target[start : start + 8])
    assert metric.sum_ndcg.dtype == torch.float64
    assert metric.count.dtype == torch.int64
    assert metric.compute().item() == pytest.approx(reference_mean(preds, target, 5), abs=1e-6)


def test_retrieval_rows_stay_float32_in_a_half_module_and_follow_set_dtype_float64() -> None:
    metric = RetrievalNDCG(k=2)
    torch.nn.ModuleDict({"metric": metric}).to(torch.float16)
    # 1 + 2^-20 and 1 are one score apart in float32 and tie in float16.
    preds = torch.tensor([1.0 + 2.0**-20, 1.0])
    metric.update(preds, torch.tensor([0, 1]), torch.tensor([0, 0]))
    assert metric.preds[0].dtype == torch.float32
    assert metric.compute().item() == pytest.approx(1 / math.log2(3), abs=1e-6)
    metric.set_dtype(torch.float64)
    assert metric.preds[0].dtype == torch.float64
    assert metric.compute().dtype == torch.float64


# --- 3. ignore_index in narrow label dtypes -------------------------------------------------

PREDS3 = torch.tensor([0.9, 0.5, 0.1])


def test_ignore_index_minus_one_keeps_label_255_of_uint8_labels() -> None:
    target = torch.tensor([0, 255, 1], dtype=torch.uint8)
    expected = references.ndcg_one_list(PREDS3.tolist(), [0, 255, 1], None, gain=LINEAR)
    assert ndcg(PREDS3, target, gain="linear", ignore_index=-1).item() == pytest.approx(expected)
    metric = NDCG(gain="linear", ignore_index=-1)
    metric.update(PREDS3, target)
    rows = RetrievalNDCG(gain="linear", ignore_index=-1)
    rows.update(PREDS3, target, torch.zeros(3, dtype=torch.int64))
    assert metric.compute().item() == pytest.approx(expected, abs=1e-6)
    assert rows.compute().item() == pytest.approx(expected, abs=1e-6)


def test_ignore_index_beyond_int32_drops_no_label() -> None:
    target = torch.tensor([0, 1, 1], dtype=torch.int32)
    expected = references.ndcg_one_list(PREDS3.tolist(), [0, 1, 1], None, gain=LINEAR)
    value = ndcg(PREDS3, target, gain="linear", ignore_index=2**32 + 1)
    assert value.item() == pytest.approx(expected)


def test_ignore_index_that_float32_labels_round_onto_drops_no_label() -> None:
    target = torch.tensor([0.0, 2.0**24, 1.0])  # 2^24 + 1 rounds to 2^24 in float32
    kept = ndcg(PREDS3, target, gain="linear", ignore_index=2**24 + 1)
    assert kept.item() == pytest.approx(ndcg(PREDS3, target, gain="linear").item())


def test_losses_drop_only_exactly_ignored_labels() -> None:
    preds = torch.tensor([[0.1, 0.7, 0.3]])
    target = torch.tensor([[0, 255, 1]], dtype=torch.uint8)  # -1 would wrap to 255
    for loss in (lambdarank_loss, approx_ndcg_loss):
        with_ignore = loss(preds, target, gain="linear", ignore_index=-1)
        assert with_ignore.item() == pytest.approx(loss(preds, target, gain="linear").item())


# --- 4. empty_target_action="error" and padding-only lists ----------------------------------


def test_error_action_accepts_lists_made_only_of_padding() -> None:
    preds = torch.tensor([[0.2, 0.9, 0.4], [0.3, 0.1, 0.5]])
    target = torch.tensor([[1, 0, 2], [-1, -1, -1]])
    expected = references.ndcg_one_list([0.2, 0.9, 0.4], [1, 0, 2], None)
    metric = NDCG(empty_target_action="error", ignore_index=-1)
    metric.update(preds, target)
    assert metric.compute().item() == pytest.approx(expected, abs=1e-6)
    assert ndcg(preds, target, ignore_index=-1, empty_target_action="error")[0].item() == (
        pytest.approx(expected)
    )
    with pytest.raises(ValueError, match="no relevant item"):
        metric.update(preds, torch.tensor([[0, 0, 0], [-1, -1, -1]]))


# --- 5. Losses on large exponential labels --------------------------------------------------

BIG = torch.tensor([[127.0, 127.0, 127.0, 0.0]])
SCORES = torch.tensor([[0.1, 0.2, 0.3, 0.4]], dtype=torch.float64)
REAL = torch.ones(1, 4, dtype=torch.bool)


def _value_and_grad(fn: Callable[[torch.Tensor], torch.Tensor], preds: torch.Tensor) -> tuple:
    leaf = preds.clone().requires_grad_(True)
    value = fn(leaf)
    value.backward()
    assert leaf.grad is not None
    return value.detach(), leaf.grad


def test_lambdarank_on_labels_127_equals_float64_dense_reference() -> None:
    ours, our_grad = _value_and_grad(lambda s: lambdarank_loss(s, BIG.long()), SCORES.float())
    expected, expected_grad = _value_and_grad(
        lambda s: references.lambdaloss_dense(s, BIG, REAL), SCORES
    )
    assert ours.item() == pytest.approx(expected.item(), rel=1e-5)
    assert ours.item() > 0
    torch.testing.assert_close(our_grad.double(), expected_grad, rtol=1e-5, atol=1e-7)


def test_approx_ndcg_on_labels_127_at_low_temperature_equals_float64_dense_reference() -> None:
    ours, our_grad = _value_and_grad(
        lambda s: approx_ndcg_loss(s, BIG.long(), temperature=0.01), SCORES.float()
    )
    expected, expected_grad = _value_and_grad(
        lambda s: references.approx_ndcg_dense(s, BIG, REAL, temperature=0.01), SCORES
    )
    assert ours.item() == pytest.approx(expected.item(), rel=1e-5)
    # Gradients of about 1e-4, from float32 score differences over T = 0.01.
    torch.testing.assert_close(our_grad.double(), expected_grad, rtol=1e-4, atol=1e-6)


# --- 6. One gain limit in ndcg, the metrics and the losses ----------------------------------

LIMIT_GEN = torch.Generator().manual_seed(6)
LIMIT_CASES = [
    (
        torch.rand(3, generator=LIMIT_GEN, dtype=torch.float64),
        torch.tensor([1023] * 3),
        "exponential",
        "1022.41",
    ),
    (
        torch.rand(3, generator=LIMIT_GEN),
        torch.tensor([1e39, 1.0, 0.0], dtype=torch.float64),
        "linear",
        "3.40282e+38",
    ),
]


@pytest.mark.parametrize(("preds", "target", "gain", "limit"), LIMIT_CASES, ids=["exp", "linear"])
def test_labels_whose_gains_overflow_get_the_same_error_everywhere(
    preds: torch.Tensor, target: torch.Tensor, gain: Any, limit: str
) -> None:
    message = re.escape(f"Expected `target` values of at most {limit} with `gain`='{gain}'")
    calls: list[Callable[[], object]] = [
        lambda: ndcg(preds, target, gain=gain),
        lambda: NDCG(gain=gain).update(preds, target),
        lambda: lambdarank_loss(preds, target, gain=gain),
        lambda: approx_ndcg_loss(preds, target, gain=gain),
    ]
    for call in calls:
        with pytest.raises(ValueError, match=message):
            call()


def test_labels_just_inside_the_limit_give_finite_values() -> None:
    preds = torch.tensor([0.3, 0.2, 0.1], dtype=torch.float64)
    value = ndcg(preds, torch.tensor([1021, 1020, 0]))
    # 2^1021 (1 + 1/(2 log2 3)) over itself with the two swapped: closed form.
    expected = (1 + 0.5 / math.log2(3)) / (1 + 0.5 / math.log2(3))
    assert value.item() == pytest.approx(expected)
    swapped = ndcg(preds, torch.tensor([1020, 1021, 0]))
    assert swapped.item() == pytest.approx((0.5 + 1 / math.log2(3)) / (1 + 0.5 / math.log2(3)))


# --- 7. Losses on finite extreme inputs -----------------------------------------------------


def test_approx_ndcg_with_scores_that_overflow_over_the_temperature() -> None:
    preds = torch.tensor([1e30, -1e30, 0.0], requires_grad=True)
    loss = approx_ndcg_loss(preds, torch.tensor([0, 1, 0]), temperature=1e-9)
    loss.backward()
    assert loss.item() == pytest.approx(1 - 1 / math.log2(4))  # the relevant item is third
    assert preds.grad is not None
    assert torch.isfinite(preds.grad).all()


def test_approx_ndcg_on_bfloat16_scores_at_the_float32_limit() -> None:
    preds = torch.tensor([3e38, -3e38, 0.0], dtype=torch.bfloat16, requires_grad=True)
    loss = approx_ndcg_loss(preds, torch.tensor([0, 1, 0]), temperature=0.1)
    loss.backward()
    assert loss.item() == pytest.approx(1 - 1 / math.log2(4))
    assert preds.grad is not None
    assert torch.isfinite(preds.grad).all()


def test_lambdarank_rejects_a_sigma_that_overflows() -> None:
    with pytest.raises(ValueError, match=r"Expected `sigma` to keep the loss and its gradient"):
        lambdarank_loss(torch.tensor([1.0, 2.0, 0.0]), torch.tensor([0, 1, 0]), sigma=1e38)


def test_approx_ndcg_rejects_a_temperature_that_overflows_the_gradient() -> None:
    with pytest.raises(ValueError, match=r"Expected `temperature` to keep the loss"):
        approx_ndcg_loss(torch.tensor([1.0, 2.0]), torch.tensor([0, 1]), temperature=1e-30)


@pytest.mark.parametrize("loss", [lambdarank_loss, approx_ndcg_loss])
def test_tiny_linear_labels_give_the_loss_of_their_scaled_copy(loss: Callable[..., Any]) -> None:
    # nDCG is invariant to scaling the linear gains; 1e-40 is subnormal in float32.
    preds = torch.tensor([1.0, 2.0, 0.0])
    tiny = loss(preds, torch.tensor([0.0, 1e-40, 0.0]), gain="linear")
    one = loss(preds, torch.tensor([0.0, 1.0, 0.0]), gain="linear")
    assert torch.isfinite(tiny)
    assert tiny.item() == pytest.approx(one.item())


# --- 8. merge_state after compute -----------------------------------------------------------


@pytest.mark.parametrize("cls", [NDCG, RetrievalNDCG])
def test_merge_state_after_compute_returns_the_merged_value(cls: type) -> None:
    gen = torch.Generator().manual_seed(3)
    preds = torch.randn(10, 6, generator=gen)
    target = torch.randint(0, 3, (10, 6), generator=gen)
    ids = torch.arange(10)[:, None].expand(10, 6)

    def metric_on(rows: slice) -> Any:
        metric = cls(k=3)
        if cls is NDCG:
            metric.update(preds[rows], target[rows])
        else:
            metric.update(preds[rows].reshape(-1), target[rows].reshape(-1), ids[rows].reshape(-1))
        return metric

    first = metric_on(slice(0, 4))
    first.compute()
    first.merge_state(metric_on(slice(4, 10)))
    assert first.compute().item() == pytest.approx(reference_mean(preds, target, 3), abs=1e-6)


def test_merge_state_refuses_a_metric_with_other_options() -> None:
    with pytest.raises(ValueError, match="same options"):
        NDCG(k=3).merge_state(NDCG(k=5))


def test_merge_state_takes_a_state_dict_without_options_key() -> None:
    metric = NDCG(k=1)
    metric.update(torch.tensor([[0.9, 0.1]]), torch.tensor([[1, 0]]))
    metric.merge_state(
        {"sum_ndcg": torch.tensor([0.5], dtype=torch.float64), "count": torch.tensor([1])}
    )
    assert metric.compute().item() == pytest.approx(0.75)


def test_retrieval_query_whose_gains_overflow_across_batches_raises_in_compute() -> None:
    metric = RetrievalNDCG().set_dtype(torch.float64)
    for score in (0.2, 0.1):  # one row per batch: each batch alone is within the limit
        metric.update(torch.tensor([score]), torch.tensor([1023.9]), torch.tensor([0]))
    with pytest.raises(ValueError, match="ideal DCG overflows"):
        metric.compute()


def test_share_memory_shares_the_states() -> None:
    metric = NDCG(k=3).share_memory()
    assert metric.sum_ndcg.is_shared()
    assert metric.sum_ndcg.dtype == torch.float64


# --- 9. validate_args is a bool everywhere --------------------------------------------------

PREDS9, TARGET9 = torch.tensor([[0.3, 0.1]]), torch.tensor([[1, 0]])
VALIDATE_CALLS: dict[str, Callable[[], object]] = {
    "ndcg": lambda: ndcg(PREDS9, TARGET9, validate_args="no"),  # type: ignore[arg-type]
    "dcg": lambda: dcg(PREDS9, TARGET9, validate_args="no"),  # type: ignore[arg-type]
    "lambdarank_loss": lambda: lambdarank_loss(PREDS9, TARGET9, validate_args="no"),  # type: ignore[arg-type]
    "approx_ndcg_loss": lambda: approx_ndcg_loss(PREDS9, TARGET9, validate_args="no"),  # type: ignore[arg-type]
    "LambdaRankLoss": lambda: LambdaRankLoss(validate_args="no"),  # type: ignore[arg-type]
    "ApproxNDCGLoss": lambda: ApproxNDCGLoss(validate_args="no"),  # type: ignore[arg-type]
    "NDCG": lambda: NDCG(validate_args="no"),  # type: ignore[arg-type]
    "RetrievalNDCG": lambda: RetrievalNDCG(validate_args="no"),  # type: ignore[arg-type]
}


@pytest.mark.parametrize("call", list(VALIDATE_CALLS.values()), ids=list(VALIDATE_CALLS))
def test_validate_args_must_be_a_bool(call: Callable[[], object]) -> None:
    with pytest.raises(TypeError, match=r"Expected `validate_args` to be a bool, but got 'no'"):
        call()


# --- 10. torch.jit.script -------------------------------------------------------------------


@pytest.mark.parametrize("metric", [NDCG(k=[1, 3]), RetrievalNDCG(k=3)], ids=["NDCG", "Retrieval"])
def test_metrics_survive_torch_jit_script(metric: Any) -> None:
    """The metric scripts with its states (torchmetrics' harness does it); `update` and
    `compute` stay Python, and the metric still gives its value afterwards."""
    preds = torch.tensor([[0.3, 0.9, 0.1], [0.2, 0.8, 0.4]])
    target = torch.tensor([[1, 0, 2], [0, 1, 0]])
    ids = torch.tensor([[4, 4, 4], [9, 9, 9]])
    metric.reset()
    if isinstance(metric, NDCG):
        metric.update(preds, target)
    else:
        metric.update(preds.reshape(-1), target.reshape(-1), ids.reshape(-1))
    scripted = torch.jit.script(metric)
    assert isinstance(scripted, torch.jit.ScriptModule)
    assert scripted.original_name == type(metric).__name__
    if isinstance(metric, NDCG):
        assert torch.equal(scripted.sum_ndcg, metric.sum_ndcg)
        assert torch.equal(scripted.count, torch.tensor([2, 2]))
    else:
        assert [p.tolist() for p in scripted.preds] == [preds.reshape(-1).tolist()]
    # Exponential gains 1, 0, 3 ranked 2nd, 1st, 3rd; the second list's one gain ranked 1st.
    first = (1 / math.log2(3) + 3 / math.log2(4)) / (3 + 1 / math.log2(3))
    second = 1.0
    result = metric.compute()
    got = result["ndcg@3"] if isinstance(result, dict) else result
    assert got.item() == pytest.approx((first + second) / 2, abs=1e-6)
