"""Traps a new user meets in the first hour (issue 28, item 4).

A metric updated only with lists that count for nothing (empty batches, lists of padding only,
lists skipped by ``empty_target_action="skip"``) returns 0 like one that saw real lists of
nDCG 0: ``compute`` warns then, as torchmetrics warns for a metric never updated. Under DDP
the count decides after the sync: one rank with real lists is enough for no warning.
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as dist

from tests.spawn import run_ranks
from torch_ndcg import NDCG, RetrievalNDCG

NO_LIST = "counted no list"
NO_QUERY = "counted no query"


def _compute_recording(metric: Any) -> tuple[Any, list[str]]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        value = metric.compute()
    return value, [str(w.message) for w in caught if issubclass(w.category, UserWarning)]


def _padding_only(metric: NDCG) -> None:
    preds = torch.tensor([[0.3, 0.2, 0.1], [0.5, 0.1, 0.0]])
    target = torch.tensor([[2, 0, 1], [1, 1, 0]])
    metric.update(preds, target, mask=torch.zeros(2, 3, dtype=torch.bool))


def _empty_batch(metric: NDCG) -> None:
    metric.update(torch.zeros(0, 4), torch.zeros(0, 4, dtype=torch.long))


def _skipped_only(metric: NDCG) -> None:
    metric.update(torch.tensor([[0.3, 0.2, 0.1]]), torch.tensor([[0, 0, 0]]))


NOTHING_COUNTED = {
    "padding only": ({}, _padding_only),
    "empty batch": ({}, _empty_batch),
    "skipped only": ({"empty_target_action": "skip"}, _skipped_only),
}


@pytest.mark.parametrize("case", list(NOTHING_COUNTED))
@pytest.mark.parametrize("k", [3, [1, 3]])
def test_ndcg_warns_when_its_updates_counted_no_list(case: str, k: Any) -> None:
    options, feed = NOTHING_COUNTED[case]
    metric = NDCG(k=k, **options)
    feed(metric)
    feed(metric)
    value, messages = _compute_recording(metric)
    assert any(NO_LIST in m for m in messages), messages
    expected = NDCG(k=k, **options)  # the value is unchanged: 0, shaped as usual
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        reference = expected.compute()
    if isinstance(reference, dict):
        assert value.keys() == reference.keys()
        for name in reference:
            assert torch.equal(value[name], reference[name])
    else:
        assert torch.equal(value, reference)


@pytest.mark.parametrize("case", list(NOTHING_COUNTED))
def test_ndcg_does_not_warn_once_a_list_counted(case: str) -> None:
    options, feed = NOTHING_COUNTED[case]
    metric = NDCG(k=3, **options)
    feed(metric)
    metric.update(torch.tensor([[0.9, 0.1]]), torch.tensor([[1, 0]]))
    feed(metric)
    value, messages = _compute_recording(metric)
    assert messages == []
    assert value.item() == 1.0


def test_ndcg_never_updated_keeps_torchmetrics_warning_only() -> None:
    _, messages = _compute_recording(NDCG(k=3))
    assert messages
    assert not any(NO_LIST in m for m in messages)


def test_lists_of_nothing_relevant_count_as_zero_without_warning() -> None:
    metric = NDCG(k=3)  # "neg": a list with no relevant item is a counted 0
    _skipped_only(metric)
    value, messages = _compute_recording(metric)
    assert messages == []
    assert value.item() == 0.0


@pytest.mark.parametrize("aggregation", ["mean", "median"])
def test_retrieval_ndcg_warns_when_every_query_was_skipped(aggregation: str) -> None:
    metric = RetrievalNDCG(k=3, empty_target_action="skip", aggregation=aggregation)
    metric.update(torch.tensor([0.3, 0.2, 0.1]), torch.tensor([0, 0, 0]), torch.tensor([5, 5, 7]))
    value, messages = _compute_recording(metric)
    assert any(NO_QUERY in m for m in messages), messages
    assert value.item() == 0.0
    metric.update(torch.tensor([0.9, 0.1]), torch.tensor([1, 0]), torch.tensor([8, 8]))
    value, messages = _compute_recording(metric)
    assert messages == []
    assert value.item() == 1.0


def test_retrieval_ndcg_warns_when_every_row_was_ignored() -> None:
    metric = RetrievalNDCG(k=3, ignore_index=-1)
    metric.update(torch.tensor([0.3, 0.2]), torch.tensor([-1, -1]), torch.tensor([5, 5]))
    value, messages = _compute_recording(metric)
    assert messages
    assert value.item() == 0.0


def _worker(rank: int, port: int, out_dir: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=2)
    try:
        result: dict[str, Any] = {}
        # Every rank only padding: nothing counted after the sync either.
        nothing = NDCG(k=3)
        _padding_only(nothing)
        result["nothing"] = _compute_recording(nothing)
        # Rank 0 only padding, rank 1 one real list: the synchronised count is 1.
        some = NDCG(k=3)
        if rank == 0:
            _padding_only(some)
        else:
            some.update(torch.tensor([[0.9, 0.1]]), torch.tensor([[1, 0]]))
        result["some"] = _compute_recording(some)
        torch.save(result, Path(out_dir) / f"rank{rank}.pt")
    finally:
        dist.destroy_process_group()


def test_ndcg_under_ddp_warns_from_the_synchronised_count(tmp_path: Path) -> None:
    ranks = run_ranks(_worker, 2, tmp_path)
    value, messages = ranks[0]["nothing"]
    assert value.item() == 0.0
    assert any(NO_LIST in m for m in messages), messages
    for result in ranks:
        value, messages = result["some"]
        assert value.item() == 1.0
        assert messages == []


def _dataset() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(3)
    preds = torch.rand(20, 8, generator=gen)
    target = torch.randint(0, 3, (20, 8), generator=gen)
    mask = torch.rand(20, 8, generator=gen) > 0.2
    mask[:, 0] = True
    return preds, target, mask


def _reference_worker(rank: int, port: int, out_dir: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=2)
    try:
        preds, target, mask = _dataset()
        share = slice(0, 13) if rank == 0 else slice(13, 20)  # uneven shares
        metric = NDCG(k=5)
        metric.update(preds[share], target[share], mask=mask[share])
        result: dict[str, Any] = {"value": metric.compute()}
        if rank == 0:  # the docs' recipe: a one-process reference on rank 0 alone
            reference = NDCG(k=5, sync_on_compute=False)
            for start in range(0, 20, 6):
                rows = slice(start, start + 6)
                reference.update(preds[rows], target[rows], mask=mask[rows])
            result["reference"] = reference.compute()
        dist.barrier()
        torch.save(result, Path(out_dir) / f"rank{rank}.pt")
    finally:
        dist.destroy_process_group()


def test_reference_value_on_rank_zero_with_sync_on_compute_false(tmp_path: Path) -> None:
    ranks = run_ranks(_reference_worker, 2, tmp_path)
    preds, target, mask = _dataset()
    one_process = NDCG(k=5)
    one_process.update(preds, target, mask=mask)
    expected = one_process.compute()
    torch.testing.assert_close(ranks[0]["reference"], expected)
    for result in ranks:
        torch.testing.assert_close(result["value"], expected)
