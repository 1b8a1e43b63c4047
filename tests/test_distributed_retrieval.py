"""RetrievalNDCG under DDP with 2 and 4 gloo processes: each query scored on one rank.

Every scenario runs in one spawn per world size; the workers save what they computed and the
tests compare it with ``retrieval_ndcg`` on all the rows in one process (rank 0's rows first,
then rank 1's, ...: the order ``ties="first"`` follows).
"""

from __future__ import annotations

import datetime
import os
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as dist
from torchmetrics import MetricCollection
from torchmetrics.utilities.distributed import gather_all_tensors

import torch_ndcg
from tests.spawn import run_ranks
from torch_ndcg import RetrievalNDCG, retrieval_ndcg

N_ROWS = 900

# name -> RetrievalNDCG options; every one is computed under DDP and in one process.
SCENARIOS: dict[str, dict[str, Any]] = {
    "mean k=5": {"k": 5},
    "k list linear skip": {"k": [1, 3, 10], "gain": "linear", "empty_target_action": "skip"},
    "first ties pos": {"k": 3, "ties": "first", "empty_target_action": "pos"},
    "ignore_index": {"k": 4, "ignore_index": 3},
    "whole query jarvelin": {"discount": "jarvelin"},
    "none": {"k": [2, 5], "aggregation": "none"},
    "median": {"k": 5, "aggregation": "median"},
    "min": {"k": 5, "aggregation": "min", "empty_target_action": "skip"},
    "max": {"k": [1, 5], "aggregation": "max"},
    "callable": {"k": 5, "aggregation": "squared_mean"},
    "median bootstrap": {"k": [1, 5], "aggregation": "median", "confidence": 0.9},
}


def gather_through_a_custom_function(tensor: torch.Tensor, group: Any = None) -> Any:
    return gather_all_tensors(tensor, group)


def squared_mean(values: torch.Tensor) -> torch.Tensor:
    return (values**2).mean()


def rows() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Shuffled rows of 70 queries with sparse ids of any sign, tied scores, a few empty queries."""
    gen = torch.Generator().manual_seed(0)
    ids = (torch.arange(70) * 7_919_993 - 2**40)[torch.randint(0, 70, (N_ROWS,), generator=gen)]
    preds = torch.randint(0, 8, (N_ROWS,), generator=gen).float() / 4  # ties
    target = torch.randint(0, 4, (N_ROWS,), generator=gen)
    target[ids == ids[0]] = 0  # a query with no relevant row
    return preds, target, ids


def rank_slices(world: int) -> list[list[slice]]:
    """Uneven batches per rank; the last rank gets no row at all."""
    bounds = torch.linspace(0, N_ROWS, world).round().long().tolist()
    per_rank: list[list[slice]] = []
    for rank in range(world - 1):
        start, stop = bounds[rank], bounds[rank + 1]
        middle = start + (stop - start) // 3
        per_rank.append([slice(start, middle), slice(middle, stop)])
    return [*per_rank, []]


def _options(options: dict[str, Any]) -> dict[str, Any]:
    if options.get("aggregation") == "squared_mean":
        return {**options, "aggregation": squared_mean}
    return options


def _plain(result: Any) -> Any:
    if isinstance(result, dict):
        return {name: _plain(value) for name, value in result.items()}
    if isinstance(result, tuple):
        return tuple(_plain(part) for part in result)
    return result.tolist()


def assert_same_result(actual: Any, expected: Any) -> None:
    """Per-query ids exactly, each value to 1e-6 (NaN equal to NaN), at any nesting.

    ``pytest.approx`` refuses nested structures (pytest >= 9.2), so a ``(values, ids)`` result
    of ``aggregation="none"`` is compared part by part.
    """
    if isinstance(expected, tuple):
        values, ids = actual
        expected_values, expected_ids = expected
        assert ids == expected_ids
        assert_same_result(values, expected_values)
    elif isinstance(expected, dict):
        assert actual.keys() == expected.keys()
        for name, value in expected.items():
            assert actual[name] == pytest.approx(value, abs=1e-6, nan_ok=True), name
    else:
        assert actual == pytest.approx(expected, abs=1e-6, nan_ok=True)


def _fed(metric: Any, rank: int, world: int) -> Any:
    preds, target, ids = rows()
    for part in rank_slices(world)[rank]:
        metric.update(preds[part], target[part], ids[part])
    return metric


def _worker(rank: int, port: int, out_dir: str, world: int) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group(
        "gloo", rank=rank, world_size=world, timeout=datetime.timedelta(seconds=60)
    )
    out: dict[str, Any] = {"torch_ndcg": torch_ndcg.__file__}
    for name, options in SCENARIOS.items():
        out[name] = _plain(_fed(RetrievalNDCG(**_options(options)), rank, world).compute())
    # Errors are raised on every rank together (no rank waits in a collective alone).
    try:
        _fed(RetrievalNDCG(empty_target_action="error"), rank, world).compute()
        out["error"] = None
    except ValueError as error:
        out["error"] = str(error)

    # An error of any type (here a callable gain's RuntimeError on the rank owning query 1)
    # is raised on every rank, and the metric stays usable: compute() raises again, the same.
    def strict_gain(labels: torch.Tensor) -> torch.Tensor:
        if bool((labels > 5).any()):
            raise RuntimeError("label above 5")
        return labels

    failing = RetrievalNDCG(gain=strict_gain, validate_args=False)  # else the check raises
    failing.update(torch.tensor([0.5, 0.2]), torch.tensor([9, 0]), torch.tensor([1, 2]))
    for attempt in ("callable error", "callable error again"):
        try:
            failing.compute()
            out[attempt] = None
        except Exception as error:
            out[attempt] = type(error).__name__
    # forward() synced per step (dist_sync_on_step), then an unsynced compute: the value of
    # this rank's own rows, with no collective.
    preds, target, ids = rows()
    own = slice(rank * 60, rank * 60 + 60)
    stepped = RetrievalNDCG(k=5, dist_sync_on_step=True, sync_on_compute=False)
    stepped(preds[own][:30], target[own][:30], ids[own][:30])
    stepped.update(preds[own][30:], target[own][30:], ids[own][30:])
    out["step then local"] = _plain(stepped.compute())
    # sync() leaves this rank the rows of its own queries; unsync() gives its rows back.
    metric = _fed(RetrievalNDCG(k=5), rank, world)
    own_rows = sum(part.numel() for part in metric.preds)
    metric.sync()
    owned = torch.cat(metric.indexes)
    out["synced rows"] = (owned.numel(), bool((owned.remainder(world) == rank).all()))
    metric.unsync()
    out["rows kept"] = sum(part.numel() for part in metric.preds) == own_rows
    out["after unsync"] = _plain(metric.compute())
    # A custom dist_sync_fn gets torchmetrics' gather of every row.
    custom = RetrievalNDCG(k=5, dist_sync_fn=gather_through_a_custom_function)
    out["custom sync fn"] = _plain(_fed(custom, rank, world).compute())
    # No sync: this rank's own queries only.
    out["local"] = _plain(_fed(RetrievalNDCG(k=5, sync_on_compute=False), rank, world).compute())
    # A collection whose members share their rows.
    collection = MetricCollection({"a": RetrievalNDCG(k=1), "b": RetrievalNDCG(k=5)})
    out["collection"] = _plain(_fed(collection, rank, world).compute())
    torch.save(out, Path(out_dir) / f"rank{rank}.pt")
    dist.barrier()
    dist.destroy_process_group()


@pytest.fixture(scope="module", params=[2, 4], ids=["2 ranks", "4 ranks"])
def ranks(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """Run every scenario once in ``world`` gloo processes; each rank's results."""
    if not dist.is_available() or not dist.is_gloo_available():
        pytest.skip("torch.distributed with gloo is not available")
    world = request.param
    out_dir = tmp_path_factory.mktemp(f"ddp{world}")
    return world, run_ranks(_worker, world, out_dir, world)


