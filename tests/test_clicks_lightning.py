"""UnbiasedLambdaRankLoss inside a real lightning.Trainer: it trains, learns, checkpoints."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from tests.spawn import cpu_trainer
from torch_ndcg import UnbiasedLambdaRankLoss, simulate_clicks

lightning = pytest.importorskip("lightning")

SESSIONS, LENGTH, FEATURES = 96, 8, 4


def click_log() -> TensorDataset:
    """Sessions of lists shown in random order, clicked by the position-based model."""
    gen = torch.Generator().manual_seed(0)
    features = torch.randn(SESSIONS, LENGTH, FEATURES, generator=gen)
    labels = (features[..., 0] > 0).long() * 3
    positions = torch.rand(SESSIONS, LENGTH, generator=gen).argsort(-1).argsort(-1)
    clicks = simulate_clicks(labels, positions, generator=gen)
    return TensorDataset(features, clicks, positions)


class ClickRanker(lightning.LightningModule):  # type: ignore[misc]
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(1)
        self.linear = torch.nn.Linear(FEATURES, 1)
        self.loss_fn = UnbiasedLambdaRankLoss(num_positions=LENGTH, bias_norm=0.0)

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        return self.linear(features).squeeze(-1)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        features, clicks, positions = batch
        loss: torch.Tensor = self.loss_fn(self(features), clicks, positions)
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.5)


def test_trainer_fits_with_the_debiased_loss_and_checkpoints_its_biases(tmp_path: Path) -> None:
    model = ClickRanker()
    trainer = cpu_trainer(1, max_epochs=3)
    trainer.fit(model, DataLoader(click_log(), batch_size=16))
    assert trainer.global_step == 3 * SESSIONS // 16
    # It learnt: the relevant feature's weight grew, and the biases fell below the top's.
    assert model.linear.weight[0, 0] > 0.5
    t_plus = model.loss_fn.t_plus
    assert t_plus[0] == 1
    assert (t_plus[1:] < 1).all()
    # The biases are in the checkpoint and come back with the module.
    path = tmp_path / "ranker.ckpt"
    trainer.save_checkpoint(path)
    state = torch.load(path, weights_only=False)["state_dict"]
    torch.testing.assert_close(state["loss_fn.t_plus"], t_plus)
    restored = ClickRanker.load_from_checkpoint(path)
    for name in ("t_plus", "t_minus", "statistics"):
        torch.testing.assert_close(getattr(restored.loss_fn, name), getattr(model.loss_fn, name))
    statistics = restored.loss_fn.statistics
    assert not torch.equal(statistics, torch.zeros_like(statistics))
