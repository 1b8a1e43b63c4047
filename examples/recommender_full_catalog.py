"""Train matrix factorisation (BPR) with Lightning; full-catalog nDCG@10 every epoch, and RecBole's.

The interactions come from a file of (user, item, rating, timestamp) rows: MovieLens's ``u.data``
(tab-separated, no header) or RecBole's atomic ``.inter`` (a header of ``name:type`` fields; the
``user_id``, ``item_id`` and ``timestamp`` fields are read). Every interaction is a positive
(implicit feedback); a repeated (user, item) pair keeps its first interaction. Each user's
interactions, in time order, are split leave-last-out (``--split loo``: the last one is the test
item, the one before it the validation item, as RecBole's ``LS: valid_and_test``) or by ratio
(``--split ratio``: the first 80% train, then 10% validation and 10% test).

Every validation epoch, ``NDCG.update_catalog`` ranks the whole catalog for each user from the
embeddings, the user's training items excluded; the test ranking excludes the training and
validation items. At the end the same final scores go through RecBole 1.2.1's own evaluator
(its ``Collector`` and ``NDCG``, the excluded items' scores set to −inf as its full-sort
evaluation does), where RecBole is installed.

MovieLens-100K is not shipped (its licence forbids redistribution): download it from GroupLens
(https://grouplens.org/datasets/movielens/100k/, ``ml-100k/u.data``), or take the copy in
RecBole's wheel (``recbole/dataset_example/ml-100k/ml-100k.inter``). Without ``--data`` a small
generated file is used.

Run: ``python examples/recommender_full_catalog.py --data ml-100k/u.data --threads 1``
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import tempfile
import time
import types
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import lightning
import numpy as np
import torch
from torch import Tensor
from torch.nn.utils.rnn import pad_sequence
from torch.utils.data import DataLoader, TensorDataset

from torch_ndcg import NDCG, catalog_ndcg

K = 10


def read_interactions(path: Path) -> list[tuple[str, str, float]]:
    """(user, item, timestamp) rows of a ``u.data`` or ``.inter`` file, in file order.

    A first line whose fields are ``name:type`` is RecBole's header: the ``user_id``,
    ``item_id`` and ``timestamp`` fields are read (no timestamp: the file order). Otherwise the
    columns are user, item, rating, timestamp, split on tabs (or whitespace).
    """
    lines = [line for line in path.read_text().splitlines() if line.strip()]
    first = lines[0].split("\t")
    if all(":" in field for field in first):
        names = [field.split(":")[0] for field in first]
        user, item = names.index("user_id"), names.index("item_id")
        when = names.index("timestamp") if "timestamp" in names else None
        rows = [line.split("\t") for line in lines[1:]]
    else:
        user, item, when = 0, 1, 3
        rows = [line.split("\t") if "\t" in line else line.split() for line in lines]
    return [(r[user], r[item], float(r[when]) if when is not None else 0.0) for r in rows]


@dataclass
class Interactions:
    """Users and items as ids ``0..n-1``; each split's item ids per user (time order)."""

    n_users: int
    n_items: int
    train: list[list[int]]
    valid: list[list[int]]
    test: list[list[int]]

    def pairs(self) -> TensorDataset:
        """The training (user, item) pairs."""
        users = [u for u, items in enumerate(self.train) for _ in items]
        return TensorDataset(
            torch.tensor(users), torch.tensor([i for items in self.train for i in items])
        )

    def eval_set(self, phase: str) -> TensorDataset:
        """Users with a ``phase`` item: ids ``[U]``, relevant ids and excluded ids, -1 pads.

        Validation excludes each user's training items; test also the validation items.
        """
        targets = self.valid if phase == "valid" else self.test
        seen = (
            self.train
            if phase == "valid"
            else [a + b for a, b in zip(self.train, self.valid, strict=True)]
        )
        users = [u for u in range(self.n_users) if targets[u]]

        def padded(lists: list[list[int]]) -> Tensor:
            rows = [torch.tensor(lists[u] or [-1]) for u in users]
            return pad_sequence(rows, batch_first=True, padding_value=-1)

        return TensorDataset(torch.tensor(users), padded(targets), padded(seen))


