"""The metrics where users put them: collections, wrappers, cast modules, autocast, Lightning.

Every metric value here is compared with the functional :func:`torch_ndcg.ndcg` on the same
data (the mean over lists). The data is chosen so that, after the first update, the states of
differently configured metrics coincide (0/1 labels, lists of at most 5 items, tie-free scores):
that is what makes torchmetrics' ``MetricCollection`` merge them into one compute group.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import Tensor
from torch.utils.data import DataLoader, TensorDataset
from torchmetrics import Metric, MetricCollection
from torchmetrics.wrappers import BootStrapper, MetricTracker, MultitaskWrapper, Running

from tests.spawn import cpu_trainer, retry_exit_abort
from torch_ndcg import NDCG, ApproxNDCGLoss, LambdaRankLoss, NeuralNDCGLoss, RetrievalNDCG, ndcg

try:
    import lightning
except ImportError:  # the Lightning tests skip
    lightning = None

Batch = tuple[Tensor, Tensor]
Spec = tuple[type[Metric], dict[str, Any]]

ATOL = 1e-6


# ---------------------------------------------------------------------------------------------
# Data and references


def field_batches(seed: int = 0) -> list[Batch]:
    """Dense ``[B, L]`` batches; the first has 0/1 labels, lists of 5 and one empty list."""
    gen = torch.Generator().manual_seed(seed)
    first_target = torch.randint(0, 2, (4, 5), generator=gen)
    first_target[0] = 0  # no relevant item
    first_target[1:, 2] = 1  # every other list has one
    batches = [(torch.rand(4, 5, generator=gen), first_target)]
    for n in (6, 5, 7):
        batches.append(
            (torch.rand(n, 12, generator=gen), torch.randint(0, 4, (n, 12), generator=gen))
        )
    return batches


def query_ids(batches: list[Batch]) -> list[Tensor]:
    """One query id per row of every dense batch (``[B, L]``, unique across batches)."""
    ids, offset = [], 0
    for preds, _ in batches:
        rows = torch.arange(offset, offset + preds.shape[0]) * 7 - 3  # sparse, some negative
        ids.append(rows[:, None].expand_as(preds).contiguous())
        offset += preds.shape[0]
    return ids


def functional_mean(batches: list[Batch], options: dict[str, Any]) -> Tensor:
    """``ndcg`` of every list of every batch, averaged over lists: ``[n_cutoffs]`` float64."""
    values = [
        ndcg(preds.float(), target, **options).reshape(preds.shape[0], -1)
        for preds, target in batches
    ]
    return torch.cat(values).double().mean(0)


def as_vector(value: Any) -> Tensor:
    """A metric result (scalar tensor or dict by cut-off) as a 1-D float64 tensor."""
    if isinstance(value, dict):
        return torch.stack([v.reshape(()) for v in value.values()]).double()
    return value.reshape(-1).double()


def feed(metric: Metric, batches: list[Batch], ids: list[Tensor]) -> None:
    for (preds, target), batch_ids in zip(batches, ids, strict=True):
        if isinstance(metric, RetrievalNDCG):
            metric.update(preds.reshape(-1), target.reshape(-1), batch_ids.reshape(-1))
        else:
            metric.update(preds, target)


def assert_value(result: Any, expected: Tensor) -> None:
    torch.testing.assert_close(as_vector(result), expected, atol=ATOL, rtol=0)


def metric_kwargs(spec: Spec) -> dict[str, Any]:
    """The functional options of a metric spec."""
    return dict(spec[1])


# Options whose states coincide after the first batch (see field_batches), and a few that don't.
MEMBERS: dict[str, Spec] = {
    "ndcg5": (NDCG, {"k": 5}),
    "ndcg10": (NDCG, {"k": 10}),
    "lin5": (NDCG, {"k": 5, "gain": "linear"}),
    "first5": (NDCG, {"k": 5, "ties": "first"}),
    "pos5": (NDCG, {"k": 5, "empty_target_action": "pos"}),
    "many_lin": (NDCG, {"k": [1, 5, 10], "gain": "linear"}),
    "many_exp": (NDCG, {"k": [1, 5, 10]}),
    "ret5": (RetrievalNDCG, {"k": 5}),
    "ret10": (RetrievalNDCG, {"k": 10}),
    "ret_many_lin": (RetrievalNDCG, {"k": [1, 5], "gain": "linear"}),
}


def build(specs: dict[str, Spec]) -> dict[str, Metric]:
    return {name: cls(**kwargs) for name, (cls, kwargs) in specs.items()}


def expected_collection(
    specs: dict[str, Spec], batches: list[Batch], prefix: str = "", postfix: str = ""
) -> dict[str, Tensor]:
    """The flat keys MetricCollection reports (dict results get their member's name, since
    several members return ``ndcg@1``...) with the functional value of each."""
    expected = {}
    for name, spec in specs.items():
        options = metric_kwargs(spec)
        values = functional_mean(batches, options)
        k = options.get("k")
        if isinstance(k, list):
            for column, cutoff in enumerate(k):
                expected[f"{prefix}{name}_ndcg@{cutoff}{postfix}"] = values[column]
        else:
            expected[f"{prefix}{name}{postfix}"] = values[0]
    return expected


def collection_inputs(preds: Tensor, target: Tensor, ids: Tensor) -> dict[str, Tensor]:
    """Keyword inputs for a mixed collection: NDCG takes ``[B, L]``, RetrievalNDCG ``indexes``."""
    return {"preds": preds, "target": target, "indexes": ids}


def assert_collection(result: dict[str, Tensor], expected: dict[str, Tensor]) -> None:
    assert set(result) == set(expected)
    wrong = {
        name: (round(result[name].item(), 6), round(expected[name].item(), 6))
        for name in expected
        if abs(result[name].double().item() - expected[name].item()) > ATOL
    }
    assert not wrong, f"members reporting another value (got, expected): {wrong}"


# ---------------------------------------------------------------------------------------------
# 1. MetricCollection


def test_field_data_makes_first_states_coincide() -> None:
    """Guard of the data: after batch 0, these members' states are equal (a compute group)."""
    batches = field_batches()
    preds, target = batches[0]
    values = {
        name: ndcg(preds, target, **metric_kwargs(MEMBERS[name]))
        for name in ("ndcg5", "ndcg10", "lin5", "first5")
    }
    for name, value in values.items():
        torch.testing.assert_close(value, values["ndcg5"], msg=name)
    torch.testing.assert_close(
        ndcg(preds, target, k=[1, 5, 10]), ndcg(preds, target, k=[1, 5, 10], gain="linear")
    )
    assert not torch.equal(
        ndcg(batches[1][0], batches[1][1], k=5), ndcg(batches[1][0], batches[1][1], k=10)
    )


