"""NDCG and RetrievalNDCG vs the functional core, torchmetrics, a loop reference, each other."""

from __future__ import annotations

import math
import pickle
import re
from typing import Any

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torchmetrics import MetricCollection
from torchmetrics.retrieval import RetrievalNormalizedDCG

from tests import references as ref
from torch_ndcg import NDCG, RetrievalNDCG, ndcg


def random_lists(
    n: int, length: int, *, seed: int, n_scores: int = 5, n_labels: int = 4
) -> tuple[torch.Tensor, torch.Tensor]:
    """``[n, length]`` scores drawn from few values (many ties) and labels 0..n_labels-1."""
    gen = torch.Generator().manual_seed(seed)
    preds = torch.randint(0, n_scores, (n, length), generator=gen).float()
    target = torch.randint(0, n_labels, (n, length), generator=gen)
    return preds, target


def flat(
    preds: torch.Tensor, target: torch.Tensor, mask: torch.Tensor | None = None, *, seed: int = 0
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Padded lists as flat shuffled rows; list ``i`` gets the sparse id ``i * 10**12 - 5``."""
    ids = torch.arange(preds.shape[0]).repeat_interleave(preds.shape[1]) * 10**12 - 5
    rows = torch.ones(preds.numel(), dtype=torch.bool) if mask is None else mask.reshape(-1)
    perm = torch.randperm(int(rows.sum()), generator=torch.Generator().manual_seed(seed))
    return preds.reshape(-1)[rows][perm], target.reshape(-1)[rows][perm], ids[rows][perm]


def as_tensor(value: Any) -> torch.Tensor:
    if isinstance(value, dict):
        return torch.stack(list(value.values()))
    return value


# ---------------------------------------------------------------------------------------------
# NDCG


@pytest.mark.parametrize("k", [None, 3, (1, 3, 10)])
@pytest.mark.parametrize("gain", ["exponential", "linear"])
@pytest.mark.parametrize("ties", ["average", "first"])
def test_ndcg_equals_functional_mean_over_batches(k: Any, gain: str, ties: str) -> None:
    preds, target = random_lists(40, 7, seed=1)
    metric = NDCG(k, gain=gain, ties=ties)  # type: ignore[arg-type]
    for batch in range(0, 40, 9):  # uneven batches
        metric.update(preds[batch : batch + 9], target[batch : batch + 9])
    expected = ndcg(preds, target, k=k, gain=gain, ties=ties).double().mean(0)  # type: ignore[arg-type]
    result = metric.compute()
    if isinstance(k, tuple):
        assert list(result) == ["ndcg@1", "ndcg@3", "ndcg@10"]
    else:
        assert isinstance(result, torch.Tensor)
        assert result.shape == ()
    torch.testing.assert_close(as_tensor(result).double(), expected, atol=1e-6, rtol=0)


@pytest.mark.parametrize("ties", ["average", "first"])
def test_ndcg_equals_loop_reference_on_every_device(ties: str, device: torch.device) -> None:
    gen = torch.Generator().manual_seed(12)
    preds = torch.randint(0, 5, (30, 9), generator=gen).double() / 4  # ties
    target = torch.randint(0, 4, (30, 9), generator=gen)
    real = torch.rand(30, 9, generator=gen) > 0.2
    real[:, 0] = True
    metric = NDCG(k=[1, 4], ties=ties).to(device)
    for part in torch.arange(30).split(7):
        metric.update(preds[part].to(device), target[part].to(device), real[part].to(device))
    result = metric.compute()
    for cutoff in (1, 4):
        expected = ref.ndcg_padded_batch(
            preds.tolist(), target.tolist(), real.tolist(), cutoff, ties=ties
        )
        got = result[f"ndcg@{cutoff}"].item()
        assert got == pytest.approx(sum(expected) / len(expected), abs=1e-6)


def test_ndcg_mask_and_ignore_index_match_functional() -> None:
    preds, target = random_lists(12, 6, seed=2)
    mask = torch.rand(12, 6, generator=torch.Generator().manual_seed(3)) > 0.3
    padded_target = torch.where(mask, target, -1)
    by_mask = NDCG(k=[2, 4])
    by_mask.update(preds, target, mask)
    by_index = NDCG(k=[2, 4], ignore_index=-1)
    by_index.update(preds, padded_target)
    expected = ndcg(preds, target, k=[2, 4], mask=mask).double().mean(0)
    torch.testing.assert_close(as_tensor(by_mask.compute()).double(), expected, atol=1e-6, rtol=0)
    torch.testing.assert_close(as_tensor(by_index.compute()).double(), expected, atol=1e-6, rtol=0)


def test_ndcg_one_dim_input_is_one_list() -> None:
    metric = NDCG(k=2, gain="linear")
    metric.update(torch.tensor([3.0, 2.0, 1.0]), torch.tensor([0, 1, 0]))
    assert metric.compute().item() == pytest.approx((1 / math.log2(3)) / 1, abs=1e-6)


@pytest.mark.parametrize(
    ("action", "expected"), [("neg", 0.5 / 2), ("pos", 1.5 / 2), ("skip", 0.5)]
)
def test_ndcg_empty_target_action(action: str, expected: float) -> None:
    # One list with nDCG@1 = 0.5 (tie of a relevant and an irrelevant item at the top), one list
    # with no relevant item.
    preds = torch.tensor([[1.0, 1.0], [2.0, 1.0]])
    target = torch.tensor([[1, 0], [0, 0]])
    metric = NDCG(k=1, empty_target_action=action)  # type: ignore[arg-type]
    metric.update(preds, target)
    assert metric.compute().item() == pytest.approx(expected, abs=1e-7)
    assert metric.count.tolist() == [1 if action == "skip" else 2]


def test_ndcg_error_action_raises_in_update() -> None:
    metric = NDCG(empty_target_action="error")
    with pytest.raises(ValueError, match="no relevant item"):
        metric.update(torch.tensor([[2.0, 1.0]]), torch.tensor([[0, 0]]))


def test_ndcg_state_size_constant_after_10000_updates() -> None:
    metric = NDCG(k=[1, 5], validate_args=False)
    preds, target = random_lists(4, 6, seed=4)
    metric.update(preds, target)
    sizes = {name: getattr(metric, name).numel() for name in ("sum_ndcg", "count")}
    for _ in range(9_999):
        metric.update(preds, target)
    assert (
        {name: getattr(metric, name).numel() for name in sizes}
        == sizes
        == {
            "sum_ndcg": 2,
            "count": 2,
        }
    )
    assert metric.count.tolist() == [40_000, 40_000]


def test_ndcg_forward_returns_batch_value_and_accumulates() -> None:
    preds, target = random_lists(10, 5, seed=5)
    metric = NDCG(k=3)
    first = metric(preds[:4], target[:4])
    second = metric(preds[4:], target[4:])
    torch.testing.assert_close(first, ndcg(preds[:4], target[:4], k=3).mean())
    torch.testing.assert_close(second, ndcg(preds[4:], target[4:], k=3).mean())
    torch.testing.assert_close(metric.compute(), ndcg(preds, target, k=3).mean())


def test_compute_before_update_returns_zero_with_warning() -> None:
    with pytest.warns(UserWarning, match="before the ``update``"):
        assert NDCG(k=[1, 2]).compute() == {"ndcg@1": 0.0, "ndcg@2": 0.0}
    with pytest.warns(UserWarning, match="before the ``update``"):
        assert RetrievalNDCG(k=5).compute().item() == 0.0
    with pytest.warns(UserWarning, match="before the ``update``"):
        values, ids = RetrievalNDCG(aggregation="none").compute()
    assert values.shape == ids.shape == (0,)


def test_retrieval_all_rows_ignored_warns() -> None:
    metric = RetrievalNDCG(ignore_index=-1)
    metric.update(torch.tensor([1.0, 2.0]), torch.tensor([-1, -1]), torch.tensor([0, 0]))
    with pytest.warns(UserWarning, match="no row"):
        assert metric.compute().item() == 0.0


@pytest.mark.parametrize("cls", [NDCG, RetrievalNDCG])
def test_class_flags(cls: type) -> None:
    assert cls.higher_is_better is True
    assert cls.is_differentiable is False
    assert cls.full_state_update is False
    assert (cls.plot_lower_bound, cls.plot_upper_bound) == (0.0, 1.0)


def updates(metric: Any, retrieval: bool, part: slice) -> None:
    preds, target = random_lists(30, 5, seed=6)
    if retrieval:
        flat_preds, flat_target, ids = flat(preds, target)
        metric.update(flat_preds[part], flat_target[part], ids[part])
    else:
        metric.update(preds[part], target[part])


@pytest.mark.filterwarnings("ignore:The ``compute`` method")
@pytest.mark.parametrize("retrieval", [False, True])
def test_state_dict_clone_pickle_reset_merge(retrieval: bool) -> None:
    cls = RetrievalNDCG if retrieval else NDCG
    whole = cls(k=[1, 3])
    updates(whole, retrieval, slice(None))
    expected = as_tensor(whole.compute())

    first, second = cls(k=[1, 3]), cls(k=[1, 3])
    updates(first, retrieval, slice(0, 70 if retrieval else 13))
    updates(second, retrieval, slice(70 if retrieval else 13, None))
    merged = first.clone()
    merged.merge_state(second)
    torch.testing.assert_close(as_tensor(merged.compute()), expected)

    restored = pickle.loads(pickle.dumps(whole))
    torch.testing.assert_close(as_tensor(restored.compute()), expected)
    torch.testing.assert_close(as_tensor(whole.clone().compute()), expected)

    whole.persistent(True)
    loaded = cls(k=[1, 3])
    loaded.persistent(True)
    loaded.load_state_dict(whole.state_dict())
    torch.testing.assert_close(as_tensor(loaded.compute()), expected)

    moved = whole.to("cpu")
    torch.testing.assert_close(as_tensor(moved.compute()), expected)
    whole.reset()
    with pytest.warns(UserWarning, match="before the ``update``"):
        assert as_tensor(whole.compute()).tolist() == [0.0, 0.0]


@pytest.mark.filterwarnings("ignore:The ``compute`` method")
def test_a_saved_state_of_other_options_is_refused_at_load() -> None:
    # NDCG's sums are per cut-off: the state of NDCG(k=1) read as NDCG(k=10)'s would report
    # nDCG@1 as nDCG@10, so the saved `options_key` must be this metric's.
    preds, target = random_lists(30, 5, seed=6)
    saved = NDCG(k=1)
    saved.persistent(True)
    saved.update(preds, target)
    other = NDCG(k=10)
    other.persistent(True)
    with pytest.raises(ValueError, match="`state_dict` from a metric with the same options"):
        other.load_state_dict(saved.state_dict())
    holder, into = torch.nn.ModuleDict({"ndcg": saved}), torch.nn.ModuleDict({"ndcg": other})
    with pytest.raises(ValueError, match="`options_key`"):  # inside a module: its prefix
        into.load_state_dict(holder.state_dict())
    same = NDCG(k=1)
    same.persistent(True)
    same.load_state_dict(saved.state_dict())
    torch.testing.assert_close(same.compute(), saved.compute())
    # Without the key (saved without it) the states load as given.
    keyless = {name: v for name, v in saved.state_dict().items() if name != "options_key"}
    fresh = NDCG(k=1)
    fresh.persistent(True)
    fresh.load_state_dict(keyless, strict=False)
    torch.testing.assert_close(fresh.compute(), saved.compute())
    # RetrievalNDCG keeps the rows, which any `k` reads alike; another `ignore_index` is refused.
    flat_preds, flat_target, ids = flat(preds, target)
    rows = RetrievalNDCG(k=1)
    rows.persistent(True)
    rows.update(flat_preds, flat_target, ids)
    at_ten = RetrievalNDCG(k=10)
    at_ten.persistent(True)
    at_ten.load_state_dict(rows.state_dict())
    direct = RetrievalNDCG(k=10)
    direct.update(flat_preds, flat_target, ids)
    torch.testing.assert_close(at_ten.compute(), direct.compute())
    assert not torch.equal(at_ten.compute(), rows.compute())  # the rows read at another k
    ignoring = RetrievalNDCG(k=10, ignore_index=-1)
    ignoring.persistent(True)
    with pytest.raises(ValueError, match="`options_key`"):
        ignoring.load_state_dict(rows.state_dict())


def test_metric_collection_logs_every_cutoff() -> None:
    preds, target = random_lists(20, 6, seed=7)
    collection = MetricCollection({"ndcg": NDCG(k=[1, 5]), "ndcg_lin": NDCG(k=5, gain="linear")})
    collection.update(preds, target)
    result = collection.compute()
    # MetricCollection flattens a dict result into its own keys.
    assert set(result) == {"ndcg@1", "ndcg@5", "ndcg_lin"}
    torch.testing.assert_close(result["ndcg@5"], ndcg(preds, target, k=5).mean())
    torch.testing.assert_close(result["ndcg_lin"], ndcg(preds, target, k=5, gain="linear").mean())


@pytest.mark.parametrize("cls", [NDCG, RetrievalNDCG])
def test_plot(cls: type) -> None:
    pytest.importorskip("matplotlib")
    metric = cls(k=[1, 3])
    updates(metric, cls is RetrievalNDCG, slice(None))
    fig, ax = metric.plot()
    assert fig is ax.figure
    # One point per cut-off, at the mean nDCG of the lists fed (the functional value).
    preds, target = random_lists(30, 5, seed=6)
    expected = ndcg(preds, target, k=[1, 3]).double().mean(0).tolist()
    lines = ax.get_lines()
    assert [line.get_label() for line in lines] == ["ndcg@1", "ndcg@3"]
    for line, value in zip(lines, expected, strict=True):
        assert line.get_ydata().tolist() == pytest.approx([value], abs=1e-6)


@pytest.mark.parametrize("k", [3, [1, 3]])
def test_plot_of_per_query_values_is_their_distribution(k: int | list[int]) -> None:
    """Not the query ids (100+) as values: a histogram on [0, 1] holding every query."""
    pytest.importorskip("matplotlib")
    metric = RetrievalNDCG(k=k, aggregation="none")
    indexes = torch.arange(100, 130).repeat_interleave(4)
    gen = torch.Generator().manual_seed(3)
    metric.update(
        torch.rand(120, generator=gen), torch.randint(0, 3, (120,), generator=gen), indexes
    )
    _, ax = metric.plot()
    assert ax.get_xlim() == (0.0, 1.0)
    names = [k] if isinstance(k, int) else k
    assert [text.get_text() for text in ax.get_legend().get_texts()] == [f"ndcg@{c}" for c in names]
    for patch in ax.patches:  # one step histogram per cut-off, counting the 30 queries
        heights = patch.get_path().vertices[:, 1]
        assert heights.max() <= 30
        assert patch.get_path().vertices[:, 0].max() <= 1.0
    with pytest.raises(ValueError, match="one `\\(values, ids\\)` result"):
        metric.plot([metric.compute()])


# ---------------------------------------------------------------------------------------------
# RetrievalNDCG


@pytest.mark.parametrize("k", [None, 1, 3, 10])
def test_retrieval_equals_torchmetrics_with_linear_gain(k: int | None) -> None:
    preds, target = random_lists(50, 8, seed=8, n_scores=4)  # many ties: both average them
    flat_preds, flat_target, ids = flat(preds, target)
    ours = RetrievalNDCG(k, gain="linear")
    theirs = RetrievalNormalizedDCG(top_k=k)
    for part in torch.arange(flat_preds.numel()).split(37):
        ours.update(flat_preds[part], flat_target[part], ids[part])
        theirs.update(flat_preds[part], flat_target[part], indexes=ids[part])
    torch.testing.assert_close(ours.compute(), theirs.compute(), atol=1e-6, rtol=0)


@pytest.mark.parametrize("k", [None, (1, 2, 5)])
@pytest.mark.parametrize("ties", ["average", "first"])
@pytest.mark.parametrize("empty_target_action", ["neg", "pos", "skip"])
def test_retrieval_equals_ndcg_on_the_same_data(
    k: Any, ties: str, empty_target_action: str
) -> None:
    preds, target = random_lists(30, 6, seed=9, n_labels=2)  # some lists without relevant item
    mask = torch.rand(30, 6, generator=torch.Generator().manual_seed(10)) > 0.25
    mask[:, 0] = True
    options: Any = {"ties": ties, "empty_target_action": empty_target_action}
    lists = NDCG(k, **options)
    lists.update(preds, target, mask)
    rows = RetrievalNDCG(k, **options)
    if ties == "first":
        # Order of appearance is row order: keep each query's rows in list order.
        ids = torch.arange(30).repeat_interleave(6)[mask.reshape(-1)]
        rows.update(preds[mask], target[mask], ids)
    else:
        rows.update(*flat(preds, target, mask))
    torch.testing.assert_close(
        as_tensor(rows.compute()), as_tensor(lists.compute()), atol=1e-6, rtol=0
    )


@pytest.mark.parametrize("ties", ["average", "first"])
@pytest.mark.parametrize("gain", ["exponential", "linear"])
def test_retrieval_per_query_equals_loop_reference(
    ties: str, gain: str, device: torch.device
) -> None:
    gen = torch.Generator().manual_seed(11)
    n = 600
    ids = torch.randint(-(2**62), 2**62, (40,), generator=gen)[
        torch.randint(0, 40, (n,), generator=gen)
    ]
    preds = torch.randint(0, 6, (n,), generator=gen).float() / 3
    target = torch.randint(0, 4, (n,), generator=gen)
    metric = RetrievalNDCG(k=[1, 5, 20], gain=gain, ties=ties, aggregation="none").to(device)  # type: ignore[arg-type]
    for part in torch.arange(n).split(97):
        metric.update(preds[part].to(device), target[part].to(device), ids[part].to(device))
    values, query_ids = metric.compute()
    values = {name: value.cpu() for name, value in values.items()}
    query_ids = query_ids.cpu()
    assert torch.equal(query_ids, torch.unique(ids))
    for cutoff in (1, 5, 20):
        expected = ref.ndcg_per_query(
            preds.tolist(), target.tolist(), ids.tolist(), cutoff, gain=ref.GAINS[gain], ties=ties
        )
        got = dict(zip(query_ids.tolist(), values[f"ndcg@{cutoff}"].tolist(), strict=True))
        assert got == pytest.approx(expected, abs=1e-6)


def test_retrieval_first_ties_follow_row_order_across_batches() -> None:
    # One query, three tied rows fed in two batches; labels 0, 0 then 1: the relevant row is
    # third in order of appearance.
    metric = RetrievalNDCG(k=3, ties="first", gain="linear")
    metric.update(torch.tensor([1.0, 1.0]), torch.tensor([0, 0]), torch.tensor([4, 4]))
    metric.update(torch.tensor([1.0]), torch.tensor([1]), torch.tensor([4]))
    assert metric.compute().item() == pytest.approx(1 / math.log2(4), abs=1e-7)
    average = RetrievalNDCG(k=3, gain="linear")
    average.update(torch.tensor([1.0, 1.0, 1.0]), torch.tensor([0, 0, 1]), torch.tensor([4, 4, 4]))
    expected = (1 + 1 / math.log2(3) + 1 / math.log2(4)) / 3
    assert average.compute().item() == pytest.approx(expected, abs=1e-7)


def test_retrieval_boundary_tie_group_is_averaged_over_all_members() -> None:
    # Scores 2, 1, 1, 1 with labels 0, 0, 0, 1 and k=2: rank 2 sits in a group of three with
    # mean gain 1/3 (McSherry–Najork), the ideal DCG@2 is 1.
    metric = RetrievalNDCG(k=2, gain="linear")
    metric.update(
        torch.tensor([2.0, 1.0, 1.0, 1.0]),
        torch.tensor([0, 0, 0, 1]),
        torch.zeros(4, dtype=torch.long),
    )
    assert metric.compute().item() == pytest.approx((1 / 3) / math.log2(3), abs=1e-7)


def test_retrieval_error_action_raises_in_compute() -> None:
    metric = RetrievalNDCG(empty_target_action="error")
    metric.update(torch.tensor([1.0, 2.0]), torch.tensor([0, 0]), torch.tensor([3, 3]))
    with pytest.raises(ValueError, match=re.escape("`empty_target_action`='error'")):
        metric.compute()


def test_retrieval_skip_leaves_query_out_and_gives_nan_per_query() -> None:
    preds = torch.tensor([1.0, 2.0, 1.0, 2.0])
    target = torch.tensor([1, 0, 0, 0])
    ids = torch.tensor([0, 0, 1, 1])
    metric = RetrievalNDCG(empty_target_action="skip", gain="linear")
    metric.update(preds, target, ids)
    assert metric.compute().item() == pytest.approx(1 / math.log2(3), abs=1e-7)
    per_query = RetrievalNDCG(empty_target_action="skip", gain="linear", aggregation="none")
    values, _ = per_query(preds, target, ids)
    assert values[0].item() == pytest.approx(1 / math.log2(3), abs=1e-7)
    assert math.isnan(values[1].item())


def test_retrieval_float64_scores_with_set_dtype() -> None:
    # Scores that differ only below float32 precision are kept apart in float64.
    preds = torch.tensor([1.0, 1.0 + 1e-12], dtype=torch.float64)
    target = torch.tensor([0, 1])
    ids = torch.zeros(2, dtype=torch.long)
    metric = RetrievalNDCG(gain="linear").set_dtype(torch.float64)
    metric.update(preds, target, ids)
    assert metric.compute().item() == pytest.approx(1.0, abs=1e-12)
    assert ndcg(preds, target, gain="linear").item() == pytest.approx(1.0, abs=1e-12)


@settings(max_examples=40, deadline=None)
@given(
    lists=st.lists(
        st.lists(st.tuples(st.integers(0, 3), st.integers(0, 3)), min_size=1, max_size=7),
        min_size=1,
        max_size=6,
    ),
    k=st.one_of(st.none(), st.integers(1, 8)),
    seed=st.integers(0, 2**16),
)
def test_retrieval_property_matches_functional_per_list(
    lists: list[list[tuple[int, int]]], k: int | None, seed: int
) -> None:
    """Any lists, any query order: per-query values are the functional ones, all in [0, 1]."""
    preds = torch.tensor([float(s) for items in lists for s, _ in items])
    target = torch.tensor([y for items in lists for _, y in items])
    ids = torch.tensor([7 * q - 3 for q, items in enumerate(lists) for _ in items])
    perm = torch.randperm(ids.numel(), generator=torch.Generator().manual_seed(seed))
    values, query_ids = RetrievalNDCG(k, aggregation="none")(preds[perm], target[perm], ids[perm])
    # torchmetrics' compute wrapper squeezes one-element results to 0-d.
    values, query_ids = values.reshape(-1), query_ids.reshape(-1)
    expected = torch.stack(
        [
            ndcg(torch.tensor([float(s) for s, _ in it]), torch.tensor([y for _, y in it]), k=k)
            for it in lists
        ]
    )
    assert query_ids.tolist() == [7 * q - 3 for q in range(len(lists))]
    torch.testing.assert_close(values, expected, atol=1e-6, rtol=0)
    assert bool(((values >= 0) & (values <= 1 + 1e-6)).all())


def test_retrieval_huge_sparse_ids_cost_nothing_extra() -> None:
    ids = torch.tensor([2**62, -(2**62), 2**62, -(2**62)])
    metric = RetrievalNDCG(gain="linear", aggregation="none")
    values, query_ids = metric(torch.tensor([1.0, 1.0, 0.0, 0.0]), torch.tensor([0, 1, 1, 0]), ids)
    assert query_ids.tolist() == [-(2**62), 2**62]
    torch.testing.assert_close(values, torch.tensor([1.0, 1 / math.log2(3)]))


# ---------------------------------------------------------------------------------------------
# Argument checks of the metrics


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        (
            {"aggregation": "average"},
            ValueError,
            "Expected `aggregation` to be one of 'mean', 'median', 'min', 'max', 'none' or a "
            "callable, but got 'average'.",
        ),
        ({"validate_args": 1}, TypeError, "Expected `validate_args` to be a bool, but got 1."),
        ({"k": 0}, ValueError, "Expected `k` to be a positive int"),
        (
            {"ties": "random"},
            ValueError,
            "Expected `ties` to be one of 'average', 'first', but got 'random'.",
        ),
        (
            {"ignore_index": 1.5},
            TypeError,
            "Expected `ignore_index` to be an int or None, but got 1.5.",
        ),
    ],
)
def test_retrieval_argument_errors(kwargs: dict[str, Any], error: type, message: str) -> None:
    with pytest.raises(error, match=re.escape(message)):
        RetrievalNDCG(**kwargs)


def test_ndcg_argument_errors() -> None:
    with pytest.raises(
        TypeError, match=re.escape("Expected `validate_args` to be a bool, but got 'yes'.")
    ):
        NDCG(validate_args="yes")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=re.escape("Expected `empty_target_action` to be one of")):
        NDCG(empty_target_action="zero")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="`aggregation`"):  # torchmetrics: unknown keyword
        NDCG(aggregation="mean")  # type: ignore[call-arg]


@pytest.mark.parametrize(
    ("indexes", "error", "message"),
    [
        ([0, 0, 1], TypeError, "Expected `indexes` to be an int64 torch.Tensor, but got list."),
        (
            torch.tensor([0.0, 0.0, 1.0]),
            TypeError,
            "Expected `indexes` to be an integer (int64) tensor, but got dtype torch.float32.",
        ),
        (torch.tensor([True, False, True]), TypeError, "but got dtype torch.bool."),
        (
            torch.tensor([0, 1]),
            ValueError,
            "Expected `indexes` to have the shape of `preds` (3,), but got (2,).",
        ),
    ],
)
def test_retrieval_indexes_errors(indexes: Any, error: type, message: str) -> None:
    metric = RetrievalNDCG()
    with pytest.raises(error, match=re.escape(message)):
        metric.update(torch.tensor([0.1, 0.2, 0.3]), torch.tensor([0, 1, 0]), indexes)


def test_retrieval_update_checks_preds_and_target() -> None:
    metric = RetrievalNDCG()
    ids = torch.tensor([0, 0])
    with pytest.raises(ValueError, match=re.escape("Expected `target` to be non-negative")):
        metric.update(torch.tensor([0.1, 0.2]), torch.tensor([0, -2]), ids)
    with pytest.raises(TypeError, match=re.escape("Expected `preds` to be a floating tensor")):
        metric.update(torch.tensor([1, 2]), torch.tensor([0, 1]), ids)
    with pytest.raises(ValueError, match=re.escape("Expected `preds` to contain no NaN")):
        metric.update(torch.tensor([0.1, float("nan")]), torch.tensor([0, 1]), ids)
    # Scores are stored in the metric's dtype (float32): labels of 128 overflow 2^y there.
    with pytest.raises(ValueError, match=re.escape("Expected `target` values of at most 127.99")):
        metric.update(torch.tensor([0.1, 0.2], dtype=torch.float64), torch.tensor([0, 128]), ids)
    # ignore_index rows are not checked, and are dropped.
    ignoring = RetrievalNDCG(ignore_index=-1, gain="linear")
    ignoring.update(torch.tensor([0.1, 0.2]), torch.tensor([1, -1]), ids)
    assert ignoring.compute().item() == 1.0


# ---------------------------------------------------------------------------------------------
# Grouping flat rows into padded lists (RetrievalNDCG's compute)


@settings(max_examples=60, deadline=None)
@given(
    sizes=st.lists(st.integers(1, 70), min_size=1, max_size=12),
    n_scores=st.integers(1, 6),
    id_spread=st.sampled_from([1, 3, 2**20, 2**40]),
    k=st.one_of(st.none(), st.lists(st.integers(1, 40), min_size=1, max_size=3).map(tuple)),
    ties=st.sampled_from(["average", "first"]),
    gain=st.sampled_from(["exponential", "linear", "callable"]),
    labels=st.sampled_from(["small", "fractional", "large"]),
    dtype=st.sampled_from([torch.float32, torch.float64]),
    seed=st.integers(0, 2**16),
)
@pytest.mark.budget
def test_grouped_kernel_equals_loop_reference_per_query(
    sizes: list[int],
    n_scores: int,
    id_spread: int,
    k: Any,
    ties: str,
    gain: str,
    labels: str,
    dtype: torch.dtype,
    seed: int,
) -> None:
    """Queries of skewed sizes (several buckets), rows shuffled, ids narrow to very wide."""
    from torch_ndcg import _grouping, _validation

    gen = torch.Generator().manual_seed(seed)
    query_of_row = torch.arange(len(sizes)).repeat_interleave(torch.tensor(sizes))
    perm = torch.randperm(query_of_row.numel(), generator=gen)
    ids = (query_of_row * id_spread - 7)[perm]
    n = ids.numel()
    preds = torch.randint(0, n_scores, (n,), generator=gen).to(dtype)
    target = torch.randint(0, 4, (n,), generator=gen).double()
    # Small integer labels take the label-count ideal; the others the ideal top-k.
    if labels == "fractional":
        target = target / 2
    elif labels == "large":
        target = target * 30  # up to 90: past the counted labels (exponential gain stays finite)
    # A gain that is not monotone in the label: the ideal order must follow the gains.
    gain_fn: Any = (lambda y: (y - 1.5).abs()) if gain == "callable" else gain
    ref_gain: Any = (lambda y: abs(y - 1.5)) if gain == "callable" else ref.GAINS[gain]
    options = _validation.check_list_options(
        k=k, gain=gain_fn, discount="log2", ties=ties, empty_target_action="neg",
        ignore_index=None, validate_args=True,
    )
    query_ids, dcg, ideal = _grouping.grouped_dcg_and_ideal(preds, target, ids, options)
    assert torch.equal(query_ids, torch.unique(ids))
    values = torch.where(ideal == 0, 0, dcg / ideal)
    for column, cutoff in enumerate([None] if k is None else k):
        expected = ref.ndcg_per_query(
            preds.tolist(), target.tolist(), ids.tolist(), cutoff, gain=ref_gain, ties=ties
        )
        got = dict(zip(query_ids.tolist(), values[:, column].tolist(), strict=True))
        assert got == pytest.approx(expected, abs=1e-6)


@pytest.mark.budget
def test_grouping_buckets_bound_the_padding() -> None:
    from torch_ndcg import _grouping

    # Sizes 1, 2, 3, 4, 5, 100: buckets (0, 1], (1, 2], (2, 4], (4, 8], (64, 128].
    sizes = torch.tensor([3, 1, 100, 4, 2, 5])
    ids = torch.arange(6).repeat_interleave(sizes) * 10
    shuffle = torch.randperm(ids.numel(), generator=torch.Generator().manual_seed(0))
    grouping = _grouping.group_rows(ids[shuffle])
    assert grouping.ids.tolist() == [0, 10, 20, 30, 40, 50]
    assert grouping.sizes.tolist() == sizes.tolist()
    buckets = list(grouping.buckets())
    assert [rows.shape[1] for _, rows, _ in buckets] == [1, 2, 4, 5, 100]
    padded = sum(rows.numel() for _, rows, _ in buckets)
    assert padded <= 2 * ids.numel()
    for queries, rows, mask in buckets:
        real = rows.numel() if mask is None else int(mask.sum())
        assert real == int(grouping.sizes[queries].sum())
    # Equal sizes: one bucket, no padding, no mask.
    (only,) = list(_grouping.group_rows(torch.tensor([5, 9, 5, 9])).buckets())
    assert only[1].tolist() == [[0, 2], [1, 3]]
    assert only[2] is None


def test_lists_of_padding_only_are_not_counted_by_either_metric() -> None:
    preds = torch.tensor([[2.0, 1.0], [2.0, 1.0], [0.5, 1.5]])
    target = torch.tensor([[1, 0], [-1, -1], [1, 0]])
    lists = NDCG(ignore_index=-1)
    lists.update(preds, target)
    rows = RetrievalNDCG(ignore_index=-1)
    rows.update(preds.flatten(), target.flatten(), torch.tensor([0, 0, 1, 1, 2, 2]))
    expected = (1 + 1 / math.log2(3)) / 2  # the two real lists only
    assert lists.compute().item() == pytest.approx(expected, abs=1e-6)
    assert rows.compute().item() == pytest.approx(expected, abs=1e-6)
    masked = NDCG()
    masked.update(preds.abs(), target.abs(), mask=target >= 0)
    assert masked.compute().item() == pytest.approx(expected, abs=1e-6)


@pytest.mark.parametrize("metric_class", [NDCG, RetrievalNDCG])
def test_duplicate_cutoffs_are_rejected_by_the_metrics(metric_class: Any) -> None:
    with pytest.raises(ValueError, match=r"`k` to hold distinct cut-offs.*but got \[3, 3, 1\]"):
        metric_class(k=[3, 3, 1])


@pytest.mark.parametrize(
    "ids",
    [
        [5, 5, 7],  # all positive: the codes are the ids themselves
        [32768, 32768, 32769],  # past int16 codes
        [2**31 - 2, 2**31 - 2, 2**31 + 3],  # past int32 codes: offset from the smallest
        [-3, -3, 2**31 - 5],  # a span just below 2^31
        [-(2**62), -(2**62), 2**62],  # a span past 2^31: ranks among the unique ids
    ],
)
def test_retrieval_returns_the_given_query_ids(ids: list[int]) -> None:
    preds, target = torch.tensor([0.9, 0.2, 0.8]), torch.tensor([1, 0, 1])
    values, query_ids = RetrievalNDCG(k=2, aggregation="none")(preds, target, torch.tensor(ids))
    assert query_ids.tolist() == sorted(set(ids))
    torch.testing.assert_close(values, torch.tensor([1.0, 1.0]))


@pytest.mark.parametrize("ties", ["average", "first"])
def test_real_minus_inf_ranks_below_the_lowest_finite_score_whatever_the_padding(
    ties: str,
) -> None:
    # Ranked: 5.0 (label 0), float32's lowest finite score (label 0), -inf (label 1): DCG@2 = 0.
    lowest = torch.finfo(torch.float32).min
    preds = torch.tensor([float("-inf"), lowest, 5.0])
    target = torch.tensor([1, 0, 0])
    alone = RetrievalNDCG(k=2, ties=ties, aggregation="none")  # type: ignore[arg-type]
    alone.update(preds, target, torch.zeros(3, dtype=torch.int64))
    # Next to a longer query, the first one is padded in its bucket.
    beside = RetrievalNDCG(k=2, ties=ties, aggregation="none")  # type: ignore[arg-type]
    beside.update(
        torch.cat([preds, torch.rand(4, generator=torch.Generator().manual_seed(1))]),
        torch.cat([target, torch.tensor([1, 0, 1, 0])]),
        torch.tensor([0, 0, 0, 1, 1, 1, 1]),
    )
    assert alone.compute()[0].reshape(-1)[0].item() == 0.0
    assert beside.compute()[0][0].item() == 0.0
    mask = torch.tensor([[True, True, True, False]])
    padded = ndcg(
        torch.cat([preds, torch.zeros(1)])[None],
        torch.tensor([[1, 0, 0, 1]]),
        k=2,
        mask=mask,
        ties=ties,
    )  # type: ignore[arg-type]
    assert padded.item() == 0.0


def test_transposed_inputs_give_the_values_of_contiguous_ones() -> None:
    gen = torch.Generator().manual_seed(3)
    preds = torch.rand(8, 6, generator=gen)
    target = torch.randint(0, 4, (8, 6), generator=gen)
    mask = torch.rand(8, 6, generator=gen) < 0.8
    expected = ndcg(preds.T.contiguous(), target.T.contiguous(), k=3, mask=mask.T.contiguous())
    torch.testing.assert_close(ndcg(preds.T, target.T, k=3, mask=mask.T), expected)
    torch.testing.assert_close(ndcg(preds.T, target.T.float(), k=3, mask=mask.T), expected)
    metric = NDCG(k=3)
    metric.update(preds.T, target.T, mask.T)
    torch.testing.assert_close(metric.compute(), expected[mask.T.any(-1)].mean())


@pytest.mark.parametrize("shape", [(0, 5), (2, 0, 5)])
def test_a_masked_update_of_no_list_adds_nothing(shape: tuple[int, ...]) -> None:
    """A batch of no list with its mask (an empty shard) is no error; it counts no list."""
    metric = NDCG(k=[1, 3])
    metric.update(torch.rand(4, 5), torch.randint(0, 3, (4, 5)))
    before = metric.compute()
    metric.update(torch.zeros(shape), torch.zeros(shape), mask=torch.ones(shape, dtype=torch.bool))
    torch.testing.assert_close(metric.compute(), before)
