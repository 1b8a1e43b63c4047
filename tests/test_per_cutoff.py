"""``per_cutoff()``: one metric per cut-off, for Lightning's ``log_dict``, exact every epoch."""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import Tensor
from torch.utils.data import DataLoader, TensorDataset

from tests.spawn import cpu_trainer, retry_exit_abort
from torch_ndcg import NDCG, RetrievalNDCG, ndcg

KS = [1, 5, 10]


def batches(n: int = 4, seed: int = 0) -> list[tuple[Tensor, Tensor]]:
    gen = torch.Generator().manual_seed(seed)
    return [
        (torch.rand(7 + i, 12, generator=gen), torch.randint(0, 4, (7 + i, 12), generator=gen))
        for i in range(n)
    ]


def functional_means(data: list[tuple[Tensor, Tensor]], **options: Any) -> Tensor:
    preds = torch.cat([p for p, _ in data])
    target = torch.cat([t for _, t in data])
    return ndcg(preds, target, k=KS, **options).double().mean(0)


def flat_rows(data: list[tuple[Tensor, Tensor]]) -> list[tuple[Tensor, Tensor, Tensor]]:
    rows, first = [], 0
    for preds, target in data:
        ids = torch.arange(first, first + len(preds))[:, None].expand_as(target)
        rows.append((preds.reshape(-1), target.reshape(-1), ids.reshape(-1)))
        first += len(preds)
    return rows


def test_members_report_each_cut_off_as_the_functional_mean() -> None:
    data = batches()
    collection = NDCG(k=KS, gain="linear").per_cutoff(prefix="val_", postfix="_lin")
    for preds, target in data:
        collection.update(preds, target)
    result = collection.compute()
    assert set(result) == {f"val_ndcg@{k}_lin" for k in KS}  # MetricCollection sorts its keys
    expected = functional_means(data, gain="linear")
    for column, k in enumerate(KS):
        value = collection[f"ndcg@{k}"].compute()
        assert value.shape == ()
        assert value.dtype == torch.float32
        assert value.item() == pytest.approx(expected[column].item(), abs=1e-6)
        assert result[f"val_ndcg@{k}_lin"].item() == pytest.approx(
            expected[column].item(), abs=1e-6
        )


def test_retrieval_members_report_each_cut_off() -> None:
    data = batches()
    collection = RetrievalNDCG(k=KS).per_cutoff()
    for preds, target, ids in flat_rows(data):
        collection.update(preds, target, ids)
    expected = functional_means(data)
    for column, k in enumerate(KS):
        value = collection[f"ndcg@{k}"].compute()
        assert value.item() == pytest.approx(expected[column].item(), abs=1e-6)


def test_whole_list_and_single_cut_off_give_one_member() -> None:
    assert list(NDCG().per_cutoff()) == ["ndcg"]
    assert list(NDCG(k=3).per_cutoff(prefix="p_")) == ["p_ndcg@3"]