@pytest.mark.parametrize("compute_groups", [True, False], ids=["groups-on", "groups-off"])
def test_collection_members_report_their_own_values(compute_groups: bool) -> None:
    batches = field_batches()
    ids = query_ids(batches)
    collection = MetricCollection(build(MEMBERS), compute_groups=compute_groups)
    for (preds, target), batch_ids in zip(batches, ids, strict=True):
        collection.update(**collection_inputs(preds, target, batch_ids))
    assert_collection(collection.compute(), expected_collection(MEMBERS, batches))


@pytest.mark.parametrize("compute_groups", [True, False], ids=["groups-on", "groups-off"])
def test_collection_prefix_postfix(compute_groups: bool) -> None:
    batches = field_batches(seed=1)
    ids = query_ids(batches)
    collection = MetricCollection(
        build(MEMBERS), prefix="val_", postfix="/epoch", compute_groups=compute_groups
    )
    for (preds, target), batch_ids in zip(batches, ids, strict=True):
        collection.update(**collection_inputs(preds, target, batch_ids))
    expected = expected_collection(MEMBERS, batches, prefix="val_", postfix="/epoch")
    assert_collection(collection.compute(), expected)


@pytest.mark.parametrize("compute_groups", [True, False], ids=["groups-on", "groups-off"])
def test_collection_clone_continues_on_its_own(compute_groups: bool) -> None:
    batches = field_batches(seed=2)
    ids = query_ids(batches)
    collection = MetricCollection(build(MEMBERS), compute_groups=compute_groups)
    for (preds, target), batch_ids in zip(batches[:2], ids[:2], strict=True):
        collection.update(**collection_inputs(preds, target, batch_ids))
    clone = collection.clone(prefix="clone_")
    for (preds, target), batch_ids in zip(batches[2:], ids[2:], strict=True):
        clone.update(**collection_inputs(preds, target, batch_ids))
    assert_collection(clone.compute(), expected_collection(MEMBERS, batches, prefix="clone_"))
    assert_collection(collection.compute(), expected_collection(MEMBERS, batches[:2]))


