"""RetrievalNDCG at its edges: options across DDP ranks, warnings under DDP, empty rows, `indexes`.

The DDP cases run in one spawn of 2 gloo processes (tests/spawn.py); each worker saves what it
saw and the tests read it back.
"""

from __future__ import annotations

import datetime
import os
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as dist
from torchmetrics.utilities import prints

import torch_ndcg
from tests import references
from tests.spawn import run_ranks
from torch_ndcg import NDCG, RetrievalNDCG
from torch_ndcg.functional import ndcg, retrieval_ndcg

WORLD = 2

# name -> (rank 0's options, rank 1's options): one option apart, each changing the value.
UNLIKE_OPTIONS: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    "k": ({"k": 5}, {"k": 1}),
    "gain": ({"k": 3}, {"k": 3, "gain": "linear"}),
    "discount": ({"k": 3}, {"k": 3, "discount": "jarvelin"}),
    "ties": ({"k": 3}, {"k": 3, "ties": "first"}),
    "empty_target_action": ({"k": 3}, {"k": 3, "empty_target_action": "pos"}),
    "ignore_index": ({"k": 3}, {"k": 3, "ignore_index": 2}),
    "aggregation": ({"k": 3, "aggregation": "median"}, {"k": 3, "aggregation": "max"}),
    "confidence": ({"k": 3, "confidence": 0.9}, {"k": 3, "confidence": 0.5}),
    "bootstrap_resamples": (
        {"k": 3, "aggregation": "median", "confidence": 0.9},
        {"k": 3, "aggregation": "median", "confidence": 0.9, "bootstrap_resamples": 10},
    ),
}


def rows() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """60 rows of 6 queries with graded labels and tied scores, a query of no relevant row."""
    gen = torch.Generator().manual_seed(0)
    ids = torch.arange(60) % 6
    preds = torch.randint(0, 5, (60,), generator=gen).float()
    target = torch.randint(0, 4, (60,), generator=gen)
    target[ids == 5] = 0
    return preds, target, ids


def _own_rows(rank: int) -> tuple[torch.Tensor, ...]:
    """This rank's half of the rows: every query spans both ranks."""
    return tuple(part[rank::WORLD] for part in rows())


def _compute_twice(metric: RetrievalNDCG) -> list[str | None]:
    """The error of two ``compute()`` calls (``None``: a value came back)."""
    errors: list[str | None] = []
    for _ in range(2):
        try:
            metric.compute()
            errors.append(None)
        except ValueError as error:
            errors.append(str(error))
    return errors


def _warnings_of(metric: RetrievalNDCG) -> tuple[Any, list[str]]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        value = metric.compute()
    return value.tolist(), [str(warning.message) for warning in caught]


