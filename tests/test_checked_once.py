"""Options checked once, metadata always: regression tests of issue 17's defects.

- ``validate_args=False`` skips only the checks that read values: shapes, dtypes and options
  are still checked (they cost nothing), so no input is silently broadcast or misread.
- ``torch.compile`` at several list lengths (automatic dynamic shapes) and with
  ``dynamic=True`` gives the eager numbers and gradients.
- A metric's ``update`` checks no option again (counted with ``mock``) and raises on a
  device other than its states'.

The option-check counts (mocked private checks) are ``budget`` tests (tests/README.md). The Python
calls per call are a benchmark's figure: ``python benchmarks/bench_host.py`` prints them.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any
from unittest import mock

import numpy as np
import pytest
import torch

from tests.conftest import needs_torch_2_13_to_compile_losses
from torch_ndcg import (
    NDCG,
    ApproxNDCGLoss,
    LambdaRankLoss,
    NeuralNDCGLoss,
    RetrievalNDCG,
    approx_ndcg_loss,
    dcg,
    lambdarank_loss,
    ndcg,
    neural_ndcg_loss,
)
from torch_ndcg.functional import retrieval_ndcg

SCORES = torch.tensor([[0.3, 0.1, 0.9, 0.5], [0.2, 0.8, 0.4, 0.6]])
LABELS = torch.tensor([[1, 0, 2, 0], [0, 1, 0, 2]])

# --- validate_args=False still checks metadata ------------------------------------------------

LIST_CALLS: dict[str, Callable[..., Any]] = {
    "ndcg": lambda p, t, **kw: ndcg(p, t, validate_args=False, **kw),
    "dcg": lambda p, t, **kw: dcg(p, t, validate_args=False, **kw),
    "NDCG.update": lambda p, t, **kw: NDCG(validate_args=False, **kw).update(p, t),
    "lambdarank_loss": lambda p, t, **kw: lambdarank_loss(p, t, validate_args=False, **kw),
    "approx_ndcg_loss": lambda p, t, **kw: approx_ndcg_loss(p, t, validate_args=False, **kw),
    "neural_ndcg_loss": lambda p, t, **kw: neural_ndcg_loss(p, t, validate_args=False, **kw),
    "LambdaRankLoss": lambda p, t, **kw: LambdaRankLoss(validate_args=False, **kw)(p, t),
}


@pytest.mark.parametrize("name", list(LIST_CALLS))
def test_unvalidated_labels_of_another_shape_raise(name: str) -> None:
    # Labels [1, L] would broadcast over scores [B, L]: validated or not, that is an error.
    message = "Expected `preds` and `target` to have the same shape, but got (2, 4) and (1, 4)."
    with pytest.raises(ValueError, match=re.escape(message)):
        LIST_CALLS[name](SCORES, LABELS[:1])


@pytest.mark.parametrize("name", list(LIST_CALLS))
def test_unvalidated_integer_scores_and_float_ignore_index_raise(name: str) -> None:
    with pytest.raises(TypeError, match="Expected `preds` to be a floating tensor"):
        LIST_CALLS[name](LABELS.float().long(), LABELS)
    with pytest.raises(TypeError, match=re.escape("Expected `ignore_index` to be an int or None")):
        LIST_CALLS[name](SCORES, LABELS, ignore_index=-1.0)


@pytest.mark.parametrize("name", ["ndcg", "dcg", "NDCG.update"])
@pytest.mark.parametrize(
    ("option", "value"), [("ties", "firts"), ("gain", "exp"), ("discount", "log")]
)
def test_unvalidated_misspelt_options_raise(name: str, option: str, value: str) -> None:
    with pytest.raises(ValueError, match=re.escape(f"Expected `{option}` to be one of")):
        LIST_CALLS[name](SCORES, LABELS, **{option: value})


@pytest.mark.parametrize(
    "call",
    [
        lambda: ndcg(SCORES, LABELS, empty_target_action="Pos", validate_args=False),
        lambda: NDCG(empty_target_action="Pos", validate_args=False),
        lambda: RetrievalNDCG(empty_target_action="Pos", validate_args=False),
        lambda: retrieval_ndcg(
            SCORES, LABELS, LABELS, empty_target_action="Pos", validate_args=False
        ),
    ],
)
def test_unvalidated_empty_target_action_is_checked(call: Callable[[], Any]) -> None:
    with pytest.raises(ValueError, match=re.escape("Expected `empty_target_action` to be one of")):
        call()


def test_unvalidated_retrieval_rows_need_indexes_of_their_shape() -> None:
    metric = RetrievalNDCG(validate_args=False)
    preds = torch.rand(4, generator=torch.Generator().manual_seed(0))
    with pytest.raises(ValueError, match=re.escape("Expected `indexes` to have the shape")):
        metric.update(preds, torch.ones(4), torch.zeros(2, dtype=torch.int64))
    with pytest.raises(TypeError, match=re.escape("Expected `indexes` to be an integer")):
        metric.update(preds, torch.ones(4), torch.zeros(4))
    assert metric.preds == []  # nothing was stored


@pytest.mark.parametrize("preds", [[0.1, 0.2], np.array([0.1, 0.2])])
@pytest.mark.parametrize("validate_args", [True, False])
def test_retrieval_update_names_a_non_tensor_preds(preds: Any, validate_args: bool) -> None:
    metric = RetrievalNDCG(validate_args=validate_args)
    with pytest.raises(TypeError, match=re.escape("Expected `preds` to be a torch.Tensor")):
        metric.update(preds, torch.ones(2), torch.zeros(2, dtype=torch.int64))


def test_validated_and_unvalidated_agree_on_valid_input() -> None:
    # The checks that remain with validate_args=False change no number.
    for k in (None, 2, [1, 3]):
        torch.testing.assert_close(
            ndcg(SCORES, LABELS, k=k, validate_args=False), ndcg(SCORES, LABELS, k=k)
        )


# --- devices ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("cls", "args"),
    [
        (NDCG, (torch.empty(4, 5, device="meta"), torch.empty(4, 5, device="meta"))),
        (
            RetrievalNDCG,
            (
                torch.empty(5, device="meta"),
                torch.empty(5, device="meta"),
                torch.empty(5, dtype=torch.int64, device="meta"),
            ),
        ),
    ],
)
def test_metric_on_the_cpu_fed_meta_tensors_raises(cls: type, args: tuple[Any, ...]) -> None:
    # It used to count the lists and add nothing: NDCG(k=3) gave count 4, value 0.
    metric = cls(k=3)
    message = "Expected `preds` on the metric's device cpu, but got meta"
    with pytest.raises(ValueError, match=re.escape(message)):
        metric.update(*args)
    if cls is NDCG:
        assert metric.count.tolist() == [0]


def test_metric_moved_to_meta_takes_meta_tensors() -> None:
    metric = NDCG(k=3).to("meta")
    metric.update(torch.empty(4, 5, device="meta"), torch.empty(4, 5, device="meta"))
    assert metric.sum_ndcg.device.type == "meta"


# --- options are checked in __init__, not per call --------------------------------------------

OPTION_CHECKS = ("check_k", "check_option", "check_ignore_index", "check_bool", "check_positive")


@pytest.mark.budget
def _count_option_checks(step: Callable[[], Any]) -> dict[str, int]:
    from torch_ndcg import _validation

    counts: dict[str, int] = {}
    patches = [
        mock.patch.object(_validation, name, wraps=getattr(_validation, name))
        for name in OPTION_CHECKS
    ]
    mocks = [patch.start() for patch in patches]
    try:
        for _ in range(3):
            step()
    finally:
        for patch in patches:
            patch.stop()
    for name, checked in zip(OPTION_CHECKS, mocks, strict=True):
        counts[name] = checked.call_count
    return counts


def _batch() -> tuple[torch.Tensor, torch.Tensor]:
    preds = torch.randn(8, 10, generator=torch.Generator().manual_seed(0))
    target = torch.randint(0, 3, (8, 10), generator=torch.Generator().manual_seed(1))
    return preds, target


def _steps() -> dict[str, Callable[[], Any]]:
    preds, target = _batch()
    ids = torch.arange(8).repeat_interleave(10)
    metric, retrieval = NDCG(k=[1, 5, 10]), RetrievalNDCG(k=5)
    losses = [LambdaRankLoss(k=5), ApproxNDCGLoss(k=5), NeuralNDCGLoss(k=5)]
    leaf = preds.clone().requires_grad_()
    steps: dict[str, Callable[[], Any]] = {
        "NDCG.update": lambda: metric.update(preds, target),
        "RetrievalNDCG.update": lambda: retrieval.update(
            preds.reshape(-1), target.reshape(-1), ids
        ),
    }
    for loss in losses:
        steps[type(loss).__name__] = lambda loss=loss: loss(leaf, target).backward()
    return steps


@pytest.mark.parametrize("name", list(_steps()))
@pytest.mark.budget
def test_no_option_is_checked_again_per_call(name: str) -> None:
    step = _steps()[name]
    assert _count_option_checks(step) == dict.fromkeys(OPTION_CHECKS, 0)


@pytest.mark.budget
def test_the_functions_check_their_options_once() -> None:
    # A function call is where the options are given: checked there, once each, and calls
    # with the same options take the configuration checked at the first.
    from torch_ndcg import _validation

    _validation._kept_options.clear()
    counts = _count_option_checks(lambda: ndcg(SCORES, LABELS, k=[1, 2]))
    assert counts["check_k"] == 1
    assert counts["check_option"] == 4  # gain, discount, ties, empty_target_action
    counts = _count_option_checks(lambda: ndcg(SCORES, LABELS, k=[1, 2], gain=lambda y: y))
    assert counts["check_k"] == 3  # a new function at every call: each is checked


@pytest.mark.parametrize(
    ("good", "bad", "error"),
    [
        ({"validate_args": True}, {"validate_args": 1}, TypeError),
        ({"k": [5]}, {"k": [5.0]}, ValueError),
        ({"k": 2}, {"k": True}, ValueError),
        ({"ignore_index": -1}, {"ignore_index": -1.0}, TypeError),
        ({"ties": "first"}, {"ties": "firts"}, ValueError),
    ],
)
def test_options_kept_from_an_earlier_call_never_pass_a_bad_one(
    good: dict[str, Any], bad: dict[str, Any], error: type[Exception]
) -> None:
    ndcg(SCORES, LABELS, **good)  # kept
    for _ in range(2):  # equal to the kept options, not of their type: raises every time
        with pytest.raises(error):
            ndcg(SCORES, LABELS, **bad)


def test_setting_a_loss_hyper_parameter_checks_it() -> None:
    loss = LambdaRankLoss()
    loss.sigma = 2.0
    assert loss.options.sigma == 2.0
    with pytest.raises(ValueError, match=re.escape("Expected `sigma` to be a positive")):
        loss.sigma = -1.0
    assert loss.sigma == 2.0


# --- torch.compile at several list lengths ----------------------------------------------------

# Dynamo and AOT autograd are where a symbolic length broke the graph; inductor's code
# generation (tested at one length in test_host_reads, test_losses) adds minutes, not coverage.
BACKEND = "aot_eager"

COMPILED: dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {
    "ndcg": lambda p, t: ndcg(p, t, k=3),
    "lambdarank_loss": lambda p, t: lambdarank_loss(p, t, k=3),
    "approx_ndcg_loss": lambda p, t: approx_ndcg_loss(p, t, k=3),
    "neural_ndcg_loss": lambda p, t: neural_ndcg_loss(p, t, k=3, max_iter=2),
}


@needs_torch_2_13_to_compile_losses
@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize("dynamic", [None, True])
@pytest.mark.parametrize("name", list(COMPILED))
def test_compiled_at_several_lengths_equals_eager(name: str, dynamic: bool | None) -> None:
    torch._dynamo.reset()
    call = COMPILED[name]
    compiled = torch.compile(call, dynamic=dynamic, backend=BACKEND)
    gen = torch.Generator().manual_seed(3)
    for length in (5, 9):
        preds = torch.randn(4, length, generator=gen)
        target = torch.randint(0, 4, (4, length), generator=gen)
        eager_leaf, compiled_leaf = preds.clone().requires_grad_(), preds.clone().requires_grad_()
        expected, got = call(eager_leaf, target), compiled(compiled_leaf, target)
        torch.testing.assert_close(got, expected)
        if expected.requires_grad:
            expected.backward()
            got.backward()
            torch.testing.assert_close(compiled_leaf.grad, eager_leaf.grad)


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize("dynamic", [None, True])
def test_metric_update_compiles_fullgraph_at_several_lengths(dynamic: bool | None) -> None:
    torch._dynamo.reset()
    eager, compiled_metric = NDCG(k=[1, 3]), NDCG(k=[1, 3])
    update = torch.compile(compiled_metric.update, fullgraph=True, dynamic=dynamic, backend=BACKEND)
    gen = torch.Generator().manual_seed(4)
    for length in (5, 9):
        preds = torch.randn(4, length, generator=gen)
        target = torch.randint(0, 4, (4, length), generator=gen)
        update(preds, target)
        eager.update(preds, target)
    torch.testing.assert_close(compiled_metric.compute(), eager.compute())


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_compiled_gain_overflow_check_at_a_dynamic_length_raises() -> None:
    torch._dynamo.reset()
    compiled = torch.compile(lambda p, t: ndcg(p, t), dynamic=True, fullgraph=True, backend=BACKEND)
    gen = torch.Generator().manual_seed(1)
    compiled(torch.rand(2, 6, generator=gen), torch.randint(0, 3, (2, 6), generator=gen))
    with pytest.raises(RuntimeError, match=re.escape("Expected `target` values of at most 127.99")):
        compiled(torch.rand(2, 9, generator=gen), torch.full((2, 9), 200))


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_compiled_float64_at_dynamic_lengths_equals_eager_and_checks_the_limit() -> None:
    """float64 scores: the gain limit depends on the list length (a symbol when dynamic), whose
    message once broke Dynamo (``Unknown format code 'f'``)."""
    torch._dynamo.reset()
    compiled = torch.compile(
        lambda p, t: ndcg(p, t, k=3), dynamic=True, fullgraph=True, backend=BACKEND
    )
    gen = torch.Generator().manual_seed(2)
    for length in (6, 11):
        preds = torch.rand(2, length, generator=gen, dtype=torch.float64)
        target = torch.randint(0, 3, (2, length), generator=gen)
        torch.testing.assert_close(compiled(preds, target), ndcg(preds, target, k=3))
    message = "Expected `target` values of at most log2(max(float64) / L + 1)"
    preds = torch.rand(2, 9, generator=gen, dtype=torch.float64)
    with pytest.raises(RuntimeError, match=re.escape(message)):
        compiled(preds, torch.full((2, 9), 2000))
    with pytest.raises(ValueError, match=re.escape("at most 1020.83 with")):  # eager: the number
        ndcg(preds, torch.full((2, 9), 2000))