@pytest.mark.parametrize("compute_groups", [True, False], ids=["groups-on", "groups-off"])
def test_collection_forward_gives_batch_values_then_the_epoch_value(compute_groups: bool) -> None:
    batches = field_batches(seed=3)
    ids = query_ids(batches)
    collection = MetricCollection(build(MEMBERS), compute_groups=compute_groups)
    for batch, ((preds, target), batch_ids) in enumerate(zip(batches, ids, strict=True)):
        out = collection(**collection_inputs(preds, target, batch_ids))
        assert_collection(out, expected_collection(MEMBERS, batches[batch : batch + 1]))
    assert_collection(collection.compute(), expected_collection(MEMBERS, batches))


@pytest.mark.parametrize("compute_groups", [True, False], ids=["groups-on", "groups-off"])
def test_collection_update_after_compute_and_reset(compute_groups: bool) -> None:
    """An epoch loop: compute, reset, and a second epoch on other data."""
    specs = {name: MEMBERS[name] for name in ("ndcg5", "ndcg10", "lin5", "ret5", "ret10")}
    collection = MetricCollection(build(specs), compute_groups=compute_groups)
    for seed in (4, 5):
        batches = field_batches(seed=seed)
        ids = query_ids(batches)
        for (preds, target), batch_ids in zip(batches, ids, strict=True):
            collection.update(**collection_inputs(preds, target, batch_ids))
        assert_collection(collection.compute(), expected_collection(specs, batches))
        collection.reset()


# ---------------------------------------------------------------------------------------------
# 2. torchmetrics wrappers


def test_metric_tracker_of_a_metric_and_of_a_collection() -> None:
    epochs = [field_batches(seed=10), field_batches(seed=11)]
    tracker = MetricTracker(NDCG(k=5))
    specs = {name: MEMBERS[name] for name in ("ndcg5", "ndcg10", "lin5", "first5")}
    tracked_collection = MetricTracker(MetricCollection(build(specs)), maximize=True)
    for batches in epochs:
        tracker.increment()
        tracked_collection.increment()
        for preds, target in batches:
            tracker.update(preds, target)
            tracked_collection.update(preds, target)
    expected = torch.stack([functional_mean(batches, {"k": 5})[0] for batches in epochs])
    all_values = tracker.compute_all()
    torch.testing.assert_close(all_values.double(), expected, atol=ATOL, rtol=0)
    best, step = tracker.best_metric(return_step=True)
    assert step == int(expected.argmax())
    assert best == pytest.approx(expected.max().item(), abs=ATOL)

    best_by_name = tracked_collection.best_metric()
    assert isinstance(best_by_name, dict)
    for name, spec in specs.items():
        per_epoch = torch.stack([functional_mean(b, metric_kwargs(spec))[0] for b in epochs])
        assert best_by_name[name] == pytest.approx(per_epoch.max().item(), abs=ATOL), name


@pytest.mark.parametrize("sampling_strategy", ["poisson", "multinomial"])
def test_bootstrapper_gives_sane_values_and_its_copies_match_functional(
    sampling_strategy: str,
) -> None:
    batches = field_batches(seed=12)
    n_boot = 5
    torch.manual_seed(123)
    boot = BootStrapper(
        NDCG(k=5), num_bootstraps=n_boot, raw=True, sampling_strategy=sampling_strategy
    )
    for preds, target in batches:
        boot.update(preds, target)
    out = boot.compute()
    assert torch.isfinite(out["mean"]).all()
    assert 0.0 <= out["mean"].item() <= 1.0
    assert torch.isfinite(out["std"]).all()
    raw = out["raw"]
    assert raw.shape == (n_boot,)
    assert ((raw >= 0) & (raw <= 1)).all()
    for copy, value in zip(boot.metrics, raw, strict=True):
        assert copy.compute().item() == pytest.approx(value.item(), abs=ATOL)
    if sampling_strategy == "multinomial":
        # Replay torchmetrics' draws (global generator, one multinomial per copy and batch).
        torch.manual_seed(123)
        resampled: list[list[Batch]] = [[] for _ in range(n_boot)]
        for preds, target in batches:
            for copy_batches in resampled:
                index = torch.multinomial(
                    torch.ones(preds.shape[0]), num_samples=preds.shape[0], replacement=True
                )
                copy_batches.append((preds[index], target[index]))
        expected = torch.stack([functional_mean(b, {"k": 5})[0] for b in resampled])
        torch.testing.assert_close(raw.double(), expected, atol=ATOL, rtol=0)
        assert out["mean"].item() == pytest.approx(expected.mean().item(), abs=ATOL)


