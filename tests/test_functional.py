"""Functional dcg/ndcg against the literature, scikit-learn, a loop reference and invariants."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.metrics import dcg_score, ndcg_score

import torch_ndcg
from tests import references as ref
from torch_ndcg import dcg, ndcg, retrieval_ndcg

# ---------------------------------------------------------------------------------------------
# Worked examples of the literature (expected values written as formulas where possible)


def ranked(relevances: list[float]) -> tuple[torch.Tensor, torch.Tensor]:
    """Scores that rank the items in the given order, and the labels."""
    n = len(relevances)
    return torch.arange(n, 0, -1, dtype=torch.float64), torch.tensor(relevances)


def test_jarvelin_worked_example() -> None:
    # Relevances 3, 2, 3, 0, 1, 2 in ranked order, Järvelin discount, linear gain.
    preds, target = ranked([3, 2, 3, 0, 1, 2])
    expected_dcg = 3 + 2 + 3 / math.log2(3) + 0 + 1 / math.log2(5) + 2 / math.log2(6)
    expected_ideal = 3 + 3 + 2 / math.log2(3) + 2 / math.log2(4) + 1 / math.log2(5)
    options = {"gain": "linear", "discount": "jarvelin"}
    assert dcg(preds, target, k=6, **options).item() == pytest.approx(expected_dcg, abs=1e-12)
    assert expected_dcg == pytest.approx(8.10, abs=5e-3)
    assert expected_ideal == pytest.approx(8.69, abs=5e-3)
    value = ndcg(preds, target, k=6, **options).item()
    assert value == pytest.approx(expected_dcg / expected_ideal, abs=1e-12)
    assert round(value, 3) == 0.932


@pytest.mark.parametrize(("discount", "expected"), [("jarvelin", 1.0), ("log2", 1 / math.log2(3))])
def test_one_relevant_document_at_rank_two(discount: str, expected: float) -> None:
    preds, target = ranked([0, 1, 0])
    assert dcg(preds, target, discount=discount).item() == pytest.approx(expected, abs=1e-12)
    assert round(expected, 3) in (1.0, 0.631)


def test_log2_linear_worked_example_exact_value() -> None:
    preds, target = ranked([3, 2, 3, 0, 1])
    expected_dcg = 3 + 2 / math.log2(3) + 3 / 2 + 0 + 1 / math.log2(6)
    expected_ideal = 3 + 3 / math.log2(3) + 2 / 2 + 1 / math.log2(5) + 0
    assert dcg(preds, target, k=5, gain="linear").item() == pytest.approx(expected_dcg, abs=1e-12)
    value = ndcg(preds, target, k=5, gain="linear").item()
    assert value == pytest.approx(expected_dcg / expected_ideal, abs=1e-12)
    assert round(expected_dcg, 4) == 6.1487
    assert round(expected_ideal, 4) == 6.3235
    assert round(value, 5) == 0.97236


@pytest.mark.parametrize("gain", ["linear", "exponential"])
def test_binary_relevance_dcg_at_3(gain: str) -> None:
    preds, target = ranked([1, 0, 1, 1, 0])
    assert dcg(preds, target, k=3, gain=gain).item() == pytest.approx(1 + 1 / math.log2(4))
    assert dcg(preds, target, k=3, gain=gain).item() == pytest.approx(1.5)


def test_sklearn_documentation_example_with_ties() -> None:
    target = torch.tensor([[3, 2, 1, 0, 0]])
    preds = torch.tensor([[3, 2, 0, 0, 1]], dtype=torch.float64)
    assert dcg(preds, target, gain="linear").item() == pytest.approx(4.670624189796882, abs=1e-12)
    ideal = dcg(target.double(), target, gain="linear").item()
    assert ideal == pytest.approx(4.761859507142915, abs=1e-12)
    assert ndcg(preds, target, gain="linear").item() == pytest.approx(0.980840401274087, abs=1e-12)


def test_tie_group_straddling_the_cutoff_is_averaged_over_the_whole_group() -> None:
    # Positions 2..4 tie; k=2 sees one slot of that group, credited the group's mean gain.
    preds = torch.tensor([5.0, 1.0, 1.0, 1.0])
    target = torch.tensor([0, 3, 0, 0])
    expected = (3 / 3) * (1 / math.log2(3))
    assert dcg(preds, target, k=2, gain="linear").item() == pytest.approx(expected, abs=1e-6)
    # "first" credits the first-appearing member of the group: the item with label 3.
    first = dcg(preds, target, k=2, gain="linear", ties="first").item()
    assert first == pytest.approx(3 / math.log2(3), abs=1e-6)


# ---------------------------------------------------------------------------------------------
# scikit-learn


def random_batch(
    rng: np.random.Generator, lists: int, items: int, *, ties: bool
) -> tuple[np.ndarray, np.ndarray]:
    labels = rng.integers(0, 5, size=(lists, items))
    scores = rng.normal(size=(lists, items))
    if ties:
        scores = np.round(scores * 2) / 2
    return scores, labels


@pytest.mark.parametrize("ties", [True, False])
@pytest.mark.parametrize("k", [1, 3, 5, 10, None])
def test_ndcg_matches_sklearn(ties: bool, k: int | None, device: torch.device) -> None:
    scores, labels = random_batch(np.random.default_rng(0), 64, 12, ties=ties)
    preds, target = torch.from_numpy(scores).to(device), torch.from_numpy(labels).to(device)
    ours = ndcg(preds, target, k=k, gain="linear").cpu()
    assert ours.mean().item() == pytest.approx(ndcg_score(labels, scores, k=k), abs=1e-12)
    per_list = [ndcg_score(labels[i : i + 1], scores[i : i + 1], k=k) for i in range(8)]
    np.testing.assert_allclose(ours[:8].numpy(), per_list, atol=1e-12)


@pytest.mark.parametrize("k", [1, 4, None])
def test_dcg_matches_sklearn(k: int | None, device: torch.device) -> None:
    scores, labels = random_batch(np.random.default_rng(1), 32, 9, ties=True)
    preds, target = torch.from_numpy(scores).to(device), torch.from_numpy(labels).to(device)
    ours = dcg(preds, target, k=k, gain="linear").cpu()
    assert ours.mean().item() == pytest.approx(dcg_score(labels, scores, k=k), abs=1e-12)


@pytest.mark.parametrize("k", [2, 6, None])
def test_first_matches_sklearn_ignore_ties_on_tie_free_scores(
    k: int | None, device: torch.device
) -> None:
    scores, labels = random_batch(np.random.default_rng(2), 64, 10, ties=False)
    preds, target = torch.from_numpy(scores).to(device), torch.from_numpy(labels).to(device)
    ours = ndcg(preds, target, k=k, gain="linear", ties="first").cpu()
    expected = ndcg_score(labels, scores, k=k, ignore_ties=True)
    assert ours.mean().item() == pytest.approx(expected, abs=1e-12)


def test_float32_matches_sklearn_on_a_large_tied_batch(device: torch.device) -> None:
    scores, labels = random_batch(np.random.default_rng(3), 500, 60, ties=True)
    preds = torch.from_numpy(scores).float().to(device)
    ours = ndcg(preds, torch.from_numpy(labels).to(device), k=10, gain="linear").cpu()
    assert ours.dtype == torch.float32
    assert ours.double().mean().item() == pytest.approx(ndcg_score(labels, scores, k=10), abs=1e-6)


# ---------------------------------------------------------------------------------------------
# Loop-based reference, every option


def custom_gain(labels: torch.Tensor) -> torch.Tensor:
    return labels**2


def custom_discount(ranks: torch.Tensor) -> torch.Tensor:
    return 1 / ranks


REFERENCE_GAINS = {
    "exponential": ("exponential", ref.exponential_gain),
    "linear": ("linear", ref.linear_gain),
    "square": (custom_gain, lambda y: float(y) ** 2),
}
REFERENCE_DISCOUNTS = {
    "log2": ("log2", ref.log2_discount),
    "jarvelin": ("jarvelin", ref.jarvelin_discount),
    "inverse": (custom_discount, lambda r: 1 / r),
}


@pytest.mark.parametrize("gain_name", list(REFERENCE_GAINS))
@pytest.mark.parametrize("discount_name", list(REFERENCE_DISCOUNTS))
@pytest.mark.parametrize("ties", ["average", "first"])
def test_matches_loop_reference_with_padding(
    gain_name: str, discount_name: str, ties: str, device: torch.device
) -> None:
    rng = np.random.default_rng(4)
    scores, labels = random_batch(rng, 40, 15, ties=True)
    real = rng.random(scores.shape) < 0.7
    gain, ref_gain = REFERENCE_GAINS[gain_name]
    discount, ref_discount = REFERENCE_DISCOUNTS[discount_name]
    ks = [1, 3, 7, 15, 20]
    ours = ndcg(
        torch.from_numpy(scores).to(device),
        torch.from_numpy(labels).to(device),
        k=ks,
        gain=gain,
        discount=discount,
        ties=ties,
        mask=torch.from_numpy(real).to(device),
    ).cpu()
    for j, k in enumerate(ks):
        expected = ref.ndcg_padded_batch(
            scores, labels, real, k, gain=ref_gain, discount=ref_discount, ties=ties
        )
        np.testing.assert_allclose(ours[:, j].numpy(), expected, atol=1e-12)


@pytest.mark.parametrize("ties", ["average", "first"])
def test_ignore_index_equals_mask(ties: str) -> None:
    rng = np.random.default_rng(5)
    scores, labels = random_batch(rng, 30, 11, ties=True)
    real = rng.random(scores.shape) < 0.6
    padded_labels = np.where(real, labels, -1)
    preds = torch.from_numpy(scores)
    by_mask = ndcg(
        preds, torch.from_numpy(labels), k=[1, 5], ties=ties, mask=torch.from_numpy(real)
    )
    by_index = ndcg(preds, torch.from_numpy(padded_labels), k=[1, 5], ties=ties, ignore_index=-1)
    torch.testing.assert_close(by_mask, by_index, rtol=0, atol=0)


def test_padded_items_never_count_whatever_their_score() -> None:
    preds = torch.tensor([[1.0, 100.0, float("nan"), 0.5, float("-inf")]])
    target = torch.tensor([[1, 9, 9, 0, 9]])
    mask = torch.tensor([[True, False, False, True, False]])
    assert ndcg(preds, target, mask=mask).item() == 1.0
    assert dcg(preds, target, mask=mask).item() == 1.0


def test_real_infinite_scores_rank_first_and_last() -> None:
    preds = torch.tensor([[float("-inf"), 0.0, float("inf")], [float("-inf"), 1.0, 0.0]])
    target = torch.tensor([[0, 1, 2], [0, 2, 1]])
    mask = torch.tensor([[True, True, True], [True, True, False]])
    values = ndcg(preds, target, mask=mask, gain="linear")
    torch.testing.assert_close(values, torch.ones(2))


# ---------------------------------------------------------------------------------------------
# Invariants (hypothesis)


@st.composite
def lists(draw: st.DrawFn, *, tie_free: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    length = draw(st.integers(1, 12))
    labels = draw(st.lists(st.integers(0, 4), min_size=length, max_size=length))
    if tie_free:
        scores = draw(st.permutations(list(range(length))))
    else:
        scores = draw(st.lists(st.integers(-3, 3), min_size=length, max_size=length))
    return torch.tensor(scores, dtype=torch.float64), torch.tensor(labels)


cutoffs = st.one_of(st.none(), st.integers(1, 15))
options = st.fixed_dictionaries(
    {
        "gain": st.sampled_from(["exponential", "linear"]),
        "discount": st.sampled_from(["log2", "jarvelin"]),
    }
)


@given(lists(), cutoffs, options)
def test_ideal_order_scores_one(
    data: tuple[torch.Tensor, torch.Tensor], k: int | None, opts: dict[str, str]
) -> None:
    _, target = data
    value = ndcg(target.double(), target, k=k, empty_target_action="pos", **opts)
    assert value.item() == pytest.approx(1.0, abs=1e-12)


@given(lists(), cutoffs, options, st.sampled_from(["average", "first"]))
def test_values_lie_in_unit_interval(
    data: tuple[torch.Tensor, torch.Tensor], k: int | None, opts: dict[str, str], ties: str
) -> None:
    preds, target = data
    value = ndcg(preds, target, k=k, ties=ties, **opts).item()
    assert -1e-12 <= value <= 1 + 1e-12


@given(lists(), cutoffs, st.randoms(use_true_random=False))
def test_joint_permutation_changes_nothing_with_average_ties(
    data: tuple[torch.Tensor, torch.Tensor], k: int | None, random: object
) -> None:
    preds, target = data
    permutation = list(range(len(preds)))
    random.shuffle(permutation)  # type: ignore[attr-defined]
    index = torch.tensor(permutation)
    expected = ndcg(preds, target, k=k)
    assert ndcg(preds[index], target[index], k=k).item() == pytest.approx(
        expected.item(), abs=1e-12
    )


@given(lists(tie_free=True), cutoffs, options)
def test_average_equals_first_without_ties(
    data: tuple[torch.Tensor, torch.Tensor], k: int | None, opts: dict[str, str]
) -> None:
    preds, target = data
    average = ndcg(preds, target, k=k, ties="average", **opts)
    first = ndcg(preds, target, k=k, ties="first", **opts)
    assert average.item() == pytest.approx(first.item(), abs=1e-12)


@given(lists(), st.integers(0, 5), st.sampled_from(["average", "first"]))
def test_k_at_least_length_equals_whole_list(
    data: tuple[torch.Tensor, torch.Tensor], extra: int, ties: str
) -> None:
    preds, target = data
    whole = ndcg(preds, target, k=None, ties=ties)
    assert ndcg(preds, target, k=len(preds) + extra, ties=ties).item() == whole.item()


@given(
    lists(),
    cutoffs,
    st.lists(st.integers(0, 12), max_size=5),
    st.sampled_from(["average", "first"]),
)
def test_padding_added_anywhere_changes_nothing(
    data: tuple[torch.Tensor, torch.Tensor], k: int | None, positions: list[int], ties: str
) -> None:
    preds, target = data
    padded_preds, padded_target, mask = (
        list(preds.tolist()),
        list(target.tolist()),
        [True] * len(preds),
    )
    for position in positions:
        at = min(position, len(padded_preds))
        padded_preds.insert(at, 10.0 if position % 2 else preds[0].item())
        padded_target.insert(at, 4)
        mask.insert(at, False)
    expected = ndcg(preds, target, k=k, ties=ties)
    value = ndcg(
        torch.tensor(padded_preds),
        torch.tensor(padded_target),
        k=k,
        ties=ties,
        mask=torch.tensor(mask),
    )
    assert value.item() == pytest.approx(expected.item(), abs=1e-6)


@settings(max_examples=50)
@given(
    lists(),
    st.lists(st.integers(1, 15), min_size=1, max_size=4),
    st.sampled_from(["average", "first"]),
)
def test_multi_k_equals_separate_calls(
    data: tuple[torch.Tensor, torch.Tensor], ks: list[int], ties: str
) -> None:
    preds, target = data
    together = ndcg(preds, target, k=ks, ties=ties)
    separate = torch.stack([ndcg(preds, target, k=k, ties=ties) for k in ks])
    torch.testing.assert_close(together, separate, rtol=0, atol=1e-12)


# ---------------------------------------------------------------------------------------------
# Shapes, dtypes, empty lists, devices


def test_output_shapes() -> None:
    gen = torch.Generator().manual_seed(0)
    preds, target = (
        torch.rand(2, 3, 7, generator=gen),
        torch.randint(0, 3, (2, 3, 7), generator=gen),
    )
    assert ndcg(preds[0, 0], target[0, 0]).shape == ()
    assert ndcg(preds, target).shape == (2, 3)
    assert ndcg(preds, target, k=5).shape == (2, 3)
    assert ndcg(preds, target, k=[5]).shape == (2, 3, 1)
    assert ndcg(preds, target, k=(1, 3, 20)).shape == (2, 3, 3)
    assert ndcg(preds[:0], target[:0], k=[1, 2]).shape == (0, 3, 2)
    assert ndcg(preds[0, 0, :3], torch.tensor([1, 0, 2]), k=np.int64(2)).shape == ()


@pytest.mark.parametrize(
    "dtype", [torch.bool, torch.uint8, torch.int32, torch.int64, torch.float32]
)
def test_any_target_dtype(dtype: torch.dtype) -> None:
    preds = torch.tensor([[0.3, 0.9, 0.1, 0.5]])
    target = torch.tensor([[0, 1, 1, 0]])
    expected = ndcg(preds, target.double())
    torch.testing.assert_close(ndcg(preds, target.to(dtype)), expected.float())
    mask = torch.tensor([[True, True, False, True]])
    torch.testing.assert_close(
        ndcg(preds, target.to(dtype), mask=mask), ndcg(preds, target.double(), mask=mask).float()
    )


@pytest.mark.parametrize(
    ("dtype", "out_dtype"),
    [
        (torch.float16, torch.float32),
        (torch.bfloat16, torch.float32),
        (torch.float32, torch.float32),
        (torch.float64, torch.float64),
    ],
)
@pytest.mark.parametrize("ties", ["average", "first"])
def test_preds_dtypes(dtype: torch.dtype, out_dtype: torch.dtype, ties: str) -> None:
    preds = torch.tensor([[0.5, 0.25, 0.25, 1.0, -2.0]])
    target = torch.tensor([[2, 0, 1, 3, 0]])
    value = ndcg(preds.to(dtype), target, k=[2, 4], ties=ties)
    assert value.dtype == out_dtype
    torch.testing.assert_close(
        value, ndcg(preds.double(), target, k=[2, 4], ties=ties).to(out_dtype)
    )
    # `dcg` ranks by its own keys: half-precision scores are converted, not taken as keys.
    gains = dcg(preds.to(dtype), target, k=[2, 4], ties=ties)
    assert gains.dtype == out_dtype
    exact = dcg(preds.double(), target, k=[2, 4], ties=ties)
    torch.testing.assert_close(gains, exact.to(out_dtype))


@pytest.mark.parametrize("ties", ["average", "first"])
def test_float32_within_1e6_of_float64_on_long_lists(ties: str) -> None:
    generator = torch.Generator().manual_seed(0)
    preds = (torch.rand(4, 10_000, generator=generator, dtype=torch.float64) * 1000).round()
    target = torch.randint(0, 5, (4, 10_000), generator=generator)
    for k in (None, 10, 1000):
        exact = ndcg(preds, target, k=k, ties=ties)
        approx = ndcg(preds.float(), target, k=k, ties=ties)
        torch.testing.assert_close(approx.double(), exact, rtol=0, atol=1e-6)
        exact_dcg = dcg(preds, target, k=k, ties=ties)
        approx_dcg = dcg(preds.float(), target, k=k, ties=ties).double()
        torch.testing.assert_close(approx_dcg, exact_dcg, rtol=1e-6, atol=0)


@pytest.mark.parametrize(("action", "expected"), [("neg", 0.0), ("pos", 1.0)])
def test_empty_target_action(action: str, expected: float) -> None:
    preds = torch.tensor([[0.1, 0.2], [0.3, 0.4]])
    target = torch.tensor([[0, 0], [1, 0]])
    values = ndcg(preds, target, empty_target_action=action)
    assert values[0].item() == expected
    assert values[1].item() == pytest.approx(1 / math.log2(3))


def test_empty_target_action_skip_gives_nan_for_nanmean() -> None:
    preds = torch.tensor([[0.1, 0.2], [0.3, 0.4]])
    target = torch.tensor([[0, 0], [1, 0]])
    values = ndcg(preds, target, k=[1, 2], empty_target_action="skip")
    assert torch.isnan(values[0]).all()
    # The second list ranks its one relevant item second: nDCG@1 = 0, nDCG@2 = 1/log2(3).
    torch.testing.assert_close(values.nanmean(dim=0), torch.tensor([0.0, 1 / math.log2(3)]))


def test_empty_target_action_error() -> None:
    with pytest.raises(ValueError, match=r"no relevant item .*`empty_target_action`='error'"):
        ndcg(torch.tensor([0.1, 0.2]), torch.tensor([0, 0]), empty_target_action="error")
    value = ndcg(torch.tensor([0.2, 0.1]), torch.tensor([0, 1]), empty_target_action="error")
    assert value.item() == pytest.approx(1 / math.log2(3))


def test_works_under_torch_compile() -> None:
    compiled = torch.compile(ndcg)
    preds = torch.tensor([[0.5, 0.25, 0.25, 1.0, -2.0], [1.0, 2.0, 3.0, 4.0, 5.0]])
    target = torch.tensor([[2, 0, 1, 3, 0], [0, 0, 1, 1, 2]])
    for ties in ("average", "first"):
        torch.testing.assert_close(
            compiled(preds, target, k=[1, 3], ties=ties), ndcg(preds, target, k=[1, 3], ties=ties)
        )


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("ties", ["average", "first"])
def test_cuda_matches_cpu(ties: str) -> None:
    scores, labels = random_batch(np.random.default_rng(6), 256, 50, ties=True)
    preds, target = torch.from_numpy(scores).float(), torch.from_numpy(labels)
    expected = ndcg(preds, target, k=[1, 10, 60], ties=ties)
    on_gpu = ndcg(preds.cuda(), target.cuda(), k=[1, 10, 60], ties=ties)
    torch.testing.assert_close(on_gpu.cpu(), expected)


def test_top_level_exports() -> None:
    assert torch_ndcg.ndcg is torch_ndcg.functional.ndcg
    assert torch_ndcg.dcg is torch_ndcg.functional.dcg
    assert {"dcg", "ndcg"} <= set(torch_ndcg.__all__)


def test_tied_exponential_gains_near_the_float32_limit_do_not_overflow() -> None:
    # 2^127 is finite in float32; two of them tied are summed in float64, not to inf.
    preds, target = torch.tensor([1.0, 1.0, 0.0]), torch.tensor([127, 127, 0])
    assert ndcg(preds, target).item() == pytest.approx(1.0)
    assert ndcg(preds, target, k=1).item() == pytest.approx(1.0)


def test_callable_discount_may_answer_in_another_dtype_and_be_unhashable() -> None:
    @dataclasses.dataclass
    class Power:  # a dataclass with eq=True is unhashable
        p: float

        def __call__(self, ranks: torch.Tensor) -> torch.Tensor:
            return (1 / ranks**self.p).float()

    preds, target = torch.tensor([3.0, 2.0, 1.0]), torch.tensor([0, 1, 2])
    expected = ndcg(preds, target, discount=lambda r: 1 / r)
    assert ndcg(preds, target, discount=Power(1.0)).item() == pytest.approx(expected.item())


@pytest.mark.parametrize("ties", ["average", "first"])
@pytest.mark.parametrize("empty_target_action", ["neg", "pos", "skip"])
def test_retrieval_ndcg_equals_loop_reference_and_the_metric(
    ties: str, empty_target_action: str, device: torch.device
) -> None:
    gen = torch.Generator().manual_seed(13)
    n = 400
    ids = torch.randint(-(2**40), 2**40, (30,), generator=gen)[
        torch.randint(0, 30, (n,), generator=gen)
    ]
    preds = torch.randint(0, 6, (n,), generator=gen).double() / 3  # ties
    target = torch.randint(0, 3, (n,), generator=gen) * (torch.rand(n, generator=gen) < 0.6)
    values, query_ids = retrieval_ndcg(
        preds.to(device),
        target.to(device),
        ids.to(device),
        k=[1, 5],
        gain="linear",
        ties=ties,  # type: ignore[arg-type]
        empty_target_action=empty_target_action,  # type: ignore[arg-type]
    )
    assert torch.equal(query_ids.cpu(), torch.unique(ids))
    empty_value = {"neg": 0.0, "pos": 1.0, "skip": float("nan")}[empty_target_action]
    for column, cutoff in enumerate((1, 5)):
        expected = ref.ndcg_per_query(
            preds.tolist(),
            target.tolist(),
            ids.tolist(),
            cutoff,
            gain=ref.linear_gain,
            ties=ties,
            empty_value=empty_value,
        )
        got = dict(zip(query_ids.tolist(), values[:, column].cpu().tolist(), strict=True))
        assert got == pytest.approx(expected, abs=1e-12, nan_ok=True)
    metric = torch_ndcg.RetrievalNDCG(
        k=[1, 5],
        gain="linear",
        ties=ties,  # type: ignore[arg-type]
        empty_target_action=empty_target_action,  # type: ignore[arg-type]
        aggregation="none",
    ).set_dtype(torch.float64)
    metric.update(preds, target, ids)
    metric_values, metric_ids = metric.compute()
    assert torch.equal(metric_ids, query_ids.cpu())
    torch.testing.assert_close(metric_values["ndcg@5"], values[:, 1].cpu(), equal_nan=True)
