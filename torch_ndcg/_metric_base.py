"""The torchmetrics machinery both metrics share: options, state dtypes, compute groups, results.

`NDCGMetricBase` holds what `torch_ndcg.NDCG` and `torch_ndcg.RetrievalNDCG` have in common
on top of `torchmetrics.Metric`: their checked options (``options``, a
`torch_ndcg._options.ListOptions`, and ``confidence``) and the shaping of results by cut-off,
the dtype each state keeps through ``.to(dtype)`` casts, the compute-group key
(``options_key``) and ``merge_state``, the per-query histogram of ``plot``, and ``per_cutoff``.
The overrides of torchmetrics internals (``_apply``, ``_computed``, ``_forward_cache``) all live
here; each metric adds its own states and their sync.
"""

import zlib
from collections.abc import Callable, Sequence
from typing import Any, TypeAlias, TypedDict

import torch
from torch import Tensor
from torchmetrics import Metric, MetricCollection

from torch_ndcg import _validation
from torch_ndcg._options import ListOptions, accumulate_dtype, compute_dtype
from torch_ndcg.functional._significance import normal_interval

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


def _given_k(self: "NDCGMetricBase") -> Any:
    """``k`` as given: an int, a tuple of them, or ``None``."""
    cutoffs = self.options.cutoffs
    return cutoffs.ks if cutoffs.is_sequence or cutoffs.ks is None else cutoffs.ks[0]


def _stored_confidence(self: "NDCGMetricBase") -> float | None:
    """``confidence`` as given."""
    return self._confidence


def _fixed(name: str) -> Any:
    """An option of a metric, read from it; setting it raises: its states were made by it."""

    def get(self: "NDCGMetricBase") -> Any:
        return getattr(self.options, name)

    if name == "k":
        get = _given_k
    elif name == "confidence":
        get = _stored_confidence

    def set_(self: "NDCGMetricBase", value: Any) -> None:
        kind = type(self).__name__
        raise AttributeError(
            f"`{kind}.{name}` is fixed when the metric is made (its states follow it), but "
            f"was set to {value!r}: make a new `{kind}({name}=...)`."
        )

    return property(get, set_, doc=f"``{name}``, as given (checked); read only.")