@pytest.mark.parametrize("window", [1, 2, 3])
@pytest.mark.parametrize(
    "options", [{"k": 5}, {"k": [1, 5, 10], "gain": "linear"}], ids=["k5", "k1-5-10-linear"]
)
def test_running_window_equals_functional_over_last_batches(
    window: int, options: dict[str, Any]
) -> None:
    batches = field_batches(seed=13)
    running = Running(NDCG(**options), window=window)
    for seen, (preds, target) in enumerate(batches, start=1):
        batch_value = running(preds, target)
        assert_value(batch_value, functional_mean([(preds, target)], options))
        last = batches[max(0, seen - window) : seen]
        assert_value(running.compute(), functional_mean(last, options))


@pytest.mark.parametrize("spec", ["ndcg5", "many_lin", "ret5", "ret_many_lin"])
def test_merge_state_after_compute_gives_the_merged_value(spec: str) -> None:
    """Per-worker metrics merged by hand, after the first one was already computed."""
    batches = field_batches(seed=15)
    ids = query_ids(batches)
    cls, options = MEMBERS[spec]
    first, second = cls(**options), cls(**options)
    feed(first, batches[:2], ids[:2])
    assert_value(first.compute(), functional_mean(batches[:2], options))
    feed(second, batches[2:], ids[2:])
    first.merge_state(second)
    assert_value(first.compute(), functional_mean(batches, options))


def test_multitask_wrapper() -> None:
    batches = field_batches(seed=14)
    wrapper = MultitaskWrapper({"a": NDCG(k=5), "b": NDCG(k=10), "c": NDCG(k=5, ties="first")})
    for preds, target in batches:
        wrapper.update({t: preds for t in "abc"}, {t: target for t in "abc"})
    result = wrapper.compute()
    assert_value(result["a"], functional_mean(batches, {"k": 5}))
    assert_value(result["b"], functional_mean(batches, {"k": 10}))
    assert_value(result["c"], functional_mean(batches, {"k": 5, "ties": "first"}))


# ---------------------------------------------------------------------------------------------
# 3. dtypes: modules cast as Lightning and users do, autocast, state_dict


DTYPE_SPECS: list[tuple[str, Spec]] = [
    ("ndcg5", (NDCG, {"k": 5})),
    ("ndcg_many_lin", (NDCG, {"k": [1, 5, 10], "gain": "linear"})),
    ("ret5", (RetrievalNDCG, {"k": 5})),
    ("ret_many_lin", (RetrievalNDCG, {"k": [1, 5], "gain": "linear"})),
]


class Holder(torch.nn.Module):
    """A model holding metrics, as a LightningModule does."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(3, 1)
        self.metrics = torch.nn.ModuleDict({name: cls(**kw) for name, (cls, kw) in DTYPE_SPECS})

    def each(self) -> Iterator[tuple[str, Metric]]:
        for name, metric in self.metrics.items():
            assert isinstance(metric, Metric)
            yield name, metric


def set_dtype(dtype: torch.dtype) -> Callable[[torch.nn.Module], Any]:
    def cast(module: torch.nn.Module) -> None:
        for metric in module.modules():
            if isinstance(metric, Metric):
                metric.set_dtype(dtype)

    return cast


CASTS: dict[str, Callable[[torch.nn.Module], Any]] = {
    "to(bfloat16)": lambda m: m.to(torch.bfloat16),
    "to(dtype=float16)": lambda m: m.to(dtype=torch.float16),
    "half()": lambda m: m.half(),
    "bfloat16()": lambda m: m.bfloat16(),
    "double()": lambda m: m.double(),
    "to(float64)": lambda m: m.to(torch.float64),
    "set_dtype(float16)": set_dtype(torch.float16),
    "set_dtype(float64)": set_dtype(torch.float64),
}
FLOAT64_CASTS = {"to(float64)", "set_dtype(float64)"}


def wide_dtype(metric: Metric) -> torch.dtype:
    """Rows and results: float64 when the metric's dtype is float64, float32 otherwise."""
    return torch.float64 if metric.dtype == torch.float64 else torch.float32


