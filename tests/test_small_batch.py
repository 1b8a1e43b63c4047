"""The small-batch path of `ndcg` and `NDCG.update` (`torch_ndcg._dcg_paths.small_ndcg`).

Every test compares it with the general path (the small path switched off), to the rounding
bound the module states (4 machine epsilons of the result's dtype, relative past 1: the two
paths' DCG products may sum in another order), and with the loop references of
`tests/references.py`; the errors and the swapped-arguments hint must be those of the general
path, and the path must be taken where it should.

A ``budget`` module: it switches private paths off and spies on them (tests/README.md).
"""

from __future__ import annotations

import contextlib
import math
import re
import warnings
from collections.abc import Iterator
from typing import Any
from unittest import mock

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tests import references
from tests.host_reads import count_host_reads
from tests.private_paths import take_accelerator_paths
from torch_ndcg import NDCG, _dcg_paths, _validation, ndcg

# Pins internals: see tests/README.md ("budget").
pytestmark = pytest.mark.budget


def general(fn: Any, *args: Any, **kwargs: Any) -> Any:
    """``fn(*args, **kwargs)`` with the small path switched off."""
    with mock.patch.object(_dcg_paths, "small_batch", return_value=False):
        return fn(*args, **kwargs)


@contextlib.contextmanager
def small_path_only() -> Iterator[None]:
    """Fail if the general path is taken (`ndcg` and `NDCG.update` share `_ndcg.list_values`)."""

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the general path was taken")

    with mock.patch.object(_validation, "check_lists", refuse):
        yield


def metric_state(options: dict[str, Any], *batches: tuple[torch.Tensor, torch.Tensor]) -> Any:
    metric = NDCG(**options)
    for preds, target in batches:
        metric.update(preds, target)
    value = metric.compute()
    if isinstance(value, dict):  # a sequence k: one value per cut-off
        value = torch.stack(list(value.values()))
    return metric.sum_ndcg.clone(), metric.count.clone(), value


def agrees(got: torch.Tensor, want: torch.Tensor, terms: float = 1.0) -> bool:
    """Within the small path's stated bound of ``want``: the same dtype, shape, NaNs and
    infinities, and each value within ``4 * eps * max(terms, |want|)`` (``eps`` of the dtype;
    ``terms``: the lists a sum holds). Integer tensors (counts) are equal."""
    if got.dtype != want.dtype or got.shape != want.shape:
        return False
    if not got.is_floating_point():
        return torch.equal(got, want)
    finite = want.isfinite()
    if not torch.equal(got[~finite].nan_to_num(nan=-7.0), want[~finite].nan_to_num(nan=-7.0)):
        return False
    bound = 4 * torch.finfo(want.dtype).eps * want[finite].abs().clamp(min=terms)
    return bool(((got[finite] - want[finite]).abs() <= bound).all())


LABEL_DTYPES = [torch.int64, torch.int32, torch.uint8, torch.bool, torch.float32, torch.float16]


