"""torchmetrics metrics over the functional core: ``NDCG`` and ``RetrievalNDCG``.

Both classes only store options and state; the numbers come from `torch_ndcg.ndcg` and
`torch_ndcg._kernels`.
"""

import numbers
import zlib
from collections.abc import Callable, Sequence
from typing import Any, Generic, Literal, TypeAlias, cast, overload

import torch
from torch import Tensor
from torchmetrics import Metric, MetricCollection
from torchmetrics.utilities.data import dim_zero_cat
from torchmetrics.utilities.distributed import gather_all_tensors
from torchmetrics.utilities.prints import rank_zero_warn
from typing_extensions import TypeVar

from torch_ndcg import _distributed, _kernels, _options, _validation
from torch_ndcg._options import Aggregated, Aggregation, Discount, EmptyTargetAction, Gain, Ties
from torch_ndcg.functional import _catalog
from torch_ndcg.functional._ndcg import _ndcg_of_lists, _prepare_lists, _retrieval_values
from torch_ndcg.functional._significance import normal_interval

__all__ = ["NDCG", "RetrievalNDCG"]

MetricValue: TypeAlias = Tensor | dict[str, Tensor]

#: What ``compute()`` returns, fixed by the constructor's arguments (see the overloads); a bare
#: ``NDCG`` annotation leaves it open (``Any``).
ResultT = TypeVar("ResultT", covariant=True, default=Any)


def _float_state_dtype(metric_dtype: torch.dtype) -> torch.dtype:
    """float64 for a float64 metric, float32 otherwise: half precision never lowers a value."""
    return torch.float64 if metric_dtype == torch.float64 else torch.float32


class _Options:
    """Validated options shared by both metrics, and the shaping of their output by cut-off."""

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
        self.ks = _validation.check_k(k)
        _validation.check_distinct_k(k, self.ks)
        _validation.check_options(
            gain, discount, ties=ties, empty_target_action=empty_target_action
        )
        _validation.check_ignore_index(ignore_index)
        _validation.check_bool("validate_args", validate_args)
        _validation.check_confidence(confidence)
        self.k = k
        self.k_is_sequence = k is not None and not isinstance(k, numbers.Integral)
        self.gain = gain
        self.discount = discount
        self.ties = ties
        self.empty_target_action = empty_target_action
        self.ignore_index = ignore_index
        self.validate_args = validate_args
        self.confidence = confidence
        # The one cut-off a member of `per_cutoff()` reports, as a tensor (None: all of them).
        self.reported: str | None = None

    @property
    def n_cutoffs(self) -> int:
        return 1 if self.ks is None else len(self.ks)

    @property
    def names(self) -> list[str]:
        """``"ndcg@k"`` per cut-off, ``"ndcg"`` for the whole list."""
        return ["ndcg"] if self.ks is None else [f"ndcg@{k}" for k in self.ks]

    @property
    def result_names(self) -> list[str]:
        """The keys of a result: `names`, each followed by its interval's bounds."""
        if self.confidence is None:
            return self.names
        return [name + end for name in self.names for end in ("", "_low", "_high")]

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
        elif self.k_is_sequence:
            result = {name: values[..., i] for i, name in enumerate(self.names)}
        else:
            result = values[..., 0]
        if self.reported is not None and isinstance(result, dict):
            return result[self.reported]
        return result


def _aggregate(values: Tensor, aggregation: Any) -> Tensor:
    """``[Q, C]`` per-query values to ``[C]`` by ``"median"``, ``"min"``, ``"max"`` or a callable.

    Per cut-off, over the counted queries (not NaN: ``"skip"`` leaves queries out); 0 where
    none is counted. ``"median"`` is the lower median (``torch.median``), as torchmetrics'.
    """
    reduce = {"median": torch.median, "min": torch.min, "max": torch.max}.get(
        aggregation, aggregation
    )
    out = []
    for column in values.unbind(-1):
        counted = column[~column.isnan()]
        out.append(reduce(counted) if counted.numel() else column.new_zeros(()))
    return torch.stack([torch.as_tensor(value, dtype=values.dtype) for value in out])


