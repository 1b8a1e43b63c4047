"""Full-catalog nDCG: `catalog_ndcg`, sparse targets and `exclude`, against the dense `ndcg`.

Every value is compared with `torch_ndcg.ndcg` on the dense ``[B, N]`` scores and target of the
same data (excluded items masked out), and the RecBole convention with a loop written from its
formula. Small catalogs with small blocks exercise what large ones do: many chunks and user
blocks, ties inside and across the top ``k`` (integer embeddings), ``-inf`` scores, catalogs
shorter than ``k``.
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Callable

import pytest
import torch
from torch import Tensor
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from tests.host_reads import count_host_reads
from torch_ndcg import NDCG, catalog_ndcg, dcg, ndcg

SLICE = 2048  # items: tests build catalogs of a few such lengths, with chunks of it

Data = tuple[Tensor, Tensor, Tensor, Tensor, Tensor]


def catalog(
    seed: int, users: int, n_items: int, *, ties: bool, n_relevant: int = 6, n_excluded: int = 9
) -> Data:
    """Embeddings, relevant ids (-1 padding) with grades, and excluded ids, all distinct per user.

    With ``ties`` the embeddings are small integers: many exactly equal scores.
    """
    gen = torch.Generator().manual_seed(seed)
    dim = 4
    if ties:
        queries = torch.randint(-2, 3, (users, dim), generator=gen).double()
        items = torch.randint(-2, 3, (n_items, dim), generator=gen).double()
    else:
        queries = torch.randn(users, dim, generator=gen, dtype=torch.float64)
        items = torch.randn(n_items, dim, generator=gen, dtype=torch.float64)
    picks = torch.stack([torch.randperm(n_items, generator=gen) for _ in range(users)])
    relevant = picks[:, :n_relevant].clone()
    excluded = picks[:, n_relevant : n_relevant + n_excluded].clone()
    relevant[0] = -1  # a user with no relevant item
    relevant[1, 2:] = -1  # padding
    excluded[2, :] = -1  # a user with nothing excluded
    grades = torch.randint(0, 4, relevant.shape, generator=gen).double()
    return queries, items, relevant, grades, excluded


def dense(
    relevant: Tensor, grades: Tensor, excluded: Tensor, n_items: int
) -> tuple[Tensor, Tensor]:
    """The dense ``[B, N]`` target and the mask (False = excluded) of the same data."""
    users = relevant.shape[0]
    target = torch.zeros(users, n_items, dtype=grades.dtype)
    mask = torch.ones(users, n_items, dtype=torch.bool)
    for user in range(users):
        for item, grade in zip(relevant[user].tolist(), grades[user].tolist(), strict=True):
            if item >= 0:
                target[user, item] = grade
        for item in excluded[user].tolist():
            if item >= 0:
                mask[user, item] = False
    return target, mask


def sparse_relevance(relevant: Tensor, grades: Tensor, n_items: int) -> Tensor:
    rows = torch.arange(relevant.shape[0])[:, None].expand_as(relevant)
    kept = relevant >= 0
    indices = torch.stack([rows[kept], relevant[kept]])
    return torch.sparse_coo_tensor(indices, grades[kept], (relevant.shape[0], n_items))


def callable_discount(ranks: Tensor) -> Tensor:
    return 1.0 / ranks


OPTIONS = [
    {"ties": "average"},
    {"ties": "first"},
    {"ties": "average", "gain": "linear", "discount": "jarvelin"},
    {"ties": "first", "discount": callable_discount, "empty_target_action": "pos"},
    {"ties": "average", "gain": torch.sqrt, "empty_target_action": "skip"},
]


@pytest.mark.parametrize("ties_in_scores", [True, False])
@pytest.mark.parametrize("options", OPTIONS)
@pytest.mark.parametrize("k", [1, 3, [1, 5, 20], 1000])
def test_catalog_ndcg_equals_dense_ndcg(
    ties_in_scores: bool, options: dict[str, object], k: int | list[int]
) -> None:
    n_items = 2 * SLICE + 300  # two whole slices and a ragged rest
    queries, items, relevant, grades, excluded = catalog(3, 9, n_items, ties=ties_in_scores)
    target, mask = dense(relevant, grades, excluded, n_items)
    expected = ndcg(queries @ items.T, target, k=k, mask=mask, **options)  # type: ignore[arg-type]
    sparse = sparse_relevance(relevant, grades, n_items)
    for chunk_size, budget in [(None, None), (SLICE, 4 * SLICE * 8), (3 * SLICE, None)]:
        got = catalog_ndcg(
            queries,
            items,
            sparse,
            k=k,
            exclude=excluded,
            chunk_size=chunk_size,
            memory_budget=budget,
            **options,  # type: ignore[arg-type]
        )
        torch.testing.assert_close(got, expected, atol=1e-5, rtol=0, equal_nan=True)


@pytest.mark.parametrize("ties", ["average", "first"])
def test_float32_embeddings_and_a_score_fn(ties: str) -> None:
    n_items = 3 * SLICE
    queries, items, relevant, grades, excluded = catalog(5, 7, n_items, ties=True)
    queries, items = queries.float(), items.float()
    target, mask = dense(relevant, grades, excluded, n_items)

    def negative_distance(q: Tensor, x: Tensor) -> Tensor:
        return -torch.cdist(q, x, compute_mode="donot_use_mm_for_euclid_dist")

    for score_fn, scores in [
        (None, queries @ items.T),
        (negative_distance, negative_distance(queries, items)),
    ]:
        expected = ndcg(scores, target, k=[1, 10], mask=mask, ties=ties)  # type: ignore[arg-type]
        got = catalog_ndcg(
            queries,
            items,
            relevant.masked_fill(grades == 0, -1),
            k=[1, 10],
            exclude=excluded,
            score_fn=score_fn,
            ties=ties,  # type: ignore[arg-type]
        )
        binary = dense(
            relevant.masked_fill(grades == 0, -1), torch.ones_like(grades), excluded, n_items
        )[0]
        expected = ndcg(scores, binary, k=[1, 10], mask=mask, ties=ties)  # type: ignore[arg-type]
        assert got.dtype == torch.float32
        torch.testing.assert_close(got, expected, atol=1e-5, rtol=0)


@pytest.mark.parametrize("ties", ["average", "first"])
def test_minus_infinity_scores_and_a_catalog_shorter_than_k(ties: str) -> None:
    """Excluded items never take a rank, also among genuine ``-inf`` scores."""
    n_items = SLICE + 100
    queries, items, relevant, grades, excluded = catalog(8, 6, n_items, ties=True)

    def clipped(q: Tensor, x: Tensor) -> Tensor:
        scores = q @ x.T
        return scores.masked_fill(scores < 1, float("-inf"))

    scores = clipped(queries, items)
    target, mask = dense(relevant, grades, excluded, n_items)
    for k in [5, [3, 400], n_items + 10]:
        expected = ndcg(scores, target, k=k, mask=mask, ties=ties)  # type: ignore[arg-type]
        got = catalog_ndcg(
            queries,
            items,
            sparse_relevance(relevant, grades, n_items),
            k=k,
            exclude=excluded,
            score_fn=clipped,
            ties=ties,  # type: ignore[arg-type]
        )
        torch.testing.assert_close(got, expected, atol=1e-5, rtol=0)
    # Every item scored -inf: ranks among them follow the tie rule alone.
    flat = lambda q, x: torch.full((q.shape[0], x.shape[0]), float("-inf"), dtype=q.dtype)  # noqa: E731
    expected = ndcg(flat(queries, items), target, k=[1, 50], mask=mask, ties=ties)  # type: ignore[arg-type]
    got = catalog_ndcg(
        queries,
        items,
        sparse_relevance(relevant, grades, n_items),
        k=[1, 50],
        exclude=excluded,
        score_fn=flat,
        ties=ties,  # type: ignore[arg-type]
    )
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=0)


@pytest.mark.parametrize("ties", ["average", "first"])
def test_excluded_items_that_score_best(ties: str) -> None:
    """Seen items are often the best scored: they must not hide the groups that hold the top k."""
    n_items = 4 * SLICE
    queries, items, relevant, grades, _ = catalog(41, 12, n_items, ties=False)
    scores = queries @ items.T
    best = scores.topk(40, dim=1).indices
    excluded = best[:, ::2].clone()  # every other of the 40 best items of each user
    relevant = torch.where(torch.isin(relevant, excluded), -1, relevant)
    relevant[:, -1] = best[:, 1]  # and a relevant item among them
    target, mask = dense(relevant, grades, excluded, n_items)
    sparse = sparse_relevance(relevant, grades, n_items)
    for k in [1, 10, [3, 30]]:
        expected = ndcg(scores, target, k=k, mask=mask, ties=ties)  # type: ignore[arg-type]
        got = catalog_ndcg(queries, items, sparse, k=k, exclude=excluded, ties=ties)  # type: ignore[arg-type]
        torch.testing.assert_close(got, expected, atol=1e-5, rtol=0)
        got = ndcg(scores.float(), sparse, k=k, exclude=excluded, ties=ties)  # type: ignore[arg-type]
        torch.testing.assert_close(got.double(), expected, atol=1e-5, rtol=0)


def _patterns(users: int, n_items: int) -> dict[str, Tensor]:
    """Score tables that stress the pruning: ties at the running k-th best in every block, a
    threshold that every block beats, one that no later block reaches, all items tied."""
    gen = torch.Generator().manual_seed(7)
    index = torch.arange(n_items, dtype=torch.float64).expand(users, n_items)
    return {
        "all tied": torch.zeros(users, n_items, dtype=torch.float64),
        "rising": index + torch.arange(users)[:, None],
        "falling": -index,
        "few levels": torch.randint(0, 4, (users, n_items), generator=gen).double(),
        "periodic": (index % 97).floor() + (index % 3 == 0),
        "random": torch.randn(users, n_items, generator=gen, dtype=torch.float64),
    }


@pytest.mark.parametrize("ties", ["average", "first"])
def test_pruned_selection_on_adversarial_scores(ties: str) -> None:
    """The streamed selection (group maxima against the running k-th best, survivors merged a
    few blocks late) gives the dense values on score tables built to defeat it: ties with the
    threshold in every block, rising and falling scores, every item tied, k above the block
    width, relevant items tied with the boundary, users with nothing relevant; float64 scores
    (two stable sorts) and float32 (integer keys)."""
    users, n_items = 6, 3 * SLICE + 50  # 16 blocks of 384 items and a ragged rest
    _, _, relevant, grades, excluded = catalog(29, users, n_items, ties=False)
    target, mask = dense(relevant, grades, excluded, n_items)
    sparse = sparse_relevance(relevant, grades, n_items)
    for name, table in _patterns(users, n_items).items():
        for dtype, ks in [(torch.float64, [1, [3, 300], 3000]), (torch.float32, [[1, 30]])]:
            scores = table.to(dtype)
            ids = torch.arange(users, dtype=dtype)[:, None]
            items = torch.arange(n_items, dtype=dtype)[:, None]

            def lookup(q: Tensor, x: Tensor, scores: Tensor = scores) -> Tensor:
                return scores[q[:, 0].long()][:, x[:, 0].long()]

            for k in ks:
                expected = ndcg(scores, target, k=k, mask=mask, ties=ties)  # type: ignore[arg-type]
                got = catalog_ndcg(
                    ids,
                    items,
                    sparse,
                    k=k,
                    exclude=excluded,
                    score_fn=lookup,
                    chunk_size=384,
                    memory_budget=3 * 384 * 8,  # three users per block
                    ties=ties,  # type: ignore[arg-type]
                )
                torch.testing.assert_close(got, expected, atol=1e-5, rtol=0, msg=name)
                got = ndcg(scores, sparse, k=k, exclude=excluded, ties=ties)  # type: ignore[arg-type]
                torch.testing.assert_close(got, expected, atol=1e-5, rtol=0, msg=name)


@pytest.mark.parametrize("ties", ["average", "first"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_blocks_where_nothing_passes_then_a_tie_with_the_threshold(
    ties: str, dtype: torch.dtype
) -> None:
    """Blocks whose every score is below the running k-th best add nothing and are skipped; a
    later block with scores equal to that k-th best (a relevant item among them) still counts
    in the boundary's ties and the relevant item's rank."""
    users, width, n_blocks, k = 3, 128, 40, 3
    n_items = width * n_blocks
    gen = torch.Generator().manual_seed(5)
    table = -10.0 - torch.rand(users, n_items, generator=gen, dtype=torch.float64)
    table[:, :k] = torch.tensor([9.0, 8.0, 7.0])  # block 0 sets the threshold 7
    late = n_items - width // 2  # in the last block, after many blocks where nothing passes
    table[:, late : late + 3] = 7.0  # ties with the k-th best, nothing above it
    table[0, late + 7] = 7.0  # excluded: takes no rank
    table = table.to(dtype)
    relevant = torch.tensor([[late + 1, 2], [late + 2, 1], [late, -1]])
    grades = torch.tensor([[2.0, 1.0], [1.0, 3.0], [1.0, 0.0]], dtype=torch.float64)
    excluded = torch.tensor([[late + 7], [-1], [late + 2]])
    target, mask = dense(relevant, grades, excluded, n_items)

    def lookup(q: Tensor, x: Tensor) -> Tensor:
        return table[q[:, 0].long()][:, x[:, 0].long()]

    for kk in [k, [1, k, 5]]:
        expected = ndcg(table, target, k=kk, mask=mask, ties=ties)  # type: ignore[arg-type]
        got = catalog_ndcg(
            torch.arange(users, dtype=dtype)[:, None],
            torch.arange(n_items, dtype=dtype)[:, None],
            sparse_relevance(relevant, grades, n_items),
            k=kk,
            exclude=excluded,
            score_fn=lookup,
            chunk_size=width,
            ties=ties,  # type: ignore[arg-type]
        )
        torch.testing.assert_close(got, expected.to(got.dtype), atol=1e-6, rtol=0)


def test_a_nan_score_after_the_threshold_is_set_is_an_error() -> None:
    """A NaN in a late block, in a group that the threshold would otherwise skip, still raises."""
    users, n_items = 3, 4 * SLICE
    table = -torch.arange(n_items, dtype=torch.float32).expand(users, n_items).clone()
    table[1, -5] = float("nan")
    relevant = torch.tensor([[0], [1], [2]])
    with pytest.raises(ValueError, match="NaN"):
        catalog_ndcg(
            torch.arange(users, dtype=torch.float32)[:, None],
            torch.arange(n_items, dtype=torch.float32)[:, None],
            relevant,
            k=5,
            score_fn=lambda q, x: table[q[:, 0].long()][:, x[:, 0].long()],
            chunk_size=512,
        )
    with pytest.raises(ValueError, match="NaN"):
        ndcg(table, torch.zeros(users, n_items).index_fill(1, torch.tensor([0]), 1.0).to_sparse())


def recbole_ndcg(
    scores: Tensor, relevant: list[set[int]], seen: list[set[int]], k: int
) -> list[float]:
    """RecBole's full-sort NDCG@k, from its formula: binary hits of the top k of the unseen items,
    DCG = sum of 1/log2(rank + 1) over hits, ideal DCG over min(|relevant|, k) hits."""
    out = []
    for user, row in enumerate(scores.tolist()):
        ranked = sorted(
            (item for item in range(len(row)) if item not in seen[user]),
            key=lambda item: (-row[item], item),
        )
        hits = [rank for rank, item in enumerate(ranked[:k], start=1) if item in relevant[user]]
        dcg_value = sum(1.0 / math.log2(rank + 1) for rank in hits)
        ideal = sum(1.0 / math.log2(rank + 1) for rank in range(1, min(len(relevant[user]), k) + 1))
        out.append(dcg_value / ideal if ideal else 0.0)
    return out


@pytest.mark.parametrize("k", [1, 10, 50])
def test_recbole_convention(k: int) -> None:
    n_items = 2 * SLICE
    queries, items, relevant, _, excluded = catalog(11, 8, n_items, ties=False)
    scores = queries @ items.T
    relevant_sets = [{i for i in row if i >= 0} for row in relevant.tolist()]
    seen = [{i for i in row if i >= 0} for row in excluded.tolist()]
    expected = torch.tensor(recbole_ndcg(scores, relevant_sets, seen, k), dtype=torch.float64)
    got = catalog_ndcg(queries, items, relevant, k=k, exclude=excluded, gain="linear")
    torch.testing.assert_close(got, expected, atol=1e-6, rtol=0)
    target, mask = dense(
        relevant, torch.ones_like(relevant, dtype=torch.float64), excluded, n_items
    )
    torch.testing.assert_close(ndcg(scores, target, k=k, mask=mask), expected, atol=1e-6, rtol=0)


def exclusion_forms(excluded: Tensor, n_items: int) -> list[Tensor]:
    mask = dense(
        excluded.clamp(max=-1), torch.zeros(excluded.shape, dtype=torch.float64), excluded, n_items
    )[1]
    return [excluded, ~mask, (~mask).to_sparse(), (~mask).to_sparse_csr()]


@pytest.mark.parametrize("ties", ["average", "first"])
@pytest.mark.parametrize("k", [2, [1, 10, 1500], None])
def test_sparse_target_ndcg_and_dcg_equal_dense(ties: str, k: int | list[int] | None) -> None:
    n_items = 2 * SLICE + 77
    queries, items, relevant, grades, excluded = catalog(13, 10, n_items, ties=True)
    scores = (queries @ items.T).float()
    target, mask = dense(relevant, grades, excluded, n_items)
    for action in ["neg", "pos", "skip"]:
        expected = ndcg(scores, target, k=k, mask=mask, ties=ties, empty_target_action=action)  # type: ignore[arg-type]
        got = ndcg(
            scores, target.to_sparse(), k=k, exclude=excluded, ties=ties, empty_target_action=action
        )  # type: ignore[arg-type]
        torch.testing.assert_close(got, expected, atol=1e-6, rtol=0, equal_nan=True)
    expected = ndcg(scores, target, k=k, mask=mask, ties=ties)  # type: ignore[arg-type]
    forms = zip(
        [target.to_sparse_csr(), sparse_relevance(relevant, grades, n_items), target.to_sparse()],
        exclusion_forms(excluded, n_items)[1:],
        strict=True,
    )
    for sparse, exclude in forms:
        got = ndcg(scores, sparse, k=k, exclude=exclude, ties=ties)  # type: ignore[arg-type]
        torch.testing.assert_close(got, expected, atol=1e-6, rtol=0)
    expected_dcg = dcg(scores, target, k=k, mask=mask, ties=ties)  # type: ignore[arg-type]
    got_dcg = dcg(scores, target.to_sparse(), k=k, exclude=excluded, ties=ties)  # type: ignore[arg-type]
    torch.testing.assert_close(got_dcg, expected_dcg, atol=1e-5, rtol=1e-6)
    # A dense target with `exclude` is the dense target with those items masked.
    masked = ndcg(scores, target, k=k, exclude=excluded, ties=ties)  # type: ignore[arg-type]
    torch.testing.assert_close(masked, expected)


def test_sparse_target_with_a_mask_and_many_users() -> None:
    """``mask`` beside a sparse target excludes too; users come in several blocks."""
    n_items = SLICE + 5
    queries, items, relevant, grades, excluded = catalog(17, 300, n_items, ties=True)
    scores = (queries @ items.T).float()
    target, mask = dense(relevant, grades, excluded, n_items)
    expected = ndcg(scores, target, k=[1, 10], mask=mask)
    got = ndcg(scores, target.to_sparse(), k=[1, 10], mask=mask)
    torch.testing.assert_close(got, expected, atol=1e-6, rtol=0)


def test_metric_update_forms_agree() -> None:
    n_items = SLICE + 64
    queries, items, relevant, grades, excluded = catalog(19, 12, n_items, ties=True)
    scores = queries @ items.T
    target, mask = dense(relevant, grades, excluded, n_items)
    sparse = sparse_relevance(relevant, grades, n_items)
    metrics = [NDCG(k=[1, 5], ties="first") for _ in range(4)]
    metrics[0].update(scores[:5], target[:5], mask[:5])
    metrics[0].update(scores[5:], target[5:], mask[5:])
    metrics[1].update(scores[:5], sparse.index_select(0, torch.arange(5)), exclude=excluded[:5])
    metrics[1].update(scores[5:], sparse.index_select(0, torch.arange(5, 12)), exclude=excluded[5:])
    metrics[2].update(scores, target, exclude=excluded)
    metrics[3].update_catalog(
        queries[:5], items, sparse.index_select(0, torch.arange(5)), exclude=excluded[:5]
    )
    metrics[3].update_catalog(
        queries[5:], items, sparse.index_select(0, torch.arange(5, 12)), exclude=excluded[5:]
    )
    expected = ndcg(scores, target, k=[1, 5], mask=mask, ties="first").mean(0)
    for metric in metrics:
        result = metric.compute()
        torch.testing.assert_close(
            torch.stack([result["ndcg@1"], result["ndcg@5"]]).double(),
            expected.double(),
            atol=1e-6,
            rtol=0,
        )


def uncoalesced_duplicate(n_items: int) -> Tensor:
    indices = torch.tensor([[0, 0, 1], [3, 3, 4]])
    return torch.sparse_coo_tensor(indices, torch.tensor([1.0, 1.0, 2.0]), (2, n_items))


ERRORS: list[tuple[str, Callable[[Tensor, Tensor], dict[str, object]], str]] = [
    (
        "relevant and excluded",
        lambda r, e: {"relevant": r, "exclude": torch.tensor([[5], [-1]])},
        "both relevant and excluded",
    ),
    (
        "duplicate relevant ids",
        lambda r, e: {"relevant": torch.tensor([[1, 1], [2, -1]])},
        "lists an item twice",
    ),
    (
        "duplicate COO entries",
        lambda r, e: {"relevant": uncoalesced_duplicate(40)},
        "lists an item twice",
    ),
    (
        "duplicate excluded ids",
        lambda r, e: {"relevant": r, "exclude": torch.tensor([[7, 7], [-1, -1]])},
        "excluded item once",
    ),
    (
        "relevant id past N",
        lambda r, e: {"relevant": torch.tensor([[40], [1]])},
        r"relevant item ids in \[0, 40\)",
    ),
    (
        "excluded id past N",
        lambda r, e: {"relevant": r, "exclude": torch.tensor([[41], [1]])},
        r"excluded item ids in \[0, 40\)",
    ),
    (
        "negative grade",
        lambda r, e: {
            "relevant": torch.sparse_coo_tensor(
                torch.tensor([[0], [1]]), torch.tensor([-1.0]), (2, 40)
            )
        },
        "non-negative",
    ),
    (
        "NaN grade",
        lambda r, e: {
            "relevant": torch.sparse_coo_tensor(
                torch.tensor([[0], [1]]), torch.tensor([float("nan")]), (2, 40)
            )
        },
        "NaN",
    ),
]


@pytest.mark.parametrize(("name", "arguments", "message"), ERRORS, ids=[e[0] for e in ERRORS])
def test_bad_input_is_an_error(
    name: str, arguments: Callable[[Tensor, Tensor], dict[str, object]], message: str
) -> None:
    gen = torch.Generator().manual_seed(5)
    queries, items = torch.randn(2, 3, generator=gen), torch.randn(40, 3, generator=gen)
    relevant = torch.tensor([[5, 6], [1, -1]])
    kwargs = arguments(relevant, torch.tensor([[0], [0]]))
    with pytest.raises(ValueError, match=message):
        catalog_ndcg(queries, items, k=3, **kwargs)  # type: ignore[arg-type]
    scores = queries @ items.T
    target = kwargs.pop("relevant")
    if isinstance(target, Tensor) and target.layout != torch.strided:
        with pytest.raises(ValueError, match=message):
            ndcg(scores, target, k=3, **kwargs)  # type: ignore[arg-type]


def test_other_errors() -> None:
    gen = torch.Generator().manual_seed(6)
    queries, items = torch.randn(2, 3, generator=gen), torch.randn(40, 3, generator=gen)
    with pytest.raises(TypeError, match="relevant"):
        catalog_ndcg(queries, items, torch.rand(2, 40, generator=gen), k=3)
    with pytest.raises(ValueError, match="NaN"):
        catalog_ndcg(
            queries,
            items.index_fill(0, torch.tensor([3]), float("nan")),
            torch.tensor([[1], [2]]),
            k=3,
        )
    dense_target = torch.zeros(2, 40).index_fill(1, torch.tensor([5]), 1.0)
    with pytest.raises(ValueError, match="both relevant and excluded"):
        ndcg(queries @ items.T, dense_target, exclude=torch.tensor([[5], [-1]]))
    with pytest.raises(ValueError, match=r"excluded item ids in \[0, 40\)"):
        NDCG().update(queries @ items.T, dense_target, exclude=torch.tensor([[50], [-1]]))
    with pytest.raises(ValueError, match="ignore_index"):
        ndcg(queries @ items.T, torch.zeros(2, 40).to_sparse(), ignore_index=-1)
    with pytest.raises(ValueError, match="score_fn"):
        catalog_ndcg(
            queries, items, torch.tensor([[1], [2]]), k=3, score_fn=lambda q, x: (q @ x.T)[:, :-1]
        )
    with pytest.raises(ValueError, match="empty_target_action"):
        catalog_ndcg(queries, items, torch.tensor([[1], [-1]]), k=3, empty_target_action="error")
    with pytest.raises(ValueError, match="`k`"):
        catalog_ndcg(queries, items, torch.tensor([[1], [2]]), k=0)
    with pytest.raises(TypeError, match=r"`queries` and `items` of the same dtype.*float64"):
        catalog_ndcg(queries, items.double(), torch.tensor([[1], [2]]), k=3)
    with pytest.raises(TypeError, match=r"`queries` and `items` of the same dtype.*float64"):
        NDCG(k=3).update_catalog(queries, items.double(), torch.tensor([[1], [2]]))


class LivePeak(TorchDispatchMode):
    """The most bytes of tensor storage made inside it and alive at once.

    Every operation's outputs are seen at the dispatcher (whatever function made them); each
    storage is counted once, views included, and freed when its last tensor goes.
    """

    def __init__(self) -> None:
        super().__init__()
        self.live = self.peak = 0
        self._held: set[int] = set()

    def _freed(self, key: int, size: int) -> None:
        self.live -= size
        self._held.discard(key)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        out = func(*args, **(kwargs or {}))
        for tensor in tree_leaves(out):
            if isinstance(tensor, Tensor) and tensor.layout == torch.strided:
                storage = tensor.untyped_storage()  # one Python object per storage while alive
                if id(storage) not in self._held:
                    self._held.add(id(storage))
                    self.live += storage.nbytes()
                    self.peak = max(self.peak, self.live)
                    weakref.finalize(storage, self._freed, id(storage), storage.nbytes())
        return out


def test_state_is_small() -> None:
    """Only the top k, the relevant scores and one block are held: no [B, N] tensor is made.

    The whole [64, 32,768] float64 score matrix would be 16 MiB; a block is 1 MiB here.
    """
    n_items = 16 * SLICE
    queries, items, relevant, grades, _ = catalog(23, 64, n_items, ties=False)
    budget = 64 * SLICE * 8
    with LivePeak() as memory:
        catalog_ndcg(
            queries,
            items,
            sparse_relevance(relevant, grades, n_items),
            k=10,
            chunk_size=SLICE,
            memory_budget=budget,
        )
    assert memory.peak < 4 * budget
    with LivePeak() as control:
        scores = queries @ items.T
    assert control.peak >= scores.numel() * 8 == 16 * budget  # the probe sees a [B, N] tensor


@pytest.mark.parametrize("ties", ["average", "first"])
@pytest.mark.budget
def test_accelerator_path_reads_nothing_back_and_gives_the_cpu_numbers(
    ties: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Item ids for `relevant` and `exclude`: an `update_catalog` on an accelerator never waits."""
    n_items = 2 * SLICE + 40
    queries, items, relevant, _, excluded = catalog(37, 6, n_items, ties=True)
    expected = catalog_ndcg(queries, items, relevant, k=[1, 10], exclude=excluded, ties=ties)  # type: ignore[arg-type]
    from tests.private_paths import take_accelerator_paths

    take_accelerator_paths(monkeypatch)
    with count_host_reads() as reads:
        got = catalog_ndcg(queries, items, relevant, k=[1, 10], exclude=excluded, ties=ties)  # type: ignore[arg-type]
    assert reads == []
    torch.testing.assert_close(got, expected, atol=1e-12, rtol=0)


