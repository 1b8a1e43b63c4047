"""A two-tower model's full-catalog nDCG in a Lightning ``validation_step``: two lines, exact
on one process and under ddp_spawn (2 gloo processes, users split across them)."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from tests.spawn import cpu_trainer, retry_exit_abort
from tests.test_catalog import catalog, dense
from torch_ndcg import NDCG, ndcg

lightning = pytest.importorskip("lightning")

USERS, ITEMS, BATCH = 30, 2500, 7


def data() -> tuple[torch.Tensor, ...]:
    queries, items, relevant, _, excluded = catalog(31, USERS, ITEMS, ties=False)
    return queries.float(), items.float(), relevant, excluded


class TwoTower(lightning.LightningModule):  # type: ignore[misc]
    def __init__(self) -> None:
        super().__init__()
        queries, items, _, _ = data()
        self.users = torch.nn.Embedding.from_pretrained(queries)
        self.items = torch.nn.Embedding.from_pretrained(items)
        self.val_ndcg = NDCG(k=10)

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        user_ids, relevant, seen = batch
        self.val_ndcg.update_catalog(
            self.users(user_ids), self.items.weight, relevant, exclude=seen
        )
        self.log("val_ndcg@10", self.val_ndcg)  # computed and reset at epoch end


@pytest.mark.parametrize("devices", [1, 2])
def test_validation_step_logs_the_whole_catalog_ndcg(devices: int) -> None:
    _, _, relevant, excluded = data()
    loader = DataLoader(TensorDataset(torch.arange(USERS), relevant, excluded), batch_size=BATCH)

    def validate() -> Any:
        trainer = cpu_trainer(devices)
        trainer.validate(TwoTower(), loader)
        return trainer.callback_metrics

    logged = retry_exit_abort(validate)
    queries, items, relevant, excluded = data()
    target, mask = dense(relevant, torch.ones(relevant.shape), excluded, ITEMS)
    expected = ndcg(queries @ items.T, target, k=10, mask=mask).mean()
    assert logged["val_ndcg@10"].item() == pytest.approx(expected.item(), abs=1e-6)
