"""Both metrics under DDP: 2 gloo processes on the CPU, uneven and empty ranks, vs one process.

One spawn serves the whole module: every scenario runs in the same two workers, which save
their results; the tests then compare them with the functional value on all the data.
"""

from __future__ import annotations

import datetime
import os
import statistics
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as dist
from torchmetrics import MetricCollection
from torchmetrics.utilities.distributed import gather_all_tensors

import torch_ndcg
from tests.host_reads import count_host_reads
from tests.spawn import run_ranks
from torch_ndcg import NDCG, RetrievalNDCG, ndcg, retrieval_ndcg

WORLD_SIZE = 2
KS = (1, 5, 10)


def dataset() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """60 lists of 12 items with ties, padded by a mask; some lists have no relevant item."""
    gen = torch.Generator().manual_seed(0)
    preds = torch.randint(0, 6, (60, 12), generator=gen).float()
    target = torch.randint(0, 3, (60, 12), generator=gen) * (torch.arange(60) % 7 != 0)[:, None]
    mask = torch.rand(60, 12, generator=gen) > 0.2
    mask[:, 0] = True
    return preds, target, mask


def flat_rows() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The same lists as shuffled flat rows with sparse ids: every query spans both ranks."""
    preds, target, mask = dataset()
    ids = (torch.arange(60) * 1_000_003 - 77).repeat_interleave(12).reshape(60, 12)
    perm = torch.randperm(int(mask.sum()), generator=torch.Generator().manual_seed(1))
    return preds[mask][perm], target[mask][perm], ids[mask][perm]


# Per rank, the slices of the data fed to update(), one slice per call. Lists for NDCG, rows for
# RetrievalNDCG. "uneven": rank 0 makes more calls than rank 1; "empty": rank 1 makes none.
LIST_SPLITS = {
    "uneven": [[slice(0, 10), slice(10, 25), slice(25, 33), slice(33, 40)], [slice(40, 60)]],
    "empty": [[slice(0, 30), slice(30, 60)], []],
}
ROW_SPLITS = {
    "uneven": [[slice(0, 100), slice(100, 150), slice(150, 400)], [slice(400, None)]],
    "empty": [[slice(0, 250), slice(250, None)], []],
}


def _value(result: Any) -> Any:
    if isinstance(result, dict):
        return {name: value.tolist() for name, value in result.items()}
    if isinstance(result, tuple):
        return tuple(_value(part) for part in result)
    return result.tolist()


# The collectives of torch.distributed a metric's sync could call, counted by name.
COLLECTIVES = (
    "all_reduce",
    "all_gather",
    "all_gather_into_tensor",
    "all_gather_object",
    "all_to_all",
    "all_to_all_single",
    "broadcast",
    "barrier",
    "gather",
    "reduce",
    "reduce_scatter",
    "reduce_scatter_tensor",
    "scatter",
)


def count_collectives(call: Any) -> dict[str, int]:
    """``call()``, counting each collective of ``torch.distributed`` it calls, by name."""
    counts: dict[str, int] = {}
    originals = {name: getattr(dist, name) for name in COLLECTIVES}

    def counting(name: str, collective: Any) -> Any:
        def counted(*args: Any, **kwargs: Any) -> Any:
            counts[name] = counts.get(name, 0) + 1
            return collective(*args, **kwargs)

        return counted

    for name, collective in originals.items():
        setattr(dist, name, counting(name, collective))
    try:
        call()
    finally:
        for name, collective in originals.items():
            setattr(dist, name, collective)
    return counts


def gather_through_a_custom_function(tensor: torch.Tensor, group: Any = None) -> Any:
    return gather_all_tensors(tensor, group)


def cubic_gain(labels: torch.Tensor) -> torch.Tensor:
    """A callable gain: its identity differs between processes, its name does not."""
    return labels.double() ** 3


# Lists counted on each rank before the sync, beside one update: more than float32 (or a float
# sum of two int32 counts) holds exactly.
LARGE_COUNTS = (2**40 + 1, 2**40 + 2)


def _ndcg_sync_semantics(
    rank: int, device: torch.device, data: tuple[torch.Tensor, ...]
) -> dict[str, Any]:
    """torchmetrics' sync semantics for NDCG, each scenario on uneven updates."""
    preds, target, mask = data
    out: dict[str, Any] = {}

    def fed(metric: Any) -> Any:
        for part in LIST_SPLITS["uneven"][rank]:
            metric.update(preds[part], target[part], mask[part])
        return metric

    # sync() sums the states (counts exactly, in their dtype); unsync() restores this rank's.
    metric = fed(NDCG(KS).to(device))
    own_count = metric.metric_state["count"].tolist()
    metric.sync()
    out["synced count"] = metric.metric_state["count"].tolist()
    out["synced dtypes"] = [str(metric.sum_ndcg.dtype), str(metric.count.dtype)]
    metric.unsync()
    out["count after unsync"] = metric.metric_state["count"].tolist() == own_count
    out["after unsync"] = _value(metric.compute())
    # Counts beyond 2**53 / world are summed exactly (merge_state adds a saved state).
    large = NDCG(1).to(device)
    large.merge_state(
        {
            "sum_ndcg": torch.tensor(
                [0.5 * LARGE_COUNTS[rank]], dtype=torch.float64, device=device
            ),
            "count": torch.tensor([LARGE_COUNTS[rank]], device=device),
        }
    )
    large.sync()
    out["large count"] = large.metric_state["count"].tolist()
    large.unsync()
    out["large mean"] = _value(large.compute())
    # A custom dist_sync_fn: torchmetrics' gather of each state, the same value.
    custom = fed(NDCG(KS, dist_sync_fn=gather_through_a_custom_function).to(device))
    out["custom sync fn"] = _value(custom.compute())
    # A process group given to the metric, and one given to sync().
    group = dist.new_group([0, 1])
    out["process group"] = _value(fed(NDCG(KS, process_group=group).to(device)).compute())
    grouped = fed(NDCG(KS).to(device))
    grouped.sync(process_group=group)
    state = grouped.metric_state
    means = (state["sum_ndcg"] / state["count"]).tolist()
    out["sync process group"] = dict(zip([f"ndcg@{k}" for k in KS], means, strict=True))
    grouped.unsync()
    # A callable gain (another object in each process) passes the options check.
    out["callable gain"] = _value(fed(NDCG(KS, gain=cubic_gain).to(device)).compute())
    # compute_on_cpu (it moves list states only: NDCG's sums stay where they are).
    on_cpu = fed(NDCG(KS, compute_on_cpu=True).to(device))
    out["compute on cpu"] = _value(on_cpu.compute())
    # No sync: this rank's lists only.
    out["local"] = _value(fed(NDCG(KS, sync_on_compute=False).to(device)).compute())
    # forward synced per step: the value of the batch over both ranks; compute() stays local.
    stepped = NDCG(KS, dist_sync_on_step=True, sync_on_compute=False).to(device)
    step = LIST_SPLITS["uneven"][rank][0]
    out["step value"] = _value(stepped(preds[step], target[step], mask[step]))
    out["step then local"] = _value(stepped.compute())
    # A collection whose members share their state (compute groups), and per_cutoff().
    collection = MetricCollection({"a": NDCG(1), "b": NDCG(1), "c": NDCG(5)}).to(device)
    out["collection"] = _value(fed(collection).compute())
    per_cutoff = NDCG(KS, confidence=0.9).per_cutoff().to(device)
    out["per cutoff"] = _value(fed(per_cutoff).compute())
    # Ranks built with other options raise, on every rank together, and the metric is kept.
    unlike = fed(NDCG(5 if rank == 0 else 10).to(device))
    unlike_count = unlike.metric_state["count"].tolist()
    for attempt in ("unlike options", "unlike options again"):
        try:
            unlike.compute()
            out[attempt] = None
        except ValueError as error:
            out[attempt] = str(error)
    # Still this rank's state, unsynced: forward (which refuses a synced metric) runs.
    out["unlike kept"] = unlike.metric_state["count"].tolist() == unlike_count
    unlike(preds[:2], target[:2], mask[:2])
    return out


