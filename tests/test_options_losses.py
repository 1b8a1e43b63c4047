"""Every option of the losses, the click simulation and the paired tests, against references.

Each public entry point (function and module) is run with each value of each of its options
and compared with something independent of the package: the loop and dense-autograd
references of `tests.references`, scipy, or the documented formula written out here. Where an
option value could be silently read as another one, the test also checks that its data tells
the two apart: the reference under every other value of the option gives another answer
(`assert_told_apart`), so a package that took one value for another would fail the test.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tests import references as ref
from torch_ndcg import (
    ApproxNDCGLoss,
    LambdaRankLoss,
    NeuralNDCGLoss,
    SoftmaxLoss,
    UnbiasedLambdaRankLoss,
    XENDCGLoss,
    approx_ndcg_loss,
    examination_probability,
    lambdarank_loss,
    neural_ndcg_loss,
    paired_randomization_test,
    paired_t_test,
    simulate_clicks,
    softmax_loss,
    xe_ndcg_loss,
)

scipy_stats = pytest.importorskip("scipy.stats")

Pair = tuple[torch.Tensor, torch.Tensor]  # (loss, gradient of its sum)


class _Default:
    """An option left out: the package's default."""

    def __repr__(self) -> str:
        return "default"


DEFAULT = _Default()


def square_gain(y: Any) -> Any:
    """A callable gain unlike both named ones (and not a multiple of either)."""
    return y * y


def plus_one_gain(y: Any) -> Any:
    """A callable gain with g(0) != 0: on 0/1 clicks the only kind that is not normalised away."""
    return y + 1.0


def inverse_discount(rank: Any) -> Any:
    """A callable discount unlike both named ones, 1 / r (differentiable for ApproxNDCG)."""
    return 1.0 / rank


def close(got: torch.Tensor, want: torch.Tensor) -> None:
    torch.testing.assert_close(got, want, rtol=1e-9, atol=1e-12)


def told_apart(first: Pair, second: Pair) -> bool:
    """Whether two (loss, gradient) answers differ beyond the comparison's tolerance."""
    if first[0].shape != second[0].shape:
        return True
    return any(
        float((a - b).abs().max()) > 1e-7 for a, b in zip(first, second, strict=True) if a.numel()
    )


def assert_told_apart(
    options: dict[str, Any],
    values: dict[str, list[Any]],
    varied: str,
    reference: Callable[[dict[str, Any]], Pair],
    want: Pair,
) -> None:
    """The reference under every other value of ``varied`` gives another answer than ``want``."""
    for other in values[varied]:
        if other is options.get(varied, DEFAULT):
            continue
        if other is DEFAULT:
            changed = {key: value for key, value in options.items() if key != varied}
        else:
            changed = {**options, varied: other}
        assert told_apart(reference(changed), want), (varied, options.get(varied), other)


def grad_of(loss: torch.Tensor, leaf: torch.Tensor) -> torch.Tensor:
    if not loss.requires_grad:  # nothing counts: a constant 0
        return torch.zeros_like(leaf)
    (grad,) = torch.autograd.grad(loss.sum(), leaf, allow_unused=True)
    return torch.zeros_like(leaf) if grad is None else grad


def function_and_module(
    function: Callable[..., torch.Tensor],
    module: type[torch.nn.Module],
    preds: torch.Tensor,
    target: torch.Tensor,
    options: dict[str, Any],
    mask: torch.Tensor | None = None,
    weight: torch.Tensor | None = None,
) -> dict[str, Pair]:
    """The loss and the gradient of its sum from the function and from the module."""
    answers = {}
    for entry in ("function", "module"):
        leaf = preds.clone().requires_grad_()
        if entry == "function":
            loss = function(leaf, target, mask=mask, weight=weight, **options)
        else:
            loss = module(**options)(leaf, target, mask, weight)
        answers[entry] = (loss.detach(), grad_of(loss, leaf))
    return answers


def reduced(
    losses: list[float], grads: list[list[float]], counted: list[bool], reduction: str
) -> Pair:
    """The documented reductions of per-list losses (and their gradients): "mean" over counted."""
    values = torch.tensor(losses, dtype=torch.float64)
    grad = torch.tensor(grads, dtype=torch.float64)
    if reduction == "none":
        return values, grad
    if reduction == "sum":
        return values.sum(), grad
    count = max(sum(counted), 1)
    return values.sum() / count, grad / count