def _plot_distribution(values: dict[str, Tensor], ax: Any, title: str) -> Any:
    """Histogram on [0, 1] of per-query values, one per cut-off; NaN (skipped) left out."""
    import matplotlib.pyplot as plt  # optional: imported only to plot, as torchmetrics does

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


class _NDCGMetric(Metric):
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

    options: _Options
    options_key: Tensor

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
        # "max" keeps the (equal) keys of all ranks; it holds no data.
        self.add_state("options_key", self._options_key(), dist_reduce_fx="max")

    def _state_dtype(self, name: str, value: Tensor) -> torch.dtype:
        """The dtype state ``name`` keeps, whatever the module was cast to."""
        return value.dtype if not value.is_floating_point() else _float_state_dtype(self.dtype)

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

    @property
    def result_dtype(self) -> torch.dtype:
        """Dtype of ``compute()``'s values: float64 for a float64 metric, else float32."""
        return _float_state_dtype(self.dtype)

    @staticmethod
    def _reject_ported_names(owner: str, metric_kwargs: dict[str, Any]) -> None:
        """Point other libraries' names (``top_k``, ...) to ours; torchmetrics checks the rest."""
        ported = _validation.METRIC_PORTED_NAMES
        _validation.reject_ported_names(
            owner, {name: value for name, value in metric_kwargs.items() if name in ported}, ported
        )

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
            assert isinstance(member, _NDCGMetric)
            member.options.reported = name
            member._computed = member._forward_cache = None  # cached results are of all cut-offs
            members[name] = member
        return MetricCollection(
            members, prefix=prefix, postfix=postfix, compute_groups=[list(members)]
        )


