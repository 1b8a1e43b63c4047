"""Hot paths read nothing back on an accelerator, once at most on the CPU; fullgraph compile.

An accelerator is stood in for by ``meta`` tensors (which cannot be read back at all) and by the
CPU made to take the accelerator's paths (``take_accelerator_paths``), whose numbers are then
compared with the CPU's own. Read-backs are counted by ``tests/host_reads.py``. The counts
and the forced accelerator paths are ``budget`` tests (tests/README.md); the meta tensors and
the compiled graphs are behaviour.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Any

import pytest
import torch

from tests.conftest import needs_torch_2_13_to_compile_losses
from tests.host_reads import count_host_reads
from torch_ndcg import (
    NDCG,
    ApproxNDCGLoss,
    LambdaRankLoss,
    ListMLELoss,
    NeuralNDCGLoss,
    PLRankLoss,
    RankNetLoss,
    RetrievalNDCG,
    SoftmaxLoss,
    XENDCGLoss,
    approx_ndcg_loss,
    dcg,
    lambdarank_loss,
    listmle_loss,
    ndcg,
    ranknet_loss,
)

N_LISTS, LENGTH = 64, 100


def inputs(device: str | torch.device = "cpu") -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    preds = torch.randn(N_LISTS, LENGTH, generator=gen)
    preds[0, :4] = 0.5  # a tie in the top 10
    target = torch.randint(0, 5, (N_LISTS, LENGTH), generator=gen)
    return preds.to(device), target.to(device)


def run_ndcg(preds: torch.Tensor, target: torch.Tensor, validate: bool) -> Any:
    return ndcg(preds, target, k=10, validate_args=validate)


def run_dcg(preds: torch.Tensor, target: torch.Tensor, validate: bool) -> Any:
    return dcg(preds, target, k=[1, 10], validate_args=validate)


def run_ndcg_update(preds: torch.Tensor, target: torch.Tensor, validate: bool) -> Any:
    metric = NDCG(k=[1, 10], validate_args=validate).to(preds.device)
    metric.update(preds, target)
    return metric.sum_ndcg


def run_retrieval_update(preds: torch.Tensor, target: torch.Tensor, validate: bool) -> Any:
    metric = RetrievalNDCG(k=10, validate_args=validate).to(preds.device)
    ids = torch.arange(N_LISTS, device=preds.device).repeat_interleave(LENGTH)
    metric.update(preds.reshape(-1), target.reshape(-1), ids)
    return metric.target[0]


def unretrieved(preds: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """A third of the items judged but not retrieved (``retrieved=``), their scores NaN."""
    retrieved = (torch.arange(preds.numel(), device=preds.device) % 3 != 0).view(preds.shape)
    return torch.where(retrieved, preds, torch.nan), retrieved


def run_ndcg_retrieved(preds: torch.Tensor, target: torch.Tensor, validate: bool) -> Any:
    preds, retrieved = unretrieved(preds)
    return ndcg(preds, target, retrieved=retrieved, k=10, validate_args=validate)


def run_ndcg_update_retrieved(preds: torch.Tensor, target: torch.Tensor, validate: bool) -> Any:
    metric = NDCG(k=[1, 10], validate_args=validate).to(preds.device)
    scores, retrieved = unretrieved(preds)
    metric.update(scores, target, retrieved=retrieved)
    return metric.sum_ndcg


def run_retrieval_update_retrieved(
    preds: torch.Tensor, target: torch.Tensor, validate: bool
) -> Any:
    metric = RetrievalNDCG(k=10, validate_args=validate).to(preds.device)
    ids = torch.arange(N_LISTS, device=preds.device).repeat_interleave(LENGTH)
    scores, retrieved = unretrieved(preds.reshape(-1))
    metric.update(scores, target.reshape(-1), ids, retrieved)
    return metric.preds[0]


def _loss_step(loss: torch.nn.Module) -> Callable[[torch.Tensor, torch.Tensor, bool], Any]:
    def step(preds: torch.Tensor, target: torch.Tensor, validate: bool) -> Any:
        leaf = preds.clone().requires_grad_()
        loss.validate_args = validate
        loss(leaf, target).backward()
        return leaf.grad

    return step


def run_xe_ndcg_step(preds: torch.Tensor, target: torch.Tensor, validate: bool) -> Any:
    """XENDCGLoss, its noise drawn from the default generator (seeded: the same every run)."""
    leaf = preds.clone().requires_grad_()
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        XENDCGLoss(validate_args=validate)(leaf, target).backward()
    return leaf.grad


def run_xe_ndcg_noise_step(preds: torch.Tensor, target: torch.Tensor, validate: bool) -> Any:
    """XENDCGLoss with its noise passed in (its values checked with the input's)."""
    noise = torch.rand(preds.shape, generator=torch.Generator().manual_seed(1))
    leaf = preds.clone().requires_grad_()
    XENDCGLoss(validate_args=validate)(leaf, target, noise=noise.to(preds.device)).backward()
    return leaf.grad


def run_pl_rank_step(preds: torch.Tensor, target: torch.Tensor, validate: bool) -> Any:
    # A fresh generator per step: the same draws on every call (none on meta tensors).
    gen = None if preds.is_meta else torch.Generator(preds.device).manual_seed(0)
    loss = PLRankLoss(k=10, num_samples=8, generator=gen)
    return _loss_step(loss)(preds, target, validate)


HOT_PATHS: dict[str, Callable[[torch.Tensor, torch.Tensor, bool], Any]] = {
    "ndcg": run_ndcg,
    "dcg": run_dcg,
    "NDCG.update": run_ndcg_update,
    "RetrievalNDCG.update": run_retrieval_update,
    "ndcg retrieved": run_ndcg_retrieved,
    "NDCG.update retrieved": run_ndcg_update_retrieved,
    "RetrievalNDCG.update retrieved": run_retrieval_update_retrieved,
    "LambdaRankLoss step": _loss_step(LambdaRankLoss(k=10, weighting="ndcg2pp")),
    "ApproxNDCGLoss step": _loss_step(ApproxNDCGLoss(k=10)),
    "NeuralNDCGLoss step": _loss_step(NeuralNDCGLoss(k=10)),
    "SoftmaxLoss step": _loss_step(SoftmaxLoss()),
    "RankNetLoss step": _loss_step(RankNetLoss()),
    "ListMLELoss step": _loss_step(ListMLELoss(position_aware=True)),
    "XENDCGLoss step": run_xe_ndcg_step,
    "XENDCGLoss step, noise given": run_xe_ndcg_noise_step,
    "PLRankLoss step": run_pl_rank_step,
}
# On the CPU a read-back is cheap: the value checks read back once where they run (at the
# edge, issue 26), and the kernel once for its fast-path flags (a tie touching the top k, the
# labels' range); the small-batch path reads both in one. The losses' kernels and
# RetrievalNDCG.update have no fast path to pick.
CPU_READS_WITHOUT_CHECKS = {
    "ndcg": 1,
    "dcg": 1,
    "NDCG.update": 1,
    "RetrievalNDCG.update": 0,
    "ndcg retrieved": 1,
    "NDCG.update retrieved": 1,
    "RetrievalNDCG.update retrieved": 0,
    "LambdaRankLoss step": 0,
    "ApproxNDCGLoss step": 0,
    "NeuralNDCGLoss step": 0,
    "SoftmaxLoss step": 0,
    "RankNetLoss step": 0,
    "ListMLELoss step": 0,
    "XENDCGLoss step": 0,
    "XENDCGLoss step, noise given": 0,
    "PLRankLoss step": 1,  # unchecked: the scores' span, whether its sums may be linear
}


@pytest.mark.parametrize("validate", [True, False], ids=["checked", "unchecked"])
@pytest.mark.parametrize("name", list(HOT_PATHS))
@pytest.mark.budget
def test_cpu_reads_back_at_most_once_per_call(name: str, validate: bool) -> None:
    preds, target = inputs()
    with count_host_reads() as reads:
        HOT_PATHS[name](preds, target, validate)
    assert len(reads) <= CPU_READS_WITHOUT_CHECKS[name] + validate, reads


@pytest.mark.parametrize("validate", [True, False], ids=["checked", "unchecked"])
@pytest.mark.parametrize("name", list(HOT_PATHS))
@pytest.mark.budget
def test_accelerator_paths_read_nothing_back_and_give_the_cpu_numbers(
    name: str, validate: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    preds, target = inputs()
    expected = HOT_PATHS[name](preds, target, validate)
    from tests.private_paths import take_accelerator_paths

    take_accelerator_paths(monkeypatch)
    with count_host_reads() as reads:
        got = HOT_PATHS[name](preds, target, validate)
    assert reads == []
    torch.testing.assert_close(got, expected, rtol=1e-6, atol=1e-7, equal_nan=True)


@pytest.mark.parametrize("name", list(HOT_PATHS))
def test_hot_paths_run_on_meta_tensors_with_default_arguments(name: str) -> None:
    preds, target = inputs("meta")  # a meta tensor has no value to read back
    with count_host_reads() as reads:
        HOT_PATHS[name](preds, target, True)
    assert reads == []


@pytest.mark.budget
def test_ndcg_compute_reads_nothing_back_on_an_accelerator(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    metric = NDCG(k=[1, 10])
    metric.update(*inputs())
    with count_host_reads() as reads:  # the CPU: the count, once (warns if no list counted)
        expected = metric.compute()
    assert len(reads) == 1
    from tests.private_paths import take_accelerator_paths

    take_accelerator_paths(monkeypatch)
    metric = NDCG(k=[1, 10])
    metric.update(*inputs())
    with count_host_reads() as reads:
        got = metric.compute()
    assert reads == []
    torch.testing.assert_close(got, expected)


@pytest.mark.parametrize(
    ("ignore_index", "some_unretrieved"), [(None, False), (3, False), (3, True)]
)
@pytest.mark.budget
def test_retrieval_compute_reads_back_a_constant_number_of_times_on_an_accelerator(
    ignore_index: int | None, some_unretrieved: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Queries of 1 to 300 rows: nine size buckets, each a padded batch for the kernel.
    gen = torch.Generator().manual_seed(1)
    sizes = torch.randint(1, 300, (500,), generator=gen)
    ids = torch.arange(500).repeat_interleave(sizes)
    preds, target = torch.rand(ids.numel(), generator=gen), torch.randint(0, 4, ids.shape)
    preds, retrieved = unretrieved(preds) if some_unretrieved else (preds, None)
    expected = RetrievalNDCG(k=10, ignore_index=ignore_index)
    expected.update(preds, target, ids, retrieved)
    from tests.private_paths import take_accelerator_paths

    take_accelerator_paths(monkeypatch)
    metric = RetrievalNDCG(k=10, ignore_index=ignore_index)
    metric.update(preds, target, ids, retrieved)
    with count_host_reads() as reads:
        value = metric.compute()
    # Dropping ignored rows, the ids' range, the query starts, the buckets' sizes, the check
    # that no query's gains overflow: whatever the number of buckets.
    assert len(reads) <= 5, reads
    torch.testing.assert_close(value, expected.compute())


# --- Checks without a read-back ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("preds", "target", "message"),
    [
        ([[0.1, float("nan")]], [[1, 0]], "Expected `preds` to contain no NaN"),
        ([[0.1, 0.2]], [[1, -2]], "Expected `target` to be non-negative"),
        ([[0.1, 0.2]], [[1, 200]], "Expected `target` values of at most 127.99"),
        ([[0.1, 0.2]], [[-math.inf, -math.inf]], "Expected `target` to be finite"),
    ],
)
@pytest.mark.budget
def test_device_side_checks_raise_with_the_cpu_message(
    preds: list[list[float]], target: list[list[int]], message: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.private_paths import take_accelerator_paths

    take_accelerator_paths(monkeypatch)
    for call in (ndcg, lambdarank_loss, approx_ndcg_loss):
        # torch._assert_async raises RuntimeError (on CUDA: a device-side assertion).
        with pytest.raises(RuntimeError, match=re.escape(message)):
            call(torch.tensor(preds), torch.tensor(target))


@pytest.mark.parametrize("dtype", [torch.int64, torch.uint8, torch.float32, torch.bfloat16])
@pytest.mark.budget
def test_device_side_gain_limit_is_exact_in_the_labels_dtype(
    dtype: torch.dtype, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The exponential limit in float32 is 127.99999991: a label of 127 passes, 128 overflows
    # (2^128 is inf in float32), as on the CPU. Compared in the labels' dtype, a limit rounded
    # to 128.0 would have let 128 through.
    preds = torch.tensor([[0.1, 0.2]])
    within, beyond = torch.tensor([[127, 0]]).to(dtype), torch.tensor([[128, 0]]).to(dtype)
    for call in (ndcg, lambdarank_loss, approx_ndcg_loss):
        assert torch.isfinite(call(preds, within)).all()
        with pytest.raises(ValueError, match=re.escape("at most 127.99")):
            call(preds, beyond)
    from tests.private_paths import take_accelerator_paths

    take_accelerator_paths(monkeypatch)
    for call in (ndcg, lambdarank_loss, approx_ndcg_loss):
        assert torch.isfinite(call(preds, within)).all()
        with pytest.raises(RuntimeError, match=re.escape("at most 127.99")):
            call(preds, beyond)


# --- torch.compile(fullgraph=True) --------------------------------------------------------------


COMPILED_CALLS: dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {
    "ndcg": lambda p, t: ndcg(p, t, k=10),
    "ndcg k list first": lambda p, t: ndcg(p, t, k=[1, 5], ties="first", gain="linear"),
    "lambdarank_loss": lambda p, t: lambdarank_loss(p, t, k=10),
    "approx_ndcg_loss": lambda p, t: approx_ndcg_loss(p, t),
    "ranknet_loss": lambda p, t: ranknet_loss(p, t),
    "listmle_loss": lambda p, t: listmle_loss(p, t, position_aware=True),
}
LOSSES = {"lambdarank_loss", "approx_ndcg_loss", "ranknet_loss", "listmle_loss"}


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize(
    "name",
    [
        pytest.param(name, marks=needs_torch_2_13_to_compile_losses if name in LOSSES else ())
        for name in COMPILED_CALLS
    ],
)
def test_fullgraph_compile_with_default_arguments_equals_eager(name: str) -> None:
    torch._dynamo.reset()
    call = COMPILED_CALLS[name]
    preds, target = inputs()
    preds, target = preds[:8, :20], target[:8, :20]
    eager_leaf = preds.clone().requires_grad_()
    compiled_leaf = preds.clone().requires_grad_()
    expected = call(eager_leaf, target)
    got = torch.compile(call, fullgraph=True)(compiled_leaf, target)
    torch.testing.assert_close(got, expected)
    if expected.requires_grad:
        expected.sum().backward()
        got.sum().backward()
        torch.testing.assert_close(compiled_leaf.grad, eager_leaf.grad)


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_compiled_checks_raise_without_breaking_the_graph() -> None:
    torch._dynamo.reset()
    compiled = torch.compile(lambda p, t: ndcg(p, t, k=2), fullgraph=True)
    with pytest.raises(RuntimeError, match=re.escape("Expected `preds` to contain no NaN")):
        compiled(torch.tensor([[0.1, float("nan"), 0.3]]), torch.tensor([[1, 0, 2]]))


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize("confidence", [None, 0.9])
@pytest.mark.parametrize("cls", [NDCG, RetrievalNDCG])
def test_metric_update_compiles_without_graph_breaks(cls: type, confidence: float | None) -> None:
    torch._dynamo.reset()
    preds, target = inputs()
    ids = torch.arange(N_LISTS).repeat_interleave(LENGTH)
    args = (preds, target) if cls is NDCG else (preds.reshape(-1), target.reshape(-1), ids)
    eager, compiled = cls(k=10, confidence=confidence), cls(k=10, confidence=confidence)
    explanation = torch._dynamo.explain(compiled.update)(*args)
    assert explanation.graph_break_count == 0, explanation.break_reasons
    eager.update(*args)
    torch.testing.assert_close(compiled.compute(), eager.compute())


@needs_torch_2_13_to_compile_losses
@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a GPU")
@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize("loss_name", ["lambdarank", "approx", "neural"])
def test_training_step_under_cuda_graphs(loss_name: str) -> None:
    torch._dynamo.reset()
    device = torch.device("cuda")
    gen = torch.Generator().manual_seed(2)
    features = torch.randn(16, 30, 8, generator=gen).to(device)
    target = torch.randint(0, 4, (16, 30), generator=gen).to(device)
    loss_fn = {
        "lambdarank": LambdaRankLoss(k=10),
        "approx": ApproxNDCGLoss(k=10),
        "neural": NeuralNDCGLoss(k=10),
    }[loss_name]

    def make() -> tuple[torch.nn.Module, torch.optim.Optimizer]:
        torch.manual_seed(0)
        model = torch.nn.Linear(8, 1).to(device)
        return model, torch.optim.SGD(model.parameters(), lr=0.1)

    def step(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> torch.Tensor:
        optimizer.zero_grad(set_to_none=False)
        loss = loss_fn(model(features).squeeze(-1), target)
        loss.backward()
        optimizer.step()
        return loss.detach()

    eager_model, eager_optimizer = make()
    graph_model, graph_optimizer = make()
    compiled = torch.compile(step, mode="reduce-overhead")
    for _ in range(4):
        expected = step(eager_model, eager_optimizer)
        torch.compiler.cudagraph_mark_step_begin()
        got = compiled(graph_model, graph_optimizer).clone()
        torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-6)
