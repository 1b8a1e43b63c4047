"""`pad_by_query` and `unpad_by_query`: flat rows with query ids as padded lists, and back.

Compared against `tests.references.rows_by_query` (a dict of row numbers per id, in row order),
and against `retrieval_ndcg`, which groups the same flat rows by itself.
"""

from __future__ import annotations

import math
import runpy
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.host_reads import count_host_reads
from tests.references import rows_by_query
from torch_ndcg import (
    NDCG,
    LambdaRankLoss,
    ListMLELoss,
    SoftmaxLoss,
    ndcg,
    pad_by_query,
    retrieval_ndcg,
    unpad_by_query,
)

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1

# A pool of ids (small, negative, at the int64 limits), then rows drawn from it in any order.
ID_POOLS = st.lists(
    st.one_of(
        st.integers(-3, 3),
        st.integers(INT64_MIN, INT64_MAX),
        st.sampled_from([INT64_MIN, INT64_MIN + 1, INT64_MAX - 1, INT64_MAX]),
    ),
    min_size=1,
    max_size=6,
    unique=True,
)
FLOATS = st.floats(width=32, allow_nan=True, allow_infinity=True)


def bits(tensor: torch.Tensor) -> torch.Tensor:
    """A float32 tensor's bit patterns (NaN payloads and -0.0 included), for exact equality."""
    return tensor.view(torch.int32)


def assert_layout(query_ids: list[int], values: list[torch.Tensor], padding_value: Any) -> None:
    """Every property of `pad_by_query`'s output, checked against the loop reference."""
    ids = torch.tensor(query_ids, dtype=torch.int64)
    padded, mask, out_ids, slots = pad_by_query(ids, *values, padding_value=padding_value)
    expected = rows_by_query(query_ids)
    longest = max((len(rows) for rows in expected.values()), default=1)  # no row: [0, 1]
    assert out_ids.dtype == torch.int64
    assert out_ids.tolist() == list(expected)
    assert mask.dtype == torch.bool
    assert mask.shape == (len(expected), longest)
    assert slots.dtype == torch.int64
    assert slots.shape == (len(query_ids),)
    assert len(padded) == len(values)
    for value, lists in zip(values, padded, strict=True):
        assert lists.shape == (len(expected), longest, *value.shape[1:])
        assert lists.dtype == value.dtype
        compare = bits if value.dtype == torch.float32 else (lambda t: t)
        for q, rows in enumerate(expected.values()):
            assert mask[q].tolist() == [j < len(rows) for j in range(longest)]
            assert torch.equal(compare(lists[q, : len(rows)]), compare(value[rows]))
            padding = lists[q, len(rows) :]
            assert torch.equal(padding, torch.full_like(padding, padding_value))
        # The inverse gives the flat rows back exactly, in their input order.
        assert torch.equal(compare(unpad_by_query(lists, slots)), compare(value))


@settings(max_examples=60, deadline=None)
@given(
    data=st.data(),
    pool=ID_POOLS,
    n_rows=st.integers(0, 30),
    trailing=st.lists(st.integers(1, 3), max_size=2),
    padding_value=st.sampled_from([0, -1, 7]),
)
def test_round_trip_any_flat_rows(
    data: st.DataObject, pool: list[int], n_rows: int, trailing: list[int], padding_value: int
) -> None:
    query_ids = data.draw(st.lists(st.sampled_from(pool), min_size=n_rows, max_size=n_rows))
    floats = data.draw(st.lists(FLOATS, min_size=n_rows, max_size=n_rows))
    generator = torch.Generator().manual_seed(n_rows)
    features = torch.randint(-100, 100, (n_rows, *trailing), generator=generator)
    values = [torch.tensor(floats, dtype=torch.float32), features]
    assert_layout(query_ids, values, padding_value)


@pytest.mark.parametrize(
    "query_ids",
    [
        [INT64_MAX, INT64_MIN, 0, INT64_MAX, INT64_MIN + 1, -1],  # the whole int64 range
        [INT64_MAX - 2, INT64_MAX, INT64_MAX - 2, INT64_MAX - 1],  # near the top, a small range
        [INT64_MIN + 5, INT64_MIN, INT64_MIN + 5],  # near the bottom
        [2**31, -(2**31), 5, 2**31],  # just past int32
        [-3, -7, -3, -3, -7, -1],  # negative, unsorted
        [9, 9, 9],  # one query: no padding
        [4, 2, 0, 3, 1],  # one row per query
        [],  # no rows
    ],
)
def test_ids_huge_negative_unsorted(query_ids: list[int]) -> None:
    values = [torch.arange(len(query_ids), dtype=torch.float32) + 0.5]
    assert_layout(query_ids, values, padding_value=0)