def one_process(world: int, options: dict[str, Any]) -> Any:
    """The metric on all the rows in rank order, in this process."""
    metric = RetrievalNDCG(**_options(options))
    for rank in range(world):
        _fed(metric, rank, world)
    return _plain(metric.compute())


def test_workers_import_this_checkout(ranks: Any) -> None:
    for result in ranks[1]:
        assert result["torch_ndcg"] == torch_ndcg.__file__


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_every_rank_gets_the_value_of_one_process(ranks: Any, name: str) -> None:
    world, results = ranks
    expected = one_process(world, SCENARIOS[name])
    for result in results:
        assert_same_result(result[name], expected)


def test_one_process_equals_the_functional_retrieval_ndcg(ranks: Any) -> None:
    world, _ = ranks
    preds, target, ids = rows()
    values, query_ids = retrieval_ndcg(preds, target, ids, k=[2, 5])
    metric_values, metric_ids = one_process(world, SCENARIOS["none"])
    assert metric_ids == query_ids.tolist()
    assert metric_values["ndcg@5"] == pytest.approx(values[:, 1].tolist(), abs=1e-6)


def test_errors_are_raised_on_every_rank(ranks: Any) -> None:
    for result in ranks[1]:
        assert result["error"] is not None
        assert "no relevant item" in result["error"] or "another rank" in result["error"]


def test_sync_unsync_custom_sync_fn_and_collections(ranks: Any) -> None:
    world, results = ranks
    expected = one_process(world, {"k": 5})
    expected_k1 = one_process(world, {"k": 1})
    assert sum(result["synced rows"][0] for result in results) == N_ROWS
    for result in results:
        assert result["synced rows"][1]  # every row on the rank that owns its query
        assert result["rows kept"]
        assert result["after unsync"] == pytest.approx(expected, abs=1e-6)
        assert result["custom sync fn"] == pytest.approx(expected, abs=1e-6)
        assert result["collection"] == pytest.approx({"a": expected_k1, "b": expected}, abs=1e-6)


def test_without_sync_each_rank_gets_its_own_queries(ranks: Any) -> None:
    world, results = ranks
    preds, target, ids = rows()
    for rank, result in enumerate(results):
        parts = rank_slices(world)[rank]
        if not parts:
            assert result["local"] == 0
            continue
        local = torch.cat([torch.arange(N_ROWS)[part] for part in parts])
        values, _ = retrieval_ndcg(preds[local], target[local], ids[local], k=5)
        assert result["local"] == pytest.approx(values.double().mean().item(), abs=1e-6)


def test_errors_of_any_type_are_raised_on_every_rank_and_again(ranks: Any) -> None:
    for result in ranks[1]:
        assert result["callable error"] in ("RuntimeError", "ValueError")
        assert result["callable error again"] in ("RuntimeError", "ValueError")


def test_forward_synced_per_step_leaves_an_unsynced_compute_local(ranks: Any) -> None:
    _, results = ranks
    preds, target, ids = rows()
    for rank, result in enumerate(results):
        own = slice(rank * 60, rank * 60 + 60)
        values, _ = retrieval_ndcg(preds[own], target[own], ids[own], k=5)
        assert result["step then local"] == pytest.approx(values.double().mean().item(), abs=1e-6)