def assert_state_dtypes(metric: Metric) -> None:
    if isinstance(metric, NDCG):
        assert metric.sum_ndcg.dtype == torch.float64
        assert metric.count.dtype == torch.int64
        return
    assert isinstance(metric, RetrievalNDCG)
    rows = wide_dtype(metric)
    for name, expected in (("preds", rows), ("target", rows), ("indexes", torch.int64)):
        state = getattr(metric, name)
        tensors = state if isinstance(state, list) else [state]
        assert tensors, name
        assert {t.dtype for t in tensors} == {expected}, name


def feed_holder(holder: Holder, batches: list[Batch], ids: list[Tensor]) -> None:
    for _, metric in holder.each():
        feed(metric, batches, ids)


def check_holder(holder: Holder, batches: list[Batch]) -> None:
    for name, metric in holder.each():
        assert_state_dtypes(metric)
        result = metric.compute()
        values = result.values() if isinstance(result, dict) else [result]
        assert {v.dtype for v in values} == {wide_dtype(metric)}, name
        options = dict(DTYPE_SPECS)[name][1]
        assert_value(result, functional_mean(batches, options))


@pytest.mark.parametrize("when", ["before-updates", "between-updates"])
@pytest.mark.parametrize("cast", list(CASTS))
def test_cast_module_keeps_states_and_values(cast: str, when: str) -> None:
    batches = field_batches(seed=20)
    ids = query_ids(batches)
    holder = Holder()
    if when == "before-updates":
        CASTS[cast](holder)
        feed_holder(holder, batches, ids)
    else:
        feed_holder(holder, batches[:1], ids[:1])
        CASTS[cast](holder)
        feed_holder(holder, batches[1:], ids[1:])
    if cast in FLOAT64_CASTS:
        assert all(metric.dtype == torch.float64 for _, metric in holder.each())
    check_holder(holder, batches)


@pytest.mark.parametrize("cast", ["to(bfloat16)", "half()", "set_dtype(float16)", "to(float64)"])
def test_cast_then_cast_back_to_float32(cast: str) -> None:
    batches = field_batches(seed=21)
    ids = query_ids(batches)
    holder = Holder()
    feed_holder(holder, batches[:2], ids[:2])
    CASTS[cast](holder)
    feed_holder(holder, batches[2:3], ids[2:3])
    holder.to(torch.float32)
    feed_holder(holder, batches[3:], ids[3:])
    check_holder(holder, batches)


def test_autocast_bf16_update_and_forward() -> None:
    batches = [(p.to(torch.bfloat16), t) for p, t in field_batches(seed=22)]
    ids = query_ids(batches)
    holder = Holder()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        for name, metric in holder.each():
            options = dict(DTYPE_SPECS)[name][1]
            preds, target = batches[0]
            if isinstance(metric, RetrievalNDCG):
                out = metric(preds.reshape(-1), target.reshape(-1), ids[0].reshape(-1))
            else:
                out = metric(preds, target)
            assert_value(out, functional_mean(batches[:1], options))
            feed(metric, batches[1:], ids[1:])
    check_holder(holder, batches)


@pytest.mark.filterwarnings("ignore:The ``compute`` method")  # a loaded metric has no update
@pytest.mark.parametrize(
    "cast", ["to(bfloat16)", "half()", "set_dtype(float16)", "set_dtype(float64)", "to(float64)"]
)
def test_state_dict_round_trip_after_cast(cast: str) -> None:
    batches = field_batches(seed=23)
    ids = query_ids(batches)
    source = Holder()
    for _, metric in source.each():
        metric.persistent(True)
    feed_holder(source, batches[:1], ids[:1])
    CASTS[cast](source)
    feed_holder(source, batches[1:], ids[1:])

    loaded = Holder()
    for _, metric in loaded.each():
        metric.persistent(True)
    CASTS[cast](loaded)
    loaded.load_state_dict(source.state_dict())
    for (name, metric), (_, original) in zip(loaded.each(), source.each(), strict=True):
        for state in metric._defaults:
            got, kept = getattr(metric, state), getattr(original, state)
            got_list = got if isinstance(got, list) else [got]
            kept_list = kept if isinstance(kept, list) else [kept]
            assert [t.dtype for t in got_list] == [t.dtype for t in kept_list], (name, state)
            assert all(torch.equal(a, b) for a, b in zip(got_list, kept_list, strict=True))
    check_holder(loaded, batches)