def split_interactions(rows: list[tuple[str, str, float]], split: str) -> Interactions:
    """Ids for users and items, first interaction of each pair, split per user in time order."""
    user_ids: dict[str, int] = {}
    item_ids: dict[str, int] = {}
    history: dict[int, dict[int, tuple[float, int]]] = {}
    for order, (user, item, when) in enumerate(rows):
        u = user_ids.setdefault(user, len(user_ids))
        i = item_ids.setdefault(item, len(item_ids))
        history.setdefault(u, {}).setdefault(i, (when, order))
    train, valid, test = [], [], []
    for u in range(len(user_ids)):
        items = sorted(history[u], key=history[u].__getitem__)  # by (timestamp, file order)
        if split == "loo":
            held = 1 if len(items) >= 3 else 0  # fewer than 3: all training, never evaluated
            cut, end = len(items) - 2 * held, len(items) - held
        else:
            cut = len(items) - 2 * int(0.1 * len(items))
            end = cut + int(0.1 * len(items))
        train.append(items[:cut])
        valid.append(items[cut:end])
        test.append(items[end:])
    return Interactions(len(user_ids), len(item_ids), train, valid, test)


def write_generated(path: Path, *, users: int = 400, items: int = 300, seed: int = 0) -> Path:
    """A small interaction file to learn from: ``u.data``'s format, RecBole's for ``.inter``.

    Users and items have random 4-d tastes; each user picks 10-24 distinct items, more often
    those close to their taste, at increasing timestamps.
    """
    rng = np.random.default_rng(seed)
    taste, kind = rng.normal(size=(users, 4)), rng.normal(size=(items, 4))
    lines = ["user_id:token\titem_id:token\trating:float\ttimestamp:float"]
    lines = lines if path.suffix == ".inter" else []
    for user in range(users):
        weights = np.exp(2.0 * kind @ taste[user])
        picked = rng.choice(
            items, size=rng.integers(10, 25), replace=False, p=weights / weights.sum()
        )
        times = 880_000_000 + np.sort(rng.choice(10**6, size=len(picked), replace=False))
        for item, when in zip(picked, times, strict=True):
            lines.append(f"{user + 1}\t{item + 1}\t{rng.integers(1, 6)}\t{when}")
    path.write_text("\n".join(lines) + "\n")
    return path


class BPR(lightning.LightningModule):
    """Matrix factorisation: score(u, i) = user_u · item_i, trained with the BPR loss.

    BPR (Rendle et al. 2009): −log σ(score(u, i) − score(u, j)) for a training pair (u, i) and
    an item j drawn uniformly from the catalog. Validation: full-catalog nDCG@10.
    """

    def __init__(self, n_users: int, n_items: int, dim: int, lr: float, reg: float) -> None:
        super().__init__()
        self.users = torch.nn.Embedding(n_users, dim)
        self.items = torch.nn.Embedding(n_items, dim)
        torch.nn.init.normal_(self.users.weight, std=0.1)
        torch.nn.init.normal_(self.items.weight, std=0.1)
        self.lr, self.reg = lr, reg
        self.val_ndcg, self.test_ndcg = NDCG(k=K), NDCG(k=K)

    def training_step(self, batch: Any, batch_idx: int) -> Tensor:
        """BPR loss of a batch of (user, item) pairs, one uniform negative each, and L2."""
        user_ids, positives = batch
        negatives = torch.randint(self.items.num_embeddings, positives.shape, device=self.device)
        user, pos, neg = self.users(user_ids), self.items(positives), self.items(negatives)
        margin = (user * (pos - neg)).sum(-1)
        l2 = (user.square() + pos.square() + neg.square()).sum(-1)
        loss = torch.nn.functional.softplus(-margin).mean() + self.reg * l2.mean()
        self.log("train_loss", loss, on_step=False, on_epoch=True)
        return loss

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        """Rank the whole catalog for a batch of users, their training items excluded."""
        user_ids, relevant, seen = batch
        self.val_ndcg.update_catalog(
            self.users(user_ids), self.items.weight, relevant, exclude=seen
        )
        self.log(f"val_ndcg@{K}", self.val_ndcg)  # computed over the epoch's users, then reset

    def test_step(self, batch: Any, batch_idx: int) -> None:
        """As `validation_step`, the validation items excluded too."""
        user_ids, relevant, seen = batch
        self.test_ndcg.update_catalog(
            self.users(user_ids), self.items.weight, relevant, exclude=seen
        )
        self.log(f"test_ndcg@{K}", self.test_ndcg)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        """Adam."""
        return torch.optim.Adam(self.parameters(), lr=self.lr)