class NDCGMetricBase(Metric):
    """What both metrics share: their options, the dtypes of their states, their result dtype.

    **Dtypes.** torchmetrics casts every floating state to the dtype a module is converted to
    (``module.to(torch.bfloat16)``, which Lightning's ``"bf16-true"`` and ``"16-true"``
    precisions call) and only ``set_dtype`` otherwise. Here each state has a dtype of its own
    (see `_apply`), which a cast never lowers: states follow the metric's device, and
    its dtype only as far as `_apply` says. Results are float32, or float64 when the
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

    options_key: Tensor
    k, gain, discount, ties = _fixed("k"), _fixed("gain"), _fixed("discount"), _fixed("ties")
    empty_target_action, ignore_index = _fixed("empty_target_action"), _fixed("ignore_index")
    validate_args, confidence = _fixed("validate_args"), _fixed("confidence")
    # torch.jit.script compiles a module's properties unless listed here.
    __jit_unused_properties__ = [  # noqa: RUF012 (torch.jit reads a list)
        *Metric.__jit_unused_properties__,
        *(name for name, value in list(vars().items()) if isinstance(value, property)),
    ]
    # The one result a member of `per_cutoff()` reports, as a tensor (None: all of them).
    _reported: str | None = None

    # Plain bookkeeping that torchmetrics sets at every ``update`` (and the rows' partition
    # flag): never a parameter, buffer, module or constant, so torch's attribute setter (its
    # checks cost a few microseconds an update) is passed by.
    _PLAIN_ATTRIBUTES = frozenset({"_computed", "_update_count", "_forward_cache", "_partitioned"})

    def __init__(
        self, k: Any, options: ListOptions, confidence: float | None, metric_kwargs: dict[str, Any]
    ) -> None:
        """``k`` as given, its checked list options, ``confidence``, Metric's keywords.

        torchmetrics' are checked first (other libraries' names get a pointer to ours), then
        the cut-offs and ``confidence``; the first state is ``options_key``.
        """
        _validation.reject_ported_names(
            type(self).__name__, metric_kwargs, _validation.METRIC_PORTED_NAMES
        )
        super().__init__(**metric_kwargs)
        self.options = options
        _validation.check_distinct_k(k, options.cutoffs.ks)
        _validation.check_confidence(confidence)
        self._confidence = confidence
        # It holds no data: "max" keeps the (equal) keys of all ranks where torchmetrics' gather
        # syncs the states (`RetrievalNDCG`'s custom `dist_sync_fn`, `NDCG`'s custom one).
        self.add_state("options_key", self._options_key(), dist_reduce_fx="max")

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
        return self._digest(self._state_options())

    def _digest(self, options: tuple[Any, ...]) -> Tensor:
        """``[8]`` uint8 bytes on the metric's device: ``options``' digest, then their callables'.

        Bytes 0-3 digest the options with each callable named ``"<callable>"`` (equal in every
        process), bytes 4-7 the callables' identities (0 without one).
        """
        named = tuple("<callable>" if callable(option) else option for option in options)
        functions = tuple(option for option in options if callable(option))
        key = zlib.crc32(repr(named).encode()).to_bytes(4, "little")
        key += (zlib.crc32(repr(functions).encode()) if functions else 0).to_bytes(4, "little")
        return torch.tensor(list(key), dtype=torch.uint8, device=self.device)

    def _apply(self, fn: Callable[..., Any], exclude_state: Sequence[str] = ()) -> Any:
        # torchmetrics sets the metric's device and dtype (unless `fn` is a dtype cast it
        # ignores); the states are then applied keeping the dtype each keeps: integer states
        # (counts, query ids) their own, the sums (``sum_*``) the accumulation dtype of the
        # device, stored scores and labels the metric's float dtype. Where `fn` changes it to
        # another, the state is taken from its original values to the device `fn` chose, never
        # through the lower dtype.
        own = tuple(self._defaults)
        super()._apply(fn, exclude_state=own)

        def apply(name: str, value: Any) -> Any:
            if not isinstance(value, Tensor):
                return [apply(name, item) for item in value]
            applied, wanted = fn(value), compute_dtype(self.dtype)
            if not value.is_floating_point():
                wanted = value.dtype
            elif name.startswith("sum"):
                wanted = accumulate_dtype(self.device)
            return applied if applied.dtype == wanted else value.to(applied.device, wanted)

        for name in own:
            self._defaults[name] = apply(name, self._defaults[name])
            setattr(self, name, apply(name, getattr(self, name)))
        # The key digests the states' dtypes, which may have changed with the metric's.
        self.options_key = self._options_key()
        self._defaults["options_key"] = self.options_key.clone()
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
        if isinstance(incoming, type(self)):
            incoming = incoming.metric_state
        if isinstance(incoming, dict):
            key = incoming.get("options_key", self.options_key)
            self._check_options_key("incoming_state", key)
            incoming_state = {**incoming, "options_key": key}
        super().merge_state(incoming_state)
        self._computed = None  # torchmetrics would return the value cached before the merge

    def _load_from_state_dict(self, state_dict: Any, prefix: str, *args: Any) -> None:
        # A saved `options_key` (persistent states) must be this metric's: the states of other
        # options (another `k`, gain, ...) would be read as this metric's, a silent wrong value.
        key = state_dict.get(prefix + "options_key")
        if key is not None:
            self._check_options_key("state_dict", key)
        super()._load_from_state_dict(state_dict, prefix, *args)

    def _check_options_key(self, argument: str, key: Any) -> None:
        """Raise where ``key`` is another options' digest (bytes 0-3: equal in every process)."""
        if not torch.equal(torch.as_tensor(key).cpu()[:4], self.options_key.cpu()[:4]):
            raise ValueError(
                f"Expected `{argument}` from a metric with the same options, but its "
                f"`options_key` {torch.as_tensor(key).tolist()} differs from this "
                f"metric's {self.options_key.tolist()}."
            )

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
        import matplotlib.pyplot as plt  # optional: imported only to plot, as torchmetrics does

        if not (isinstance(result, tuple) and len(result) == 2):
            raise ValueError(
                "Expected `val` to be one `(values, ids)` result of `compute()` with "
                f"`aggregation`='none', but got {type(result).__name__}."
            )
        values = result[0]
        if not isinstance(values, dict):
            values = {self.options.cutoffs.names[0]: values}
        fig, ax = plt.subplots() if ax is None else (ax.get_figure(), ax)
        for name, column in values.items():
            counted = column.detach().reshape(-1).float().cpu()
            counted = counted[~counted.isnan()]
            ax.hist(counted.numpy(), bins=20, range=(0.0, 1.0), histtype="step", label=name)
        ax.set(xlim=(0, 1), xlabel="nDCG per query", ylabel="queries", title=type(self).__name__)
        ax.legend()
        return fig, ax

    @property
    def result_dtype(self) -> torch.dtype:
        """Dtype of ``compute()``'s values: float64 for a float64 metric, else float32."""
        return compute_dtype(self.dtype)

    def _shape(self, values: Tensor, bounds: tuple[Tensor, Tensor] | None = None) -> MetricValue:
        """``[..., n_cutoffs]`` to a dict by name (sequence ``k``) or ``[...]`` (single k).

        With ``bounds`` (an interval's low and high, shaped as ``values``) always a dict with
        ``"ndcg@k_low"`` and ``"ndcg@k_high"`` after each ``"ndcg@k"``. A member of
        ``per_cutoff()`` gets its reported value alone. In the result dtype.
        """
        names = self.options.cutoffs.names
        parts = [part.to(self.result_dtype) for part in (values, *(bounds or ()))]
        result: dict[str, Tensor] = {
            name + end: part[..., i]
            for i, name in enumerate(names)
            for end, part in zip(("", "_low", "_high"), parts, strict=False)
        }
        if self._reported is not None:
            return result[self._reported]
        return result if bounds or self.options.cutoffs.is_sequence else result[names[0]]

    def _mean(self, total: Tensor, count: Tensor, squares: Tensor | None = None) -> MetricValue:
        """The mean from the sums of the counted values (0 if none), shaped, with its interval.

        With ``confidence``, the bounds of the normal interval from the sum of ``squares`` of
        the values (NaN below two values).
        """
        if self._confidence is None:
            return self._shape(total / count.clamp(min=1))
        assert squares is not None
        mean, low, high = normal_interval(total, squares, count, self._confidence)
        return self._shape(mean, (low, high))

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
        ends = ("",) if self._confidence is None else ("", "_low", "_high")
        members: dict[str, Metric | MetricCollection] = {}
        for name in (name + end for name in self.options.cutoffs.names for end in ends):
            member = self.clone()
            assert isinstance(member, NDCGMetricBase)
            member._reported = name
            member._computed = member._forward_cache = None  # cached results are of all cut-offs
            members[name] = member
        return MetricCollection(
            members, prefix=prefix, postfix=postfix, compute_groups=[list(members)]
        )