def test_one_pass_update_scores_each_batch_once(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    original = NDCG.update

    def counting(self: NDCG[Any], *args: Any, **kwargs: Any) -> None:
        calls.append(id(self))
        original(self, *args, **kwargs)

    monkeypatch.setattr(NDCG, "update", counting)
    collection = NDCG(k=KS).per_cutoff()
    for preds, target in batches():
        collection.update(preds, target)
    assert len(calls) == 4
    assert len(set(calls)) == 1


def test_forward_gives_batch_values_and_compute_the_epoch_values() -> None:
    data = batches()
    collection = NDCG(k=KS).per_cutoff()
    for preds, target in data:
        batch = collection(preds, target)
        expected_batch = ndcg(preds, target, k=KS).mean(0)
        for column, k in enumerate(KS):
            assert batch[f"ndcg@{k}"].item() == pytest.approx(
                expected_batch[column].item(), abs=1e-6
            )
    expected = functional_means(data)
    for column, k in enumerate(KS):
        assert collection[f"ndcg@{k}"].compute().item() == pytest.approx(
            expected[column].item(), abs=1e-6
        )


def test_members_reset_one_by_one_then_the_next_epoch_is_exact() -> None:
    """Lightning computes every logged metric, then resets each one by itself."""
    collection = NDCG(k=KS).per_cutoff()
    for epoch in range(3):
        data = batches(seed=epoch)
        for preds, target in data:
            collection.update(preds, target)
        expected = functional_means(data)
        values = [collection[f"ndcg@{k}"].compute() for k in KS]
        for member in collection.values():
            member.reset()
        for column, value in enumerate(values):
            assert value.item() == pytest.approx(expected[column].item(), abs=1e-6)


def test_copies_the_states_so_far() -> None:
    data = batches()
    metric = NDCG(k=KS)
    metric.update(*data[0])
    collection = metric.per_cutoff()
    for preds, target in data[1:]:
        collection.update(preds, target)
    expected = functional_means(data)
    assert collection["ndcg@5"].compute().item() == pytest.approx(expected[1].item(), abs=1e-6)
    assert metric.compute()["ndcg@5"].item() == pytest.approx(
        functional_means(data[:1])[1].item(), abs=1e-6
    )


def test_a_computed_metric_gives_members_without_its_cached_dict() -> None:
    data = batches()
    metric = NDCG(k=KS)
    metric.update(*data[0])
    metric.compute()  # torchmetrics caches the dict of all cut-offs
    value = metric.per_cutoff()["ndcg@5"].compute()
    assert isinstance(value, Tensor)
    assert value.item() == pytest.approx(functional_means(data[:1])[1].item(), abs=1e-6)


def test_per_query_values_are_refused() -> None:
    with pytest.raises(ValueError, match="`aggregation` is 'none'"):
        RetrievalNDCG(k=KS, aggregation="none").per_cutoff()


# ---------------------------------------------------------------------------------------------
# A real Trainer: one line logs three cut-offs, each epoch exact, on 1 and 2 processes

# Only the Trainer test needs Lightning, and skips without it; the classes it fits stay at module
# level, where ddp_spawn's workers find them.
try:
    import lightning
except ImportError:
    lightning = None
LightningModule: Any = object if lightning is None else lightning.LightningModule
Callback: Any = object if lightning is None else lightning.Callback

N_LISTS, LENGTH, FEATURES, VAL_BATCH = 44, 12, 5, 20


def validation_data() -> TensorDataset:
    gen = torch.Generator().manual_seed(5)
    features = torch.randn(N_LISTS, LENGTH, FEATURES, generator=gen)
    target = torch.randint(0, 4, (N_LISTS, LENGTH), generator=gen)
    mask = torch.rand(N_LISTS, LENGTH, generator=gen) > 0.2
    mask[:, 0] = True
    return TensorDataset(features, target, mask, torch.arange(N_LISTS))


class CutoffScorer(LightningModule):  # type: ignore[misc]
    def __init__(self, dump_dir: str) -> None:
        super().__init__()
        torch.manual_seed(2)
        self.linear = torch.nn.Linear(FEATURES, 1)
        self.val_ndcg = NDCG(k=KS).per_cutoff(prefix="val_")
        self.val_retrieval = RetrievalNDCG(k=KS, gain="linear").per_cutoff(prefix="val_linear_")
        self.val_interval = NDCG(k=10, confidence=0.9).per_cutoff(prefix="val_ci_")
        self.dump_dir = Path(dump_dir)
        self.seen: list[tuple[Tensor, Tensor, Tensor, Tensor]] = []

    def forward(self, features: Tensor) -> Tensor:
        return self.linear(features).squeeze(-1)

    def training_step(self, batch: Any, batch_idx: int) -> Tensor:
        features, target, mask, _ = batch
        return -(torch.where(mask, self(features), 0) * target).mean()

    def on_validation_epoch_start(self) -> None:
        self.seen = []

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        features, target, mask, list_ids = batch
        scores = self(features)
        self.seen.append((scores.detach().clone(), target, mask, list_ids))
        self.val_ndcg.update(scores, target, mask)
        self.log_dict(self.val_ndcg)  # the one line: nDCG@1, @5 and @10 of the whole epoch
        ids = list_ids[:, None].expand_as(target)
        self.val_retrieval.update(scores[mask], target[mask], ids[mask])
        self.log_dict(self.val_retrieval)
        self.val_interval.update(scores, target, mask)
        self.log_dict(self.val_interval)  # the mean and its interval's bounds

    def on_validation_epoch_end(self) -> None:
        if not self.trainer.sanity_checking:
            name = f"seen_epoch{self.current_epoch}_rank{self.global_rank}.pt"
            torch.save(self.seen, self.dump_dir / name)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.5)


class RecordLogged(Callback):  # type: ignore[misc]
    def __init__(self, dump_dir: str) -> None:
        self.dump_dir = Path(dump_dir)

    def on_validation_end(self, trainer: Any, module: Any) -> None:
        if not trainer.sanity_checking and trainer.global_rank == 0:
            logged = {name: value.item() for name, value in trainer.callback_metrics.items()}
            torch.save(logged, self.dump_dir / f"logged_epoch{trainer.current_epoch}.pt")


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize("devices", [1, 2])
def test_trainer_logs_three_cut_offs_exactly_every_epoch(devices: int, tmp_path: Path) -> None:
    """``devices=2``: ddp_spawn on 2 CPU processes (gloo); lists split across them."""
    pytest.importorskip("lightning")
    data = validation_data()

    def fit() -> None:
        trainer = cpu_trainer(devices, max_epochs=3, callbacks=[RecordLogged(str(tmp_path))])
        trainer.fit(
            CutoffScorer(str(tmp_path)),
            DataLoader(data, batch_size=11),
            DataLoader(data, batch_size=VAL_BATCH),
        )

    retry_exit_abort(fit)
    previous = None
    for epoch in range(3):
        seen = [
            item
            for rank in range(devices)
            for item in torch.load(tmp_path / f"seen_epoch{epoch}_rank{rank}.pt")
        ]
        scores, target, mask, list_ids = (torch.cat(parts) for parts in zip(*seen, strict=True))
        assert sorted(list_ids.tolist()) == list(range(N_LISTS))
        logged = torch.load(tmp_path / f"logged_epoch{epoch}.pt")
        exponential = ndcg(scores, target, k=KS, mask=mask).double().mean(0)
        linear = ndcg(scores, target, k=KS, mask=mask, gain="linear").double().mean(0)
        for column, k in enumerate(KS):
            assert logged[f"val_ndcg@{k}"] == pytest.approx(exponential[column].item(), abs=1e-6)
            assert logged[f"val_linear_ndcg@{k}"] == pytest.approx(linear[column].item(), abs=1e-6)
        per_list = ndcg(scores, target, k=10, mask=mask).double().tolist()
        z = statistics.NormalDist().inv_cdf(0.95)
        mean, half = statistics.fmean(per_list), z * statistics.stdev(per_list) / N_LISTS**0.5
        assert logged["val_ci_ndcg@10"] == pytest.approx(mean, abs=1e-6)
        assert logged["val_ci_ndcg@10_low"] == pytest.approx(mean - half, abs=1e-6)
        assert logged["val_ci_ndcg@10_high"] == pytest.approx(mean + half, abs=1e-6)
        assert previous is None or logged["val_ndcg@10"] != previous  # the model moved
        previous = logged["val_ndcg@10"]