class PrintEpoch(lightning.Callback):
    """Print the epoch's training loss and validation nDCG@10, and keep the values."""

    def __init__(self) -> None:
        self.values: list[float] = []

    def on_train_epoch_end(self, trainer: lightning.Trainer, module: Any) -> None:
        """Print after each epoch (its validation has run by then)."""
        logged = trainer.callback_metrics
        self.values.append(float(logged[f"val_ndcg@{K}"]))
        print(
            f"epoch {trainer.current_epoch + 1}: train BPR loss {float(logged['train_loss']):.4f}, "
            f"valid nDCG@{K} {self.values[-1]:.4f}"
        )


def full_scores(model: BPR, test: TensorDataset) -> tuple[Tensor, Tensor, Tensor]:
    """Dense ``[U, N]`` test scores, excluded items at −inf; positives' (row, item) indices."""
    user_ids, relevant, seen = test.tensors
    with torch.no_grad():
        scores = model.users(user_ids) @ model.items.weight.T
    rows = torch.arange(len(user_ids))[:, None]
    scores[rows.expand_as(seen)[seen >= 0], seen[seen >= 0]] = float("-inf")
    return scores, rows.expand_as(relevant)[relevant >= 0], relevant[relevant >= 0]


def recbole_ndcg(scores: Tensor, positive_u: Tensor, positive_i: Tensor) -> float | None:
    """nDCG@10 from RecBole 1.2.1's evaluator (``Collector`` + ``Evaluator``); None without it.

    RecBole's full-sort evaluation sets the seen items' scores to −inf, takes ``torch.topk`` of
    every row and counts binary hits against all the user's test positives. Two compatibility
    shims, for RecBole only, undone on return: numpy 1.24 removed ``np.float`` (RecBole's
    ``NDCG`` uses it); and where RecBole's own dependencies (colorlog, pandas, tensorboard...)
    are not installed, its ``recbole.utils`` package is stood in for, while the evaluator is
    imported, by ``recbole/utils/enum_type.py`` (the only thing the evaluator takes from it).
    """
    spec = importlib.util.find_spec("recbole")
    if spec is None or spec.origin is None:
        return None
    had_float = "float" in vars(np)
    if not had_float:
        setattr(np, "float", float)  # noqa: B010 (shim: RecBole 1.2.1 calls np.float)
    try:
        try:
            from recbole.evaluator import Collector, Evaluator
        except ImportError:  # a RecBole dependency that the evaluator itself never uses
            for name in [name for name in sys.modules if name.startswith("recbole.")]:
                del sys.modules[name]
            path = Path(spec.origin).parent / "utils" / "enum_type.py"
            enum_spec = importlib.util.spec_from_file_location("recbole.utils.enum_type", path)
            assert enum_spec is not None
            assert enum_spec.loader is not None
            enum_type = importlib.util.module_from_spec(enum_spec)
            enum_spec.loader.exec_module(enum_type)
            sys.modules["recbole.utils"] = types.ModuleType("recbole.utils")
            sys.modules["recbole.utils"].EvaluatorType = enum_type.EvaluatorType  # type: ignore[attr-defined]
            try:
                from recbole.evaluator import Collector, Evaluator
            finally:
                del sys.modules["recbole.utils"]
        config = {
            "metrics": ["NDCG"],
            "topk": [K],
            "metric_decimal_place": 12,
            "eval_args": {"mode": "full"},
            "device": torch.device("cpu"),
        }
        collector = Collector(config)
        collector.eval_batch_collect(scores, None, positive_u, positive_i)
        return float(Evaluator(config).evaluate(collector.get_data_struct())[f"ndcg@{K}"])
    except ImportError:
        return None
    finally:
        if not had_float:
            delattr(np, "float")


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, help="u.data or .inter file (default: generated)")
    parser.add_argument("--split", choices=["loo", "ratio"], default="loo")
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--dim", type=int, default=32)
    parser.add_argument("--lr", type=float, default=5e-3)
    parser.add_argument("--reg", type=float, default=1e-3, help="L2 weight of the embeddings")
    parser.add_argument("--batch-size", type=int, default=1024)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--threads",
        type=int,
        default=0,
        help="torch's CPU threads (torch.set_num_threads), set before any work; "
        "default 0: torch's own (one per core or OMP_NUM_THREADS)",
    )
    args = parser.parse_args(argv)
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        path = args.data or write_generated(Path(tmp) / "generated.data")
        data = split_interactions(read_interactions(path), args.split)
    train, valid, test = data.pairs(), data.eval_set("valid"), data.eval_set("test")
    print(
        f"{path.name}: {data.n_users} users, {data.n_items} items, {len(train)} training "
        f"interactions, {len(valid)} validation users, {len(test)} test users ({args.split})"
    )
    lightning.seed_everything(args.seed, verbose=False)
    model = BPR(data.n_users, data.n_items, args.dim, args.lr, args.reg)
    printer = PrintEpoch()
    trainer = lightning.Trainer(
        accelerator="cpu",
        devices=1,
        max_epochs=args.epochs,
        logger=False,
        enable_checkpointing=False,
        enable_model_summary=False,
        enable_progress_bar=False,
        num_sanity_val_steps=0,
        callbacks=[printer],
    )
    trainer.fit(
        model,
        DataLoader(train, batch_size=args.batch_size, shuffle=True),
        DataLoader(valid, batch_size=1024),
    )
    ours = float(
        trainer.test(model, DataLoader(test, batch_size=1024), verbose=False)[0][f"test_ndcg@{K}"]
    )
    scores, positive_u, positive_i = full_scores(model, test)
    recbole = recbole_ndcg(scores, positive_u, positive_i)
    top = scores.topk(K + 1).values  # RecBole's topk orders tied scores arbitrarily
    tied = int((top[:, 1:] == top[:, :-1]).any(1).sum())
    print(f"test nDCG@{K}, torch_ndcg NDCG.update_catalog: {ours:.6f}")
    if recbole is None:
        print("RecBole's evaluator: skipped (pip install --no-deps recbole==1.2.1)")
    else:
        print(
            f"test nDCG@{K}, RecBole 1.2.1 evaluator on the same scores: {recbole:.6f} "
            f"(difference {abs(ours - recbole):.1e}; "
            f"{tied} of {len(scores)} users have tied scores among their top {K + 1})"
        )
    user_ids, relevant, seen = test.tensors  # for scale: the most popular unseen items
    counts = torch.bincount(train.tensors[1], minlength=data.n_items).float()
    popular = catalog_ndcg(
        torch.ones(len(user_ids), 1), counts[:, None], relevant, k=K, exclude=seen
    )
    print(
        f"test nDCG@{K}, most popular training items (ties averaged): {float(popular.mean()):.6f}"
    )
    print(f"run time {time.perf_counter() - started:.1f} s, {torch.get_num_threads()} threads")
    return {"valid": printer.values, "test": ours, "recbole": recbole, "model": model, "data": data}


if __name__ == "__main__":
    main()