def loss_lists(
    seed: int, n: int = 4, length: int = 7
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Scores, labels 0-3, a mask (far-off scores on its padding), weights; the last list has
    no relevant item, so "mean" (over the lists that count) is neither "sum" nor a plain mean.
    """
    gen = torch.Generator().manual_seed(seed)
    preds = torch.randn(n, length, generator=gen, dtype=torch.float64)
    target = torch.randint(0, 4, (n, length), generator=gen)
    target[-1] = 0
    mask = torch.rand(n, length, generator=gen) > 0.3
    mask[:, :2] = True
    preds = torch.where(mask, preds, 4.0)  # padding would rank first if it were taken
    weight = 0.2 + 2 * torch.rand(n, length, generator=gen, dtype=torch.float64)
    return preds, target, mask, weight


# --- LambdaRankLoss / lambdarank_loss ------------------------------------------------------------

LAMBDA_VALUES: dict[str, list[Any]] = {
    "weighting": [DEFAULT, "ndcg2", "ndcg2pp"],
    "mu": [DEFAULT, 0.0, 2.5],
    "sigma": [DEFAULT, 0.4, 2.5],
    "k": [DEFAULT, 1, 3],
    "gain": [DEFAULT, "linear", square_gain],
    "discount": [DEFAULT, "jarvelin", inverse_discount],
    "reduction": [DEFAULT, "sum", "none"],
}
EXPLICIT_DEFAULTS = {
    "weighting": "lambdarank",
    "mu": 10.0,
    "sigma": 1.0,
    "k": None,
    "gain": "exponential",
    "discount": "log2",
    "reduction": "mean",
}


def lambdarank_reference(
    preds: torch.Tensor,
    target: torch.Tensor,
    mask: torch.Tensor,
    options: dict[str, Any],
    weight: torch.Tensor | None = None,
) -> Pair:
    given_options = dict(options)
    given_options.pop("ignore_index", None)
    reduction = given_options.pop("reduction", "mean")
    losses, grads, counted = ref.lambdaloss_lists(
        preds, target, mask, weight=weight, **given_options
    )
    return reduced(losses, grads, counted, reduction)


def option_cases(values: dict[str, list[Any]], bases: dict[str, list[dict[str, Any]]]) -> list[Any]:
    """One case per option and value, on each base (the options the option is seen with)."""
    cases = []
    for name, option_values in values.items():
        for base in bases.get(name, bases["*"]):
            for value in option_values:
                options = dict(base) if value is DEFAULT else {**base, name: value}
                label = getattr(value, "__name__", repr(value))
                base_label = ",".join(f"{k}={getattr(v, '__name__', v)}" for k, v in base.items())
                cases.append(pytest.param(name, options, id=f"{name}={label}[{base_label}]"))
    return cases


LAMBDA_BASES = {
    "*": [{"weighting": w} for w in ("lambdarank", "ndcg2", "ndcg2pp")],
    "weighting": [{}, {"k": 2, "discount": "jarvelin"}],
    "mu": [{"weighting": "ndcg2pp"}],
}


@pytest.mark.parametrize(("varied", "options"), option_cases(LAMBDA_VALUES, LAMBDA_BASES))
def test_lambdarank_each_option_value_equals_the_loop_reference(
    varied: str, options: dict[str, Any]
) -> None:
    preds, target, mask, _ = loss_lists(seed=1)

    def reference(opts: dict[str, Any]) -> Pair:
        return lambdarank_reference(preds, target, mask, opts)

    want = reference(options)
    for got in function_and_module(
        lambdarank_loss, LambdaRankLoss, preds, target, options, mask=mask
    ).values():
        close(got[0], want[0])
        close(got[1], want[1])
    assert_told_apart(options, LAMBDA_VALUES, varied, reference, want)


def test_explicit_defaults_equal_the_defaults() -> None:
    """Every default is the value the docs name: passing it changes nothing."""
    preds, target, mask, _ = loss_lists(seed=2)
    for function, module, named in (
        (lambdarank_loss, LambdaRankLoss, EXPLICIT_DEFAULTS),
        (approx_ndcg_loss, ApproxNDCGLoss, {**APPROX_DEFAULTS, **COMMON_DEFAULTS}),
        (neural_ndcg_loss, NeuralNDCGLoss, {**NEURAL_DEFAULTS, **COMMON_DEFAULTS}),
    ):
        left_out = function_and_module(function, module, preds, target, {}, mask=mask)
        explicit = function_and_module(function, module, preds, target, named, mask=mask)
        for entry in ("function", "module"):
            close(explicit[entry][0], left_out[entry][0])
            close(explicit[entry][1], left_out[entry][1])
    # The unbiased loss: left-out options equal the documented defaults.
    loss_fn = UnbiasedLambdaRankLoss(num_positions=3)
    assert (loss_fn.bias_norm, loss_fn.momentum, loss_fn.match_exposure) == (2.0, 1.0, True)
    assert (loss_fn.k, loss_fn.sigma, loss_fn.gain, loss_fn.discount) == (
        None,
        1.0,
        "exponential",
        "log2",
    )
    assert (loss_fn.reduction, loss_fn.ignore_index) == ("mean", None)


PADDINGS = ["mask", "ignore_index", "mask and ignore_index", "weight", "weight and mask"]


def padded_call(
    how: str, preds: torch.Tensor, target: torch.Tensor, mask: torch.Tensor, weight: torch.Tensor
) -> tuple[torch.Tensor, dict[str, Any], torch.Tensor | None, torch.Tensor | None, torch.Tensor]:
    """The package's arguments for one way of padding: (target, options, mask, weight) and the
    mask of real items the reference keeps."""
    real = torch.ones_like(mask) if how == "weight" else mask
    options: dict[str, Any] = {}
    given_mask: torch.Tensor | None = mask
    if "ignore_index" in how:
        options["ignore_index"] = -1
        if how == "ignore_index":
            target = torch.where(mask, target, -1)
            given_mask = None
        else:  # half the padding by each: the real items are those both keep
            by_label = mask | (torch.arange(mask.shape[-1]) % 2 == 0)
            target = torch.where(by_label, target, -1)
            given_mask = mask | ~by_label
    if how == "weight":
        given_mask = None
    return target, options, given_mask, weight if "weight" in how else None, real


@pytest.mark.parametrize("how", PADDINGS)
@pytest.mark.parametrize("weighting", ["lambdarank", "ndcg2pp"])
def test_lambdarank_padding_and_weight_equal_the_loop_reference(how: str, weighting: str) -> None:
    preds, target, mask, weight = loss_lists(seed=3)
    target, options, given_mask, given_weight, real = padded_call(how, preds, target, mask, weight)
    options = {**options, "weighting": weighting, "k": 4, "reduction": "none"}
    want = lambdarank_reference(preds, target.clamp(min=0), real, options, given_weight)
    for got in function_and_module(
        lambdarank_loss, LambdaRankLoss, preds, target, options, given_mask, given_weight
    ).values():
        close(got[0], want[0])
        close(got[1], want[1])
    # Told apart: every item real, or every weight 1, is another answer.
    everything = torch.ones_like(mask)
    assert told_apart(lambdarank_reference(preds, target.clamp(min=0), everything, options), want)
    if given_weight is not None:
        assert told_apart(lambdarank_reference(preds, target, real, options), want)


@pytest.mark.parametrize("weighting", ["lambdarank", "ndcg2", "ndcg2pp"])
def test_lambdarank_long_lists_take_the_blockwise_path_with_every_option(weighting: str) -> None:
    """3 x 105 items: more than 32,768 pairs, past the dense path."""
    preds, target, mask, weight = loss_lists(seed=4, n=3, length=105)
    options = {
        "weighting": weighting,
        "k": 7,
        "sigma": 0.7,
        "mu": 2.0,
        "gain": square_gain,
        "discount": inverse_discount,
        "reduction": "sum",
    }
    want = lambdarank_reference(preds, target, mask, options, weight)
    for got in function_and_module(
        lambdarank_loss, LambdaRankLoss, preds, target, options, mask, weight
    ).values():
        close(got[0], want[0])
        close(got[1], want[1])


@settings(max_examples=40, deadline=None)
@given(
    options=st.fixed_dictionaries(
        {},
        optional={
            "weighting": st.sampled_from(["lambdarank", "ndcg2", "ndcg2pp"]),
            "mu": st.sampled_from([0.0, 0.5, 4.0]),
            "sigma": st.sampled_from([0.3, 1.0, 3.0]),
            "k": st.sampled_from([1, 2, 5, 20]),
            "gain": st.sampled_from(["exponential", "linear", square_gain]),
            "discount": st.sampled_from(["log2", "jarvelin", inverse_discount]),
            "reduction": st.sampled_from(["mean", "sum", "none"]),
        },
    ),
    how=st.sampled_from(PADDINGS),
    shape=st.sampled_from([(1, 1), (2, 5), (3, 6), (5, 3)]),
    module=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_lambdarank_any_options_equal_the_loop_reference(
    options: dict[str, Any], how: str, shape: tuple[int, int], module: bool, seed: int
) -> None:
    preds, target, mask, weight = loss_lists(seed, *shape)
    target, padding, given_mask, given_weight, real = padded_call(how, preds, target, mask, weight)
    options = {**options, **padding}
    want = lambdarank_reference(preds, target.clamp(min=0), real, options, given_weight)
    got = function_and_module(
        lambdarank_loss, LambdaRankLoss, preds, target, options, given_mask, given_weight
    )["module" if module else "function"]
    close(got[0], want[0])
    close(got[1], want[1])


# --- ApproxNDCGLoss / approx_ndcg_loss ----------------------------------------------------------

COMMON_DEFAULTS = {"gain": "exponential", "discount": "log2", "reduction": "mean"}
APPROX_DEFAULTS = {"temperature": 1.0, "k": None}
APPROX_VALUES: dict[str, list[Any]] = {
    "temperature": [DEFAULT, 0.3, 2.5],
    "k": [DEFAULT, 1, 4],  # 4: some lists have more real items, some not
    "gain": [DEFAULT, "linear", square_gain],
    "discount": [DEFAULT, "jarvelin", inverse_discount],
    "reduction": [DEFAULT, "sum", "none"],
}
APPROX_BASES = {"*": [{}, {"k": 3, "temperature": 0.5}], "k": [{}, {"temperature": 0.5}]}


def dense_reference(
    reference: Callable[..., torch.Tensor],
    preds: torch.Tensor,
    target: torch.Tensor,
    mask: torch.Tensor,
    options: dict[str, Any],
    weight: torch.Tensor | None = None,
) -> Pair:
    """A dense-autograd reference's loss and the gradient of its sum."""
    given_options = {key: value for key, value in options.items() if key != "ignore_index"}
    leaf = preds.clone().requires_grad_()
    loss = reference(leaf, target, mask, weight=weight, **given_options)
    return loss.detach(), grad_of(loss, leaf)


@pytest.mark.parametrize(("varied", "options"), option_cases(APPROX_VALUES, APPROX_BASES))
def test_approx_each_option_value_equals_the_dense_reference(
    varied: str, options: dict[str, Any]
) -> None:
    preds, target, mask, _ = loss_lists(seed=5)

    def reference(opts: dict[str, Any]) -> Pair:
        return dense_reference(ref.approx_ndcg_dense, preds, target, mask, opts)

    want = reference(options)
    for got in function_and_module(
        approx_ndcg_loss, ApproxNDCGLoss, preds, target, options, mask=mask
    ).values():
        close(got[0], want[0])
        close(got[1], want[1])
    assert_told_apart(options, APPROX_VALUES, varied, reference, want)


def test_approx_cut_applies_only_to_lists_longer_than_k() -> None:
    """A worked example: k = 2; the first list has 2 real items (no cut), the second 3.

    Scores far apart (T = 1e-3 is not needed: the sigmoid of a gap of 40 is 1 to float64), so
    the smooth ranks are the ranks.
    """
    preds = torch.tensor([[40.0, 0.0, 9.0], [40.0, 0.0, -40.0]], dtype=torch.float64)
    target = torch.tensor([[0, 1, 5], [0, 1, 1]])
    mask = torch.tensor([[True, True, False], [True, True, True]])
    loss = approx_ndcg_loss(preds, target, mask=mask, k=2, reduction="none")
    d2, d3 = 1 / math.log2(3), 1 / math.log2(4)
    # First list: gain 1 at rank 2, no cut; ideal 1. Second: ranks 2 and 3, each cut by
    # sigmoid(k + 1/2 - rank); ideal DCG@2 = 1 + d2.
    sig = torch.sigmoid(torch.tensor([0.5, -0.5], dtype=torch.float64)).tolist()
    expected = [1 - d2, 1 - (d2 * sig[0] + d3 * sig[1]) / (1 + d2)]
    close(loss, torch.tensor(expected, dtype=torch.float64))


@pytest.mark.parametrize("how", PADDINGS)
def test_approx_padding_and_weight_equal_the_dense_reference(how: str) -> None:
    preds, target, mask, weight = loss_lists(seed=6)
    target, options, given_mask, given_weight, real = padded_call(how, preds, target, mask, weight)
    options = {**options, "k": 3, "temperature": 0.7, "reduction": "none"}
    want = dense_reference(
        ref.approx_ndcg_dense, preds, target.clamp(min=0), real, options, given_weight
    )
    for got in function_and_module(
        approx_ndcg_loss, ApproxNDCGLoss, preds, target, options, given_mask, given_weight
    ).values():
        close(got[0], want[0])
        close(got[1], want[1])
    everything = torch.ones_like(mask)
    assert told_apart(
        dense_reference(ref.approx_ndcg_dense, preds, target.clamp(min=0), everything, options),
        want,
    )
    if given_weight is not None:
        assert told_apart(
            dense_reference(ref.approx_ndcg_dense, preds, target, real, options), want
        )


def test_approx_long_lists_take_the_blockwise_path_with_every_option() -> None:
    preds, target, mask, weight = loss_lists(seed=7, n=3, length=105)
    options = {
        "temperature": 0.6,
        "k": 9,
        "gain": square_gain,
        "discount": inverse_discount,
        "reduction": "sum",
    }
    want = dense_reference(ref.approx_ndcg_dense, preds, target, mask, options, weight)
    for got in function_and_module(
        approx_ndcg_loss, ApproxNDCGLoss, preds, target, options, mask, weight
    ).values():
        close(got[0], want[0])
        close(got[1], want[1])


@settings(max_examples=40, deadline=None)
@given(
    options=st.fixed_dictionaries(
        {},
        optional={
            "temperature": st.sampled_from([0.2, 1.0, 3.0]),
            "k": st.sampled_from([1, 2, 5, 20]),
            "gain": st.sampled_from(["exponential", "linear", square_gain]),
            "discount": st.sampled_from(["log2", "jarvelin", inverse_discount]),
            "reduction": st.sampled_from(["mean", "sum", "none"]),
        },
    ),
    how=st.sampled_from(PADDINGS),
    shape=st.sampled_from([(1, 1), (2, 5), (3, 6), (5, 3)]),
    module=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_approx_any_options_equal_the_dense_reference(
    options: dict[str, Any], how: str, shape: tuple[int, int], module: bool, seed: int
) -> None:
    preds, target, mask, weight = loss_lists(seed, *shape)
    target, padding, given_mask, given_weight, real = padded_call(how, preds, target, mask, weight)
    options = {**options, **padding}
    want = dense_reference(
        ref.approx_ndcg_dense, preds, target.clamp(min=0), real, options, given_weight
    )
    got = function_and_module(
        approx_ndcg_loss, ApproxNDCGLoss, preds, target, options, given_mask, given_weight
    )["module" if module else "function"]
    close(got[0], want[0])
    close(got[1], want[1])


# --- NeuralNDCGLoss / neural_ndcg_loss ----------------------------------------------------------

NEURAL_DEFAULTS = {"temperature": 1.0, "k": None, "max_iter": 50, "tol": 1e-6}
NEURAL_VALUES: dict[str, list[Any]] = {
    "temperature": [DEFAULT, 0.5, 2.0],
    "max_iter": [DEFAULT, 0, 3],
    "tol": [DEFAULT, 1e-3, 0.05],
    "k": [DEFAULT, 1, 3],
    "gain": [DEFAULT, "linear", square_gain],
    "discount": [DEFAULT, "jarvelin", inverse_discount],
    "reduction": [DEFAULT, "sum", "none"],
}
NEURAL_BASES = {"*": [{}], "tol": [{}, {"temperature": 0.5}]}


@pytest.mark.parametrize(("varied", "options"), option_cases(NEURAL_VALUES, NEURAL_BASES))
def test_neural_each_option_value_equals_the_loop_reference(
    varied: str, options: dict[str, Any]
) -> None:
    preds, target, mask, _ = loss_lists(seed=8, n=3, length=5)

    def reference(opts: dict[str, Any]) -> Pair:
        return dense_reference(ref.neural_ndcg_dense, preds, target, mask, opts)

    want = reference(options)
    for got in function_and_module(
        neural_ndcg_loss, NeuralNDCGLoss, preds, target, options, mask=mask
    ).values():
        close(got[0], want[0])
        close(got[1], want[1])
    assert_told_apart(options, NEURAL_VALUES, varied, reference, want)


@pytest.mark.parametrize("how", PADDINGS)
def test_neural_padding_and_weight_equal_the_loop_reference(how: str) -> None:
    preds, target, mask, weight = loss_lists(seed=9, n=3, length=5)
    target, options, given_mask, given_weight, real = padded_call(how, preds, target, mask, weight)
    options = {**options, "k": 3, "temperature": 0.7, "reduction": "none"}
    want = dense_reference(
        ref.neural_ndcg_dense, preds, target.clamp(min=0), real, options, given_weight
    )
    for got in function_and_module(
        neural_ndcg_loss, NeuralNDCGLoss, preds, target, options, given_mask, given_weight
    ).values():
        close(got[0], want[0])
        close(got[1], want[1])
    everything = torch.ones_like(mask)
    assert told_apart(
        dense_reference(ref.neural_ndcg_dense, preds, target.clamp(min=0), everything, options),
        want,
    )
    if given_weight is not None:
        assert told_apart(
            dense_reference(ref.neural_ndcg_dense, preds, target, real, options), want
        )


@settings(max_examples=15, deadline=None)
@given(
    options=st.fixed_dictionaries(
        {},
        optional={
            "temperature": st.sampled_from([0.5, 1.0, 2.0]),
            "max_iter": st.sampled_from([0, 1, 7]),
            "tol": st.sampled_from([0.0, 1e-4, 0.1]),
            "k": st.sampled_from([1, 2, 10]),
            "gain": st.sampled_from(["exponential", "linear", square_gain]),
            "discount": st.sampled_from(["log2", "jarvelin", inverse_discount]),
            "reduction": st.sampled_from(["mean", "sum", "none"]),
        },
    ),
    how=st.sampled_from(PADDINGS),
    shape=st.sampled_from([(1, 1), (2, 4), (3, 3)]),
    module=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_neural_any_options_equal_the_loop_reference(
    options: dict[str, Any], how: str, shape: tuple[int, int], module: bool, seed: int
) -> None:
    preds, target, mask, weight = loss_lists(seed, *shape)
    target, padding, given_mask, given_weight, real = padded_call(how, preds, target, mask, weight)
    options = {**options, **padding}
    want = dense_reference(
        ref.neural_ndcg_dense, preds, target.clamp(min=0), real, options, given_weight
    )
    got = function_and_module(
        neural_ndcg_loss, NeuralNDCGLoss, preds, target, options, given_mask, given_weight
    )["module" if module else "function"]
    close(got[0], want[0])
    close(got[1], want[1])


# --- SoftmaxLoss / XENDCGLoss (softmax_loss / xe_ndcg_loss) -------------------------------------

SOFTMAX_VALUES: dict[str, list[Any]] = {
    "gain": [DEFAULT, "linear", square_gain],
    "reduction": [DEFAULT, "sum", "none"],
}


def softmax_reference(
    preds: torch.Tensor,
    target: torch.Tensor,
    real: torch.Tensor,
    options: dict[str, Any],
    weight: torch.Tensor | None = None,
    noise: torch.Tensor | None = None,
) -> Pair:
    """The loop reference of the normalised (noisy, with ``noise``) gains' cross-entropy."""
    targets = ref.normalised_gains(
        target.tolist(),
        real.tolist(),
        options.get("gain", "exponential"),
        None if noise is None else noise.tolist(),
    )
    losses, grads = ref.cross_entropy_lists(
        preds.tolist(), targets, real.tolist(), None if weight is None else weight.tolist()
    )
    counted = [any(value > 0 for value in row) for row in targets]
    return reduced(losses, grads, counted, options.get("reduction", "mean"))


def softmax_answers(
    noisy: bool,
    preds: torch.Tensor,
    target: torch.Tensor,
    options: dict[str, Any],
    mask: torch.Tensor | None,
    weight: torch.Tensor | None,
    noise: torch.Tensor,
) -> dict[str, Pair]:
    """`function_and_module` of `softmax_loss`, or of `xe_ndcg_loss` with ``noise`` given."""
    if not noisy:
        return function_and_module(
            softmax_loss, SoftmaxLoss, preds, target, options, mask=mask, weight=weight
        )
    answers = {}
    for entry in ("function", "module"):
        leaf = preds.clone().requires_grad_()
        if entry == "function":
            loss = xe_ndcg_loss(leaf, target, mask=mask, weight=weight, noise=noise, **options)
        else:
            loss = XENDCGLoss(**options)(leaf, target, mask, weight, noise=noise)
        answers[entry] = (loss.detach(), grad_of(loss, leaf))
    return answers


@pytest.mark.parametrize("noisy", [False, True], ids=["softmax", "xe_ndcg"])
@pytest.mark.parametrize(("varied", "options"), option_cases(SOFTMAX_VALUES, {"*": [{}]}))
def test_softmax_losses_each_option_value_equals_the_loop_reference(
    varied: str, options: dict[str, Any], noisy: bool
) -> None:
    preds, target, mask, _ = loss_lists(seed=21)
    noise = torch.rand(preds.shape, generator=torch.Generator().manual_seed(3), dtype=preds.dtype)

    def reference(opts: dict[str, Any]) -> Pair:
        return softmax_reference(preds, target, mask, opts, noise=noise if noisy else None)

    want = reference(options)
    for got in softmax_answers(noisy, preds, target, options, mask, None, noise).values():
        close(got[0], want[0])
        close(got[1], want[1])
    assert_told_apart(options, SOFTMAX_VALUES, varied, reference, want)


@pytest.mark.parametrize("noisy", [False, True], ids=["softmax", "xe_ndcg"])
@pytest.mark.parametrize("how", PADDINGS)
def test_softmax_losses_padding_and_weight_equal_the_loop_reference(how: str, noisy: bool) -> None:
    preds, target, mask, weight = loss_lists(seed=22)
    noise = torch.rand(preds.shape, generator=torch.Generator().manual_seed(4), dtype=preds.dtype)
    target, options, given_mask, given_weight, real = padded_call(how, preds, target, mask, weight)
    want = softmax_reference(
        preds, target, real, {}, weight=given_weight, noise=noise if noisy else None
    )
    answers = softmax_answers(noisy, preds, target, options, given_mask, given_weight, noise)
    for got in answers.values():
        close(got[0], want[0])
        close(got[1], want[1])


def test_softmax_losses_explicit_defaults_equal_the_defaults() -> None:
    preds, target, mask, _ = loss_lists(seed=23)
    noise = torch.rand(preds.shape, generator=torch.Generator().manual_seed(5), dtype=preds.dtype)
    named = {"gain": "exponential", "reduction": "mean", "ignore_index": None}
    named["validate_args"] = True
    for noisy in (False, True):
        left_out = softmax_answers(noisy, preds, target, {}, mask, None, noise)
        explicit = softmax_answers(noisy, preds, target, named, mask, None, noise)
        for entry in ("function", "module"):
            close(explicit[entry][0], left_out[entry][0])
            close(explicit[entry][1], left_out[entry][1])
        unchecked = softmax_answers(
            noisy, preds, target, {"validate_args": False}, mask, None, noise
        )
        close(unchecked["function"][0], left_out["function"][0])


# --- UnbiasedLambdaRankLoss: forward and aggregated, and the biases it learns -----------------

UNBIASED_DEFAULTS = {"bias_norm": 2.0, "momentum": 1.0, "match_exposure": True}
UNBIASED_VALUES: dict[str, list[Any]] = {
    "k": [DEFAULT, 2],
    "sigma": [DEFAULT, 0.5, 2.0],
    "bias_norm": [DEFAULT, 0.0, 1.0],
    "momentum": [DEFAULT, 0.0, 0.5, 0.9],
    "match_exposure": [DEFAULT, False],
    "gain": [DEFAULT, "linear", plus_one_gain],
    "discount": [DEFAULT, "jarvelin", inverse_discount],
    "reduction": [DEFAULT, "sum", "none"],
}
# On 0/1 clicks 2^c - 1 = c: the two named gains are one gain there.
SAME_ON_CLICKS = (("linear", DEFAULT),)
N_POSITIONS = 5


def click_sessions(
    seed: int, n: int = 6, length: int = 6, steps: int = 3
) -> list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """``steps`` batches of ``n`` sessions: items shown in random order down to a depth of
    their own (lists of unequal length), random clicks; the last session has no shown click.
    """
    gen = torch.Generator().manual_seed(seed)
    batches = []
    for _ in range(steps):
        preds = torch.randn(n, length, generator=gen, dtype=torch.float64)
        clicks = (torch.rand(n, length, generator=gen) < 0.4).long()
        order = torch.stack([torch.randperm(length, generator=gen) for _ in range(n)])
        depth = torch.randint(2, N_POSITIONS + 1, (n, 1), generator=gen)
        depth[0] = N_POSITIONS
        positions = torch.where(order < depth, order, -1)
        clicks[-1] = torch.where(positions[-1] == -1, 1, 0)  # clicks on unshown items only
        batches.append((preds, clicks, positions))
    return batches


def unbiased_reference(
    batches: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]],
    options: dict[str, Any],
    num_positions: int = N_POSITIONS,
    aggregated: bool = False,
) -> list[tuple[torch.Tensor, torch.Tensor, list[float], list[float]]]:
    """Each step's reduced loss, the summed statistics and the biases.

    The batch statistics and losses of the loop references (`ref.unbiased_lambdarank_step`,
    `ref.aggregated_unbiased_lambdarank_step`); the sums over the steps, discounted,
    ``momentum * old + batch``; the biases Hu et al.'s closed form of the sums
    (`ref.closed_form_update`). "mean" is over the lists with a click.
    """
    opts = {**UNBIASED_DEFAULTS, **options}
    momentum, reduction = opts.pop("momentum"), opts.pop("reduction", "mean")
    opts.pop("ignore_index", None)
    t_plus, t_minus = [1.0] * num_positions, [1.0] * num_positions
    average = [[0.0] * num_positions for _ in range(4)]
    steps = []
    for preds, clicks, third in batches:
        if aggregated:
            opts.pop("gain", None)
            losses, statistics, _, _ = ref.aggregated_unbiased_lambdarank_step(
                preds.tolist(), clicks.tolist(), third.tolist(), t_plus, t_minus, **opts
            )
            counted = [sum(map(sum, row)) > 0 for row in clicks.tolist()]
        else:
            losses, statistics, _, _ = ref.unbiased_lambdarank_step(
                preds.tolist(), clicks.tolist(), third.tolist(), t_plus, t_minus, **opts
            )
            counted = [
                any(c == 1 and p != -1 for c, p in zip(cs, ps, strict=True))
                for cs, ps in zip(clicks.tolist(), third.tolist(), strict=True)
            ]
        average = [
            [momentum * old + new for old, new in zip(a, s, strict=True)]
            for a, s in zip(average, statistics, strict=True)
        ]
        bias_norm = opts["bias_norm"]
        t_plus = ref.closed_form_update(average[0], average[2], t_plus, bias_norm)
        t_minus = ref.closed_form_update(average[1], average[3], t_minus, bias_norm)
        loss, _ = reduced(losses, [], counted, reduction)
        steps.append((loss, torch.tensor(average, dtype=torch.float64), t_plus, t_minus))
    return steps


def unbiased_steps(
    loss_fn: UnbiasedLambdaRankLoss,
    batches: list[tuple[torch.Tensor, ...]],
    aggregated: bool = False,
    masks: list[torch.Tensor] | None = None,
) -> list[tuple[torch.Tensor, torch.Tensor, list[float], list[float]]]:
    steps = []
    for index, batch in enumerate(batches):
        mask = None if masks is None else masks[index]
        call = loss_fn.aggregated if aggregated else loss_fn
        loss = call(*batch, mask)
        steps.append(
            (
                loss.detach(),
                loss_fn.statistics.clone(),
                loss_fn.t_plus.tolist(),
                loss_fn.t_minus.tolist(),
            )
        )
    return steps


def assert_steps_equal(got: list[Any], want: list[Any]) -> None:
    for (loss, statistics, t_plus, t_minus), (w_loss, w_stats, w_plus, w_minus) in zip(
        got, want, strict=True
    ):
        close(loss, w_loss)
        close(statistics, w_stats)
        close(torch.tensor(t_plus, dtype=torch.float64), torch.tensor(w_plus, dtype=torch.float64))
        close(
            torch.tensor(t_minus, dtype=torch.float64), torch.tensor(w_minus, dtype=torch.float64)
        )


def steps_told_apart(first: list[Any], second: list[Any]) -> bool:
    for a, b in zip(first, second, strict=True):
        if a[0].shape != b[0].shape or float((a[0] - b[0]).abs().max()) > 1e-7:
            return True
        if float((a[1] - b[1]).abs().max()) > 1e-9:
            return True
        if max(abs(x - y) for x, y in zip(a[2] + a[3], b[2] + b[3], strict=True)) > 1e-9:
            return True
    return False


def unbiased_cases() -> list[Any]:
    bases = {"*": [{"k": 3}], "k": [{}], "gain": [{"k": 3}, {"k": 3, "reduction": "sum"}]}
    return option_cases(UNBIASED_VALUES, bases)


def assert_unbiased_told_apart(
    options: dict[str, Any],
    varied: str,
    reference: Callable[[dict[str, Any]], list[Any]],
    want: list[Any],
) -> None:
    for other in UNBIASED_VALUES[varied]:
        mine = options.get(varied, DEFAULT)
        if other is mine or (mine, other) in SAME_ON_CLICKS or (other, mine) in SAME_ON_CLICKS:
            continue
        changed = (
            {key: value for key, value in options.items() if key != varied}
            if other is DEFAULT
            else {**options, varied: other}
        )
        assert steps_told_apart(reference(changed), want), (varied, mine, other)


@pytest.mark.parametrize(("varied", "options"), unbiased_cases())
def test_unbiased_forward_each_option_value_equals_the_loop_reference(
    varied: str, options: dict[str, Any]
) -> None:
    """Three training steps: each step's loss (with the biases learnt so far), the moving
    averages of the statistics and the biases after it."""
    batches = click_sessions(seed=11)

    def reference(opts: dict[str, Any]) -> list[Any]:
        return unbiased_reference(batches, opts)

    want = reference(options)
    loss_fn = UnbiasedLambdaRankLoss(num_positions=N_POSITIONS, **options).double()
    assert_steps_equal(unbiased_steps(loss_fn, batches), want)
    assert_unbiased_told_apart(options, varied, reference, want)


def test_unbiased_forward_gradient_with_every_option_equals_finite_differences() -> None:
    """The gradient through learnt biases, sigma, k, a callable gain and Järvelin's discount:
    central differences of the loop reference's loss (its pair weights are constant there)."""
    options = {
        "k": 3,
        "sigma": 0.6,
        "gain": plus_one_gain,
        "discount": "jarvelin",
        "bias_norm": 0.5,
        "momentum": 0.3,
        "reduction": "sum",
    }
    batches = click_sessions(seed=12, steps=2)
    loss_fn = UnbiasedLambdaRankLoss(num_positions=N_POSITIONS, **options).double()
    loss_fn(*batches[0])  # learn biases
    loss_fn.eval()
    preds, clicks, positions = batches[1]
    leaf = preds.clone().requires_grad_()
    (grad,) = torch.autograd.grad(loss_fn(leaf, clicks, positions), leaf)
    t_plus, t_minus = loss_fn.t_plus.tolist(), loss_fn.t_minus.tolist()
    assert max(t_plus + t_minus) != 1.0 or min(t_plus + t_minus) != 1.0  # biases were learnt
    step_options = {k: v for k, v in options.items() if k not in ("momentum", "reduction")}
    step = 1e-6
    for row, col in itertools.product(range(preds.shape[0]), range(preds.shape[1])):
        values = []
        for sign in (1, -1):
            moved = preds.clone()
            moved[row, col] += sign * step
            losses = ref.unbiased_lambdarank_step(
                moved.tolist(),
                clicks.tolist(),
                positions.tolist(),
                t_plus,
                t_minus,
                **step_options,
            )[0]
            values.append(sum(losses))
        numeric = (values[0] - values[1]) / (2 * step)
        assert grad[row, col].item() == pytest.approx(numeric, rel=1e-5, abs=1e-8)


@pytest.mark.parametrize("how", ["mask", "ignore_index"])
def test_unbiased_forward_padding_equals_leaving_the_items_unshown(how: str) -> None:
    """Padded items take no part: the reference sees them at position -1 (not shown). Their
    positions are never read: here, past ``num_positions``."""
    batches = click_sessions(seed=13)
    gen = torch.Generator().manual_seed(0)
    given, masks, seen = [], [], []
    for preds, clicks, positions in batches:
        mask = torch.rand(clicks.shape, generator=gen) > 0.3
        mask[:, 0] = True
        unshown = torch.where(mask, positions, -1)
        seen.append((preds, clicks, unshown))
        wild = torch.where(mask, positions, 99)
        if how == "mask":
            given.append((preds, clicks, wild))
            masks.append(mask)
        else:
            given.append((preds, torch.where(mask, clicks, -1), wild))
    options = {"ignore_index": -1} if how == "ignore_index" else {}
    options |= {"k": 3, "bias_norm": 1.0, "momentum": 0.5, "reduction": "none"}
    loss_fn = UnbiasedLambdaRankLoss(num_positions=N_POSITIONS, **options).double()
    got = unbiased_steps(loss_fn, given, masks=masks if how == "mask" else None)
    want = unbiased_reference(seen, options)
    assert_steps_equal(got, want)
    assert steps_told_apart(unbiased_reference(batches, options), want)


def test_unbiased_more_positions_than_shown_keep_their_biases() -> None:
    """``num_positions`` = 8 with positions 0-4 shown: the others keep bias 1 and statistic 0."""
    batches = click_sessions(seed=14)
    options = {"bias_norm": 0.0, "momentum": 0.0, "reduction": "sum"}
    loss_fn = UnbiasedLambdaRankLoss(num_positions=8, **options).double()
    got = unbiased_steps(loss_fn, batches)
    want = unbiased_reference(batches, options, num_positions=8)
    assert_steps_equal(got, want)
    assert loss_fn.t_plus[N_POSITIONS:].tolist() == [1.0] * 3
    assert loss_fn.statistics[:, N_POSITIONS:].abs().max() == 0


def counts_batches(
    seed: int, n: int = 4, length: int = 5, steps: int = 3
) -> list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """Per item and position, click and view counts (clicks <= views), summed sessions."""
    gen = torch.Generator().manual_seed(seed)
    batches = []
    for _ in range(steps):
        preds = torch.randn(n, length, generator=gen, dtype=torch.float64)
        views = torch.randint(0, 4, (n, length, N_POSITIONS), generator=gen).double()
        views[:, :, 2:] *= torch.rand(n, 1, 1, generator=gen) > 0.4  # uneven exposure
        clicks = torch.floor(views * torch.rand(views.shape, generator=gen, dtype=torch.float64))
        clicks[-1] = 0  # a list without a click
        batches.append((preds, clicks, views))
    return batches


AGGREGATED_VALUES = {key: value for key, value in UNBIASED_VALUES.items() if key != "gain"}


@pytest.mark.parametrize(
    ("varied", "options"), option_cases(AGGREGATED_VALUES, {"*": [{"k": 3}], "k": [{}]})
)
def test_unbiased_aggregated_each_option_value_equals_the_loop_reference(
    varied: str, options: dict[str, Any]
) -> None:
    batches = counts_batches(seed=15)

    def reference(opts: dict[str, Any]) -> list[Any]:
        return unbiased_reference(batches, opts, aggregated=True)

    want = reference(options)
    loss_fn = UnbiasedLambdaRankLoss(num_positions=N_POSITIONS, **options).double()
    assert_steps_equal(unbiased_steps(loss_fn, batches, aggregated=True), want)
    for other in AGGREGATED_VALUES[varied]:
        mine = options.get(varied, DEFAULT)
        if other is mine:
            continue
        changed = (
            {key: value for key, value in options.items() if key != varied}
            if other is DEFAULT
            else {**options, varied: other}
        )
        assert steps_told_apart(reference(changed), want), (varied, mine, other)


def test_unbiased_aggregated_gradient_with_every_option_equals_finite_differences() -> None:
    options = {
        "k": 3,
        "sigma": 0.6,
        "discount": inverse_discount,
        "bias_norm": 0.5,
        "momentum": 0.3,
        "match_exposure": False,
        "reduction": "sum",
    }
    batches = counts_batches(seed=17, steps=2)
    loss_fn = UnbiasedLambdaRankLoss(num_positions=N_POSITIONS, **options).double()
    loss_fn.aggregated(*batches[0])  # learn biases
    loss_fn.eval()
    preds, clicks, views = batches[1]
    leaf = preds.clone().requires_grad_()
    (grad,) = torch.autograd.grad(loss_fn.aggregated(leaf, clicks, views), leaf)
    t_plus, t_minus = loss_fn.t_plus.tolist(), loss_fn.t_minus.tolist()
    step_options = {k: v for k, v in options.items() if k not in ("momentum", "reduction")}
    step = 1e-6
    for row, col in itertools.product(range(preds.shape[0]), range(preds.shape[1])):
        values = []
        for sign in (1, -1):
            moved = preds.clone()
            moved[row, col] += sign * step
            losses = ref.aggregated_unbiased_lambdarank_step(
                moved.tolist(), clicks.tolist(), views.tolist(), t_plus, t_minus, **step_options
            )[0]
            values.append(sum(losses))
        numeric = (values[0] - values[1]) / (2 * step)
        assert grad[row, col].item() == pytest.approx(numeric, rel=1e-5, abs=1e-8)


def test_unbiased_aggregated_mask_equals_dropping_the_items() -> None:
    batches = counts_batches(seed=16)
    gen = torch.Generator().manual_seed(1)
    masks = [torch.rand(b[0].shape, generator=gen) > 0.3 for b in batches]
    for mask in masks:
        mask[:, 0] = True
    options = {"k": 3, "bias_norm": 1.0, "momentum": 0.5, "reduction": "none"}
    loss_fn = UnbiasedLambdaRankLoss(num_positions=N_POSITIONS, **options).double()
    got = unbiased_steps(loss_fn, batches, aggregated=True, masks=masks)

    # The reference on each list's real items alone (variable lengths: loops take lists).
    class Ragged:
        def __init__(self, rows: list[Any]) -> None:
            self.rows = rows

        def tolist(self) -> list[Any]:
            return self.rows

    kept = []
    for (preds, clicks, views), mask in zip(batches, masks, strict=True):
        rows = [torch.nonzero(m).flatten().tolist() for m in mask]
        kept.append(
            tuple(
                Ragged([[t[b][i] for i in rows[b]] for b in range(len(rows))])
                for t in (preds.tolist(), clicks.tolist(), views.tolist())
            )
        )
    want = unbiased_reference(kept, options, aggregated=True)  # type: ignore[arg-type]
    assert_steps_equal(got, want)
    assert steps_told_apart(unbiased_reference(batches, options, aggregated=True), want)


# --- simulate_clicks / examination_probability ---------------------------------------------------


@pytest.mark.parametrize("eta", [0.0, 0.5, 1.0, 2.0, 3.7])
def test_examination_probability_is_the_power_law_for_every_eta(eta: float) -> None:
    positions = torch.tensor([[0, 1, 2, 5], [9, -1, 3, 0]])
    expected = [
        [0.0 if i == -1 else (1 / (i + 1)) ** eta for i in row] for row in positions.tolist()
    ]
    got = examination_probability(positions, eta=eta)
    torch.testing.assert_close(got, torch.tensor(expected, dtype=got.dtype))
    if eta == 1.0:  # the default
        torch.testing.assert_close(examination_probability(positions), got)


SESSIONS = 10_000
CLICK_TARGET = torch.tensor([3, 2, 0, 1, 3, 2, 1])
CLICK_POSITIONS = torch.tensor([2, 0, 4, 1, 3, 5, -1])
EXAMINATION = torch.tensor([0.9, 0.3, 0.6, 0.15, 0.45, 0.05], dtype=torch.float64)


def expected_click_rates(
    target: Sequence[float],
    positions: Sequence[int],
    mask: Sequence[bool] | None = None,
    *,
    model: str = "position_based",
    eta: float = 1.0,
    examination: Sequence[float] | None = None,
    noise: float = 0.1,
    max_label: float = 4.0,
) -> list[float]:
    """Each item's click probability in one session, from the documented click models.

    Attractiveness ``noise + (1 - noise) (2^y - 1) / (2^y_max - 1)``; position-based:
    ``theta_i`` (``examination[i]``, or ``(1 / (i + 1))^eta``) times it; cascade: it times the
    probability that no item shown above was attractive. Unshown and masked items: 0.
    """
    real = [True] * len(target) if mask is None else list(mask)
    shown = [i for i, p in enumerate(positions) if p != -1 and real[i]]
    gamma = [noise + (1 - noise) * (2**y - 1) / (2**max_label - 1) for y in target]
    rates = [0.0] * len(target)
    if model == "position_based":
        for i in shown:
            p = positions[i]
            theta = examination[p] if examination is not None else (1 / (p + 1)) ** eta
            rates[i] = theta * gamma[i]
        return rates
    none_above = 1.0
    for i in sorted(shown, key=lambda i: positions[i]):
        rates[i] = none_above * gamma[i]
        none_above *= 1 - gamma[i]
    return rates


def observed_rates(
    target: torch.Tensor, positions: torch.Tensor, seed: int, **options: Any
) -> torch.Tensor:
    mask = options.get("mask")
    if mask is not None:
        options = {**options, "mask": mask.expand(SESSIONS, -1)}
    clicks = simulate_clicks(
        target.expand(SESSIONS, -1),
        positions.expand(SESSIONS, -1),
        generator=torch.Generator().manual_seed(seed),
        **options,
    )
    assert set(clicks.unique().tolist()) <= {0.0, 1.0}
    return clicks.double().mean(0)


def assert_rates(observed: torch.Tensor, expected: list[float]) -> None:
    """Within 4.5 standard errors of the binomial mean (0 exactly where the rate is 0)."""
    rate = torch.tensor(expected, dtype=torch.float64)
    sd = (rate * (1 - rate) / SESSIONS).sqrt()
    assert ((observed - rate).abs() <= 4.5 * sd + 1e-12).all(), (observed, rate)


def assert_rates_told_apart(expected: list[float], other: list[float]) -> None:
    """Some item's rate differs by 9 worst-case standard errors: far outside the band."""
    gap = max(abs(a - b) for a, b in zip(expected, other, strict=True))
    assert gap > 9 * 0.5 / math.sqrt(SESSIONS), (expected, other)


CLICK_VALUES: dict[str, list[Any]] = {
    "model": [DEFAULT, "cascade"],
    "eta": [DEFAULT, 0.0, 0.5, 2.5],
    "examination": [DEFAULT, EXAMINATION],
    "noise": [DEFAULT, 0.0, 0.4],
    "max_label": [DEFAULT, 3.0, 6.0],
}


def click_cases() -> list[Any]:
    cases = []
    for name, values in CLICK_VALUES.items():
        models = ["position_based", "cascade"] if name in ("noise", "max_label") else [None]
        for model in models:
            for value in values:
                if value is DEFAULT:
                    continue
                options = {name: value} if model is None else {"model": model, name: value}
                label = "table" if isinstance(value, torch.Tensor) else value
                cases.append(pytest.param(name, options, id=f"{name}={label}[{model}]"))
    return cases


@pytest.mark.parametrize(("varied", "options"), click_cases())
def test_simulated_click_rates_follow_the_model_for_every_option(
    varied: str, options: dict[str, Any]
) -> None:
    def rates(opts: dict[str, Any]) -> list[float]:
        table = opts.get("examination")
        plain = {
            **opts,
            "examination": None if table is None else table.tolist(),
        }
        return expected_click_rates(CLICK_TARGET.tolist(), CLICK_POSITIONS.tolist(), **plain)

    expected = rates(options)
    assert_rates(
        observed_rates(CLICK_TARGET, CLICK_POSITIONS, seed=len(varied), **options), expected
    )
    assert expected[-1] == 0  # not shown
    for other in CLICK_VALUES[varied]:
        if other is options[varied]:
            continue
        changed = {k: v for k, v in options.items() if k != varied}
        if other is not DEFAULT:
            changed[varied] = other
        assert_rates_told_apart(expected, rates(changed))


def test_cascade_reads_neither_eta_nor_the_examination_table() -> None:
    """The cascade user reads from the top until a click: no examination probabilities."""
    expected = expected_click_rates(
        CLICK_TARGET.tolist(), CLICK_POSITIONS.tolist(), model="cascade"
    )
    for options in ({"eta": 3.0}, {"examination": EXAMINATION}):
        observed = observed_rates(CLICK_TARGET, CLICK_POSITIONS, seed=5, model="cascade", **options)
        assert_rates(observed, expected)


@pytest.mark.parametrize("model", ["position_based", "cascade"])
def test_masked_items_are_never_clicked_nor_checked(model: str) -> None:
    """Masked items: never clicked, not in the cascade (a masked attractive item on top does not
    stop the user), and their labels are not checked (here out of range)."""
    target = torch.tensor([4, 9, 1, 3, 0, 2])
    positions = torch.tensor([0, 5, 1, 2, 3, 4])
    mask = torch.tensor([False, False, True, True, True, True])
    options = {"model": model, "noise": 0.2, "examination": EXAMINATION}
    rates = {"model": model, "noise": 0.2, "examination": EXAMINATION.tolist()}
    labels = target.clamp(max=4).tolist()
    expected = expected_click_rates(labels, positions.tolist(), mask.tolist(), **rates)
    observed = observed_rates(target, positions, seed=7, mask=mask, **options)
    assert_rates(observed, expected)
    assert observed[:2].tolist() == [0.0, 0.0]
    assert_rates_told_apart(expected, expected_click_rates(labels, positions.tolist(), **rates))
    with pytest.raises(ValueError, match="Expected `target` to be in"):
        simulate_clicks(target, positions, model=model)


def test_a_masked_items_position_past_the_examination_table_is_not_read() -> None:
    clicks = simulate_clicks(
        torch.tensor([1, 2]),
        torch.tensor([0, 5]),
        examination=torch.tensor([0.9, 0.5]),
        mask=torch.tensor([True, False]),
        noise=1.0,
        generator=torch.Generator().manual_seed(0),
    )
    assert clicks[1] == 0


def test_generator_draws_the_clicks() -> None:
    """A seeded generator gives the same clicks whatever the global state, leaves the global
    generator untouched, and other seeds give other clicks; without one, the global seed."""
    target = CLICK_TARGET.expand(200, -1)
    positions = CLICK_POSITIONS.expand(200, -1)
    for model in ("position_based", "cascade"):
        torch.manual_seed(1)
        state = torch.get_rng_state()
        first = simulate_clicks(
            target, positions, model=model, generator=torch.Generator().manual_seed(3)
        )
        assert torch.equal(torch.get_rng_state(), state)
        torch.manual_seed(2)
        again = simulate_clicks(
            target, positions, model=model, generator=torch.Generator().manual_seed(3)
        )
        assert torch.equal(first, again)
        other = simulate_clicks(
            target, positions, model=model, generator=torch.Generator().manual_seed(4)
        )
        assert not torch.equal(first, other)
        torch.manual_seed(3)
        global_first = simulate_clicks(target, positions, model=model)
        torch.manual_seed(3)
        assert torch.equal(simulate_clicks(target, positions, model=model), global_first)


@settings(max_examples=30, deadline=None)
@given(
    model=st.sampled_from(["position_based", "cascade"]),
    eta=st.sampled_from([0.0, 0.7, 1.0, 3.0]),
    noise=st.sampled_from([0.0, 0.1, 0.5, 1.0]),
    table=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_clicks_are_binary_only_on_real_shown_items_and_at_most_one_per_cascade(
    model: str, eta: float, noise: float, table: bool, seed: int
) -> None:
    gen = torch.Generator().manual_seed(seed)
    target = torch.randint(0, 5, (8, 6), generator=gen)
    positions = torch.stack([torch.randperm(6, generator=gen) for _ in range(8)]) - 1
    mask = torch.rand(8, 6, generator=gen) > 0.3
    clicks = simulate_clicks(
        target,
        positions,
        model=model,
        eta=eta,
        noise=noise,
        mask=mask,
        examination=EXAMINATION[:5] if table else None,
        generator=gen,
    )
    assert set(clicks.unique().tolist()) <= {0.0, 1.0}
    assert clicks[~mask | (positions == -1)].abs().sum() == 0
    if model == "cascade":
        assert clicks.sum(-1).max() <= 1
        if noise == 1.0:  # every item attractive: the first real shown item is clicked
            shown = mask & (positions != -1)
            first = torch.where(shown, positions, 99).argmin(-1)
            has = shown.any(-1)
            assert torch.equal(clicks[has].argmax(-1), first[has])


# --- paired_t_test / paired_randomization_test ---------------------------------------------------


def two_samples(seed: int, n: int = 25, shift: float = 0.03) -> tuple[torch.Tensor, torch.Tensor]:
    rng = np.random.default_rng(seed)
    a = rng.random(n)
    b = np.clip(a - shift + 0.08 * rng.standard_normal(n), 0, 1)
    return torch.tensor(a), torch.tensor(b)


def t_interval(d: np.ndarray, confidence: float) -> tuple[float, float]:
    """mean ± t_{(1+c)/2, n-1} s / sqrt(n), with scipy's t quantile."""
    n = d.size
    half = scipy_stats.t.ppf((1 + confidence) / 2, n - 1) * d.std(ddof=1) / math.sqrt(n)
    return d.mean() - half, d.mean() + half


def assert_t_interval(result: Any, d: np.ndarray, confidence: float) -> None:
    low, high = t_interval(d, confidence)
    assert result.low.item() == pytest.approx(low, rel=1e-9, abs=1e-15)
    assert result.high.item() == pytest.approx(high, rel=1e-9, abs=1e-15)
    assert result.mean_difference.item() == pytest.approx(d.mean(), rel=1e-12, abs=1e-15)
    assert result.confidence == confidence
    assert result.df == d.size - 1
    assert result.n_pairs == d.size


@pytest.mark.parametrize("confidence", [DEFAULT, 0.5, 0.8, 0.99], ids=str)
def test_paired_t_test_equals_scipy_at_every_confidence(confidence: Any) -> None:
    a, b = two_samples(seed=1)
    options = {} if confidence is DEFAULT else {"confidence": confidence}
    level = 0.95 if confidence is DEFAULT else confidence
    result = paired_t_test(a, b, **options)
    expected = scipy_stats.ttest_rel(a.numpy(), b.numpy())
    assert result.statistic.item() == pytest.approx(expected.statistic, rel=1e-9)
    assert result.pvalue.item() == pytest.approx(expected.pvalue, rel=1e-7)
    interval = expected.confidence_interval(confidence_level=level)
    assert result.low.item() == pytest.approx(interval.low, rel=1e-9)
    assert result.high.item() == pytest.approx(interval.high, rel=1e-9)
    assert_t_interval(result, (a - b).numpy(), level)


def exact_sign_flip_p(differences: Sequence[float]) -> float:
    """Every one of the 2^n sign flips, the observed one included."""
    observed = abs(sum(differences))
    count = sum(
        abs(sum(s * d for s, d in zip(signs, differences, strict=True))) >= observed * (1 - 1e-12)
        for signs in itertools.product((1, -1), repeat=len(differences))
    )
    return count / 2 ** len(differences)


@pytest.mark.parametrize("confidence", [DEFAULT, 0.5, 0.8, 0.99], ids=str)
def test_randomization_interval_is_the_t_interval_at_every_confidence(confidence: Any) -> None:
    """The docs: the reported interval is the t-interval of the mean difference."""
    a, b = two_samples(seed=2)
    options = {} if confidence is DEFAULT else {"confidence": confidence}
    level = 0.95 if confidence is DEFAULT else confidence
    result = paired_randomization_test(a, b, n_resamples=200, **options)
    assert result.statistic.item() == pytest.approx((a - b).mean().item(), rel=1e-12)
    assert_t_interval(result, (a - b).numpy(), level)
    interval = scipy_stats.ttest_rel(a.numpy(), b.numpy()).confidence_interval(level)
    assert result.low.item() == pytest.approx(interval.low, rel=1e-9)
    assert result.high.item() == pytest.approx(interval.high, rel=1e-9)


@pytest.mark.parametrize("n_resamples", [1, 7, 99, 30_000])
def test_randomization_p_value_counts_n_resamples_flips(n_resamples: int) -> None:
    """p = (1 + #extreme) / (1 + R): a multiple of 1 / (1 + R); with many flips, the exact
    enumeration's p within 4.5 Monte-Carlo standard errors."""
    a, b = two_samples(seed=3, n=10, shift=0.02)
    d = (a - b).tolist()
    exact = exact_sign_flip_p(d)
    assert 0.05 < exact < 0.95
    _, p = paired_randomization_test(a, b, n_resamples=n_resamples, seed=1)
    count = p.item() * (n_resamples + 1)
    assert count == pytest.approx(round(count), abs=1e-6)
    assert 1 <= round(count) <= n_resamples + 1
    if n_resamples >= 1000:
        sd = math.sqrt(exact * (1 - exact) / n_resamples)
        assert abs(p.item() - exact) <= 4.5 * sd


def test_randomization_seed_picks_the_flips() -> None:
    a, b = two_samples(seed=4, n=12, shift=0.02)
    first = paired_randomization_test(a, b, n_resamples=300, seed=5).pvalue.item()
    assert paired_randomization_test(a, b, n_resamples=300, seed=5).pvalue.item() == first
    by_seed = {
        paired_randomization_test(a, b, n_resamples=300, seed=s).pvalue.item() for s in range(6)
    }
    assert len(by_seed) >= 3
    default = paired_randomization_test(a, b, n_resamples=300).pvalue.item()
    assert default == paired_randomization_test(a, b, n_resamples=300, seed=0).pvalue.item()


@pytest.mark.parametrize("test", [paired_t_test, paired_randomization_test])
@pytest.mark.parametrize("unmatched_ids", [DEFAULT, "raise", "intersect"], ids=str)
def test_unmatched_ids_raise_or_intersect(test: Any, unmatched_ids: Any) -> None:
    """Ids only one side has: an error, or the test on the ids both have (scipy on those)."""
    a, b = two_samples(seed=5, n=30)
    ids_a = torch.arange(30) * 3
    ids_b = ids_a.clone()
    ids_b[:4] = 1000 + torch.arange(4)  # the first four queries are only in each side's own set
    perm = torch.randperm(30, generator=torch.Generator().manual_seed(0))
    options = {} if unmatched_ids is DEFAULT else {"unmatched_ids": unmatched_ids}
    extra = {"n_resamples": 200} if test is paired_randomization_test else {}
    call = lambda: test((a, ids_a), (b[perm], ids_b[perm]), **options, **extra)  # noqa: E731
    if unmatched_ids != "intersect":
        with pytest.raises(ValueError, match="same query ids"):
            call()
        return
    result = call()
    d = (a[4:] - b[4:]).numpy()
    assert_t_interval(result, d, 0.95)
    if test is paired_t_test:
        expected = scipy_stats.ttest_rel(a[4:].numpy(), b[4:].numpy())
        assert result.statistic.item() == pytest.approx(expected.statistic, rel=1e-9)
        assert result.pvalue.item() == pytest.approx(expected.pvalue, rel=1e-7)


@pytest.mark.parametrize("test", [paired_t_test, paired_randomization_test])
def test_dicts_of_cut_offs_are_tested_per_cut_off(test: Any) -> None:
    """A dict of values per cut-off (as the retrieval metric gives): one result per key, each
    the test of that key's values (with ids: paired by id)."""
    a5, b5 = two_samples(seed=6)
    a10, b10 = two_samples(seed=7, shift=0.1)
    ids = torch.arange(25) + 100
    perm = torch.randperm(25, generator=torch.Generator().manual_seed(1))
    extra = (
        {"n_resamples": 200, "confidence": 0.9}
        if test is paired_randomization_test
        else {"confidence": 0.9}
    )
    results = test(
        ({"ndcg@5": a5, "ndcg@10": a10}, ids),
        ({"ndcg@5": b5[perm], "ndcg@10": b10[perm]}, ids[perm]),
        **extra,
    )
    assert set(results) == {"ndcg@5", "ndcg@10"}
    for key, (a, b) in {"ndcg@5": (a5, b5), "ndcg@10": (a10, b10)}.items():
        assert_t_interval(results[key], (a - b).numpy(), 0.9)
        if test is paired_t_test:
            expected = scipy_stats.ttest_rel(a.numpy(), b.numpy())
            assert results[key].statistic.item() == pytest.approx(expected.statistic, rel=1e-9)
            assert results[key].pvalue.item() == pytest.approx(expected.pvalue, rel=1e-7)


@settings(max_examples=30, deadline=None)
@given(
    n=st.integers(2, 40),
    confidence=st.sampled_from([0.5, 0.9, 0.95, 0.999]),
    shift=st.sampled_from([0.0, 0.01, 0.1]),
    seed=st.integers(0, 2**16),
)
def test_paired_t_test_equals_scipy_on_any_sample(
    n: int, confidence: float, shift: float, seed: int
) -> None:
    a, b = two_samples(seed, n=n, shift=shift)
    result = paired_t_test(a, b, confidence=confidence)
    expected = scipy_stats.ttest_rel(a.numpy(), b.numpy())
    if np.isnan(expected.statistic):
        return
    assert result.statistic.item() == pytest.approx(expected.statistic, rel=1e-8)
    assert result.pvalue.item() == pytest.approx(expected.pvalue, rel=1e-6, abs=1e-14)
    assert_t_interval(result, (a - b).numpy(), confidence)
