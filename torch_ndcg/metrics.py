"""torchmetrics metrics over the functional core: ``NDCG`` and ``RetrievalNDCG``, and their typing.

Both classes store their checked options and states, and take their numbers from the functional
core (`torch_ndcg.ndcg`'s dispatch, `torch_ndcg.functional.retrieval_ndcg`'s kernel, the catalog
stream); the torchmetrics machinery they share is `torch_ndcg._metric_base`'s, the DDP protocols
`torch_ndcg._metric_sync`'s.
"""

from collections.abc import Sequence
from typing import Any, Generic, Literal, cast, overload

import torch
from torch import Tensor
from torchmetrics.utilities.prints import rank_zero_warn
from typing_extensions import TypeVar, Unpack

from torch_ndcg import _host, _validation
from torch_ndcg._metric_base import MetricKeywords, NDCGMetricBase
from torch_ndcg._metric_sync import PartitionedRows, SummedStates
from torch_ndcg._options import (
    Aggregated,
    Aggregation,
    Discount,
    EmptyTargetAction,
    Gain,
    ScoreFn,
    Ties,
    compute_dtype,
)
from torch_ndcg.functional import _catalog, _ndcg
from torch_ndcg.functional._significance import REDUCE_LAST_DIM, bootstrap_interval

__all__ = ["NDCG", "RetrievalNDCG"]

#: What ``compute()`` returns, fixed by the constructor's arguments (see the overloads); a bare
#: ``NDCG`` annotation leaves it open (``Any``).
ResultT = TypeVar("ResultT", covariant=True, default=Any)


class _ListKeywords(MetricKeywords, total=False):
    """The keywords that do not change the result's type, as the overloads take them."""

    gain: Gain
    discount: Discount
    ties: Ties
    empty_target_action: EmptyTargetAction
    ignore_index: int | None
    validate_args: bool


class _RetrievalKeywords(_ListKeywords, total=False):
    """`RetrievalNDCG`'s keywords that do not change the result's type."""

    bootstrap_resamples: int
    bootstrap_seed: int


