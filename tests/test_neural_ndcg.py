"""NeuralNDCGLoss: parity with allRank, a loop reference, blockwise = kept kernel, numerics."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

import torch_ndcg
from tests import references as ref
from tests.conftest import needs_torch_2_13_to_compile_losses
from tests.host_reads import count_host_reads
from tests.test_losses import NUMERIC_CASES, batch
from torch_ndcg import NeuralNDCGLoss, ndcg, neural_ndcg_loss

ALLRANK_PATH = os.environ.get("ALLRANK_PATH", "/tmp/allrank_site")


@pytest.fixture(scope="module")
def allrank() -> Any:
    """allRank 1.4.3's loss modules (imported with the benchmark's stand-ins), or a skip."""
    from benchmarks.bench_losses import import_allrank

    losses = import_allrank(ALLRANK_PATH)
    if losses is None:
        pytest.skip("allRank is not importable")
    return losses


def padded_batch(n: int, length: int, seed: int) -> torch.Tensor:
    """Graded labels, -1 padding at the end of some lists, one list without a relevant item."""
    generator = torch.Generator().manual_seed(seed)
    target = torch.randint(0, 4, (n, length), generator=generator)
    lengths = torch.randint(1, length + 1, (n,), generator=generator)
    lengths[0] = length
    target = torch.where(torch.arange(length) < lengths[:, None], target, -1)
    target[1] = torch.where(target[1] >= 0, 0, -1)  # nothing relevant: left out of the mean
    return target


# --- Parity with allRank's neuralNDCG ----------------------------------------------------------


PARITY_CASES = [
    *[(6, 12, temperature, k) for temperature in (0.5, 1.0, 2.0) for k in (None, 3)],
    *[(n, length, 1.0, k) for n, length in ((3, 5), (4, 30)) for k in (None, 3)],
]


@pytest.mark.parametrize(("n", "length", "temperature", "k"), PARITY_CASES)
def test_equals_allrank(allrank: Any, n: int, length: int, temperature: float, k: Any) -> None:
    target = padded_batch(n, length, seed=n * length)
    generator = torch.Generator().manual_seed(length)
    preds = torch.randn(n, length, generator=generator)
    ours_preds = preds.clone().requires_grad_()
    theirs_preds = preds.clone().requires_grad_()
    ours = neural_ndcg_loss(ours_preds, target, temperature=temperature, k=k, ignore_index=-1)
    theirs = 1 + allrank.neuralNDCG(
        theirs_preds, target.float(), padded_value_indicator=-1, temperature=temperature, k=k
    )
    ours.backward()
    theirs.backward()
    torch.testing.assert_close(ours, theirs, rtol=0, atol=1e-4)
    torch.testing.assert_close(ours_preds.grad, theirs_preds.grad, rtol=0, atol=1e-4)


def test_allrank_ported_names_point_to_ours() -> None:
    preds, target, _ = batch()
    with pytest.raises(TypeError, match=r"did you mean `ignore_index`"):
        neural_ndcg_loss(preds, target, padded_value_indicator=-1)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match=r"did you mean `gain`"):
        NeuralNDCGLoss(powered_relevancies=False)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match=r"`neural_ndcg_loss` got an unexpected keyword"):
        neural_ndcg_loss(preds, target, colour=1)  # type: ignore[call-arg]


# --- Against the loop reference (float64) ------------------------------------------------------


@pytest.mark.parametrize(
    ("temperature", "k", "reduction"), [(0.5, None, "mean"), (1.0, 3, "sum"), (2.0, 2, "none")]
)
def test_equals_loop_reference(temperature: float, k: Any, reduction: str) -> None:
    preds, target, mask = batch(4, 7, seed=3)
    target[1] = 0
    ours_preds = preds.clone().requires_grad_()
    ref_preds = preds.clone().requires_grad_()
    options = {"temperature": temperature, "k": k, "reduction": reduction}
    ours = neural_ndcg_loss(ours_preds, target, mask=mask, **options)
    expected = ref.neural_ndcg_dense(ref_preds, target, mask, **options)
    ours.sum().backward()
    expected.sum().backward()
    torch.testing.assert_close(ours, expected, rtol=0, atol=1e-6)
    torch.testing.assert_close(ours_preds.grad, ref_preds.grad, rtol=0, atol=1e-6)


@pytest.mark.parametrize(
    ("max_iter", "tol"),
    [(50, 1e-3), (50, 1e-5), (7, 0.0), (3, 10.0)],
    ids=["stops-early", "stops-later", "never-stops", "stops-at-once"],
)
def test_sinkhorn_stop_equals_loop_reference(max_iter: int, tol: float) -> None:
    """All iterations run on the device; the stop is picked afterwards, as the loop stops."""
    preds, target, mask = batch(4, 7, seed=21)
    ours_preds = preds.clone().requires_grad_()
    ref_preds = preds.clone().requires_grad_()
    options = {"max_iter": max_iter, "tol": tol, "reduction": "sum"}
    ours = neural_ndcg_loss(ours_preds, target, mask=mask, **options)
    expected = ref.neural_ndcg_dense(ref_preds, target, mask, **options)
    ours.backward()
    expected.backward()
    torch.testing.assert_close(ours, expected, rtol=0, atol=1e-9)
    torch.testing.assert_close(ours_preds.grad, ref_preds.grad, rtol=0, atol=1e-9)
    # The stop matters: all iterations would give another value.
    unstopped = neural_ndcg_loss(preds, target, mask=mask, **{**options, "tol": 0.0})
    assert (tol == 0.0) == bool(torch.equal(ours.detach(), unstopped))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("power", [-90, -20, 20])
@pytest.mark.budget
def test_gradient_scales_exactly_with_the_loss(dtype: torch.dtype, power: int) -> None:
    """The backward scales each list's incoming gradient to about 2^40 by a power of 2 and the
    result back: a loss 2^p times smaller or larger gives its gradient times 2^p, bit for bit."""
    from torch_ndcg import _sinkhorn

    values = torch.tensor([1e-20, -3e-8, 0.7, 5e20, 0.0, -2.5], dtype=dtype)
    gains = torch.tensor([1.0, 0.25, 3e4, 0.0, 1.0, 1e-3], dtype=dtype)[:, None].expand(6, 3)
    scale, unscale = _sinkhorn._gradient_scale(values, gains)
    assert torch.equal(torch.frexp(scale).mantissa, torch.full_like(scale, 0.5))
    assert torch.equal(scale * unscale, torch.ones_like(scale))
    largest = torch.where(gains[:, 0] > 0, gains[:, 0], 1.0)  # no gain: the gradient alone
    scaled = (values * scale * largest).abs()[values != 0]
    assert bool(((scaled >= 2.0**38) & (scaled < 2.0**40)).all())
    preds, target, mask = batch(3, 9, seed=22, dtype=dtype)
    grads = []
    for factor in (1.0, 2.0**power):
        leaf = preds.clone().requires_grad_()
        (neural_ndcg_loss(leaf, target, mask=mask, temperature=0.2) * factor).backward()
        assert leaf.grad is not None
        grads.append(leaf.grad)
    assert torch.equal(grads[1], grads[0] * 2.0**power)


@pytest.mark.parametrize("weight", [1e20, 1e30])
def test_huge_weights_keep_float32_gradients_finite(weight: float) -> None:
    """Weighted gains of 1e30 pass the checks in float32: the backward's scaling, which takes
    each list's largest gain into account, must leave them room (it gave NaN at 2^40 alone)."""
    preds, target, _ = batch(2, 8, seed=23)
    weights = torch.ones(2, 8)
    weights[:, 0] = weight
    grads = []
    for dtype in (torch.float32, torch.float64):
        leaf = preds.to(dtype).requires_grad_()
        neural_ndcg_loss(leaf, target, weight=weights.to(dtype)).sum().backward()
        assert leaf.grad is not None
        grads.append(leaf.grad)
    assert bool(grads[0].isfinite().all())
    largest = float(grads[1].abs().max())
    torch.testing.assert_close(grads[0].double(), grads[1], rtol=1e-3, atol=1e-5 * largest)