@pytest.mark.parametrize("dtype", [torch.int16, torch.int32, torch.uint8, torch.int64])
def test_any_integer_id_dtype(dtype: torch.dtype) -> None:
    ids = torch.tensor([5, 1, 5, 3, 1, 5], dtype=dtype)
    (lists,), mask, query_ids, _ = pad_by_query(ids, torch.arange(6))
    assert query_ids.dtype == torch.int64
    assert query_ids.tolist() == [1, 3, 5]
    assert lists.tolist() == [[1, 4, -1], [3, -1, -1], [0, 2, 5]]  # int64 values: padded with -1
    assert mask.sum(dim=1).tolist() == [2, 1, 3]


def test_no_values_and_bool_values() -> None:
    ids = torch.tensor([2, 1, 2])
    assert pad_by_query(ids).values == ()
    (flags,), mask, _, _ = pad_by_query(ids, torch.tensor([True, True, False]), padding_value=0)
    assert flags.tolist() == [[True, False], [True, False]]
    assert mask.tolist() == [[True, False], [True, True]]


def test_padded_lists_give_the_numbers_of_retrieval_ndcg(device: torch.device) -> None:
    """`ndcg` of the padded lists = `retrieval_ndcg` of the flat rows, also with ties="first"
    (which follows the order of a query's rows)."""
    generator = torch.Generator().manual_seed(0)
    n_rows = 500
    ids = (torch.randint(0, 40, (n_rows,), generator=generator) - 20) * 2**40
    preds = (torch.rand(n_rows, generator=generator) * 4).round()  # many ties
    target = torch.randint(0, 4, (n_rows,), generator=generator)
    ids, preds, target = ids.to(device), preds.to(device), target.to(device)
    (padded_preds, padded_target), mask, query_ids, slots = pad_by_query(ids, preds, target)
    assert padded_preds.device.type == device.type
    assert slots.device.type == device.type
    for ties in ("average", "first"):
        values, expected_ids = retrieval_ndcg(preds, target, ids, k=[3, 10], ties=ties)
        lists = ndcg(padded_preds, padded_target, k=[3, 10], mask=mask, ties=ties)
        assert torch.equal(query_ids, expected_ids)
        torch.testing.assert_close(lists, values, rtol=0, atol=1e-6)


def test_gradients_flow_both_ways() -> None:
    ids = torch.tensor([3, 1, 3, 3])
    scores = torch.tensor([0.1, 0.2, 0.3, 0.4], requires_grad=True)
    (lists,), mask, _, slots = pad_by_query(ids, scores, padding_value=-5.0)
    weights = torch.arange(1.0, 1.0 + lists.numel()).view(lists.shape)
    (lists * weights).sum().backward()
    assert scores.grad is not None
    # Row i went to slot slots[i]: its gradient is that slot's weight.
    assert scores.grad.tolist() == weights.flatten()[slots].tolist()
    padded = torch.zeros(mask.shape, requires_grad=True)
    unpad_by_query(padded, slots).sum().backward()
    assert padded.grad is not None
    assert torch.equal(padded.grad, mask.float())


def test_unpad_reads_nothing_back() -> None:
    (lists,), _, _, slots = pad_by_query(torch.tensor([4, 2, 4]), torch.tensor([1.0, 2.0, 3.0]))
    with count_host_reads() as reads:
        unpad_by_query(lists, slots)
    assert reads == []


@pytest.mark.parametrize("spacing", [1, 2**50])
def test_pad_reads_back_a_few_values_not_one_per_query(spacing: int) -> None:
    """On the CPU: the id range, (wide ids: their unique values,) the queries and the longest."""
    generator = torch.Generator().manual_seed(1)
    ids = torch.randint(0, 300, (3000,), generator=generator) * spacing
    with count_host_reads() as reads:
        pad_by_query(ids, torch.rand(3000, generator=generator))
    assert len(reads) <= 4, reads


ID2 = torch.tensor([1, 2])


