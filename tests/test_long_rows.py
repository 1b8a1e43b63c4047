"""Long rows: the same values as the general dense path and the loop references.

Rows of at least 16,384 items (and k small beside them) are ranked from group maxima of the
float scores, and their ideal DCG from the largest labels alone. The behaviour tests compare
with the loop references; the budget tests compare with the general path (the long-row path
switched off, a private name) and pin which rows take the path.
"""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tests import references
from tests.host_reads import count_host_reads
from torch_ndcg import dcg, ndcg

# The long-row path's threshold (16,384 items) plus 37, not a multiple of its groups of 32
# items: the items in no group are candidates too. `test_long_rows_are_decided_from_the_shape`
# holds that such rows take the path.
LENGTH = (1 << 14) + 37
ROWS = 3
CUTOFFS = [1, 3, 10, 11, 50, 100]


@pytest.mark.budget  # a helper of the budget tests: it patches a private name
def general(monkeypatch: pytest.MonkeyPatch, fn: object, *args: object, **kwargs: object) -> object:
    from torch_ndcg import _dcg_paths

    with monkeypatch.context() as patch:
        patch.setattr(_dcg_paths, "long_rows", lambda length, kmax: False)
        return fn(*args, **kwargs)  # type: ignore[operator]


def data(seed: int, *, tied: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    if tied:  # few distinct scores: ties everywhere, at the k-th position too
        preds = torch.randint(0, 400, (ROWS, LENGTH), generator=gen).float()
    else:
        preds = torch.randn(ROWS, LENGTH, generator=gen)
    target = torch.zeros(ROWS, LENGTH)
    hits = torch.randint(0, LENGTH, (ROWS, 40), generator=gen)
    target.scatter_(1, hits, torch.randint(1, 5, (ROWS, 40), generator=gen).float())
    # Some relevant items among the best scores, so that the DCG is not 0.
    best = preds.topk(20, dim=1).indices
    target.scatter_(1, best[:, ::3], torch.randint(0, 5, (ROWS, 7), generator=gen).float())
    return preds, target


@pytest.mark.budget
def test_long_rows_are_decided_from_the_shape() -> None:
    from torch_ndcg import _dcg_paths

    assert _dcg_paths.LONG_ROW_LENGTH + 37 == LENGTH
    assert _dcg_paths.long_rows(LENGTH, 10)
    assert not _dcg_paths.long_rows(LENGTH, LENGTH)  # k >= N: the whole list
    assert not _dcg_paths.long_rows(_dcg_paths.LONG_ROW_LENGTH - 1, 10)


@pytest.mark.parametrize("ties", ["average", "first"])
@pytest.mark.parametrize("gain", ["exponential", "linear"])
@pytest.mark.parametrize("tied", [False, True])
@pytest.mark.budget
def test_equal_to_the_general_path(
    monkeypatch: pytest.MonkeyPatch, ties: str, gain: str, tied: bool
) -> None:
    preds, target = data(1, tied=tied)
    for discount in ["log2", "jarvelin"]:
        options = {"k": CUTOFFS, "ties": ties, "gain": gain, "discount": discount}
        got = ndcg(preds, target, **options)  # type: ignore[arg-type]
        want = general(monkeypatch, ndcg, preds, target, **options)
        torch.testing.assert_close(got, want, rtol=0, atol=1e-6)
        got = dcg(preds, target, **options)  # type: ignore[arg-type]
        want = general(monkeypatch, dcg, preds, target, **options)
        torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("ties", ["average", "first"])
def test_ties_at_the_kth_score_match_the_references(ties: str) -> None:
    """A tie group straddles k = 10 (its members far apart in the row), in every row."""
    preds, target = data(2)
    order = preds.argsort(dim=1, descending=True)
    for row in range(ROWS):
        tie_value = preds[row, order[row, 8]].item()
        # Positions 9 and 10 and an item far down the row join the 9th best score.
        far = order[row, LENGTH // 2]
        preds[row, order[row, 9]] = tie_value
        preds[row, order[row, 10]] = tie_value
        preds[row, far] = tie_value
        target[row, far] = 4.0
    got = ndcg(preds, target, k=[5, 9, 10, 12], ties=ties)  # type: ignore[arg-type]
    for row in range(ROWS):
        for column, k in enumerate([5, 9, 10, 12]):
            want = references.ndcg_one_list(preds[row].tolist(), target[row].tolist(), k, ties=ties)
            assert got[row, column].item() == pytest.approx(want, abs=1e-6)


def masked_data(ties: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    preds, target = data(3)
    gen = torch.Generator().manual_seed(3)
    mask = torch.rand(ROWS, LENGTH, generator=gen) < 0.5
    mask[:, :: LENGTH // 7] = True
    mask[0] = False
    mask[0, :5] = True  # fewer real items than k: padding would be selected
    preds[1, 7] = -torch.inf  # a real -inf
    mask[1, 7] = True
    return preds, target, mask


@pytest.mark.parametrize("ties", ["average", "first"])
def test_masks_match_the_references(ties: str) -> None:
    preds, target, mask = masked_data(ties)
    got = ndcg(preds, target, k=[1, 10, 100], mask=mask, ties=ties)  # type: ignore[arg-type]
    for column, k in enumerate([1, 10, 100]):
        refs = references.ndcg_padded_batch(
            preds.tolist(), target.tolist(), mask.tolist(), k, ties=ties
        )
        torch.testing.assert_close(
            got[:, column].double(), torch.tensor(refs, dtype=torch.float64), atol=1e-6, rtol=0
        )
    # Excluded items are left out of the list: the same as masking them.
    exclude = target.eq(0) & torch.arange(LENGTH).remainder(5).eq(1)
    got = ndcg(preds, target, k=10, exclude=exclude, ties=ties)  # type: ignore[arg-type]
    refs = references.ndcg_padded_batch(
        preds.tolist(), target.tolist(), (~exclude).tolist(), 10, ties=ties
    )
    torch.testing.assert_close(
        got.double(), torch.tensor(refs, dtype=torch.float64), atol=1e-6, rtol=0
    )


@pytest.mark.parametrize("ties", ["average", "first"])
@pytest.mark.budget
def test_masks_and_exclusions_equal_the_general_path(
    monkeypatch: pytest.MonkeyPatch, ties: str
) -> None:
    preds, target, mask = masked_data(ties)
    got = ndcg(preds, target, k=[1, 10, 100], mask=mask, ties=ties)  # type: ignore[arg-type]
    want = general(monkeypatch, ndcg, preds, target, k=[1, 10, 100], mask=mask, ties=ties)
    torch.testing.assert_close(got, want, rtol=0, atol=1e-6)
    exclude = target.eq(0) & torch.arange(LENGTH).remainder(5).eq(1)
    got = ndcg(preds, target, k=10, exclude=exclude, ties=ties)  # type: ignore[arg-type]
    want = general(monkeypatch, ndcg, preds, target, k=10, exclude=exclude, ties=ties)
    torch.testing.assert_close(got, want, rtol=0, atol=1e-6)


@pytest.mark.budget
def test_callable_gain_integer_and_fractional_labels(monkeypatch: pytest.MonkeyPatch) -> None:
    preds, target = data(4)
    for labels, gain in [
        (target.long(), "exponential"),
        (target.bool(), "linear"),
        (target * 0.37, "exponential"),
        (target, lambda y: y.sqrt()),
    ]:
        got = ndcg(preds, labels, k=[3, 10], gain=gain)  # type: ignore[arg-type]
        want = general(monkeypatch, ndcg, preds, labels, k=[3, 10], gain=gain)
        torch.testing.assert_close(got, want, rtol=0, atol=1e-6)


@pytest.mark.parametrize("ties", ["average", "first"])
@pytest.mark.budget
def test_untied_rows_take_no_full_row_keys(monkeypatch: pytest.MonkeyPatch, ties: str) -> None:
    """Tie-free long rows never build integer keys of the whole row (nor a label histogram)."""
    from torch_ndcg import _dcg_paths

    preds, target = data(8)

    def refused(*args: object) -> None:
        raise AssertionError("the general path was taken")

    want = general(monkeypatch, ndcg, preds, target, k=[1, 10], ties=ties)
    monkeypatch.setattr(_dcg_paths, "ranking_keys", refused)
    monkeypatch.setattr(_dcg_paths, "counted_levels", refused)
    got = ndcg(preds, target, k=[1, 10], ties=ties)  # type: ignore[arg-type]
    torch.testing.assert_close(got, want, rtol=0, atol=1e-6)


@pytest.mark.budget
def test_one_read_back_besides_the_checks() -> None:
    preds, target = data(5)
    with count_host_reads() as reads:
        ndcg(preds, target, k=10, validate_args=False)
    assert len(reads) == 1
    with count_host_reads() as reads:
        ndcg(preds, target, k=10)
    assert len(reads) == 2  # the value checks' own, at the edge


def test_value_checks() -> None:
    preds, target = data(5)
    bad = preds.clone()
    bad[1, 123] = math.nan
    with pytest.raises(ValueError, match="NaN"):
        ndcg(bad, target, k=10)
    with pytest.raises(ValueError, match="NaN"):
        ndcg(bad, target, k=10, ties="first")
    bad = target.clone()
    bad[2, 5] = -1.0
    with pytest.raises(ValueError, match="negative"):
        ndcg(preds, bad, k=10)
    bad[2, 5] = math.inf
    with pytest.raises(ValueError, match=r"finite|inf"):
        ndcg(preds, bad, k=10)
    with pytest.raises(ValueError, match="exponential"):
        ndcg(preds, target * 2000.0, k=10)


def test_swapped_arguments_hint_on_long_rows() -> None:
    gen = torch.Generator().manual_seed(6)
    scores = torch.rand(2, LENGTH, generator=gen)
    labels = torch.randint(0, 4, (2, LENGTH), generator=gen).float()
    with pytest.warns(UserWarning, match="were scores and labels swapped"):
        ndcg(labels, scores, k=10)


@pytest.mark.budget
def test_grouped_top_values_equal_topk() -> None:
    from torch_ndcg import _dcg_paths

    gen = torch.Generator().manual_seed(7)
    values = torch.randint(0, 50, (4, 5000 + 13), generator=gen).float()
    values[1, 4999] = math.nan
    for count in [1, 11, 39]:
        got, index = _dcg_paths.grouped_top(values, count)
        want = values.topk(count, dim=-1).values
        torch.testing.assert_close(got, want, equal_nan=True)
        torch.testing.assert_close(values.gather(-1, index), got, equal_nan=True)


@settings(max_examples=40, deadline=None)
@given(
    count=st.integers(1, 12),
    extra=st.integers(0, 700),
    levels=st.integers(1, 1000),
    seed=st.integers(0, 2**31 - 1),
)
@pytest.mark.budget
def test_grouped_top_is_topk_property(count: int, extra: int, levels: int, seed: int) -> None:
    """Any row long enough for the grouped selection, few or many distinct values."""
    from torch_ndcg import _dcg_paths

    length = count * _dcg_paths.GROUP * 4 + extra
    gen = torch.Generator().manual_seed(seed)
    values = torch.randint(0, levels, (3, length), generator=gen).float()
    got, index = _dcg_paths.grouped_top(values, count)
    torch.testing.assert_close(got, values.topk(count, dim=-1).values)
    torch.testing.assert_close(values.gather(-1, index), got)
    assert all(len(set(row)) == count for row in index.tolist())  # distinct items