def built_in_the_parent() -> dict[str, Any]:
    """Metrics built before the workers start, passed to them as Lightning's ``ddp_spawn`` does.

    ``torch.multiprocessing`` pickles a CPU tensor into shared memory (Lightning's ddp_spawn
    gives each worker private copies of a module's parameters and buffers only), so each worker
    must not keep adding to state tensors that the other workers share.
    """
    return {
        "interval": NDCG(KS, confidence=0.9),
        "own": NDCG(KS, sync_on_compute=False),
        "retrieval": RetrievalNDCG(KS),
    }


def _from_the_parent(rank: int, device: torch.device, parent: dict[str, Any]) -> dict[str, Any]:
    """The metrics of `built_in_the_parent` fed this rank's "uneven" updates, then computed."""
    preds, target, mask = (tensor.to(device) for tensor in dataset())
    rows = tuple(tensor.to(device) for tensor in flat_rows())
    for part in LIST_SPLITS["uneven"][rank]:
        parent["interval"].to(device).update(preds[part], target[part], mask[part])
        parent["own"].to(device).update(preds[part], target[part], mask[part])
    for part in ROW_SPLITS["uneven"][rank]:
        parent["retrieval"].to(device).update(rows[0][part], rows[1][part], rows[2][part])
    dist.barrier()  # every rank's updates made before any rank reads its state
    return {name: _value(metric.compute()) for name, metric in parent.items()}