@pytest.mark.parametrize(
    ("args", "error", "match"),
    [
        ((torch.tensor([1.0, 2.0]), torch.zeros(2)), TypeError, r"`query_ids`.*integer"),
        (([1, 2], torch.zeros(2)), TypeError, r"`query_ids`.*torch.Tensor"),
        ((torch.tensor([[1, 2]]), torch.zeros(2)), ValueError, r"`query_ids`.*1-D.*\(1, 2\)"),
        ((torch.tensor(3), torch.zeros(1)), ValueError, r"`query_ids`.*1-D, but got shape \(\)\.$"),
        ((torch.tensor([True, False]),), TypeError, r"`query_ids`.*integer"),
        ((ID2, torch.zeros(2), torch.zeros(3)), ValueError, r"`values\[1\]`.*2 rows.*\(3,\)"),
        ((ID2, torch.tensor(1.0)), ValueError, r"`values\[0\]`.*2 rows.*\(\)"),
        ((ID2, torch.zeros(2, 3).T), ValueError, r"`values\[0\]`.*\(3, 2\)"),
        ((ID2, [0.5, 0.5]), TypeError, r"`values\[0\]`.*torch.Tensor.*list"),
        ((ID2, torch.zeros(2, device="meta")), ValueError, r"`values\[0\]` on the device"),
    ],
)  # fmt: skip
def test_pad_errors_name_the_argument(args: tuple[Any, ...], error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        pad_by_query(*args)


@pytest.mark.parametrize(
    ("padded", "slots", "error", "match"),
    [
        ([[1.0]], torch.tensor([0]), TypeError, r"`padded`.*torch.Tensor"),
        (torch.zeros(3), torch.tensor([0]), ValueError, r"`padded`.*\[Q, L, \.\.\.\].*\(3,\)"),
        (torch.zeros(2, 2), torch.tensor([0.0]), TypeError, r"`slots`.*1-D integer"),
        (torch.zeros(2, 2), torch.tensor([[0]]), TypeError, r"`slots`.*1-D integer.*\(1, 1\)"),
        (torch.zeros(2, 2), [0, 1], TypeError, r"`slots`.*1-D integer.*\[0, 1\]"),
    ],
)
def test_unpad_errors_name_the_argument(padded: Any, slots: Any, error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        unpad_by_query(padded, slots)


def test_benchmark_script_runs(monkeypatch: pytest.MonkeyPatch, capsys: Any) -> None:
    benchmarks = Path(__file__).resolve().parent.parent / "benchmarks"
    monkeypatch.syspath_prepend(str(benchmarks))
    monkeypatch.setattr(sys, "argv", ["bench_grouping.py", "--rows", "2000", "--queries", "20"])
    monkeypatch.setattr(torch, "set_num_threads", lambda threads: None)  # leave the suite's
    runpy.run_path(str(benchmarks / "bench_grouping.py"), run_name="__main__")
    out = capsys.readouterr().out
    assert "2,000 rows of 20 queries" in out
    assert out.count("x (within 4x)") + out.count("x (OVER 4x)") == 2


# --- Review: a padding value the values' dtype cannot hold -------------------------------------


@pytest.mark.parametrize(
    ("value", "padding_value"),
    [
        (torch.tensor([1, 0, 2], dtype=torch.uint8), -1),  # was 255: a relevant label
        (torch.tensor([True, False, True]), -1),  # was True
        (torch.tensor([1, 0, 2]), 0.5),  # was 0
        (torch.tensor([1, 0, 2]), float("nan")),  # was torch's RuntimeError
        (torch.tensor([1.0, 0.0, 2.0], dtype=torch.float16), 1e6),  # was torch's RuntimeError
    ],
)
def test_a_padding_value_the_dtype_cannot_hold_is_named(value: Any, padding_value: Any) -> None:
    qid = torch.tensor([3, 1, 3])
    with pytest.raises(ValueError, match=r"`padding_value` to be a value of .*`values\[1\]`"):
        pad_by_query(qid, torch.zeros(3), value, padding_value=padding_value)


def test_padding_values_the_dtype_holds_and_other_types() -> None:
    qid = torch.tensor([3, 1, 3])
    labels = torch.tensor([1, 0, 2], dtype=torch.int8)
    (padded,), mask, _, _ = pad_by_query(qid, labels, padding_value=-1)
    assert padded.tolist() == [[0, -1], [1, 2]]
    assert not mask[0, 1]
    (scores,), _, _, _ = pad_by_query(qid, torch.ones(3), padding_value=float("-inf"))
    assert scores[0, 1] == -math.inf
    (flags,), _, _, _ = pad_by_query(qid, torch.ones(3, dtype=torch.bool), padding_value=False)
    assert not flags[0, 1]
    (waves,), _, _, _ = pad_by_query(qid, torch.ones(3, dtype=torch.complex64), padding_value=2)
    assert waves[0, 1] == 2
    with pytest.raises(TypeError, match="`padding_value` to be a real number"):
        pad_by_query(qid, torch.ones(3), padding_value="0")  # type: ignore[arg-type]


def test_unpad_by_query_takes_slots_of_any_integer_dtype() -> None:
    # Before: uint8 slots passed the check and met index_select's RuntimeError.
    (lists,), _, _, slots = pad_by_query(torch.tensor([3, 1, 3]), torch.tensor([10, 20, 30]))
    for dtype in (torch.uint8, torch.int16, torch.int32):
        assert unpad_by_query(lists, slots.to(dtype)).tolist() == [10, 20, 30]


def test_no_row_lays_out_a_batch_of_no_list_that_every_entry_point_scores() -> None:
    """An empty shard (a rank of a distributed evaluation) is no error: ``[0, 1]`` lists."""
    empty = torch.zeros(0, dtype=torch.long)
    (preds, target), mask, ids, slots = pad_by_query(empty, empty.float(), empty)
    assert preds.shape == target.shape == mask.shape == (0, 1)
    assert ids.shape == slots.shape == (0,)
    assert unpad_by_query(preds, slots).shape == (0,)
    assert ndcg(preds, target, mask=mask, k=[1, 3]).shape == (0, 2)
    metric = NDCG()
    metric.update(preds, target, mask=mask)
    scores = preds.requires_grad_()
    for loss in (LambdaRankLoss(), SoftmaxLoss(), ListMLELoss()):
        assert loss(scores, target, mask=mask).item() == 0