# ---------------------------------------------------------------------------------------------
# 4. A real Lightning Trainer at every precision

N_LISTS, LENGTH, FEATURES, VAL_BATCH = 48, 12, 5, 20


def lightning_data() -> TensorDataset:
    gen = torch.Generator().manual_seed(30)
    features = torch.randn(N_LISTS, LENGTH, FEATURES, generator=gen)
    target = torch.randint(0, 4, (N_LISTS, LENGTH), generator=gen)
    target[:VAL_BATCH, :5] = torch.randint(0, 2, (VAL_BATCH, 5), generator=gen)
    target[3] = 0  # a list with no relevant item
    mask = torch.rand(N_LISTS, LENGTH, generator=gen) > 0.2
    mask[:, 0] = True
    return TensorDataset(features, target, mask, torch.arange(N_LISTS))


if lightning is not None:

    class FieldScorer(lightning.LightningModule):  # type: ignore[misc]
        """Logs NDCG(k=10) and RetrievalNDCG(k=10); keeps the scores it produced."""

        def __init__(self, dump_dir: str | None = None) -> None:
            super().__init__()
            torch.manual_seed(1)
            self.linear = torch.nn.Linear(FEATURES, 1)
            self.ndcg10 = NDCG(k=10)
            self.retrieval10 = RetrievalNDCG(k=10)
            self.dump_dir = dump_dir
            self.seen: list[tuple[Tensor, Tensor, Tensor, Tensor]] = []

        def forward(self, features: Tensor) -> Tensor:
            return self.linear(features).squeeze(-1)

        def validation_step(self, batch: Any, batch_idx: int) -> None:
            features, target, mask, list_ids = batch
            scores = self(features)
            self.seen.append((scores.detach().cpu().clone(), target, mask, list_ids))
            self.ndcg10.update(scores, target, mask)
            self.log("val_ndcg", self.ndcg10)
            ids = list_ids[:, None].expand_as(target)
            self.retrieval10.update(scores[mask], target[mask], ids[mask])
            self.log("val_retrieval_ndcg", self.retrieval10)

        def on_validation_epoch_end(self) -> None:
            if self.dump_dir is not None:  # ddp_spawn: the workers' scores back to the test
                torch.save(self.seen, Path(self.dump_dir) / f"rank{self.global_rank}.pt")


def reference_from_seen(
    seen: list[tuple[Tensor, Tensor, Tensor, Tensor]], model_dtype: torch.dtype
) -> float:
    scores = torch.cat([s for s, _, _, _ in seen])
    target = torch.cat([t for _, t, _, _ in seen])
    mask = torch.cat([m for _, _, m, _ in seen])
    list_ids = torch.cat([i for _, _, _, i in seen])
    assert sorted(list_ids.tolist()) == list(range(N_LISTS))
    assert scores.dtype == model_dtype
    return ndcg(scores.float(), target, k=10, mask=mask).double().mean().item()


def run_validate(precision: str, devices: int, dump_dir: str | None) -> tuple[Any, Any]:
    if devices > 1:
        return retry_exit_abort(lambda: validate_once(precision, devices, dump_dir))
    return validate_once(precision, devices, dump_dir)


def validate_once(precision: str, devices: int, dump_dir: str | None) -> tuple[Any, Any]:
    pytest.importorskip("lightning")
    model = FieldScorer(dump_dir)
    trainer = cpu_trainer(devices, precision=precision, max_epochs=1, limit_train_batches=2)
    trainer.validate(model, DataLoader(lightning_data(), batch_size=VAL_BATCH))
    return model, trainer.callback_metrics


SCORE_DTYPES = {
    "32-true": torch.float32,
    "bf16-mixed": torch.bfloat16,
    "bf16-true": torch.bfloat16,
    "16-true": torch.float16,
    "64-true": torch.float64,
}


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize("precision", list(SCORE_DTYPES))
def test_trainer_validate_logs_functional_ndcg(precision: str) -> None:
    model, logged = run_validate(precision, devices=1, dump_dir=None)
    expected = reference_from_seen(model.seen, SCORE_DTYPES[precision])
    assert logged["val_ndcg"].item() == pytest.approx(expected, abs=ATOL)
    assert logged["val_retrieval_ndcg"].item() == pytest.approx(expected, abs=ATOL)


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_trainer_validate_ddp_spawn_bf16_true(tmp_path: Path) -> None:
    _, logged = run_validate("bf16-true", devices=2, dump_dir=str(tmp_path))
    seen = [item for rank in (0, 1) for item in torch.load(tmp_path / f"rank{rank}.pt")]
    expected = reference_from_seen(seen, torch.bfloat16)
    assert logged["val_ndcg"].item() == pytest.approx(expected, abs=ATOL)
    assert logged["val_retrieval_ndcg"].item() == pytest.approx(expected, abs=ATOL)