def _worker(rank: int, port: int, out_dir: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group(
        "gloo", rank=rank, world_size=WORLD, timeout=datetime.timedelta(seconds=60)
    )
    # torchmetrics shows its rank-zero warnings on local rank 0 only: here every worker shows
    # its own, so that each rank's verdict is seen.
    prints.rank_zero_only.rank = 0  # type: ignore[attr-defined]
    preds, target, ids = _own_rows(rank)
    out: dict[str, Any] = {"torch_ndcg": torch_ndcg.__file__}
    for name, options in UNLIKE_OPTIONS.items():
        metric = RetrievalNDCG(**options[rank])
        metric.update(preds, target, ids)
        out[name] = _compute_twice(metric)
        out[f"{name} rows kept"] = sum(part.numel() for part in metric.preds) == preds.numel()
    # Every query skipped on both ranks: "mean" (summed) and "median" (gathered values).
    for aggregation in ("mean", "median"):
        skipped = RetrievalNDCG(k=3, empty_target_action="skip", aggregation=aggregation)
        skipped.update(preds, torch.zeros_like(target), ids)
        out[f"all skipped {aggregation}"] = _warnings_of(skipped)
    # A rank whose queries are all skipped beside one that counts some: no warning anywhere.
    some = RetrievalNDCG(k=3, empty_target_action="skip")
    some.update(preds, target if rank == 1 else torch.zeros_like(target), ids + 6 * rank)
    out["some counted"] = _warnings_of(some)
    # Empty batches on both ranks: no row anywhere.
    empty = RetrievalNDCG(k=3)
    try:
        empty.update(torch.empty(0), torch.empty(0), torch.empty(0, dtype=torch.int64))
        out["no row"] = _warnings_of(empty)
    except ValueError as error:  # on both ranks alike: no rank is left in a collective
        out["no row"] = str(error)
    torch.save(out, Path(out_dir) / f"rank{rank}.pt")
    dist.barrier()
    dist.destroy_process_group()


@pytest.fixture(scope="module")
def ranks(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    """Every DDP scenario, run once in 2 gloo processes; each rank's results."""
    if not dist.is_available() or not dist.is_gloo_available():
        pytest.skip("torch.distributed with gloo is not available")
    results = run_ranks(_worker, WORLD, tmp_path_factory.mktemp("edges"))
    assert all(result["torch_ndcg"] == torch_ndcg.__file__ for result in results)
    return results


@pytest.mark.parametrize("option", list(UNLIKE_OPTIONS))
def test_ranks_with_other_options_raise_together(ranks: list[dict[str, Any]], option: str) -> None:
    # The options do give other numbers in one process: a value from both would be wrong.
    preds, target, ids = rows()
    values = {
        repr(RetrievalNDCG(**options)(preds, target, ids)) for options in UNLIKE_OPTIONS[option]
    }
    assert len(values) == 2
    for result in ranks:
        for error in result[option]:  # raised, and raised again: the metric stays usable
            assert error is not None
            assert "Expected the same options on every rank" in error
            assert "RetrievalNDCG" in error
        assert result[f"{option} rows kept"]


def _skipped_warnings(messages: list[str]) -> list[str]:
    return [message for message in messages if "counted no query" in message]


@pytest.mark.parametrize("aggregation", ["mean", "median"])
def test_every_query_skipped_on_every_rank_warns_on_every_rank(
    ranks: list[dict[str, Any]], aggregation: str
) -> None:
    for result in ranks:
        value, messages = result[f"all skipped {aggregation}"]
        assert value == 0.0
        assert len(_skipped_warnings(messages)) == 1
    # Where another rank counts a query, no rank warns, and the value is that rank's.
    preds, target, ids = rows()
    # The one-process reference: rank 1's queries, all counted (each has a relevant row).
    rank_1 = slice(1, None, WORLD)
    expected = references.ndcg_per_query(
        preds[rank_1].tolist(), target[rank_1].tolist(), (ids[rank_1] + 6).tolist(), 3
    )
    expected = {query: value for query, value in expected.items() if query != 11}
    for result in ranks:
        value, messages = result["some counted"]
        assert not _skipped_warnings(messages)
        assert value == pytest.approx(sum(expected.values()) / len(expected), abs=1e-6)


def test_empty_batches_on_every_rank_warn_no_row(ranks: list[dict[str, Any]]) -> None:
    for result in ranks:
        assert isinstance(result["no row"], tuple), result["no row"]
        value, messages = result["no row"]
        assert value == 0.0
        assert [message for message in messages if "no row" in message]


# --- No row at all, in one process -------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
@pytest.mark.parametrize("k", [2, [1, 2]])
def test_retrieval_ndcg_of_no_row_gives_no_query(dtype: torch.dtype, k: Any) -> None:
    empty = torch.empty(0, dtype=dtype)
    values, ids = retrieval_ndcg(empty, torch.empty(0), torch.empty(0, dtype=torch.int64), k=k)
    # The dtypes and trailing shape of a call with rows.
    some_values, some_ids = retrieval_ndcg(
        torch.tensor([0.5, 0.2], dtype=dtype), torch.tensor([1, 0]), torch.tensor([4, 4]), k=k
    )
    assert values.dtype == some_values.dtype
    assert ids.dtype == some_ids.dtype == torch.int64
    assert values.shape == (0, *some_values.shape[1:])
    assert ids.shape == (0,)


def test_an_empty_batch_is_a_no_op_for_retrieval_ndcg_update() -> None:
    preds, target, ids = rows()
    no_row = (torch.empty(0), torch.empty(0, dtype=torch.int64), torch.empty(0, dtype=torch.int64))
    metric = RetrievalNDCG(k=3)
    metric.update(*no_row)
    metric.update(preds, target, ids)
    metric.update(*no_row)
    expected = references.ndcg_per_query(preds.tolist(), target.tolist(), ids.tolist(), 3)
    assert metric.compute().item() == pytest.approx(
        sum(expected.values()) / len(expected), abs=1e-6
    )
    assert sum(part.numel() for part in metric.preds) == preds.numel()


def test_only_empty_batches_give_zero_with_a_warning() -> None:
    metric = RetrievalNDCG(k=3)
    metric.update(torch.empty(0), torch.empty(0), torch.empty(0, dtype=torch.int64))
    with pytest.warns(UserWarning, match="no row"):
        assert metric.compute().item() == 0.0


# --- Query ids passed where `NDCG` takes its mask ----------------------------------------------


def test_ndcg_update_with_query_ids_third_points_to_retrieval_ndcg() -> None:
    preds, target, ids = rows()
    with pytest.raises(TypeError, match=r"`mask`.*torch.int64.*query ids.*RetrievalNDCG"):
        NDCG(k=2).update(preds, target, ids)


def test_functional_ndcg_with_query_ids_as_mask_points_to_retrieval_ndcg() -> None:
    preds, target, ids = rows()
    with pytest.raises(TypeError, match=r"`mask`.*query ids.*retrieval_ndcg"):
        ndcg(preds, target, mask=ids.int())
