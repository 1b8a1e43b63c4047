"""NDCG logged from a real lightning.Trainer equals the functional nDCG over the validation set."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from tests.spawn import cpu_trainer, retry_exit_abort
from torch_ndcg import NDCG, RetrievalNDCG, ndcg

lightning = pytest.importorskip("lightning")

N_LISTS, LENGTH, FEATURES, VAL_BATCH = 64, 12, 5, 20


def validation_data() -> TensorDataset:
    gen = torch.Generator().manual_seed(0)
    features = torch.randn(N_LISTS, LENGTH, FEATURES, generator=gen)
    target = torch.randint(0, 4, (N_LISTS, LENGTH), generator=gen)
    mask = torch.rand(N_LISTS, LENGTH, generator=gen) > 0.2
    mask[:, 0] = True
    return TensorDataset(features, target, mask, torch.arange(N_LISTS))


class Scorer(lightning.LightningModule):  # type: ignore[misc]
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(1)
        self.linear = torch.nn.Linear(FEATURES, 1)
        self.ndcg10 = NDCG(k=10)
        self.ndcg_many = NDCG(k=[1, 5, 10], gain="linear")
        self.retrieval10 = RetrievalNDCG(k=10)

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        return self.linear(features).squeeze(-1)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        features, target, mask, _ = batch
        scores = self(features)
        return -(torch.where(mask, scores, 0) * target).mean()  # any loss: it only has to train

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        features, target, mask, list_ids = batch
        scores = self(features)
        self.ndcg10.update(scores, target, mask)
        self.log("val_ndcg@10", self.ndcg10)  # Lightning computes and resets at epoch end
        self.ndcg_many.update(scores, target, mask)
        ids = list_ids[:, None].expand_as(target)
        self.retrieval10.update(scores[mask], target[mask], ids[mask])
        self.log("val_retrieval_ndcg@10", self.retrieval10)

    def on_validation_epoch_end(self) -> None:
        self.log_dict(
            {f"val_linear_{name}": value for name, value in self.ndcg_many.compute().items()}
        )
        self.ndcg_many.reset()

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


@pytest.mark.parametrize("devices", [1, 2])
def test_trainer_logs_functional_ndcg_of_whole_validation_set(devices: int) -> None:
    """``devices=2``: Lightning's ddp_spawn on 2 CPU processes (gloo), lists split across them."""
    data = validation_data()

    def fit() -> tuple[Scorer, Any]:
        model = Scorer()
        trainer = cpu_trainer(devices, max_epochs=2)
        train, val = DataLoader(data, batch_size=16), DataLoader(data, batch_size=VAL_BATCH)
        trainer.fit(model, train, val)
        return model, trainer.callback_metrics

    model, logged = retry_exit_abort(fit)
    features, target, mask, _ = data.tensors
    with torch.no_grad():
        scores = model(features)
    expected10 = ndcg(scores, target, k=10, mask=mask).mean().item()
    assert logged["val_ndcg@10"].item() == pytest.approx(expected10, abs=1e-6)
    assert logged["val_retrieval_ndcg@10"].item() == pytest.approx(expected10, abs=1e-6)
    linear = ndcg(scores, target, k=[1, 5, 10], gain="linear", mask=mask).mean(0)
    for column, k in enumerate((1, 5, 10)):
        assert logged[f"val_linear_ndcg@{k}"].item() == pytest.approx(
            linear[column].item(), abs=1e-6
        )
    # The batches of 20 do not divide 64: a mean of batch means would differ.
    batch_means = torch.stack(
        [
            ndcg(scores[i : i + 20], target[i : i + 20], k=10, mask=mask[i : i + 20]).mean()
            for i in range(0, 64, 20)
        ]
    ).mean()
    assert abs(batch_means.item() - expected10) > 1e-6