class NDCG(_NDCGMetric, Generic[ResultT]):
    r"""Mean nDCG over lists, one list per row, at one or many cut-offs.

    $$
    \mathrm{nDCG@}k = \frac{1}{|Q|} \sum_{q \in Q}
        \frac{\mathrm{DCG@}k(q)}{\mathrm{IDCG@}k(q)},
    \qquad
    \mathrm{DCG@}k = \sum_{r=1}^{\min(k, L)} \mathrm{gain}(y_{\pi(r)}) \, \mathrm{discount}(r)
    $$

    Each ``update`` scores its lists with `torch_ndcg.ndcg` and adds them to a float64
    running sum per cut-off and a list count: the state has a constant size, and under DDP it is
    synchronised by one sum all-reduce, exact whatever the split of batches across ranks (also
    for ranks with fewer updates or none). Lists with no relevant item count as 0 (``"neg"``),
    1 (``"pos"``), are left out of the mean (``"skip"``) or raise (``"error"``); lists made
    only of padding (``mask`` / ``ignore_index``) are not counted at all.

    Note:
        The default gain is exponential, $2^y - 1$ (LightGBM, TF-Ranking, Rax). torchmetrics'
        ``RetrievalNormalizedDCG`` and scikit-learn's ``ndcg_score`` use the label itself: pass
        ``gain="linear"`` to get their numbers. Graded labels give different values (0/1 labels
        the same).

    Args:
        k: an int, a sequence of ints, or ``None`` (whole list).
        gain: ``"exponential"`` ($2^y - 1$), ``"linear"`` or an element-wise callable.
        discount: ``"log2"``, ``"jarvelin"`` or a callable of the 1-based ranks.
        ties: ``"average"`` (McSherry–Najork) or ``"first"`` (order of appearance in the row).
        empty_target_action: ``"neg"``, ``"pos"``, ``"skip"`` or ``"error"``.
        ignore_index: label value that marks padded items.
        validate_args: check every batch: one read-back per ``update`` on the CPU, device-side
            assertions (``RuntimeError``, no read-back) on an accelerator.
        metric_kwargs: passed to `torchmetrics.Metric` (``sync_on_compute``, ...).

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

    is_differentiable = False
    higher_is_better = True
    full_state_update = False
    plot_lower_bound = 0.0
    plot_upper_bound = 1.0

    sum_ndcg: Tensor
    count: Tensor
    sum_sq_ndcg: Tensor

    @overload
    def __init__(
        self: "NDCG[Tensor]",
        k: int | None = None,
        *,
        gain: Gain = ...,
        discount: Discount = ...,
        ties: Ties = ...,
        empty_target_action: EmptyTargetAction = ...,
        ignore_index: int | None = ...,
        validate_args: bool = ...,
        confidence: None = None,
        **metric_kwargs: Any,
    ) -> None: ...

    @overload
    def __init__(
        self: "NDCG[dict[str, Tensor]]",
        k: Sequence[int],
        *,
        gain: Gain = ...,
        discount: Discount = ...,
        ties: Ties = ...,
        empty_target_action: EmptyTargetAction = ...,
        ignore_index: int | None = ...,
        validate_args: bool = ...,
        confidence: float | None = None,
        **metric_kwargs: Any,
    ) -> None: ...

    @overload
    def __init__(
        self: "NDCG[dict[str, Tensor]]",
        k: int | None = None,
        *,
        gain: Gain = ...,
        discount: Discount = ...,
        ties: Ties = ...,
        empty_target_action: EmptyTargetAction = ...,
        ignore_index: int | None = ...,
        validate_args: bool = ...,
        confidence: float,
        **metric_kwargs: Any,
    ) -> None: ...

    def __init__(
        self,
        k: int | Sequence[int] | None = None,
        *,
        gain: Gain = "exponential",
        discount: Discount = "log2",
        ties: Ties = "average",
        empty_target_action: EmptyTargetAction = "neg",
        ignore_index: int | None = None,
        validate_args: bool = True,
        confidence: float | None = None,
        **metric_kwargs: Any,
    ) -> None:
        self._reject_ported_names(type(self).__name__, metric_kwargs)
        super().__init__(**metric_kwargs)
        self.options = _Options(
            k, gain, discount, ties, empty_target_action, ignore_index, validate_args, confidence
        )
        opt = self.options
        self._add_options_state()
        n = opt.n_cutoffs
        self.add_state("sum_ndcg", torch.zeros(n, dtype=torch.float64), dist_reduce_fx="sum")
        self.add_state("count", torch.zeros(n, dtype=torch.int64), dist_reduce_fx="sum")
        if confidence is not None:  # the interval's one more constant-size state
            self.add_state("sum_sq_ndcg", torch.zeros(n, dtype=torch.float64), dist_reduce_fx="sum")

    def _state_options(self) -> tuple[Any, ...]:
        opt = self.options
        options = (opt.ks, opt.gain, opt.discount, opt.ties, opt.empty_target_action)
        # The interval's state enters the key only when kept: earlier keys stay valid.
        interval = ("sum_sq_ndcg",) if opt.confidence is not None else ()
        return (*options, opt.ignore_index, *interval)

    def _state_dtype(self, name: str, value: Tensor) -> torch.dtype:
        if name in ("sum_ndcg", "sum_sq_ndcg"):
            return _options.accumulate_dtype(self.device)
        return super()._state_dtype(name, value)

    def update(
        self,
        preds: Tensor,
        target: Tensor,
        mask: Tensor | None = None,
        exclude: Tensor | None = None,
    ) -> None:
        """Add the nDCG of every list of the batch.

        Args:
            preds: ``[..., L]`` floating scores, one list per row (a 1-D tensor is one list).
            target: ``[..., L]`` non-negative labels; for ``[B, N]`` scores also a sparse COO
                or CSR ``[B, N]`` tensor of grades (see `torch_ndcg.ndcg`).
            mask: ``[..., L]`` bool, ``True`` for real items, or ``None``.
            exclude: items that take no rank, for ``[B, N]`` scores (see `torch_ndcg.dcg`).
        """
        opt = self.options
        # Nothing here is differentiated: inference mode spares every op its autograd
        # bookkeeping (about a tenth of an update of [256, 100]).
        with torch.inference_mode():
            if _catalog.is_sparse(target):
                values = _catalog.sparse_values(
                    preds,
                    target,
                    exclude,
                    mask,
                    k=opt.k,
                    gain=opt.gain,
                    discount=opt.discount,
                    ties=opt.ties,
                    ignore_index=opt.ignore_index,
                    empty_target_action=opt.empty_target_action,
                    validate_args=opt.validate_args,
                    normalize=True,
                )
                self._add_values(values, None)
                return
            if exclude is not None:
                mask = _catalog.dense_mask_with_exclusions(
                    exclude, mask, target, validate_args=opt.validate_args
                )
            lists = _prepare_lists(
                preds,
                target,
                k=opt.k,
                gain=opt.gain,
                discount=opt.discount,
                ties=opt.ties,
                mask=mask,
                ignore_index=opt.ignore_index,
                empty_target_action=opt.empty_target_action,
                validate_args=opt.validate_args,
            )
            values = _ndcg_of_lists(
                lists,
                gain=opt.gain,
                discount=opt.discount,
                ties=opt.ties,
                empty_target_action=opt.empty_target_action,
            )
        self._add_values(values, lists.mask)

    def update_catalog(
        self,
        queries: Tensor,
        items: Tensor,
        relevant: Tensor,
        *,
        exclude: Tensor | None = None,
        score_fn: Callable[[Tensor, Tensor], Tensor] | None = None,
        chunk_size: int | None = None,
        memory_budget: int | None = None,
        item_offset: int = 0,
        process_group: Any | None = None,
    ) -> None:
        """Add the nDCG of every user against the whole catalog, from embeddings.

        The values of `torch_ndcg.functional.catalog_ndcg` with this metric's options (see
        there for the arguments): the ``[B, N]`` scores are never held. Under DDP with the
        users split across ranks (each rank its own ``queries``, every rank the whole
        ``items``) the state is synchronised as for `update`. With item shards
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
        opt = self.options
        # What torchmetrics' wrapper does around `update`: this is an update too.
        self._computed = None
        self._update_count += 1
        with torch.inference_mode():
            values = _catalog.catalog_ndcg_values(
                queries,
                items,
                relevant,
                k=opt.k,
                exclude=exclude,
                score_fn=score_fn,
                chunk_size=chunk_size,
                memory_budget=memory_budget,
                gain=opt.gain,
                discount=opt.discount,
                ties=opt.ties,
                empty_target_action=opt.empty_target_action,
                item_offset=item_offset,
                process_group=process_group,
                validate_args=opt.validate_args,
            )
            share = _catalog.user_share(values.shape[0], process_group, values.device)
        self._add_values(values, share)

    def _add_values(self, values: Tensor, real: Tensor | None) -> None:
        """Add ``[N, len(k)]`` nDCG values to the state; ``real`` marks lists that count."""
        opt = self.options
        with torch.inference_mode():
            values = values.to(self.sum_ndcg.dtype)
            batch_count: Tensor | int
            counted: Tensor | None = None
            if real is None and opt.empty_target_action != "skip":
                batch_sum, batch_count = values.sum(0), values.shape[0]
            else:
                counted = ~values.isnan()
                if real is not None:
                    # A list of padding only is no list (RetrievalNDCG never sees its rows).
                    counted &= real.reshape(values.shape[0], -1).any(-1, keepdim=True)
                batch_sum, batch_count = _kernels.counted_sum(values, counted)
            if opt.confidence is not None:
                squares = values * values
                batch_sum_sq = (
                    squares.sum(0) if counted is None else _kernels.counted_sum(squares, counted)[0]
                )
        # In place by method: `+=` would go through torchmetrics' slow attribute setter.
        self.sum_ndcg.add_(batch_sum)
        self.count.add_(batch_count)
        if opt.confidence is not None:
            self.sum_sq_ndcg.add_(batch_sum_sq)

    def compute(self) -> ResultT:
        """Mean nDCG of the lists seen so far (0 if none was counted), with its interval.

        With ``confidence``, also the bounds of the normal-approximation interval of the mean
        (`torch_ndcg.functional._significance.normal_interval`; NaN with fewer than two
        lists).
        """
        if self.options.confidence is None:
            mean = self.sum_ndcg / self.count.clamp(min=1)
            return cast(ResultT, self.options.shape(mean, self.result_dtype))
        mean, low, high = normal_interval(
            self.sum_ndcg, self.sum_sq_ndcg, self.count, self.options.confidence
        )
        return cast(ResultT, self.options.shape(mean, self.result_dtype, (low, high)))

    def plot(self, val: Any = None, ax: Any = None) -> Any:
        """Plot a value (or a list of values) of the metric; needs matplotlib.

        Args:
            val: a result of ``compute``/``forward`` or a list of them; ``None`` computes one.
            ax: a matplotlib axis to draw on.

        Returns:
            ``(figure, axis)``.
        """
        return self._plot(val, ax)


