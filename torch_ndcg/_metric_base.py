"""The torchmetrics machinery both metrics share: options, state dtypes, compute groups.

`NDCGMetricBase` holds what `torch_ndcg.NDCG` and `torch_ndcg.RetrievalNDCG` have in common
on top of `torchmetrics.Metric`: their checked options (`MetricOptions`) and the shaping of
results by cut-off, the dtype each state keeps through ``.to(dtype)`` casts, the compute-group
key (``options_key``) and ``merge_state``, and ``per_cutoff``. The overrides of torchmetrics
internals (``_apply``, ``_computed``, ``_forward_cache``) all live here. On top of it, the two
kinds of state: `CountedMean` (constant-size sums, `torch_ndcg.NDCG`) and `QueryRows` (stored
rows scored per query, `torch_ndcg.RetrievalNDCG`).
"""

import zlib
from collections.abc import Callable, Sequence
from typing import Any, TypeAlias, TypedDict

import torch
from torch import Tensor
from torchmetrics import Metric, MetricCollection
from torchmetrics.utilities.distributed import gather_all_tensors
from torchmetrics.utilities.prints import rank_zero_warn

from torch_ndcg import _host, _validation
from torch_ndcg._options import (
    Discount,
    EmptyTargetAction,
    Gain,
    Ties,
    accumulate_dtype,
    as_dtype,
    compute_dtype,
)
from torch_ndcg.functional._distributed import PartitionedRows, sum_states_over_ranks
from torch_ndcg.functional._ndcg import _retrieval_values, _rows_to_store
from torch_ndcg.functional._significance import (
    REDUCE_LAST_DIM,
    bootstrap_interval,
    normal_interval,
)

MetricValue: TypeAlias = Tensor | dict[str, Tensor]


class MetricKeywords(TypedDict, total=False):
    """The keywords torchmetrics' `Metric` takes (1.9), passed on as they are.

    Not ours: the metrics take them as ``**kwargs: Unpack[MetricKeywords]`` (so a type checker
    flags a misspelt one) and hand them to ``Metric.__init__``.
    """

    compute_on_cpu: bool
    dist_sync_on_step: bool
    process_group: Any
    dist_sync_fn: Callable[..., Any] | None
    distributed_available_fn: Callable[[], bool] | None
    sync_on_compute: bool
    compute_with_cache: bool


class MetricOptions:
    """A metric's checked options (`ListOptions`), its interval, and the shaping of results."""

    def __init__(
        self,
        k: int | Sequence[int] | None,
        gain: Gain,
        discount: Discount,
        ties: Ties,
        empty_target_action: EmptyTargetAction,
        ignore_index: int | None,
        validate_args: bool,
        confidence: float | None = None,
    ) -> None:
        self.lists = _validation.check_list_options(
            k, gain, discount, ties, empty_target_action, ignore_index, validate_args
        )
        _validation.check_distinct_k(k, self.lists.cutoffs.ks)
        _validation.check_confidence(confidence)
        self.cutoffs = self.lists.cutoffs
        self.ks = self.cutoffs.ks
        self.k = k
        self.gain = gain
        self.discount = discount
        self.ties = ties
        self.empty_target_action = empty_target_action
        self.ignore_index = ignore_index
        self.validate_args = validate_args
        self.confidence = confidence
        # The one cut-off a member of `per_cutoff()` reports, as a tensor (None: all of them).
        self.reported: str | None = None
        # Names and their interval bounds, worked out once.
        self.names = self.cutoffs.names
        self.result_names = (
            self.names
            if confidence is None
            else [name + end for name in self.names for end in ("", "_low", "_high")]
        )

    @property
    def n_cutoffs(self) -> int:
        return self.cutoffs.count

    def shape(
        self, values: Tensor, dtype: torch.dtype, bounds: tuple[Tensor, Tensor] | None = None
    ) -> MetricValue:
        """``[..., n_cutoffs]`` to a dict by name (sequence ``k``) or ``[...]`` (single k).

        With ``bounds`` (an interval's low and high, shaped as ``values``) always a dict of
        `result_names`. A member of ``per_cutoff()`` gets its reported value alone.
        """
        values = values.to(dtype)
        result: MetricValue
        if bounds is not None:
            low, high = (bound.to(dtype) for bound in bounds)
            result = {}
            for i, name in enumerate(self.names):
                result[name] = values[..., i]
                result[f"{name}_low"], result[f"{name}_high"] = low[..., i], high[..., i]
        elif self.cutoffs.is_sequence:
            result = {name: values[..., i] for i, name in enumerate(self.names)}
        else:
            result = values[..., 0]
        if self.reported is not None and isinstance(result, dict):
            return result[self.reported]
        return result