def test_gradcheck() -> None:
    preds, target, mask = batch(2, 5, seed=5)
    target = torch.where(mask, target, -1)
    leaf = preds.clone().requires_grad_()
    assert torch.autograd.gradcheck(
        lambda p: neural_ndcg_loss(p, target, k=3, ignore_index=-1, reduction="none"), (leaf,)
    )


@pytest.mark.parametrize(("k", "reduction"), [(None, "mean"), (4, "none")])
@pytest.mark.budget
def test_blockwise_equals_kept_kernel(
    k: Any, reduction: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    preds, target, mask = batch(5, 23, seed=4)

    def run() -> tuple[torch.Tensor, torch.Tensor]:
        leaf = preds.clone().requires_grad_()
        loss = neural_ndcg_loss(leaf, target, mask=mask, k=k, reduction=reduction)
        loss.sum().backward()
        assert leaf.grad is not None
        return loss, leaf.grad

    from tests.private_paths import force_blockwise_pairs
    from torch_ndcg import _sinkhorn

    kept = run()
    monkeypatch.setattr(_sinkhorn, "CACHE_BYTES", 0)
    force_blockwise_pairs(monkeypatch)
    blockwise = run()
    torch.testing.assert_close(blockwise, kept, rtol=0, atol=1e-12)


@pytest.mark.budget
def test_absolute_gap_sums_equal_the_dense_sum() -> None:
    from torch_ndcg import _sinkhorn

    preds, _, mask = batch(3, 11, seed=6)
    preds[0, :3] = 0.25  # ties
    leaf = preds.clone().requires_grad_()
    dense_leaf = preds.clone().requires_grad_()
    got = _sinkhorn.absolute_gap_sums(leaf, mask, torch.float64)
    gaps = (dense_leaf[:, :, None] - dense_leaf[:, None, :]).abs()
    expected = torch.where(mask[:, None, :], gaps, 0).sum(-1)
    torch.testing.assert_close(torch.where(mask, got, 0), torch.where(mask, expected, 0))
    weights = torch.randn(3, 11, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    torch.where(mask, got * weights, 0).sum().backward()
    torch.where(mask, expected * weights, 0).sum().backward()
    torch.testing.assert_close(leaf.grad, dense_leaf.grad)


# --- Limits, options, padding --------------------------------------------------------------------


@pytest.mark.parametrize("k", [None, 1, 3])
def test_tends_to_exact_ndcg_as_temperature_goes_to_zero(k: Any) -> None:
    preds, target, mask = batch(4, 8, seed=9)
    loss = neural_ndcg_loss(preds, target, mask=mask, k=k, temperature=1e-3, reduction="none")
    exact = ndcg(preds, target, mask=mask, k=k, empty_target_action="pos")
    torch.testing.assert_close(loss, 1 - exact, rtol=0, atol=1e-4)


def test_worked_example() -> None:
    # Far apart scores in the reverse order: P is the exact sorting permutation.
    loss = neural_ndcg_loss(torch.tensor([0.0, 50.0, 100.0]), torch.tensor([2, 1, 0]))
    expected = 1 - (3 / math.log2(4) + 1 / math.log2(3)) / (3 + 1 / math.log2(3))
    assert loss.item() == pytest.approx(expected, abs=1e-6)


def test_module_equals_function() -> None:
    preds, target, mask = batch(seed=7)
    target = torch.where(mask, target, -1)
    options = {"k": 3, "temperature": 0.5, "max_iter": 7, "tol": 1e-3}
    loss_fn = NeuralNDCGLoss(**options, gain="linear", ignore_index=-1, reduction="none")
    expected = neural_ndcg_loss(
        preds, target, **options, gain="linear", mask=mask, reduction="none"
    )
    torch.testing.assert_close(loss_fn(preds, target), expected)
    assert "k=3" in repr(loss_fn)
    assert "max_iter=7" in repr(loss_fn)


def test_padding_equals_dropping_the_items() -> None:
    preds, target, _ = batch(1, 6, seed=11)
    padded_preds = torch.cat([preds, torch.tensor([[5.0, -3.0]], dtype=preds.dtype)], dim=-1)
    padded_target = torch.cat([target, torch.tensor([[-1, -1]])], dim=-1)
    padded = neural_ndcg_loss(padded_preds, padded_target, ignore_index=-1, k=3)
    assert padded.item() == pytest.approx(neural_ndcg_loss(preds, target, k=3).item(), abs=1e-12)


def test_joint_permutation_changes_nothing() -> None:
    preds, target, mask = batch(3, 8, seed=12)
    order = torch.randperm(8, generator=torch.Generator().manual_seed(0))
    loss = neural_ndcg_loss(preds, target, mask=mask, reduction="none")
    moved = neural_ndcg_loss(
        preds[:, order], target[:, order], mask=mask[:, order], reduction="none"
    )
    torch.testing.assert_close(moved, loss)


def test_no_sinkhorn_is_neural_sort_alone() -> None:
    preds, target, _ = batch(1, 5, seed=13)
    matrix = ref.neural_sort_matrix(preds[0], 1.0)
    gains = 2.0 ** target[0].double() - 1
    discounts = 1 / torch.log2(torch.arange(2, 7, dtype=torch.float64))
    ideal = (gains.sort(descending=True).values * discounts).sum()
    expected = 1 - (discounts * (matrix @ gains)).sum() / ideal
    got = neural_ndcg_loss(preds, target, max_iter=0)
    assert got.item() == pytest.approx(expected.item(), abs=1e-12)


def test_nothing_to_rank_gives_zero_loss_and_zero_gradient() -> None:
    preds = torch.randn(2, 4, generator=torch.Generator().manual_seed(1), requires_grad=True)
    loss = neural_ndcg_loss(
        preds, torch.tensor([[0, 0, -1, -1], [-1, -1, -1, -1]]), ignore_index=-1
    )
    loss.backward()
    assert loss.item() == 0
    assert preds.grad is not None
    assert (preds.grad == 0).all()


# --- Numerics ------------------------------------------------------------------------------------


@pytest.mark.parametrize("case", NUMERIC_CASES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_loss_and_gradient_are_finite(case: str, dtype: torch.dtype) -> None:
    values, target = NUMERIC_CASES[case]
    preds = values.to(dtype, copy=True).requires_grad_()
    loss = neural_ndcg_loss(preds, target, ignore_index=-1)
    assert loss.dtype == torch.float32  # half inputs are computed in float32
    assert torch.isfinite(loss)
    loss.backward()
    assert preds.grad is not None
    assert preds.grad.dtype == dtype
    assert torch.isfinite(preds.grad.float()).all()


def test_float64_stays_float64() -> None:
    preds, target, _ = batch()
    assert neural_ndcg_loss(preds, target).dtype == torch.float64


@pytest.mark.budget  # a helper of a budget test: the probe sets a private size
def memory_probe(cache_bytes: int) -> str:
    """The script of one loss step, with the kernel kept up to ``cache_bytes``."""
    return f"""
import torch
from torch_ndcg import _sinkhorn
from torch_ndcg.functional import neural_ndcg_loss

def peak_mib():  # this process's own peak RSS (ru_maxrss would start at the parent's peak)
    with open("/proc/self/status") as status:
        line = next(line for line in status if line.startswith("VmHWM:"))
    return int(line.split()[1]) / 1024

_sinkhorn.CACHE_BYTES = {cache_bytes}
gen = torch.Generator().manual_seed(0)
warm = torch.randn(2, 64, generator=gen, requires_grad=True)
neural_ndcg_loss(warm, torch.randint(0, 5, (2, 64), generator=gen), max_iter=1).backward()
preds = torch.randn(2, 3072, generator=gen, requires_grad=True)
target = torch.randint(0, 5, (2, 3072), generator=gen)
before = peak_mib()
neural_ndcg_loss(preds, target, max_iter=1).backward()
print(peak_mib() - before)
"""


def peak_growth_mib(cache_bytes: int) -> float:
    """Peak RSS growth of one loss step in a fresh process (the peak is per process)."""
    script = memory_probe(cache_bytes)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, check=True
    )
    return float(result.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="needs Linux's /proc")
@pytest.mark.budget
def test_long_lists_use_bounded_memory() -> None:
    """Above the kept-kernel size nothing [B, L, L] is held: 2 x 3,072^2 float32 is 72 MiB."""
    assert peak_growth_mib(cache_bytes=0) < 24
    assert peak_growth_mib(cache_bytes=1 << 30) > 72  # the probe sees a kept kernel


@needs_torch_2_13_to_compile_losses
@pytest.mark.filterwarnings("ignore:The .grad attribute of a Tensor that is not a leaf")
@pytest.mark.filterwarnings("ignore:`torch.jit.script_method` is deprecated:DeprecationWarning")
def test_torch_compile() -> None:
    preds, target, mask = batch(2, 5, seed=10, dtype=torch.float32)
    loss_fn = NeuralNDCGLoss(k=3, max_iter=5)
    eager = preds.clone().requires_grad_()
    compiled_preds = preds.clone().requires_grad_()
    expected = loss_fn(eager, target, mask)
    got = torch.compile(loss_fn, fullgraph=True)(compiled_preds, target, mask)
    torch.testing.assert_close(got, expected)
    got.backward()
    expected.backward()
    torch.testing.assert_close(compiled_preds.grad, eager.grad)


# --- Host read-backs ---------------------------------------------------------------------------


@pytest.mark.parametrize("validate", [True, False])
@pytest.mark.budget
def test_cpu_reads_back_at_most_once(validate: bool) -> None:
    preds, target, _ = batch(4, 20, seed=14, dtype=torch.float32)
    leaf = preds.requires_grad_()
    with count_host_reads() as reads:
        neural_ndcg_loss(leaf, target, k=5, validate_args=validate).backward()
    assert len(reads) <= (1 if validate else 0), reads


@pytest.mark.budget
def test_accelerator_path_reads_nothing_back(monkeypatch: pytest.MonkeyPatch) -> None:
    preds, target, _ = batch(4, 20, seed=14, dtype=torch.float32)
    expected = neural_ndcg_loss(preds, target, k=5)
    from tests.private_paths import take_accelerator_paths

    take_accelerator_paths(monkeypatch)
    leaf = preds.clone().requires_grad_()
    with count_host_reads() as reads:
        got = neural_ndcg_loss(leaf, target, k=5)
        got.backward()
    assert reads == []
    torch.testing.assert_close(got, expected)


def test_runs_on_meta_tensors() -> None:
    preds = torch.zeros(3, 6, device="meta", requires_grad=True)
    target = torch.zeros(3, 6, device="meta", dtype=torch.long)
    with count_host_reads() as reads:
        neural_ndcg_loss(preds, target).backward()
    assert reads == []


# --- Errors and exports --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"temperature": 0}, r"`temperature` to be a positive finite float, but got 0"),
        ({"max_iter": -1}, r"`max_iter` to be a non-negative int, but got -1"),
        ({"max_iter": 2.5}, r"`max_iter` to be a non-negative int, but got 2.5"),
        ({"tol": -1e-3}, r"`tol` to be a non-negative finite float"),
        ({"reduction": "max"}, r"`reduction` to be one of"),
        ({"k": 0}, r"`k` to be a positive int or None, but got 0"),
    ],
)
def test_errors(options: dict[str, Any], match: str) -> None:
    preds, target, _ = batch()
    with pytest.raises(ValueError, match=match):
        neural_ndcg_loss(preds, target, **options)
    with pytest.raises(ValueError, match=match):
        NeuralNDCGLoss(**options)


def test_exports() -> None:
    assert {"NeuralNDCGLoss", "neural_ndcg_loss"} <= set(torch_ndcg.__all__)
    assert torch_ndcg.functional.neural_ndcg_loss is neural_ndcg_loss
