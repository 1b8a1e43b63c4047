"""Item-sharded catalogs: 2 and 4 gloo processes, each holding a slice of the item embeddings.

Every rank passes the same users and global ids and must get the whole catalog's values, equal
to the dense `ndcg` of one process, with one collective per call: uneven shards, an empty
shard, users whose relevant items all sit on another rank's shard.
"""

from __future__ import annotations

import datetime
import os
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as dist

from tests.spawn import run_ranks
from tests.test_catalog import catalog, dense, sparse_relevance
from torch_ndcg import NDCG, catalog_ndcg, ndcg

N_ITEMS = 4100
USERS = 10
# (offset, size) of each rank's shard of the catalog; "4" has an empty shard.
SHARDS = {
    2: [(0, 3000), (3000, 1100)],
    4: [(0, 2100), (2100, 0), (2100, 1500), (3600, 500)],
}
KS = [1, 5, 20]


def data() -> tuple[torch.Tensor, ...]:
    queries, items, relevant, grades, excluded = catalog(29, USERS, N_ITEMS, ties=True)
    relevant[3] = torch.tensor([3700, 3800, 4000, 4099, 3601, 3650])  # all on the last shard
    relevant[4] = torch.tensor([0, 1, 2, 3, 4, 5])  # all on the first shard
    excluded[3] = torch.arange(3000, 3009)
    return queries, items, relevant, grades, excluded


def _worker(rank: int, port: int, out_dir: str, world: int) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group(
        "gloo", rank=rank, world_size=world, timeout=datetime.timedelta(seconds=60)
    )
    calls = []
    all_gather = dist.all_gather

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return all_gather(*args, **kwargs)

    dist.all_gather = counted  # type: ignore[assignment]
    queries, items, relevant, grades, excluded = data()
    offset, size = SHARDS[world][rank]
    shard = items[offset : offset + size]
    sparse = sparse_relevance(relevant, grades, N_ITEMS)
    results: dict[str, Any] = {}
    for ties in ("average", "first"):
        before = len(calls)
        results[f"values-{ties}"] = catalog_ndcg(
            queries,
            shard,
            sparse,
            k=KS,
            exclude=excluded,
            ties=ties,  # type: ignore[arg-type]
            item_offset=offset,
            process_group="default",
        )
        results[f"collectives-{ties}"] = len(calls) - before
    metric = NDCG(KS, ties="first")
    metric.update_catalog(
        queries[:6],
        shard,
        sparse.index_select(0, torch.arange(6)),
        exclude=excluded[:6],
        item_offset=offset,
        process_group="default",
    )
    metric.update_catalog(
        queries[6:],
        shard,
        sparse.index_select(0, torch.arange(6, USERS)),
        exclude=excluded[6:],
        item_offset=offset,
        process_group="default",
    )
    results["metric"] = {name: value.item() for name, value in metric.compute().items()}
    try:  # an id past the whole catalog: known to be bad only once the shards are gathered
        catalog_ndcg(
            queries,
            shard,
            torch.full((USERS, 1), N_ITEMS),
            k=3,
            item_offset=offset,
            process_group="default",
        )
    except ValueError as error:
        results["error"] = str(error)
    torch.save(results, Path(out_dir) / f"rank{rank}.pt")
    dist.barrier()
    dist.destroy_process_group()


@pytest.fixture(scope="module", params=sorted(SHARDS))
def world_results(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> tuple[int, list[dict[str, Any]]]:
    if not (dist.is_available() and dist.is_gloo_available()):
        pytest.skip("gloo is not available")
    world = request.param
    return world, run_ranks(_worker, world, tmp_path_factory.mktemp(f"shards{world}"), world)


@pytest.mark.parametrize("ties", ["average", "first"])
def test_every_rank_gets_the_whole_catalog(
    world_results: tuple[int, list[dict[str, Any]]], ties: str
) -> None:
    _, results = world_results
    queries, items, relevant, grades, excluded = data()
    target, mask = dense(relevant, grades, excluded, N_ITEMS)
    expected = ndcg(queries @ items.T, target, k=KS, mask=mask, ties=ties)  # type: ignore[arg-type]
    for result in results:
        torch.testing.assert_close(result[f"values-{ties}"], expected, atol=1e-5, rtol=0)


@pytest.mark.budget
@pytest.mark.parametrize("ties", ["average", "first"])
def test_one_all_gather_per_call(
    world_results: tuple[int, list[dict[str, Any]]], ties: str
) -> None:
    _, results = world_results
    for result in results:
        assert result[f"collectives-{ties}"] == 1


def test_metric_counts_each_user_once(world_results: tuple[int, list[dict[str, Any]]]) -> None:
    _, results = world_results
    queries, items, relevant, grades, excluded = data()
    target, mask = dense(relevant, grades, excluded, N_ITEMS)
    expected = ndcg(queries @ items.T, target, k=KS, mask=mask, ties="first").mean(0)
    for result in results:
        got = torch.tensor([result["metric"][f"ndcg@{k}"] for k in KS], dtype=torch.float64)
        torch.testing.assert_close(got, expected, atol=1e-5, rtol=0)


def test_ids_past_the_catalog_are_an_error_on_every_rank(
    world_results: tuple[int, list[dict[str, Any]]],
) -> None:
    _, results = world_results
    for result in results:
        assert f"relevant item ids in [0, {N_ITEMS})" in result["error"]