class NDCG(NDCGMetricBase, SummedStates, Generic[ResultT]):
    r"""Mean nDCG over lists, one list per row, at one or many cut-offs.

    $$
    \mathrm{nDCG@}k = \frac{1}{|Q|} \sum_{q \in Q}
        \frac{\mathrm{DCG@}k(q)}{\mathrm{IDCG@}k(q)},
    \qquad
    \mathrm{DCG@}k = \sum_{r=1}^{\min(k, L)} \mathrm{gain}(y_{\pi(r)}) \, \mathrm{discount}(r)
    $$

    Each ``update`` scores its lists with `torch_ndcg.ndcg` and adds them to a float64
    running sum per cut-off and a list count: the state has a constant size, and under DDP it is
    synchronised by one sum all-reduce of one float64 buffer (counts exact up to 2**53 lists),
    exact whatever the split of batches across ranks (also for ranks with fewer updates or
    none). The buffer also carries a digest of the named options: ranks built with other
    options raise ``ValueError`` together (on an accelerator a device-side assertion; nothing is
    read back). Every rank must build the metric with the same ``k`` and ``confidence``. A
    custom ``dist_sync_fn`` gets torchmetrics' gather of each state instead, unchecked.

    Lists with no relevant item count as 0 (``"neg"``), 1 (``"pos"``), are left out of the
    mean (``"skip"``) or raise (``"error"``); lists made only of padding (``mask`` /
    ``ignore_index``) are not counted at all.

    The options read back as attributes (``metric.k``, ``metric.gain``, ...), as given. They
    are fixed when the metric is made, as its states are: setting one raises
    ``AttributeError`` (make a new metric).

    Note:
        The default gain is exponential, $2^y - 1$, as `torch_ndcg.ndcg`'s (see its note):
        pass ``gain="linear"`` to get the numbers of torchmetrics' ``RetrievalNormalizedDCG``.

    Args:
        k: an int, a sequence of ints, or ``None`` (whole list).
        confidence: coverage of the normal-approximation interval of the mean (e.g. 0.95):
            one more constant-size state (the sum of squares, in the same all-reduce under
            DDP), and the
            result becomes a dict with ``"ndcg@k"``, ``"ndcg@k_low"`` and ``"ndcg@k_high"``
            per cut-off; NaN bounds below two lists. ``None``: no interval.
        **kwargs: the keyword arguments of `torchmetrics.Metric` (``sync_on_compute``, ...),
            passed on to it.

    Keyword Args:
        gain: ``"exponential"`` ($2^y - 1$, the default), ``"linear"``, an element-wise
            callable, or a sequence of per-label gains (LightGBM's ``label_gain``; as `ndcg`).
        discount: ``"log2"`` (the default), ``"jarvelin"`` or a callable of the 1-based ranks
            (as `torch_ndcg.ndcg`'s).
        ties: ``"average"`` (McSherry–Najork, the default) or ``"first"`` (order of appearance
            in the row).
        empty_target_action: ``"neg"`` (the default), ``"pos"``, ``"skip"`` or ``"error"``.
        ignore_index: label value that marks padded items; default ``None``.
        validate_args: check every batch (the default ``True``): one read-back per ``update``
            on the CPU (besides the kernel's own, for its fast-path flags), device-side
            assertions (``RuntimeError``, no read-back) on an accelerator.

    Result:
        From ``compute()`` and ``forward``: a scalar tensor for an int ``k`` or ``None``; for a
        sequence ``k`` a dict ``{"ndcg@1": ..., "ndcg@5": ...}``. float32. 0 before any update.

    Raises:
        ValueError: bad ``k`` or option; in ``update`` as `torch_ndcg.ndcg`.
        TypeError: non-int ``ignore_index``, non-bool ``validate_args``.

    Example:
        Two lists; the first is ranked ideally (nDCG 1), the second puts its only relevant item
        second: $1/\log_2 3 = 0.6309$. The mean is 0.8155.

        >>> import torch
        >>> from torch_ndcg import NDCG
        >>> metric = NDCG(k=[1, 3])
        >>> metric.update(torch.tensor([[3.0, 2.0, 1.0]]), torch.tensor([[2, 1, 0]]))
        >>> metric.update(torch.tensor([[3.0, 2.0, 1.0]]), torch.tensor([[0, 1, 0]]))
        >>> metric.compute()
        {'ndcg@1': tensor(0.5000), 'ndcg@3': tensor(0.8155)}
        >>> NDCG(k=3)(torch.tensor([[3.0, 2.0, 1.0]]), torch.tensor([[0, 1, 0]]))
        tensor(0.6309)
    """

    # The states: a float64 running sum per cut-off, an int64 list count per cut-off and, with
    # ``confidence``, the float64 sum of squares; under DDP summed by one all-reduce (see
    # `torch_ndcg._metric_sync.SummedStates`).
    sum_ndcg: Tensor
    count: Tensor
    sum_sq_ndcg: Tensor

    # The overloads type `compute()` by ``k`` and ``confidence``: a tensor for an int ``k`` or
    # ``None`` without an interval, else a dict (a union where the arguments' types are).
    @overload
    def __init__(
        self: "NDCG[Tensor]",
        k: int | None = None,
        *,
        confidence: None = None,
        **kwargs: Unpack[_ListKeywords],
    ) -> None: ...

    @overload
    def __init__(
        self: "NDCG[dict[str, Tensor]]",
        k: int | Sequence[int] | None = None,
        *,
        confidence: float | None = None,
        **kwargs: Unpack[_ListKeywords],
    ) -> None: ...

    def __init__(
        self,
        k: int | Sequence[int] | None = None,
        *,
        confidence: float | None = None,
        gain: Gain = "exponential",
        discount: Discount = "log2",
        ties: Ties = "average",
        empty_target_action: EmptyTargetAction = "neg",
        ignore_index: int | None = None,
        validate_args: bool = True,
        **kwargs: Unpack[MetricKeywords],
    ) -> None:
        options = _validation.check_list_options(
            k=k, gain=gain, discount=discount, ties=ties, empty_target_action=empty_target_action,
            ignore_index=ignore_index, validate_args=validate_args
        )
        super().__init__(k, options, confidence, dict(kwargs))
        # The states summed over the ranks, in the order of the sync's buffer.
        self._summed = ("sum_ndcg", "count", "sum_sq_ndcg")[: 2 if confidence is None else 3]
        for name in self._summed:
            dtype = torch.int64 if name == "count" else torch.float64
            zeros = torch.zeros(self.options.cutoffs.count, dtype=dtype)
            self.add_state(name, zeros, dist_reduce_fx="sum")

    def update(
        self,
        preds: Tensor,
        target: Tensor,
        mask: Tensor | None = None,
        exclude: Tensor | None = None,
        retrieved: Tensor | None = None,
    ) -> None:
        """Add the nDCG of every list of the batch.

        Args:
            preds: ``[..., L]`` floating scores, one list per row (a 1-D tensor is one list).
            target: ``[..., L]`` non-negative labels; for ``[B, N]`` scores also a sparse COO
                or CSR ``[B, N]`` tensor of grades (see `torch_ndcg.ndcg`).
            mask: ``[..., L]`` bool, ``True`` for real items, or ``None``.
            exclude: items that take no rank, for ``[B, N]`` scores (see `torch_ndcg.dcg`).
            retrieved: ``[..., L]`` bool, ``False`` for items judged but not retrieved: in the
                ideal DCG only (see `torch_ndcg.ndcg`), or ``None`` (all retrieved).
        """
        # Nothing here is differentiated: inference mode spares every op its autograd
        # bookkeeping (about a tenth of an update of [256, 100]).
        with torch.inference_mode():
            marks = (mask, exclude, retrieved)
            values, listed = _ndcg.list_values(preds, target, marks, self.options)
            _validation.check_device(preds, self.sum_ndcg.device)
            self._add_values(values, listed)  # a row of padding only is no list

    @_validation.names_ported_keywords({})
    def update_catalog(
        self,
        queries: Tensor,
        items: Tensor,
        relevant: Tensor,
        *,
        exclude: Tensor | None = None,
        score_fn: ScoreFn | None = None,
        chunk_size: int | None = None,
        memory_budget: int | None = None,
        item_offset: int = 0,
        process_group: Any | None = None,
    ) -> None:
        """Add the nDCG of every user against the whole catalog, from embeddings.

        The values of `torch_ndcg.functional.catalog_ndcg` with this metric's options: the
        arguments and the keyword arguments (``exclude``, ``score_fn``, ``chunk_size``,
        ``memory_budget``, ``item_offset``, ``process_group``) are those of
        `torch_ndcg.functional.catalog_ndcg`, with its defaults; the ``[B, N]`` scores are
        never held. Under DDP with the users split across ranks (each rank its own
        ``queries``, every rank the whole ``items``) the state is synchronised as for
        `update`. With item shards
        (``process_group`` given, every rank the same users), every rank computes every
        user's value and adds those of its share of users (user ``u`` on rank
        ``u mod world``), so that the synchronised mean counts each user once.

        Example:
            >>> import torch
            >>> from torch_ndcg import NDCG
            >>> metric = NDCG(k=2)
            >>> queries = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
            >>> items = torch.tensor([[0.1, 0.9], [0.5, 0.5], [0.9, 0.8], [0.0, 0.0]])
            >>> metric.update_catalog(queries, items, torch.tensor([[2], [0]]))
            >>> metric.compute()
            tensor(1.)
        """
        # What torchmetrics' wrapper does around `update`: this is an update too.
        self._computed = None
        self._update_count += 1
        blocks = _catalog.Blocks(score_fn, chunk_size, memory_budget, item_offset, process_group)
        with torch.inference_mode():
            _validation.check_device(queries, self.sum_ndcg.device, "queries")
            values = _catalog.catalog_ndcg_values(
                queries, items, relevant, exclude, self.options, blocks
            )
            share = _catalog.user_share(values.shape[0], process_group, values.device)
            self._add_values(values, share)

    def compute(self) -> ResultT:
        """Mean nDCG of the lists seen so far (0 if none was counted), with its interval.

        With ``confidence``, also the bounds of the normal-approximation interval of the mean
        (`torch_ndcg.functional._significance.normal_interval`; NaN with fewer than two
        lists).

        Warns when the metric was updated but counted no list (every list it saw was empty,
        all padding, or skipped by ``empty_target_action="skip"``): the 0 it returns then is
        no measurement. Under DDP the count is the synchronised one. The check reads the count
        back on the CPU only (one read-back); on an accelerator nothing is read and nothing
        is warned.
        """
        if (
            self._update_count > 0
            and _host.may_read_back(self.count.device)
            and not bool((self.count > 0).any())
        ):
            rank_zero_warn(
                f"{type(self).__name__} was updated but counted no list (every list was"
                " empty, all padding or skipped); returning 0."
            )
        return cast(ResultT, self._mean(*(getattr(self, name) for name in self._summed)))

    def _add_values(self, values: Tensor, real: Tensor | None) -> None:
        """Add ``[N, len(k)]`` values to the state; ``real`` marks lists that count.

        Called in the caller's inference mode (in-place additions to the states are allowed
        there). Values not counted (NaN: ``"skip"``; lists not ``real``) add nothing. The values
        are summed in their own dtype (float64 where the device has it), and the sums added to
        the states in theirs.
        """
        count: Tensor | int = values.shape[0]
        if real is not None or self.options.empty_target_action == "skip":
            counted = ~values.isnan()
            if real is not None:  # a list of padding only is no list
                # Per list (or per user of a catalog): the width from the count, also with none.
                rows = values.shape[0]
                width = real.numel() // max(rows, 1)
                counted &= real.reshape(rows, width).any(-1, keepdim=True)
            values, count = torch.where(counted, values, 0), counted.sum(0)
        # In place by method: `+=` would go through torchmetrics' slow attribute setter.
        self.sum_ndcg.add_(values.sum(0))
        self.count.add_(count)
        if self._confidence is not None:
            self.sum_sq_ndcg.add_((values * values).sum(0))

    def _state_options(self) -> tuple[Any, ...]:
        opt = self.options
        options = (opt.cutoffs.ks, opt.gain, opt.discount, opt.ties, opt.empty_target_action)
        # The interval's state enters the key only when kept: earlier keys stay valid.
        interval = ("sum_sq_ndcg",) if self._confidence is not None else ()
        return (*options, opt.ignore_index, *interval)