def _worker(rank: int, port: int, out_dir: str, backend: str, parent: dict[str, Any]) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    device = torch.device("cpu")
    if backend == "nccl":
        device = torch.device("cuda", rank)
        torch.cuda.set_device(device)
    dist.init_process_group(
        backend, rank=rank, world_size=WORLD_SIZE, timeout=datetime.timedelta(seconds=60)
    )
    results: dict[str, Any] = {"torch_ndcg": torch_ndcg.__file__}
    preds, target, mask = (tensor.to(device) for tensor in dataset())
    rows = tuple(tensor.to(device) for tensor in flat_rows())
    for split, per_rank in LIST_SPLITS.items():
        for k in (KS, None):
            metric = NDCG(k, empty_target_action="skip" if k is None else "neg").to(device)
            for part in per_rank[rank]:
                metric.update(preds[part], target[part], mask[part])
            results[f"ndcg-{split}-{k}"] = _value(metric.compute())
    for split, per_rank in ROW_SPLITS.items():
        for aggregation in ("mean", "none"):
            retrieval = RetrievalNDCG(KS, aggregation=aggregation).to(device)  # type: ignore[arg-type]
            for part in per_rank[rank]:
                retrieval.update(rows[0][part], rows[1][part], rows[2][part])
            results[f"retrieval-{split}-{aggregation}"] = _value(retrieval.compute())
    for split, per_rank in LIST_SPLITS.items():  # the interval's sums are all-reduced too
        metric = NDCG(KS, confidence=0.9).to(device)
        for part in per_rank[rank]:
            metric.update(preds[part], target[part], mask[part])
        results[f"ndcg-confidence-{split}"] = _value(metric.compute())
    for split, per_rank in ROW_SPLITS.items():
        retrieval = RetrievalNDCG(KS, confidence=0.9, empty_target_action="skip").to(device)
        for part in per_rank[rank]:
            retrieval.update(rows[0][part], rows[1][part], rows[2][part])
        results[f"retrieval-confidence-{split}"] = _value(retrieval.compute())
    # A half-precision module (Lightning's "bf16-true") with a rank that has no row: the empty
    # rank's stand-in rows must have the dtype of the others' stored rows (float32).
    half_rows = RetrievalNDCG(KS).to(device, torch.bfloat16)
    half_lists = NDCG(KS).to(device, torch.bfloat16)
    for part in ROW_SPLITS["empty"][rank]:
        half_rows.update(rows[0][part], rows[1][part], rows[2][part])
    for part in LIST_SPLITS["empty"][rank]:
        half_lists.update(preds[part], target[part], mask[part])
    results["retrieval-empty-bf16"] = _value(half_rows.compute())
    results["ndcg-empty-bf16"] = _value(half_lists.compute())
    # The collectives of one compute() after uneven updates (the docs: one all-reduce each).
    for confidence in (None, 0.9):
        metric = NDCG(KS, confidence=confidence).to(device)
        for part in LIST_SPLITS["uneven"][rank]:
            metric.update(preds[part], target[part], mask[part])
        results[f"collectives-ndcg-{confidence}"] = count_collectives(metric.compute)
        retrieval = RetrievalNDCG(KS, confidence=confidence).to(device)
        for part in ROW_SPLITS["uneven"][rank]:
            retrieval.update(rows[0][part], rows[1][part], rows[2][part])
        results[f"collectives-retrieval-{confidence}"] = count_collectives(retrieval.compute)
    custom = NDCG(KS, dist_sync_fn=gather_through_a_custom_function).to(device)
    for part in LIST_SPLITS["uneven"][rank]:
        custom.update(preds[part], target[part], mask[part])
    results["collectives-ndcg-custom"] = count_collectives(custom.compute)
    results["ndcg-sync"] = _ndcg_sync_semantics(rank, device, (preds, target, mask))
    results["from the parent"] = _from_the_parent(rank, device, parent)
    torch.save(results, Path(out_dir) / f"rank{rank}.pt")
    dist.barrier()
    dist.destroy_process_group()