@pytest.mark.parametrize("dtype", [torch.float64, torch.bfloat16])
def test_update_catalog_after_to_dtype(dtype: torch.dtype) -> None:
    """A metric moved to another dtype (Lightning's precisions) keeps float64 sums."""
    n_items = SLICE + 10
    queries, items, relevant, _, excluded = catalog(43, 9, n_items, ties=False)
    queries, items = queries.to(dtype), items.to(dtype)
    metric = NDCG(k=5).to(dtype)
    metric.update_catalog(queries, items, relevant, exclude=excluded)
    scores = (queries @ items.T).float()
    target, mask = dense(relevant, torch.ones(relevant.shape), excluded, n_items)
    expected = ndcg(scores, target, k=5, mask=mask).mean()
    assert metric.compute().dtype == metric.result_dtype
    assert metric.compute().item() == pytest.approx(expected.item(), abs=1e-6)


@pytest.mark.parametrize("layout", ["csc", "bsr"])
def test_a_sparse_target_of_another_layout_is_named(layout: str) -> None:
    preds = torch.rand(3, 6)
    target = torch.zeros(3, 6)
    target[0, 2] = 1.0
    sparse = target.to_sparse_csc() if layout == "csc" else target.to_sparse_bsr((1, 1))
    for call in (
        lambda: ndcg(preds, sparse),
        lambda: dcg(preds, sparse),
        lambda: NDCG().update(preds, sparse),
    ):
        with pytest.raises(ValueError, match=r"sparse `target` in the COO or CSR layout"):
            call()


