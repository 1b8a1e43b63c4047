"""Train a small scorer with Lightning and log nDCG@1/5/10 on the validation set every epoch.

The data is LightGBM's lambdarank example (``examples/data/``): 201 training and 50 test
queries, 300 features, labels 0-4. The scorer is a small MLP trained with a listwise softmax
cross-entropy (ListNet); ``torch_ndcg.NDCG`` accumulates exact nDCG over all validation lists
(a float64 sum and a count, so the epoch value is the mean over lists, not over batches), and
``RetrievalNDCG`` gets the same lists as flat rows with query ids.

Run: ``python examples/lightning_validation.py --epochs 5``
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import lightning
import torch
from torch.utils.data import DataLoader, TensorDataset

sys.path.insert(0, str(Path(__file__).resolve().parent))
from ranking_data import NUM_FEATURES, load_split

from torch_ndcg import NDCG, RetrievalNDCG, ndcg


def padded_dataset(name: str) -> TensorDataset:
    """Features ``[Q, L, 300]``, labels ``[Q, L]``, mask ``[Q, L]`` and query ids ``[Q]``."""
    features, labels, mask = load_split(name).padded()
    return TensorDataset(features, labels, mask, torch.arange(labels.shape[0]))


class Scorer(lightning.LightningModule):
    """An MLP that scores every item of a list; nDCG logged on validation."""

    def __init__(self, hidden: int = 64, lr: float = 3e-3) -> None:
        super().__init__()
        self.lr = lr
        self.net = torch.nn.Sequential(
            torch.nn.Linear(NUM_FEATURES, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, 1)
        )
        # Three cut-offs scored in one pass, one logged value each ("val_ndcg@1", ...);
        # LightGBM's eval convention.
        self.val_ndcg = NDCG(k=[1, 5, 10], ties="first", empty_target_action="pos").per_cutoff(
            prefix="val_"
        )
        self.val_retrieval = RetrievalNDCG(k=10, ties="first", empty_target_action="pos")

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        """Score every item: ``[B, L, 300]`` to ``[B, L]``."""
        return self.net(features).squeeze(-1)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        """ListNet loss of a batch of padded lists."""
        features, labels, mask, _ = batch
        scores = self(features).masked_fill(~mask, float("-inf"))
        # ListNet: cross-entropy between softmax of the labels and of the scores.
        target = torch.softmax(labels.masked_fill(~mask, float("-inf")), dim=-1)
        loss = -(target * torch.log_softmax(scores, dim=-1).masked_fill(~mask, 0)).sum(-1).mean()
        self.log("train_loss", loss, prog_bar=True)
        return loss

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        """Accumulate the batch into both metrics."""
        features, labels, mask, query = batch
        scores = self(features)
        self.val_ndcg.update(scores, labels, mask)
        self.log_dict(self.val_ndcg, prog_bar=True)  # each computed over the epoch, then reset
        ids = query[:, None].expand_as(labels)
        self.val_retrieval.update(scores[mask], labels[mask], ids[mask])
        self.log("val_retrieval_ndcg@10", self.val_retrieval)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        """Adam."""
        return torch.optim.Adam(self.parameters(), lr=self.lr)


class PrintEpoch(lightning.Callback):
    """Print the logged validation nDCG after every validation epoch."""

    def on_validation_end(self, trainer: lightning.Trainer, module: Any) -> None:
        """Print the epoch's logged values."""
        if trainer.sanity_checking:
            return
        logged = trainer.callback_metrics
        cells = ", ".join(
            f"{name.removeprefix('val_')} {logged[name].item():.4f}"
            for name in ("val_ndcg@1", "val_ndcg@5", "val_ndcg@10", "val_retrieval_ndcg@10")
            if name in logged
        )
        print(f"epoch {trainer.current_epoch}: {cells}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--no-progress-bar", action="store_true")
    args = parser.parse_args()
    lightning.seed_everything(0, verbose=False)
    train, test = padded_dataset("train"), padded_dataset("test")
    trainer = lightning.Trainer(
        accelerator="cpu",
        devices=1,
        max_epochs=args.epochs,
        logger=False,
        enable_checkpointing=False,
        enable_model_summary=False,
        enable_progress_bar=not args.no_progress_bar,
        callbacks=[PrintEpoch()],
    )
    model = Scorer()
    trainer.fit(
        model,
        DataLoader(train, batch_size=16, shuffle=True),
        DataLoader(test, batch_size=16),
    )
    # The logged epoch values are the nDCG of the whole validation set, not a mean of batches.
    features, labels, mask, _ = test.tensors
    with torch.no_grad():
        scores = model(features)
    exact = ndcg(scores, labels, k=[1, 5, 10], mask=mask, ties="first", empty_target_action="pos")
    print(
        "functional nDCG@1/5/10 over all 50 test queries:",
        [round(v, 4) for v in exact.mean(0).tolist()],
    )


if __name__ == "__main__":
    main()