@st.composite
def batches(draw: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """Small batches of any leading shape, with ties (also at the cut-off) and infinities."""
    leading = draw(st.sampled_from([(), (1,), (5,), (2, 3)]))
    length = draw(st.integers(2, 12))
    shape = (*leading, length)
    seed = draw(st.integers(0, 2**31 - 1))
    gen = torch.Generator().manual_seed(seed)
    distinct = draw(st.sampled_from([2, 4, 1000]))  # few distinct scores: many ties
    preds = torch.randint(0, distinct, shape, generator=gen).double() / 7
    if draw(st.booleans()):
        preds = preds.masked_fill(torch.rand(shape, generator=gen) < 0.2, math.inf)
        preds = preds.masked_fill(torch.rand(shape, generator=gen) < 0.2, -math.inf)
    if draw(st.booleans()):
        preds = -preds  # -0.0 next to 0.0
    preds = preds.to(draw(st.sampled_from([torch.float32, torch.float64])))
    label_dtype = draw(st.sampled_from(LABEL_DTYPES))
    top = 2 if label_dtype == torch.bool else 5
    target = torch.randint(0, top, shape, generator=gen)
    if label_dtype.is_floating_point:
        target = target / 2  # fractional labels
    return preds, target.to(label_dtype)


OPTIONS = st.fixed_dictionaries(
    {
        "k": st.sampled_from([None, 1, 3, 20, [1, 3, 20], (2, 1)]),
        "gain": st.sampled_from(["exponential", "linear"]),
        "discount": st.sampled_from(["log2", "jarvelin"]),
        "empty_target_action": st.sampled_from(["neg", "pos", "skip"]),
        "validate_args": st.booleans(),
    }
)


@settings(max_examples=150, deadline=None)
@given(batch=batches(), options=OPTIONS)
def test_ndcg_equals_the_general_path(
    batch: tuple[torch.Tensor, torch.Tensor], options: dict[str, Any]
) -> None:
    preds, target = batch
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # label-like scores: the hint (tested below)
        with mock.patch.object(_dcg_paths, "small_ndcg", wraps=_dcg_paths.small_ndcg) as spy:
            got = ndcg(preds, target, **options)
        assert spy.call_count == 1
        assert agrees(got, general(ndcg, preds, target, **options))


@settings(max_examples=60, deadline=None)
@given(batch=batches(), options=OPTIONS)
def test_metric_state_equals_the_general_path(
    batch: tuple[torch.Tensor, torch.Tensor], options: dict[str, Any]
) -> None:
    preds, target = batch
    options = {**options, "k": options["k"] or 3}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = metric_state(options, batch, (preds.flip(-1), target))
        want = general(metric_state, options, batch, (preds.flip(-1), target))
    lists = 2 * preds[..., 0].numel()  # the sums hold the lists of both batches
    for got_part, want_part in zip(got, want, strict=True):
        assert agrees(got_part, want_part, terms=lists)


@pytest.mark.parametrize("gain", ["exponential", "linear"])
def test_equal_to_the_loop_reference_with_ties_at_the_cutoff(gain: str) -> None:
    preds = torch.tensor([[3.0, 1.0, 1.0, 1.0, 0.5, -math.inf], [2.0, 2.0, 0.0, -0.0, 1.0, 1.0]])
    target = torch.tensor([[0, 3, 1, 0, 2, 1], [1, 0, 4, 2, 0, 3]])
    gain_fn = references.exponential_gain if gain == "exponential" else references.linear_gain
    for k in (1, 2, 3, 4, 6):
        want = [
            references.ndcg_one_list(row.tolist(), labels.tolist(), k, gain=gain_fn)
            for row, labels in zip(preds, target, strict=True)
        ]
        with small_path_only():
            got = ndcg(preds, target, k=k, gain=gain)
            metric = NDCG(k=k, gain=gain)
            metric.update(preds, target)
        torch.testing.assert_close(metric.compute(), got.mean(), rtol=1e-6, atol=1e-7)
        torch.testing.assert_close(got, torch.tensor(want), rtol=1e-6, atol=1e-7)


def test_the_path_is_taken_where_it_should_be() -> None:
    gen = torch.Generator().manual_seed(0)
    preds, target = torch.randn(4, 6, generator=gen), torch.randint(0, 3, (4, 6), generator=gen)
    taken = [
        ({}, True),
        ({"k": [1, 3]}, True),
        ({"validate_args": False}, True),
        ({"mask": torch.ones(4, 6, dtype=torch.bool)}, False),
        ({"ignore_index": -1}, False),
        ({"ties": "first"}, False),
        ({"empty_target_action": "error"}, False),
        ({"gain": lambda y: y}, False),
        ({"discount": lambda r: 1 / r}, False),
    ]
    for options, small in taken:
        with mock.patch.object(_dcg_paths, "small_ndcg", wraps=_dcg_paths.small_ndcg) as spy:
            ndcg(preds, target, **options)
        assert spy.called == small, options
    for other in (
        preds.half(),
        torch.randn(1, 5000, generator=gen),
    ):  # half scores; past SMALL_ELEMENTS
        with mock.patch.object(_dcg_paths, "small_ndcg") as spy:
            ndcg(other, torch.zeros(other.shape, dtype=torch.int64))
        assert not spy.called
    with mock.patch.object(_dcg_paths, "small_ndcg") as spy:  # float64 labels, float32 scores
        ndcg(preds, target.double())
    assert not spy.called


def test_one_host_read_per_call() -> None:
    gen = torch.Generator().manual_seed(1)
    preds, target = torch.randn(8, 10, generator=gen), torch.randint(0, 5, (8, 10), generator=gen)
    for validate_args in (True, False):
        metric = NDCG(k=[1, 5, 10], validate_args=validate_args)
        metric.update(preds, target)  # tables kept
        with count_host_reads() as reads:
            metric.update(preds, target)
            ndcg(preds, target, k=10, validate_args=validate_args)
        assert len(reads) == 2, reads


BAD_INPUT = [
    (torch.tensor([[0.1, math.nan, 0.3]]), torch.tensor([[1, 0, 2]]), "no NaN"),
    (torch.tensor([[0.1, 0.2, 0.3]]), torch.tensor([[1, -1, 2]]), "the value -1 (if -1"),
    (torch.tensor([[0.1, 0.2, 0.3]]), torch.tensor([[1, 200, 2]]), "found 200;"),
    # Past 2^24 the float32 copy of the label rounds: the message still names the exact label.
    (torch.tensor([[0.1, 0.2, 0.3]]), torch.tensor([[1, 2**25 + 1, 2]]), f"found {2**25 + 1};"),
    (torch.tensor([[0.1, 0.2, 0.3]]), torch.tensor([[1.0, math.nan, 2.0]]), "NaN labels"),
    (torch.tensor([[0.1, 0.2, 0.3]]), torch.tensor([[1.0, math.inf, 2.0]]), "finite"),
]


@pytest.mark.parametrize(("preds", "target", "message"), BAD_INPUT)
def test_bad_values_raise_the_general_paths_error(
    preds: torch.Tensor, target: torch.Tensor, message: str
) -> None:
    for call in (lambda: ndcg(preds, target), lambda: NDCG().update(preds, target)):
        with pytest.raises(ValueError, match=re.escape(message)) as small_error:
            call()
        with pytest.raises(ValueError, match=re.escape(message)) as general_error:
            general(call)
        assert str(small_error.value) == str(general_error.value)


def test_swapped_arguments_still_get_the_hint() -> None:
    labels_as_scores = torch.tensor([[0.0, 3.0, 1.0, 2.0]])
    scores_as_labels = torch.tensor([[0.1, 0.9, 0.4, 0.2]])
    with pytest.warns(UserWarning, match="were scores and labels swapped"):
        ndcg(labels_as_scores, scores_as_labels)
    with pytest.warns(UserWarning, match="were scores and labels swapped"):
        NDCG(k=2).update(labels_as_scores, scores_as_labels)


def test_a_metric_on_another_device_gets_the_device_error() -> None:
    metric = NDCG(k=2).to("meta")
    gen = torch.Generator().manual_seed(4)
    with pytest.raises(ValueError, match="on the metric's device meta"):
        metric.update(torch.randn(2, 3, generator=gen), torch.randint(0, 3, (2, 3), generator=gen))


def test_the_accelerator_paths_tests_take_on_the_cpu_skip_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The parity tests' "cpu-without-read-back" device must check the branch-free paths."""
    take_accelerator_paths(monkeypatch)
    gen = torch.Generator().manual_seed(3)
    preds, target = torch.randn(4, 6, generator=gen), torch.randint(0, 3, (4, 6), generator=gen)
    with mock.patch.object(_dcg_paths, "small_ndcg") as spy:
        ndcg(preds, target)
        NDCG(k=3).update(preds, target)
    assert not spy.called