@pytest.fixture(scope="module", params=["gloo", "nccl"])
def ranks(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> list[dict[str, Any]]:
    """Run every scenario once in 2 processes (gloo on the CPU, NCCL on 2 GPUs where present)."""
    backend = request.param
    if not dist.is_available():
        pytest.skip("torch.distributed is not available")
    if backend == "gloo" and not dist.is_gloo_available():
        pytest.skip("gloo is not available")
    if backend == "nccl" and not (dist.is_nccl_available() and torch.cuda.device_count() >= 2):
        pytest.skip("NCCL needs 2 CUDA devices")
    out_dir = tmp_path_factory.mktemp(f"ddp-{backend}")
    return run_ranks(_worker, WORLD_SIZE, out_dir, backend, built_in_the_parent())


def test_workers_import_this_checkout(ranks: list[dict[str, Any]]) -> None:
    for result in ranks:
        assert result["torch_ndcg"] == torch_ndcg.__file__


@pytest.mark.parametrize("split", list(LIST_SPLITS))
def test_ndcg_under_ddp_equals_one_process(ranks: list[dict[str, Any]], split: str) -> None:
    preds, target, mask = dataset()
    per_list = ndcg(preds, target, k=KS, mask=mask).double()
    expected = dict(zip([f"ndcg@{k}" for k in KS], per_list.mean(0).tolist(), strict=True))
    whole = ndcg(preds, target, mask=mask, empty_target_action="skip").double().nanmean().item()
    for result in ranks:  # every rank gets the global value
        assert result[f"ndcg-{split}-{KS}"] == pytest.approx(expected, abs=1e-6)
        assert result[f"ndcg-{split}-None"] == pytest.approx(whole, abs=1e-6)


@pytest.mark.parametrize("split", list(ROW_SPLITS))
def test_retrieval_under_ddp_equals_one_process(ranks: list[dict[str, Any]], split: str) -> None:
    preds, target, mask = dataset()
    per_list = ndcg(preds, target, k=KS, mask=mask).double()
    names = [f"ndcg@{k}" for k in KS]
    expected_mean = dict(zip(names, per_list.mean(0).tolist(), strict=True))
    ids = (torch.arange(60) * 1_000_003 - 77).tolist()
    for result in ranks:
        assert result[f"retrieval-{split}-mean"] == pytest.approx(expected_mean, abs=1e-6)
        values, query_ids = result[f"retrieval-{split}-none"]
        assert query_ids == ids
        for column, name in enumerate(names):
            assert values[name] == pytest.approx(per_list[:, column].tolist(), abs=1e-6)


@pytest.mark.parametrize("metric", ["retrieval", "ndcg"])
def test_half_precision_metrics_with_an_empty_rank(
    ranks: list[dict[str, Any]], metric: str
) -> None:
    preds, target, mask = dataset()
    per_list = ndcg(preds, target, k=KS, mask=mask).double()
    expected = dict(zip([f"ndcg@{k}" for k in KS], per_list.mean(0).tolist(), strict=True))
    for result in ranks:
        assert result[f"{metric}-empty-bf16"] == pytest.approx(expected, abs=1e-6)


def direct_interval(values: torch.Tensor, confidence: float) -> dict[str, list[float]]:
    """Mean ± z·s/√n per column of per-list values, NaN (skipped) left out: the definition."""
    z = statistics.NormalDist().inv_cdf((1 + confidence) / 2)
    out: dict[str, list[float]] = {}
    for column, k in enumerate(KS):
        kept = [v for v in values[:, column].tolist() if v == v]
        mean, half = statistics.fmean(kept), z * statistics.stdev(kept) / len(kept) ** 0.5
        out[f"ndcg@{k}"], out[f"ndcg@{k}_low"], out[f"ndcg@{k}_high"] = (
            mean,
            mean - half,
            mean + half,
        )
    return out


@pytest.mark.parametrize("split", list(LIST_SPLITS))
def test_ndcg_interval_under_ddp_equals_the_definition(
    ranks: list[dict[str, Any]], split: str
) -> None:
    preds, target, mask = dataset()
    expected = direct_interval(ndcg(preds, target, k=KS, mask=mask).double(), 0.9)
    for result in ranks:
        assert result[f"ndcg-confidence-{split}"] == pytest.approx(expected, abs=1e-6)


@pytest.mark.parametrize("split", list(ROW_SPLITS))
def test_retrieval_interval_under_ddp_equals_the_definition(
    ranks: list[dict[str, Any]], split: str
) -> None:
    values, _ = retrieval_ndcg(*flat_rows(), k=KS, empty_target_action="skip")
    expected = direct_interval(values.double(), 0.9)
    for result in ranks:
        assert result[f"retrieval-confidence-{split}"] == pytest.approx(expected, abs=1e-6)


def means_of(lists: torch.Tensor, ks: Any = KS) -> dict[str, float]:
    """The mean nDCG at each of ``ks`` of the given lists of `dataset`."""
    preds, target, mask = dataset()
    per_list = ndcg(preds[lists], target[lists], k=ks, mask=mask[lists]).double()
    return dict(zip([f"ndcg@{k}" for k in ks], per_list.mean(0).tolist(), strict=True))


def own_lists(rank: int) -> torch.Tensor:
    """The lists rank ``rank`` updates with in the "uneven" split."""
    return torch.cat([torch.arange(60)[part] for part in LIST_SPLITS["uneven"][rank]])


def test_ndcg_sync_and_unsync(ranks: list[dict[str, Any]]) -> None:
    expected = means_of(torch.arange(60))
    for result in ranks:
        synced = result["ndcg-sync"]
        assert synced["synced count"] == [60, 60, 60]
        assert synced["synced dtypes"] == ["torch.float64", "torch.int64"]
        assert synced["count after unsync"]
        assert synced["after unsync"] == pytest.approx(expected, abs=1e-6)


def test_metrics_built_before_the_workers_start(ranks: list[dict[str, Any]]) -> None:
    """Each worker's states are its own, also when the metric came from the parent process."""
    preds, target, mask = dataset()
    interval = direct_interval(ndcg(preds, target, k=KS, mask=mask).double(), 0.9)
    for rank, result in enumerate(ranks):
        got = result["from the parent"]
        assert got["interval"] == pytest.approx(interval, abs=1e-6)
        assert got["own"] == pytest.approx(means_of(own_lists(rank)), abs=1e-6)
        assert got["retrieval"] == pytest.approx(means_of(torch.arange(60)), abs=1e-6)


def test_ndcg_sync_sums_counts_exactly(ranks: list[dict[str, Any]]) -> None:
    for result in ranks:
        assert result["ndcg-sync"]["large count"] == [sum(LARGE_COUNTS)]
        assert result["ndcg-sync"]["large mean"] == 0.5


@pytest.mark.parametrize(
    "scenario", ["custom sync fn", "process group", "sync process group", "compute on cpu"]
)
def test_ndcg_sync_with_a_custom_function_a_process_group_or_compute_on_cpu(
    ranks: list[dict[str, Any]], scenario: str
) -> None:
    expected = means_of(torch.arange(60))
    for result in ranks:
        assert result["ndcg-sync"][scenario] == pytest.approx(expected, abs=1e-6)


def test_ndcg_with_a_callable_gain_under_ddp(ranks: list[dict[str, Any]]) -> None:
    preds, target, mask = dataset()
    per_list = ndcg(preds, target, k=KS, mask=mask, gain=cubic_gain).double()
    expected = dict(zip([f"ndcg@{k}" for k in KS], per_list.mean(0).tolist(), strict=True))
    for result in ranks:
        assert result["ndcg-sync"]["callable gain"] == pytest.approx(expected, abs=1e-6)


def test_ndcg_without_sync_and_synced_per_step(ranks: list[dict[str, Any]]) -> None:
    first = [LIST_SPLITS["uneven"][rank][0] for rank in range(WORLD_SIZE)]
    both_steps = torch.cat([torch.arange(60)[part] for part in first])
    for rank, result in enumerate(ranks):
        synced = result["ndcg-sync"]
        assert synced["local"] == pytest.approx(means_of(own_lists(rank)), abs=1e-6)
        assert synced["step value"] == pytest.approx(means_of(both_steps), abs=1e-6)
        own_step = torch.arange(60)[first[rank]]
        assert synced["step then local"] == pytest.approx(means_of(own_step), abs=1e-6)


def test_ndcg_collections_and_per_cutoff_under_ddp(ranks: list[dict[str, Any]]) -> None:
    preds, target, mask = dataset()
    at_1, at_5 = (means_of(torch.arange(60), [k])[f"ndcg@{k}"] for k in (1, 5))
    interval = direct_interval(ndcg(preds, target, k=KS, mask=mask).double(), 0.9)
    for result in ranks:
        synced = result["ndcg-sync"]
        assert synced["collection"] == pytest.approx({"a": at_1, "b": at_1, "c": at_5}, abs=1e-6)
        assert synced["per cutoff"] == pytest.approx(interval, abs=1e-6)


def test_ndcg_ranks_with_other_options_raise_together(ranks: list[dict[str, Any]]) -> None:
    for result in ranks:
        synced = result["ndcg-sync"]
        for attempt in ("unlike options", "unlike options again"):
            assert synced[attempt] is not None
            assert "same options on every rank" in synced[attempt]
        assert synced["unlike kept"]


# One all-reduce of one buffer: the sums, the counts, (the sums of squares,) and the options
# digest that checks every rank's options.
@pytest.mark.parametrize("confidence", [None, 0.9])
@pytest.mark.budget
def test_ndcg_syncs_by_one_all_reduce(
    ranks: list[dict[str, Any]], confidence: float | None
) -> None:
    """docs/lightning-and-ddp.md: "its sync is one all-reduce" (with the interval's sum of
    squares too, docs/significance.md)."""
    for result in ranks:
        assert result[f"collectives-ndcg-{confidence}"] == {"all_reduce": 1}


@pytest.mark.budget
def test_ndcg_with_a_custom_sync_function_keeps_torchmetrics_gather(
    ranks: list[dict[str, Any]],
) -> None:
    """docs/lightning-and-ddp.md: a custom ``dist_sync_fn`` gets torchmetrics' gather of each
    state (the options key, the sums, the count: a barrier and two all_gathers each)."""
    for result in ranks:
        assert result["collectives-ndcg-custom"] == {"barrier": 3, "all_gather": 6}


@pytest.mark.parametrize("confidence", [None, 0.9])
@pytest.mark.budget
def test_retrieval_exchanges_rows_then_one_all_reduce_of_the_sums(
    ranks: list[dict[str, Any]], confidence: float | None
) -> None:
    """docs/getting-started.md: rows exchanged ("3 ``all_to_all_single``: counts, scores and
    labels, ids"), "then one all-reduce of an error flag (an error raises on every rank
    together) and one all-reduce of the sums"."""
    for result in ranks:
        counts = result[f"collectives-retrieval-{confidence}"]
        assert counts == {"all_to_all_single": 3, "all_reduce": 2}


@pytest.mark.budget
def test_ndcg_sync_reads_nothing_back_on_an_accelerator(accelerator_paths: None) -> None:
    """The CPU taking an accelerator's paths: the sync's options check is a device-side
    assertion, and nothing of the sync is read back (a one-rank gloo group, in this process)."""
    if not dist.is_available() or not dist.is_gloo_available():
        pytest.skip("torch.distributed with gloo is not available")
    if dist.is_initialized():
        pytest.skip("a process group is already initialised in this process")
    preds, target, mask = dataset()
    dist.init_process_group("gloo", rank=0, world_size=1, store=dist.HashStore())
    try:
        metric = NDCG(KS, confidence=0.9)
        metric.update(preds, target, mask)
        with count_host_reads() as reads:
            metric.sync()
        assert reads == []
        assert metric.metric_state["count"].tolist() == [60, 60, 60]
        metric.unsync()
    finally:
        dist.destroy_process_group()