# ---------------------------------------------------------------------------------------------
# 5. Losses in half-precision modules and under autocast

LOSSES: dict[str, Callable[[], torch.nn.Module]] = {
    "lambdarank-k5": lambda: LambdaRankLoss(k=5),
    "approx": lambda: ApproxNDCGLoss(),
    "neural-k5": lambda: NeuralNDCGLoss(k=5),
}
HALF_CASTS: dict[str, tuple[Callable[[torch.nn.Module], Any], torch.dtype]] = {
    "to(bfloat16)": (lambda m: m.to(torch.bfloat16), torch.bfloat16),
    "half()": (lambda m: m.half(), torch.float16),
}


def loss_data() -> tuple[Tensor, Tensor]:
    gen = torch.Generator().manual_seed(40)
    features = torch.randn(6, 10, 4, generator=gen)
    target = torch.randint(0, 4, (6, 10), generator=gen)
    target[2] = 0  # a list with no relevant item
    return features, target


@pytest.mark.parametrize("cast", list(HALF_CASTS))
@pytest.mark.parametrize("loss_name", list(LOSSES))
def test_loss_in_half_precision_module(loss_name: str, cast: str) -> None:
    features, target = loss_data()
    convert, dtype = HALF_CASTS[cast]
    torch.manual_seed(2)
    net = torch.nn.Linear(4, 1)
    convert(net)
    loss_fn = LOSSES[loss_name]()
    scores = net(features.to(dtype)).squeeze(-1)
    assert scores.dtype == dtype
    scores.retain_grad()
    loss = loss_fn(scores, target)
    assert torch.isfinite(loss).all()
    loss.backward()
    assert scores.grad is not None
    assert net.weight.grad is not None
    assert torch.isfinite(net.weight.grad).all()
    assert torch.isfinite(scores.grad).all()

    # Computed in float32: the loss of the half scores is the float32 loss of the same values,
    # far below half precision's rounding (bfloat16's epsilon is 7.8e-3, float16's 9.8e-4), and
    # the gradient is the float32 gradient rounded once to the scores' dtype.
    reference_scores = scores.detach().float().requires_grad_(True)
    reference = loss_fn(reference_scores, target)
    reference.backward()
    assert reference_scores.grad is not None
    assert loss.dtype == torch.float32
    torch.testing.assert_close(loss, reference.detach(), rtol=1e-6, atol=1e-7)
    torch.testing.assert_close(scores.grad, reference_scores.grad.to(dtype), rtol=0, atol=0)


@pytest.mark.parametrize("loss_name", list(LOSSES))
def test_loss_under_bf16_autocast(loss_name: str) -> None:
    features, target = loss_data()
    torch.manual_seed(2)
    net = torch.nn.Linear(4, 1)
    loss_fn = LOSSES[loss_name]()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        scores = net(features).squeeze(-1)
        assert scores.dtype == torch.bfloat16
        scores.retain_grad()
        loss = loss_fn(scores, target)
    assert loss.dtype == torch.float32
    assert torch.isfinite(loss).all()
    loss.backward()
    assert net.weight.grad is not None
    assert net.weight.grad.dtype == torch.float32
    assert torch.isfinite(net.weight.grad).all()
    assert net.weight.grad.abs().sum() > 0
    # Autocast lowers nothing inside the loss: the float32 loss of the same bfloat16 values
    # (far below bfloat16's epsilon of 7.8e-3), its gradient rounded once to bfloat16.
    reference_scores = scores.detach().float().requires_grad_(True)
    reference = loss_fn(reference_scores, target)
    reference.backward()
    assert reference_scores.grad is not None
    torch.testing.assert_close(loss.detach(), reference.detach(), rtol=1e-6, atol=1e-7)
    assert scores.grad is not None
    torch.testing.assert_close(
        scores.grad, reference_scores.grad.to(torch.bfloat16), rtol=0, atol=0
    )