class RetrievalNDCG(NDCGMetricBase, PartitionedRows, Generic[ResultT]):
    r"""nDCG over queries given as flat rows ``(preds, target, indexes)``, at one or many cut-offs.

    $$
    \mathrm{nDCG@}k = \frac{1}{|Q|} \sum_{q \in Q}
        \frac{\mathrm{DCG@}k(q)}{\mathrm{IDCG@}k(q)}
    $$

    where query $q$ is the set of rows whose ``indexes`` equal $q$. Query ids may be
    any int64 values (sparse, huge, negative), in any order, and a query may span batches and
    DDP ranks. ``compute`` is `torch_ndcg.functional.retrieval_ndcg` on the stored rows:
    one stable sort of the query ids, the queries laid out as padded lists in buckets of
    similar size, each bucket scored by the kernel of `torch_ndcg.ndcg`; no loop over
    queries. Rows whose label equals ``ignore_index`` are dropped.

    Under DDP, ``compute`` does not gather every row to every rank: the rows are exchanged so
    that query ``q`` lands on rank ``q mod world`` (three ``all_to_all_single``: the row
    counts, the score and label pairs, the ids), each rank scores its own queries, one
    all-reduce of an error flag lets an error raise on every rank together, and one sum
    all-reduce (``"mean"``) or a gather of the per-query values (the other aggregations and
    ``"none"``, so every rank still gets every query's value) finishes: per-rank memory and
    work fall as ``1 / world``. The row counts travel beside a digest of the options that
    change the value (``k``, gain, discount, ``ties``, ``empty_target_action``,
    ``ignore_index``, ``aggregation``, ``confidence`` and the bootstrap's, the rows' dtype;
    callables are not compared): ranks built with other options raise ``ValueError`` together,
    before any row moves. A custom ``dist_sync_fn`` gets
    torchmetrics' gather of the rows instead, unchecked; ``sync_on_compute=False`` gives each
    rank the value of its own rows. An error (``"error"``, an overflowing query) is raised on
    every rank together.

    Scores and labels are stored in the metric's float dtype (float32; ``set_dtype`` changes
    it). With ``ties="first"``, equal scores of a query keep their order of appearance in the
    concatenated rows: update order within a process, and under DDP the rows of rank 0, then
    rank 1, and so on, so it depends on how rows were split across ranks; the default
    ``ties="average"`` does not depend on any order.

    The default gain is exponential, as `NDCG`'s (see its note: ``gain="linear"`` gives
    torchmetrics' ``RetrievalNormalizedDCG`` numbers).

    Args:
        k: an int, a sequence of ints, or ``None`` (each whole query).
        aggregation: over the queries (``"skip"``-ped ones left out): ``"mean"``,
            ``"median"`` (the lower one, as ``torch.median``), ``"min"``, ``"max"``, a callable
            of the ``[Q]`` values (as torchmetrics' retrieval metrics), or ``"none"`` for
            per-query values.
        confidence: coverage of an interval of the aggregate (e.g. 0.95), reported beside it
            as ``"ndcg@k_low"`` and ``"ndcg@k_high"``. ``"mean"``: the normal-approximation
            interval from the sum, count and sum of squares (the all-reduce of the sums
            under DDP).
            ``"median"``, ``"min"``, ``"max"`` or a callable: a percentile bootstrap over the
            queries (`bootstrap_resamples` resamples of the per-query values, drawn by a
            generator seeded with ``bootstrap_seed``, vectorised on the values' device; the
            cost is resamples × queries gathered values and one reduction over them per
            cut-off; a callable is called once per resample). Not with ``"none"``.
        **kwargs: the keyword arguments of `torchmetrics.Metric`, as `NDCG`.

    Keyword Args:
        gain, discount, ties, ignore_index, validate_args: as `NDCG` (``ignore_index``: the
            label value of rows to drop).
        empty_target_action: value of queries with no relevant item: ``"neg"`` (the default)
            0, ``"pos"`` 1, ``"skip"`` left out of the mean (NaN per query), ``"error"`` raises
            in ``compute``.
        bootstrap_resamples: number of bootstrap resamples (with ``confidence`` and an
            aggregation other than ``"mean"``); default 1000.
        bootstrap_seed: seed of the bootstrap resampling: the same rows give the same bounds,
            on every rank; default 0.

    Result:
        Aggregated: a scalar tensor (int ``k`` or ``None``) or a dict ``{"ndcg@k": ...}``
        (sequence ``k``); 0 with a warning when there is no row. With
        ``"none"``: a tuple ``(values, ids)`` where ``ids`` are the sorted unique query ids
        ``[Q]`` and ``values`` is ``[Q]`` (or a dict of ``[Q]`` tensors), aligned with ``ids``;
        NaN for queries skipped by ``"skip"``. (torchmetrics squeezes one-element results, so a
        single query gives 0-d tensors.)

    Raises:
        ValueError: bad ``k``, option or ``aggregation``; ``indexes`` of another shape.
        TypeError: non-integer ``indexes``.

    Example:
        Query 7 is ranked ideally; query -2 puts its only relevant row second (1/log2(3)).

        >>> import torch
        >>> from torch_ndcg import RetrievalNDCG
        >>> preds = torch.tensor([0.9, 0.2, 0.8, 0.1, 0.7])
        >>> target = torch.tensor([1, 0, 0, 0, 1])
        >>> indexes = torch.tensor([7, 7, -2, -2, -2])
        >>> metric = RetrievalNDCG(k=2)
        >>> metric.update(preds, target, indexes)
        >>> metric.compute()
        tensor(0.8155)
        >>> RetrievalNDCG(k=[1, 2], aggregation="none")(preds, target, indexes)
        ({'ndcg@1': tensor([0., 1.]), 'ndcg@2': tensor([0.6309, 1.0000])}, tensor([-2,  7]))
    """

    # The states `preds`, `target`, `indexes`: lists of batches (one tensor after torchmetrics'
    # sync), declared by `torch_ndcg._metric_sync.PartitionedRows`, which exchanges
    # them under DDP; the rows are stored checked, in the metric's float dtype (ids as int64).

    # The overloads type `compute()` by ``k``, ``aggregation`` and ``confidence``, as `NDCG`'s.
    @overload
    def __init__(
        self: "RetrievalNDCG[Tensor]",
        k: int | None = None,
        *,
        aggregation: Aggregated = ...,
        confidence: None = None,
        **kwargs: Unpack[_RetrievalKeywords],
    ) -> None: ...

    @overload
    def __init__(
        self: "RetrievalNDCG[tuple[Tensor, Tensor]]",
        k: int | None = None,
        *,
        aggregation: Literal["none"],
        confidence: None = None,
        **kwargs: Unpack[_RetrievalKeywords],
    ) -> None: ...

    @overload
    def __init__(
        self: "RetrievalNDCG[tuple[dict[str, Tensor], Tensor]]",
        k: Sequence[int],
        *,
        aggregation: Literal["none"],
        confidence: None = None,
        **kwargs: Unpack[_RetrievalKeywords],
    ) -> None: ...

    @overload
    def __init__(
        self: "RetrievalNDCG[dict[str, Tensor]]",
        k: int | Sequence[int] | None = None,
        *,
        aggregation: Aggregated = ...,
        confidence: float | None = None,
        **kwargs: Unpack[_RetrievalKeywords],
    ) -> None: ...

    def __init__(
        self,
        k: int | Sequence[int] | None = None,
        *,
        aggregation: Aggregation = "mean",
        confidence: float | None = None,
        gain: Gain = "exponential",
        discount: Discount = "log2",
        ties: Ties = "average",
        empty_target_action: EmptyTargetAction = "neg",
        ignore_index: int | None = None,
        validate_args: bool = True,
        bootstrap_resamples: int = 1000,
        bootstrap_seed: int = 0,
        **kwargs: Unpack[MetricKeywords],
    ) -> None:
        options = _validation.check_list_options(
            k=k, gain=gain, discount=discount, ties=ties, empty_target_action=empty_target_action,
            ignore_index=ignore_index, validate_args=validate_args
        )
        super().__init__(k, options, confidence, dict(kwargs))
        for name in ("preds", "target", "indexes"):
            self.add_state(name, [], dist_reduce_fx="cat")
        self._partitioned = False  # see PartitionedRows (set here: torch.jit.script sees it)
        self._partition_group: Any = None
        _validation.check_aggregation(aggregation, confidence, bootstrap_resamples, bootstrap_seed)
        self.aggregation, self.bootstrap_seed = aggregation, bootstrap_seed
        self.bootstrap_resamples = bootstrap_resamples

    def update(
        self, preds: Tensor, target: Tensor, indexes: Tensor, retrieved: Tensor | None = None
    ) -> None:
        """Store a batch of rows.

        A batch of no row (``preds`` of shape ``[0]``) is checked and stores nothing.

        Args:
            preds: floating scores, any shape (flattened).
            target: non-negative labels, the shape of ``preds``.
            indexes: integer query ids, the shape of ``preds``.
            retrieved: bool, the shape of ``preds``: ``False`` for rows judged but not
                retrieved, which count in their query's ideal DCG only (stored with a NaN
                score: no extra state); ``None``: all retrieved. See
                `torch_ndcg.functional.retrieval_ndcg`.
        """
        # Rows whose label is `ignore_index` are stored with a NaN label, which `compute` drops
        # (compared in the labels' own dtype, exactly: a stored float label could round onto
        # `ignore_index` or off it).
        stored = compute_dtype(self.dtype), self.options_key.device
        preds, target, indexes, _ = _ndcg.checked_rows(
            preds, target, indexes, self.options, retrieved, stored
        )
        if not preds.numel():  # no row: nothing to store (checked all the same)
            return
        self.preds.append(preds)
        self.target.append(target)
        self.indexes.append(indexes)

    def _state_options(self) -> tuple[Any, ...]:
        # The rows depend on `ignore_index` (its rows get a NaN label) and on their dtype only:
        # metrics with other `k`, gains, ... may share them in a MetricCollection.
        return (self.options.ignore_index, compute_dtype(self.dtype))

    def _rank_key(self) -> Tensor:
        # Every option that changes the result, and the rows' dtype: equal on every rank.
        opt, confidence = self.options, self._confidence
        options = (opt.cutoffs.ks, opt.gain, opt.discount, opt.ties, opt.empty_target_action)
        drawn = confidence is not None and self.aggregation != "mean"  # a bootstrap
        bootstrap = (self.bootstrap_resamples, self.bootstrap_seed) if drawn else ()
        chosen = (opt.ignore_index, self.aggregation, confidence, *bootstrap, self.result_dtype)
        return self._digest((*options, *chosen))[:4]

    def compute(self) -> ResultT:
        """Return the nDCG of the queries seen so far: aggregated, or per query with their ids.

        After a DDP sync this rank holds the rows of its own queries only (see
        `torch_ndcg._metric_sync.PartitionedRows`): it scores them, one all-reduce of an
        error flag raises an error on every rank together, and one all-reduce of the sums
        (``"mean"``) or a gather of the per-query values (the other aggregations, ``"none"``)
        gives every rank the value of all the queries.

        Warns when the metric was updated but has no row, or skipped every query
        (``"skip"``): the 0 it returns then is no measurement. Under DDP from every rank's
        counts (the same verdict on every rank); read back on the CPU only, as `NDCG`'s.
        """
        opt = self.options

        def score() -> tuple[Tensor, Tensor]:  # the queries' values and ids (ignored rows out)
            preds, target, indexes = self.stored_rows()
            kept = None if opt.ignore_index is None else ~target.isnan()
            return _ndcg._retrieval_values(preds, target, indexes, kept, opt)

        values, ids = self.score_on_every_rank(score, gather=self.aggregation != "mean")
        counted = ~values.isnan()
        if self.aggregation == "mean":  # from the sums over the counted queries of all ranks
            kept = torch.where(counted, values, 0)
            terms = [kept.sum(0), counted.sum(0)]
            if self._confidence is not None:
                terms.append((kept * kept).sum(0))
            if self.partitioned:  # this rank's number of queries, summed with the rest
                terms.append(torch.full_like(terms[1], ids.numel()))
            totals = list(self.sum_over_ranks(torch.stack(terms).to(torch.float64)))
            self._warn_if_nothing_counted(
                totals.pop()[0] if self.partitioned else ids.numel(), totals[1]
            )
            return cast(ResultT, self._mean(*totals))
        # Every rank has every query's value here (gathered where partitioned).
        self._warn_if_nothing_counted(ids.numel(), counted.sum(0))
        if self.aggregation == "none":
            return cast(ResultT, (self._shape(values), ids))
        # The same aggregate on every rank, and the same bootstrap draws.
        aggregation = self.aggregation
        reduce = REDUCE_LAST_DIM[aggregation] if isinstance(aggregation, str) else aggregation

        def aggregate(column: Tensor) -> Tensor:  # over the counted queries; 0 if none
            counted = column[~column.isnan()]
            value = reduce(counted) if counted.numel() else column.new_zeros(())
            return torch.as_tensor(value, dtype=values.dtype)

        result = torch.stack([aggregate(column) for column in values.unbind(-1)])
        bounds = None
        if self._confidence is not None:
            resamples, seed = self.bootstrap_resamples, self.bootstrap_seed
            bounds = bootstrap_interval(
                values, aggregation, self._confidence, n_resamples=resamples, seed=seed
            )
        return cast(ResultT, self._shape(result, bounds))

    def _warn_if_nothing_counted(self, queries: Tensor | int, counted: Tensor) -> None:
        """Warn where the metric was updated but counted no query: no row, or every one skipped.

        ``queries``: the number of queries (a tensor where summed over the ranks), ``counted``:
        how many of them count, per cut-off (of every rank under DDP: the same verdict on
        every rank). Read back once on the CPU, only where metadata cannot tell (a tensor
        ``queries``, or ``"skip"``); on an accelerator nothing is read, and only what metadata
        tells (no row, in one process) is warned.
        """
        if self._update_count == 0:
            return
        kept: Any = queries  # every query counts, unless skipped
        if isinstance(queries, Tensor) or (queries and self.options.empty_target_action == "skip"):
            if not _host.may_read_back(counted.device):
                return
            found = torch.as_tensor(queries).to(counted)
            queries, kept = torch.stack([found, counted.max()]).tolist()
        if queries == 0:
            rank_zero_warn(f"{type(self).__name__} has no row to compute on; returning 0.")
        elif kept == 0:
            rank_zero_warn(
                f"{type(self).__name__} was updated but counted no query (every query was"
                " skipped: no relevant row); returning 0."
            )