def counted_sum(values: Tensor, counted: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """Sum over dim 0 of the counted values and their number: the two terms of every mean.

    ``counted`` marks the values to count (default: those that are not NaN, which
    ``empty_target_action="skip"`` gives); the others add nothing. The mean is then
    ``sum / count.clamp(min=1)``: 0 where nothing is counted, never NaN.
    """
    if counted is None:
        counted = ~values.isnan()
    return torch.where(counted, values, 0).sum(0), counted.sum(0)


def aggregate(values: Tensor, aggregation: Any) -> Tensor:
    """``[Q, C]`` per-query values to ``[C]`` by ``"median"``, ``"min"``, ``"max"`` or a callable.

    Per cut-off, over the counted queries (not NaN: ``"skip"`` leaves queries out); 0 where
    none is counted. ``"median"`` is the lower median (``torch.median``), as torchmetrics'.
    """
    reduce: Callable[[Tensor], Tensor] = (
        REDUCE_LAST_DIM[aggregation] if isinstance(aggregation, str) else aggregation
    )
    out = []
    for column in values.unbind(-1):
        counted = column[~column.isnan()]
        out.append(reduce(counted) if counted.numel() else column.new_zeros(()))
    return torch.stack([torch.as_tensor(value, dtype=values.dtype) for value in out])


def aggregate_with_interval(
    values: Tensor, aggregation: Any, confidence: float | None, n_resamples: int, seed: int
) -> tuple[Tensor, tuple[Tensor, Tensor] | None]:
    """`aggregate` of ``[Q, C]`` values, and its percentile bootstrap interval (``confidence``).

    The resamples are drawn from a generator seeded with ``seed``: every rank holding every
    query's value draws the same bounds.
    """
    result = aggregate(values, aggregation)
    if confidence is None:
        return result, None
    bounds = bootstrap_interval(values, aggregation, confidence, n_resamples=n_resamples, seed=seed)
    return result, bounds


def mean_of_counted(
    values: Tensor, confidence: float | None, reduce: Callable[[Tensor], Tensor]
) -> tuple[Tensor, tuple[Tensor, Tensor] | None]:
    """Mean of ``[Q, C]`` values over the counted ones, and its normal interval (``confidence``).

    ``reduce`` sums the ``[sum, count(, sum of squares)]`` terms over the ranks (one
    all-reduce) or returns them as they are.
    """
    terms = list(counted_sum(values))
    if confidence is not None:
        terms.append(counted_sum(values * values)[0])
    totals = reduce(torch.stack(terms).to(torch.float64))
    mean = totals[0] / totals[1].clamp(min=1)
    if confidence is None:
        return mean, None
    _, low, high = normal_interval(totals[0], totals[2], totals[1], confidence)
    return mean, (low, high)


def plot_distribution(result: Any, name: str, ax: Any, title: str) -> Any:
    """Histogram on [0, 1] of per-query values, one per cut-off; NaN (skipped) left out.

    ``result`` is one ``(values, ids)`` result of ``aggregation="none"``; ``name`` that of a
    single cut-off's values.
    """
    import matplotlib.pyplot as plt  # optional: imported only to plot, as torchmetrics does

    if not (isinstance(result, tuple) and len(result) == 2):
        raise ValueError(
            "Expected `val` to be one `(values, ids)` result of `compute()` with "
            f"`aggregation`='none', but got {type(result).__name__}."
        )
    values = result[0] if isinstance(result[0], dict) else {name: result[0]}

    fig, ax = plt.subplots() if ax is None else (ax.get_figure(), ax)
    for name, column in values.items():
        counted = column.detach().reshape(-1).float().cpu()
        counted = counted[~counted.isnan()]
        ax.hist(counted.numpy(), bins=20, range=(0.0, 1.0), histtype="step", label=name)
    ax.set_xlim(0.0, 1.0)
    ax.set_xlabel("nDCG per query")
    ax.set_ylabel("queries")
    ax.set_title(title)
    ax.legend()
    return fig, ax


class NDCGMetricBase(Metric):
    """What both metrics share: their options, the dtypes of their states, their result dtype.

    **Dtypes.** torchmetrics casts every floating state to the dtype a module is converted to
    (``module.to(torch.bfloat16)``, which Lightning's ``"bf16-true"`` and ``"16-true"``
    precisions call) and only ``set_dtype`` otherwise. Here each state has a dtype of its own
    (`_state_dtype`), which a cast never lowers: states follow the metric's device, and
    its dtype only as far as `_state_dtype` says. Results are float32, or float64 when the
    metric's dtype is float64.

    **Compute groups.** ``MetricCollection`` lets metrics whose states are equal after the first
    ``update`` share one state (only the group's first metric is updated). The first state,
    ``options_key``, digests the options that shape the other states, so only metrics that
    would store the same states are merged. It holds the digest as 8 bytes: torchmetrics
    compares states with ``allclose``, whose relative tolerance would let two large integers
    pass as equal. Bytes 0-3 digest the named options, bytes 4-7 the identity of a callable
    gain or discount (0 without one): metrics with different functions never share a state,
    while ``merge_state``, which may take a metric from another process, compares bytes 0-3.
    """

    is_differentiable = False
    higher_is_better = True
    full_state_update = False
    plot_lower_bound = 0.0
    plot_upper_bound = 1.0

    options: MetricOptions
    options_key: Tensor

    # Plain bookkeeping that torchmetrics sets at every ``update`` (and the rows' partition
    # flag): never a parameter, buffer, module or constant, so torch's attribute setter (its
    # checks cost a few microseconds an update) is passed by.
    _PLAIN_ATTRIBUTES = frozenset({"_computed", "_update_count", "_forward_cache", "_partitioned"})

    def __init__(self, options: tuple[Any, ...], metric_kwargs: dict[str, Any]) -> None:
        """Our options (the arguments of `MetricOptions`, in order) and torchmetrics' keywords.

        torchmetrics' are checked first (other libraries' names get a pointer to ours), then
        ours, into the `MetricOptions`.
        """
        _validation.reject_ported_names(
            type(self).__name__, metric_kwargs, _validation.METRIC_PORTED_NAMES
        )
        super().__init__(**metric_kwargs)
        self.options = MetricOptions(*options)
        self._add_options_state()

    def __setattr__(self, name: str, value: Any) -> None:
        if name in NDCGMetricBase._PLAIN_ATTRIBUTES:
            object.__setattr__(self, name, value)
        else:
            super().__setattr__(name, value)

    def __setstate__(self, state: dict[str, Any]) -> None:
        """Unpickle (torchmetrics' restore), each tensor state then a copy of this process's own.

        ``torch.multiprocessing`` pickles a CPU tensor by moving it to shared memory: a metric
        passed to spawned processes (Lightning's ``ddp_spawn`` passes the whole module, and
        makes private copies of its parameters and buffers only) would otherwise give every
        worker the same state tensors, each worker adding its lists in place to the others'
        (the sums of all ranks, read at whatever moment each rank syncs, then summed again).
        A shared tensor state is copied; a list state is never written in place.
        """
        super().__setstate__(state)
        for name in self._defaults:
            value = getattr(self, name)
            if isinstance(value, Tensor) and value.untyped_storage().is_shared():
                setattr(self, name, value.clone())

    def _state_options(self) -> tuple[Any, ...]:
        """The options (and dtypes) that shape the states: equal for metrics that may share them."""
        raise NotImplementedError

    def _options_key(self) -> Tensor:
        """``[8]`` uint8 bytes: a digest of `_state_options`, then of its callables."""
        options = self._state_options()
        named = tuple("<callable>" if callable(option) else option for option in options)
        functions = tuple(option for option in options if callable(option))
        digests = (
            zlib.crc32(repr(named).encode()),
            zlib.crc32(repr(functions).encode()) if functions else 0,
        )
        key = [byte for digest in digests for byte in digest.to_bytes(4, "little")]
        return torch.tensor(key, dtype=torch.uint8, device=self.device)

    def _add_options_state(self) -> None:
        # It holds no data: "max" keeps the (equal) keys of all ranks where torchmetrics' gather
        # syncs the states (`RetrievalNDCG`'s custom `dist_sync_fn`, `NDCG`'s custom one).
        self.add_state("options_key", self._options_key(), dist_reduce_fx="max")

    def _state_dtype(self, name: str, value: Tensor) -> torch.dtype:
        """The dtype state ``name`` keeps, whatever the module was cast to."""
        return value.dtype if not value.is_floating_point() else compute_dtype(self.dtype)

    def _apply_to_state(self, fn: Callable[..., Any], name: str, value: Any) -> Any:
        """``fn`` of a state (a tensor or a list of them), in the state's own dtype.

        Where ``fn`` changes the dtype to another than `_state_dtype`, the state is taken
        from its original values to the device ``fn`` chose, never through the lower dtype.
        """
        if not isinstance(value, Tensor):
            return [self._apply_to_state(fn, name, item) for item in value]
        applied = fn(value)
        wanted = self._state_dtype(name, value)
        if applied.dtype == wanted:
            return applied
        return value.to(device=applied.device, dtype=wanted)

    def _apply(self, fn: Callable[..., Any], exclude_state: Sequence[str] = ()) -> Any:
        # torchmetrics applies `fn` to the other states and sets the metric's device and dtype
        # (unless `fn` is a dtype cast it ignores); ours are then applied keeping their dtype.
        own = tuple(name for name in self._defaults if name not in exclude_state)
        super()._apply(fn, exclude_state=(*exclude_state, *own))
        for name in own:
            self._defaults[name] = self._apply_to_state(fn, name, self._defaults[name])
            setattr(self, name, self._apply_to_state(fn, name, getattr(self, name)))
        if "options_key" in own:
            # A state dtype may have changed with the metric's dtype.
            self._defaults["options_key"] = self._options_key()
            self.options_key = self._options_key()
        self._computed = None  # recomputed from the states, in the result dtype
        return self

    def merge_state(self, incoming_state: dict[str, Any] | Metric) -> None:
        """Merge another metric's state (or a state dict) into this one; see torchmetrics.

        Args:
            incoming_state: a metric of the same class and options, or its ``metric_state``
                (a dict without ``options_key``, as saved by earlier versions, is taken as is).

        Raises:
            ValueError: a metric of another class or other options.
        """
        incoming: Any = incoming_state
        if isinstance(incoming_state, type(self)):
            incoming = incoming_state.metric_state
        if isinstance(incoming, dict):
            key = incoming.get("options_key")
            if key is None:
                incoming_state = {**incoming, "options_key": self.options_key}
            elif not torch.equal(torch.as_tensor(key).cpu()[:4], self.options_key.cpu()[:4]):
                raise ValueError(
                    "Expected `incoming_state` from a metric with the same options, but its "
                    f"`options_key` {torch.as_tensor(key).tolist()} differs from this "
                    f"metric's {self.options_key.tolist()}."
                )
        super().merge_state(incoming_state)
        self._computed = None  # torchmetrics would return the value cached before the merge

    def plot(self, val: Any = None, ax: Any = None) -> Any:
        """Plot the metric's value(s), or with ``aggregation="none"`` their distribution.

        Aggregated, as torchmetrics' metrics: one value (a dict of them for a sequence ``k``)
        or a list of values over time. With ``aggregation="none"`` (`torch_ndcg.RetrievalNDCG`)
        the per-query values are drawn as a histogram on [0, 1], one per cut-off (queries
        skipped by ``"skip"`` left out); the query ids are not plotted. Needs matplotlib.

        Args:
            val: a result of ``compute``/``forward`` or, aggregated, a list of them;
                ``None`` computes one.
            ax: a matplotlib axis to draw on.

        Returns:
            ``(figure, axis)``.

        Raises:
            ValueError: with ``aggregation="none"``, a ``val`` that is not one
                ``(values, ids)`` result.
        """
        if getattr(self, "aggregation", None) != "none":
            return self._plot(val, ax)
        result = self.compute() if val is None else val
        return plot_distribution(result, self.options.names[0], ax, type(self).__name__)

    @property
    def result_dtype(self) -> torch.dtype:
        """Dtype of ``compute()``'s values: float64 for a float64 metric, else float32."""
        return compute_dtype(self.dtype)

    def per_cutoff(
        self, *, prefix: str | None = None, postfix: str | None = None
    ) -> MetricCollection:
        r"""One metric per cut-off, each reporting a scalar tensor: for Lightning's ``log_dict``.

        A metric with a sequence ``k`` returns a dict, which Lightning's ``self.log`` does not
        take. This returns a `torchmetrics.MetricCollection` keyed ``"ndcg@1"``,
        ``"ndcg@5"``, ... (with ``prefix`` / ``postfix``, as torchmetrics names them) whose
        members are copies of this metric (options and states), each reporting one cut-off.
        They form one compute group: the collection's ``update`` scores each batch once, for
        every cut-off, and every member shares the first one's states. Each member's
        ``compute()`` is the exact value over all updates and DDP ranks, as this metric's; it
        computes (and, under DDP, synchronises) on its own, and the collection's ``forward``
        runs each member's ``forward``, as torchmetrics does for any collection. To merge
        another metric's state, ``merge_state`` into this metric before calling this.

        Args:
            prefix: put before every key (``"val_"`` gives ``"val_ndcg@10"``).
            postfix: put after every key.

        Returns:
            The collection: ``update`` / ``forward`` it with this metric's arguments, and log
            it with ``self.log_dict(collection)``: Lightning computes and resets every member
            at the end of the epoch.

        Raises:
            ValueError: for ``RetrievalNDCG(aggregation="none")``, whose values are per query.

        Example:
            The lists of the class example: nDCG@1 is the mean of 1 and 0, nDCG@3 of 1 and
            $1/\log_2 3$.

            >>> import torch
            >>> from torch_ndcg import NDCG
            >>> metrics = NDCG(k=[1, 3]).per_cutoff(prefix="val_")
            >>> metrics.update(torch.tensor([[3.0, 2.0, 1.0]]), torch.tensor([[2, 1, 0]]))
            >>> metrics.update(torch.tensor([[3.0, 2.0, 1.0]]), torch.tensor([[0, 1, 0]]))
            >>> metrics.compute()
            {'val_ndcg@1': tensor(0.5000), 'val_ndcg@3': tensor(0.8155)}
            >>> metrics["ndcg@3"].compute()
            tensor(0.8155)

            In a ``LightningModule``: ``self.val_ndcg = NDCG(k=[1, 5, 10]).per_cutoff(prefix=
            "val_")`` in ``__init__``, then in ``validation_step``
            ``self.val_ndcg.update(scores, labels)`` and ``self.log_dict(self.val_ndcg)``.
        """
        if getattr(self, "aggregation", None) == "none":
            raise ValueError(
                "Expected an aggregated metric for `per_cutoff`, but `aggregation` is 'none' "
                "(per-query values): use `compute()` of the metric itself."
            )
        members: dict[str, Metric | MetricCollection] = {}
        for name in self.options.result_names:
            member = self.clone()
            assert isinstance(member, NDCGMetricBase)
            member.options.reported = name
            member._computed = member._forward_cache = None  # cached results are of all cut-offs
            members[name] = member
        return MetricCollection(
            members, prefix=prefix, postfix=postfix, compute_groups=[list(members)]
        )


class CountedMean(NDCGMetricBase):
    """A mean of per-list values in constant-size states, with its normal interval.

    The states: a float64 running sum per cut-off (``sum_ndcg``), an int64 list count per
    cut-off (``count``) and, with ``confidence``, the float64 sum of squares
    (``sum_sq_ndcg``). Under DDP (torchmetrics' default ``dist_sync_fn``) `_sync_dist` sums
    them all by one all-reduce of one float64 buffer (counts exact up to 2**53 lists), which
    also carries the bytes of ``options_key`` that digest the named options, so that ranks
    built with other options raise, all together, instead of adding unlike sums. Exact whatever
    the split of batches across ranks. `torch_ndcg.NDCG` is this state over the values of
    `torch_ndcg.ndcg`.
    """

    sum_ndcg: Tensor
    count: Tensor
    sum_sq_ndcg: Tensor

    def __init__(self, options: tuple[Any, ...], metric_kwargs: dict[str, Any]) -> None:
        super().__init__(options, metric_kwargs)
        n = self.options.n_cutoffs
        self.add_state("sum_ndcg", torch.zeros(n, dtype=torch.float64), dist_reduce_fx="sum")
        self.add_state("count", torch.zeros(n, dtype=torch.int64), dist_reduce_fx="sum")
        if self.options.confidence is not None:  # the interval's one more constant-size state
            self.add_state("sum_sq_ndcg", torch.zeros(n, dtype=torch.float64), dist_reduce_fx="sum")

    def _summed_states(self) -> list[str]:
        """The names of the states summed over the ranks, in the order of the sync's buffer."""
        interval = ["sum_sq_ndcg"] if self.options.confidence is not None else []
        return ["sum_ndcg", "count", *interval]

    def _sync_dist(
        self,
        dist_sync_fn: Callable[..., Any] = gather_all_tensors,
        process_group: Any | None = None,
    ) -> None:
        """Sum the states over the ranks by one all-reduce (see the class).

        With torchmetrics' default ``dist_sync_fn``: the sums, the counts and bytes 0-3 of
        ``options_key`` (the named options; bytes 4-7, a callable's identity, differ between
        processes) in one buffer, one sum all-reduce, and the states replaced by the totals
        (``unsync`` restores this rank's from torchmetrics' cache). ``options_key`` stays this
        rank's: equal on every rank, or the sync raises on every rank (``ValueError`` on the
        CPU, a device-side assertion on an accelerator, where nothing is read back). A custom
        ``dist_sync_fn`` gets torchmetrics' gather of each state, reduced by its
        ``dist_reduce_fx`` (sums, and the largest key), without the options check.
        """
        if dist_sync_fn is not gather_all_tensors:
            super()._sync_dist(dist_sync_fn, process_group)
            return
        group = process_group or self.process_group  # as torchmetrics chooses it
        names = self._summed_states()
        summed, same = sum_states_over_ranks(
            [getattr(self, name) for name in names], self.options_key[:4], group
        )
        _validation.check_same_options_on_every_rank(same, type(self).__name__, self.options_key)
        for name, total in zip(names, summed, strict=True):
            setattr(self, name, total)

    def _state_options(self) -> tuple[Any, ...]:
        opt = self.options
        options = (opt.ks, opt.gain, opt.discount, opt.ties, opt.empty_target_action)
        # The interval's state enters the key only when kept: earlier keys stay valid.
        interval = ("sum_sq_ndcg",) if opt.confidence is not None else ()
        return (*options, opt.ignore_index, *interval)

    def _state_dtype(self, name: str, value: Tensor) -> torch.dtype:
        if name in ("sum_ndcg", "sum_sq_ndcg"):
            return accumulate_dtype(self.device)
        return super()._state_dtype(name, value)

    def _add_values(self, values: Tensor, real: Tensor | None) -> None:
        """Add ``[N, len(k)]`` values to the state; ``real`` marks lists that count.

        Called in the caller's inference mode (in-place additions to the states are allowed
        there).
        """
        opt = self.options
        values = as_dtype(values, self.sum_ndcg.dtype)
        batch_count: Tensor | int
        counted: Tensor | None = None
        if real is None and opt.empty_target_action != "skip":
            batch_sum, batch_count = values.sum(0), values.shape[0]
        else:
            counted = ~values.isnan()
            if real is not None:
                # A list of padding only is no list (RetrievalNDCG never sees its rows).
                counted &= real.reshape(values.shape[0], -1).any(-1, keepdim=True)
            batch_sum, batch_count = counted_sum(values, counted)
        # In place by method: `+=` would go through torchmetrics' slow attribute setter.
        self.sum_ndcg.add_(batch_sum)
        self.count.add_(batch_count)
        if opt.confidence is not None:
            squares = values * values
            self.sum_sq_ndcg.add_(
                squares.sum(0) if counted is None else counted_sum(squares, counted)[0]
            )

    def _mean(self) -> MetricValue:
        """The mean of the counted values (0 if none), shaped; with its interval's bounds."""
        if self.options.confidence is None:
            mean = self.sum_ndcg / self.count.clamp(min=1)
            return self.options.shape(mean, self.result_dtype)
        mean, low, high = normal_interval(
            self.sum_ndcg, self.sum_sq_ndcg, self.count, self.options.confidence
        )
        return self.options.shape(mean, self.result_dtype, (low, high))


class QueryRows(NDCGMetricBase, PartitionedRows):
    """Flat rows ``(preds, target, indexes)`` in list states, scored and aggregated per query.

    The rows are stored checked, in the metric's float dtype (ids as int64), and exchanged
    under DDP by `torch_ndcg.functional._distributed.PartitionedRows`; `_aggregated` scores
    them with `torch_ndcg.functional.retrieval_ndcg`'s kernel and reduces the per-query values by
    ``aggregation`` (with its interval). `torch_ndcg.RetrievalNDCG` is this state.
    """

    aggregation: Any
    bootstrap_resamples: int
    bootstrap_seed: int

    def __init__(self, options: tuple[Any, ...], metric_kwargs: dict[str, Any]) -> None:
        super().__init__(options, metric_kwargs)
        self.add_state("preds", [], dist_reduce_fx="cat")
        self.add_state("target", [], dist_reduce_fx="cat")
        self.add_state("indexes", [], dist_reduce_fx="cat")
        self._partitioned = False  # see PartitionedRows (set here: torch.jit.script sees it)
        self._partition_group: Any = None

    def _store_rows(
        self, preds: Tensor, target: Tensor, indexes: Tensor, retrieved: Tensor | None
    ) -> None:
        rows = _rows_to_store(
            preds,
            target,
            indexes,
            self.options.lists,
            compute_dtype(self.dtype),
            self.options_key.device,
            retrieved,
        )
        for state, row in zip((self.preds, self.target, self.indexes), rows, strict=True):
            state.append(row)

    def _state_options(self) -> tuple[Any, ...]:
        # The rows depend on `ignore_index` (its rows get a NaN label) and on their dtype only:
        # metrics with other `k`, gains, ... may share them in a MetricCollection.
        return (self.options.ignore_index, compute_dtype(self.dtype))

    def _state_dtype(self, name: str, value: Tensor) -> torch.dtype:
        return torch.int64 if name == "indexes" else super()._state_dtype(name, value)

    def _score_queries(self) -> tuple[Tensor, Tensor]:
        """The per-query values and ids of the stored rows (rows marked ignored dropped)."""
        preds, target, indexes = self.stored_rows()
        kept = None if self.options.ignore_index is None else ~target.isnan()
        return _retrieval_values(preds, target, indexes, kept, self.options.lists)

    def _aggregated(self) -> MetricValue | tuple[MetricValue, Tensor]:
        """The aggregate of the queries seen so far (with its interval), or ``(values, ids)``."""
        opt = self.options
        values, ids = self.score_on_every_rank(self._score_queries)
        bounds: tuple[Tensor, Tensor] | None = None  # of the interval, with `confidence`
        if self.aggregation == "mean":
            mean, bounds = mean_of_counted(values, opt.confidence, self.sum_over_ranks)
        else:
            values, ids = self.gather_over_ranks(values, ids)
        if self._update_count > 0 and ids.numel() == 0 and not self.partitioned:
            rank_zero_warn(f"{type(self).__name__} has no row to compute on; returning 0.")
        elif (
            self._update_count > 0
            and not self.partitioned
            and opt.empty_target_action == "skip"
            and _host.may_read_back(values.device)
            and bool(values.isnan().all())
        ):  # every query skipped (one read-back, on the CPU only)
            rank_zero_warn(
                f"{type(self).__name__} was updated but counted no query (every query was"
                " skipped: no relevant row); returning 0."
            )
        if self.aggregation == "none":
            return opt.shape(values, self.result_dtype), ids
        if self.aggregation != "mean":  # every rank has every query's value: same draws
            mean, bounds = aggregate_with_interval(
                values,
                self.aggregation,
                opt.confidence,
                self.bootstrap_resamples,
                self.bootstrap_seed,
            )
        return opt.shape(mean, self.result_dtype, bounds)