def test_item_kinds_are_checked_before_anything_is_computed() -> None:
    """A bad ``relevant`` or ``exclude`` raises before a score is taken or a stream starts."""
    scored: list[int] = []

    def score_fn(queries: Tensor, chunk: Tensor) -> Tensor:
        scored.append(chunk.shape[0])
        return queries @ chunk.T

    def scored_catalog(relevant: Tensor, **options: object) -> Tensor:
        queries, items = torch.rand(2, 4), torch.rand(8, 4)
        return catalog_ndcg(queries, items, relevant, k=2, score_fn=score_fn, **options)

    with pytest.raises(TypeError, match="`relevant`"):
        scored_catalog(torch.rand(2, 3))
    ids = torch.tensor([[1], [2]])
    with pytest.raises(TypeError, match="`exclude`"):
        scored_catalog(ids, exclude=torch.rand(2, 1))
    with pytest.raises(ValueError, match="`exclude` with 2 rows"):
        # A bad tensor is named before a bad size.
        scored_catalog(ids, exclude=torch.tensor([[0]]), chunk_size=0)
    assert scored == []
    sparse = torch.zeros(2, 8).index_put_((torch.tensor([0]), torch.tensor([1])), torch.tensor(1.0))
    with pytest.raises(TypeError, match="`exclude`"):
        ndcg(torch.rand(2, 8), sparse.to_sparse(), exclude=torch.rand(2, 1))
    with pytest.raises(TypeError, match="`exclude`"):
        ndcg(torch.rand(2, 8), sparse, exclude=torch.rand(2, 1))