class RetrievalNDCG(_NDCGMetric, Generic[ResultT]):
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
    that query ``q`` lands on rank ``q mod world`` (``all_to_all_single``), each rank scores
    its own queries, and one sum all-reduce (``"mean"``) or a gather of the per-query values
    (the other aggregations and ``"none"``, so every rank still gets every query's value)
    finishes: per-rank memory and work fall as ``1 / world``. A custom ``dist_sync_fn`` gets
    torchmetrics' gather of the rows instead; ``sync_on_compute=False`` gives each rank the
    value of its own rows. An error (``"error"``, an overflowing query) is raised on every
    rank together.

    Scores and labels are stored in the metric's float dtype (float32; ``set_dtype`` changes
    it). With ``ties="first"``, equal scores of a query keep their order of appearance in the
    concatenated rows: update order within a process, and under DDP the rows of rank 0, then
    rank 1, and so on, so it depends on how rows were split across ranks; the default
    ``ties="average"`` does not depend on any order.

    Note:
        The default gain is exponential, $2^y - 1$ (LightGBM, TF-Ranking, Rax). torchmetrics'
        ``RetrievalNormalizedDCG`` and scikit-learn's ``ndcg_score`` use the label itself: pass
        ``gain="linear"`` to get their numbers. Graded labels give different values (0/1 labels
        the same).

    Args:
        k: an int, a sequence of ints, or ``None`` (each whole query).
        gain: ``"exponential"``, ``"linear"`` or a callable.
        discount: ``"log2"``, ``"jarvelin"`` or a callable.
        ties: ``"average"`` or ``"first"``.
        empty_target_action: value of queries with no relevant item: ``"neg"`` 0, ``"pos"`` 1,
            ``"skip"`` left out of the mean (NaN per query), ``"error"`` raises in ``compute``.
        ignore_index: label value of rows to drop.
        aggregation: over the queries (``"skip"``-ped ones left out): ``"mean"``,
            ``"median"`` (the lower one, as ``torch.median``), ``"min"``, ``"max"``, a callable
            of the ``[Q]`` values (as torchmetrics' retrieval metrics), or ``"none"`` for
            per-query values.
        validate_args: check every batch: one read-back per ``update`` on the CPU, device-side
            assertions (``RuntimeError``, no read-back) on an accelerator.
        metric_kwargs: passed to `torchmetrics.Metric`.

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

    is_differentiable = False
    higher_is_better = True
    full_state_update = False
    plot_lower_bound = 0.0
    plot_upper_bound = 1.0

    # Lists of batches; torchmetrics' sync may leave one concatenated tensor (jit needs a
    # single type here, as torchmetrics' own retrieval metrics declare it).
    preds: list[Tensor]
    target: list[Tensor]
    indexes: list[Tensor]

    @overload
    def __init__(
        self: "RetrievalNDCG[Tensor]",
        k: int | None = None,
        *,
        gain: Gain = ...,
        discount: Discount = ...,
        ties: Ties = ...,
        empty_target_action: EmptyTargetAction = ...,
        ignore_index: int | None = ...,
        aggregation: Aggregated = ...,
        validate_args: bool = ...,
        confidence: None = None,
        **metric_kwargs: Any,
    ) -> None: ...

    @overload
    def __init__(
        self: "RetrievalNDCG[dict[str, Tensor]]",
        k: Sequence[int],
        *,
        gain: Gain = ...,
        discount: Discount = ...,
        ties: Ties = ...,
        empty_target_action: EmptyTargetAction = ...,
        ignore_index: int | None = ...,
        aggregation: Aggregated = ...,
        validate_args: bool = ...,
        confidence: float | None = None,
        **metric_kwargs: Any,
    ) -> None: ...

    @overload
    def __init__(
        self: "RetrievalNDCG[dict[str, Tensor]]",
        k: int | None = None,
        *,
        gain: Gain = ...,
        discount: Discount = ...,
        ties: Ties = ...,
        empty_target_action: EmptyTargetAction = ...,
        ignore_index: int | None = ...,
        aggregation: Literal["mean"] = ...,
        validate_args: bool = ...,
        confidence: float,
        **metric_kwargs: Any,
    ) -> None: ...

    @overload
    def __init__(
        self: "RetrievalNDCG[tuple[Tensor, Tensor]]",
        k: int | None = None,
        *,
        gain: Gain = ...,
        discount: Discount = ...,
        ties: Ties = ...,
        empty_target_action: EmptyTargetAction = ...,
        ignore_index: int | None = ...,
        aggregation: Literal["none"],
        validate_args: bool = ...,
        confidence: None = None,
        **metric_kwargs: Any,
    ) -> None: ...

    @overload
    def __init__(
        self: "RetrievalNDCG[tuple[dict[str, Tensor], Tensor]]",
        k: Sequence[int],
        *,
        gain: Gain = ...,
        discount: Discount = ...,
        ties: Ties = ...,
        empty_target_action: EmptyTargetAction = ...,
        ignore_index: int | None = ...,
        aggregation: Literal["none"],
        validate_args: bool = ...,
        confidence: None = None,
        **metric_kwargs: Any,
    ) -> None: ...

    def __init__(
        self,
        k: int | Sequence[int] | None = None,
        *,
        gain: Gain = "exponential",
        discount: Discount = "log2",
        ties: Ties = "average",
        empty_target_action: EmptyTargetAction = "neg",
        ignore_index: int | None = None,
        aggregation: Aggregation = "mean",
        validate_args: bool = True,
        confidence: float | None = None,
        **metric_kwargs: Any,
    ) -> None:
        self._reject_ported_names(type(self).__name__, metric_kwargs)
        super().__init__(**metric_kwargs)
        self.options = _Options(
            k, gain, discount, ties, empty_target_action, ignore_index, validate_args, confidence
        )
        _validation.check_aggregation(aggregation)
        if confidence is not None and aggregation != "mean":
            raise ValueError(
                "Expected `aggregation`='mean' with `confidence` (the interval is of the mean), "
                f"but got `aggregation`={aggregation!r}."
            )
        self.aggregation = aggregation
        self._add_options_state()
        self.add_state("preds", [], dist_reduce_fx="cat")
        self.add_state("target", [], dist_reduce_fx="cat")
        self.add_state("indexes", [], dist_reduce_fx="cat")
        # While the states hold this rank's share of the queries (after a DDP sync): True,
        # and the process group (None is the default group).
        self._partitioned = False
        self._partition_group: Any = None

    def update(self, preds: Tensor, target: Tensor, indexes: Tensor) -> None:
        """Store a batch of rows.

        Args:
            preds: floating scores, any shape (flattened).
            target: non-negative labels, the shape of ``preds``.
            indexes: integer query ids, the shape of ``preds``.
        """
        opt = self.options
        row_dtype = _float_state_dtype(self.dtype)
        stored_preds = preds.detach().reshape(-1).to(row_dtype)
        # Checked as stored: the gains' overflow limit is that of the stored dtype.
        real = _validation.check_rows(
            preds,
            target,
            indexes,
            gain=opt.gain,
            ignore_index=opt.ignore_index,
            validate_args=opt.validate_args,
            scores=stored_preds,
        )
        stored_target = target.detach().reshape(-1).to(row_dtype)
        if real is not None:
            # Compared in the labels' own dtype (exactly), then marked by NaN, which compute()
            # drops: a stored float label could round onto `ignore_index` or off it.
            stored_target = torch.where(real, stored_target, torch.nan)
        self.preds.append(stored_preds)
        self.target.append(stored_target)
        self.indexes.append(indexes.detach().reshape(-1).to(torch.int64))

    def _state_options(self) -> tuple[Any, ...]:
        # The rows depend on `ignore_index` (its rows get a NaN label) and on their dtype only:
        # metrics with other `k`, gains, ... may share them in a MetricCollection.
        return (self.options.ignore_index, _float_state_dtype(self.dtype))

    def _state_dtype(self, name: str, value: Tensor) -> torch.dtype:
        return torch.int64 if name == "indexes" else super()._state_dtype(name, value)

    def _stored_rows(self) -> tuple[Tensor, Tensor, Tensor]:
        """The stored rows as three flat tensors (ignored rows still marked)."""
        if isinstance(self.preds, list) and not self.preds:
            empty = torch.empty(0, dtype=_float_state_dtype(self.dtype), device=self.device)
            return empty, empty, torch.empty(0, dtype=torch.int64, device=self.device)
        return dim_zero_cat(self.preds), dim_zero_cat(self.target), dim_zero_cat(self.indexes)

    def _kept_rows(self, target: Tensor) -> Tensor | None:
        """The stored rows to score: not marked as ``ignore_index`` (``None``: every row)."""
        ignore_index = self.options.ignore_index
        if ignore_index is None:
            return None
        keep = ~target.isnan()
        if _validation.label_dtype_holds(target.dtype, ignore_index):
            keep &= target != ignore_index  # rows stored by earlier versions keep the label
        return keep

    def compute(self) -> ResultT:
        """Return the nDCG of the queries seen so far: aggregated, or per query with their ids.

        After a DDP sync this rank holds the rows of its own queries only (see
        `_sync_dist`): it scores them, and one all-reduce (``"mean"``) or a gather of
        the per-query values (the other aggregations, ``"none"``) gives every rank the value
        of all the queries.
        """
        opt = self.options
        # torchmetrics' forward may leave the flag set without a sync (dist_sync_on_step).
        partitioned = self._partitioned and self._is_synced
        group = self._partition_group
        failure: Exception | None = None
        try:
            preds, target, indexes = self._stored_rows()
            values, ids = _retrieval_values(
                preds,
                target,
                indexes,
                self._kept_rows(target),
                ks=opt.ks,
                gain=opt.gain,
                discount=opt.discount,
                ties=opt.ties,
                empty_target_action=opt.empty_target_action,
                validate_args=opt.validate_args,
            )
        except Exception as error:
            if not partitioned:
                raise
            failure = error  # raised below on every rank together: no rank waits alone
        if partitioned:
            failed = torch.tensor([float(failure is not None)], device=self.device)
            if _distributed.all_reduce_sum(failed, group).item() > 0:
                # Raising skips torchmetrics' unsync: restore this rank's rows first, so that
                # the metric stays usable.
                self.unsync()
                raise failure or ValueError(
                    "Found an invalid query on another rank (see its error): "
                    "`RetrievalNDCG.compute` raises on every rank."
                )
        bounds: tuple[Tensor, Tensor] | None = None  # of the interval, with `confidence`
        if self.aggregation == "mean":
            # [sum, count] per cut-off, and the sum of squares for an interval: one all-reduce.
            terms = list(_kernels.counted_sum(values))
            if opt.confidence is not None:
                terms.append(_kernels.counted_sum(values * values)[0])
            totals = torch.stack(terms).to(torch.float64)
            if partitioned:
                totals = _distributed.all_reduce_sum(totals, group)
            mean = totals[0] / totals[1].clamp(min=1)
            if opt.confidence is not None:
                _, low, high = normal_interval(totals[0], totals[2], totals[1], opt.confidence)
                bounds = (low, high)
        else:
            if partitioned:
                values = dim_zero_cat(gather_all_tensors(values, group))
                ids = dim_zero_cat(gather_all_tensors(ids, group))
                order = ids.argsort()  # each query was scored on one rank: ids are distinct
                values, ids = values.index_select(0, order), ids.index_select(0, order)
        if self._update_count > 0 and ids.numel() == 0 and not partitioned:
            rank_zero_warn(f"{type(self).__name__} has no row to compute on; returning 0.")
        if self.aggregation == "none":
            return cast(ResultT, (opt.shape(values, self.result_dtype), ids))
        if self.aggregation != "mean":
            mean = _aggregate(values, self.aggregation)
        return cast(ResultT, opt.shape(mean, self.result_dtype, bounds))

    def _sync_dist(
        self,
        dist_sync_fn: Callable[..., Any] = gather_all_tensors,
        process_group: Any | None = None,
    ) -> None:
        """Exchange rows between ranks so that each query lands on one rank.

        The one place where torchmetrics' sync (a gather of every row to every rank) is
        replaced: with the default ``dist_sync_fn``, rows go to the rank that owns their
        query (`torch_ndcg._distributed.exchange_by_query`) and `compute` finishes
        with one reduction. A custom ``dist_sync_fn`` gets torchmetrics' gather.
        """
        group = process_group if process_group is not None else self.process_group
        if dist_sync_fn is gather_all_tensors and _distributed.world_size(group) > 1:
            preds, target, indexes = self._stored_rows()
            (pairs,), owned = _distributed.exchange_by_query(
                [torch.stack([preds, target], dim=-1)], indexes, group
            )
            self.preds, self.target, self.indexes = [pairs[:, 0]], [pairs[:, 1]], [owned]
            self._partitioned, self._partition_group = True, group
            return
        # torchmetrics stands in an empty tensor of the metric's own dtype for an empty list
        # state: the other ranks' int64 ids, and their float32 rows in a half-precision
        # metric, would then meet another dtype in the gather (gloo aborts).
        for name in ("preds", "target", "indexes"):
            value = getattr(self, name)
            if isinstance(value, list) and not value:
                dtype = torch.int64 if name == "indexes" else _float_state_dtype(self.dtype)
                setattr(self, name, [torch.empty(0, dtype=dtype, device=self.device)])
        super()._sync_dist(dist_sync_fn, process_group)

    def unsync(self, should_unsync: bool = True) -> None:
        """Restore this rank's own rows after a sync (see torchmetrics)."""
        super().unsync(should_unsync)
        if should_unsync:
            self._partitioned = False

    def reset(self) -> None:
        """Forget every row (see torchmetrics)."""
        super().reset()
        self._partitioned = False

    def plot(self, val: Any = None, ax: Any = None) -> Any:
        """Plot the metric's value(s), or with ``aggregation="none"`` their distribution.

        Aggregated, as torchmetrics' metrics: one value (a dict of them for a sequence ``k``)
        or a list of values over time. With ``aggregation="none"`` the per-query values are
        drawn as a histogram on [0, 1], one per cut-off (queries skipped by ``"skip"`` left
        out); the query ids are not plotted. Needs matplotlib.

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
        if self.aggregation != "none":
            return self._plot(val, ax)
        result = self.compute() if val is None else val
        if not (isinstance(result, tuple) and len(result) == 2):
            raise ValueError(
                "Expected `val` to be one `(values, ids)` result of `compute()` with "
                f"`aggregation`='none', but got {type(result).__name__}."
            )
        values = result[0] if isinstance(result[0], dict) else {self.options.names[0]: result[0]}
        return _plot_distribution(values, ax, type(self).__name__)
