"""Option literals, their names, dtype rules and the checked configurations: the leaf module.

One place says which values an option takes; the kernels read the literals, the checks the
name tuples, and both the dtype rules. The public signatures annotate their keyword parameters
with these literals and state each default there, once. `ListOptions` is what
`torch_ndcg._validation` returns once it has checked the options of a metric (at a function
call, or in a metric's ``__init__``; a loss's are `torch_ndcg.functional._loss_input.LossOptions`):
internals take them and check nothing again, so an ``update`` checks only its tensors.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal, TypeAlias, get_args

import torch
from torch import Tensor

GainFn: TypeAlias = Callable[[Tensor], Tensor]
DiscountFn: TypeAlias = Callable[[Tensor], Tensor]
ScoreFn: TypeAlias = Callable[[Tensor, Tensor], Tensor]
GainName: TypeAlias = Literal["exponential", "linear"]
DiscountName: TypeAlias = Literal["log2", "jarvelin"]
# A sequence is a table of per-label gains (LightGBM's `label_gain`), checked into a tuple.
Gain: TypeAlias = GainName | GainFn | Sequence[float]
Discount: TypeAlias = DiscountName | DiscountFn
Ties: TypeAlias = Literal["average", "first"]
EmptyTargetAction: TypeAlias = Literal["neg", "pos", "skip", "error"]
Weighting: TypeAlias = Literal["lambdarank", "ndcg2", "ndcg2pp"]
Reduction: TypeAlias = Literal["mean", "sum", "none"]
AggregationFn: TypeAlias = Callable[[Tensor], Tensor]
AggregationName: TypeAlias = Literal["mean", "median", "min", "max"]
Aggregated: TypeAlias = AggregationName | AggregationFn

# Index of an empty slot of the catalog's top K (and of an excluded candidate): above every item
# index, so that it ranks after every real item of equal score; the low 32 bits of a 64-bit sort
# key hold `CATALOG_PLACEHOLDER - index`, hence the bound on catalog sizes.
CATALOG_PLACEHOLDER = (1 << 32) - 1
# The position of an item that was not shown: it takes no part in the clicked/unclicked pairs.
NOT_SHOWN = -1

# Rows of at least this many items may take the long-row path (`torch_ndcg._dcg_paths`), where
# the value checks read fewer signs (`torch_ndcg._validation`): one number both read.
LONG_ROW_LENGTH = 1 << 14


def is_integer_tensor(tensor: Tensor) -> bool:
    """An integer dtype: not floating, complex or bool (query ids, item ids)."""
    return not (tensor.is_floating_point() or tensor.is_complex() or tensor.dtype == torch.bool)


Aggregation: TypeAlias = Aggregated | Literal["none"]

# The names each option takes, read off its literal: declared once.
GAIN_NAMES: tuple[str, ...] = get_args(GainName)
DISCOUNT_NAMES: tuple[str, ...] = get_args(DiscountName)
TIES_NAMES: tuple[str, ...] = get_args(Ties)
EMPTY_TARGET_ACTIONS: tuple[str, ...] = get_args(EmptyTargetAction)
WEIGHTINGS: tuple[str, ...] = get_args(Weighting)
REDUCTIONS: tuple[str, ...] = get_args(Reduction)
AGGREGATIONS: tuple[str, ...] = (*get_args(AggregationName), "none")


def compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """Floating dtype the kernels work in: float64 stays, everything else is computed in float32."""
    return torch.float64 if dtype == torch.float64 else torch.float32


def as_dtype(tensor: Tensor, dtype: torch.dtype) -> Tensor:
    """``tensor.to(dtype)``, without the call where it is that dtype already.

    A ``Tensor.to`` that changes nothing still parses its arguments: about a microsecond of
    host time, several times per call of a hot path on small input. The dtype is passed by
    keyword, which ``Tensor.to`` parses faster than a positional one (1.8 against 2.5 us).
    """
    return tensor if tensor.dtype == dtype else tensor.to(dtype=dtype)


def accumulate_dtype(device: torch.device) -> torch.dtype:
    """Dtype of DCG sums: float64 wherever the device has it (MPS has not)."""
    return torch.float32 if device.type == "mps" else torch.float64


@dataclass(frozen=True)
class Cutoffs:
    """Checked cut-offs: what ``k`` was given as, and how results are shaped by it.

    Attributes:
        ks: the cut-offs in the order given, or ``None`` (the whole list).
        is_sequence: whether ``k`` was a sequence (results get a trailing ``len(ks)`` dim, or a
            dict by name in the metrics) rather than an int or ``None``.
    """

    ks: tuple[int, ...] | None
    is_sequence: bool

    @property
    def count(self) -> int:
        """The number of results per list: ``len(ks)``, 1 for the whole list."""
        return 1 if self.ks is None else len(self.ks)

    @property
    def names(self) -> list[str]:
        """``"ndcg@k"`` per cut-off, ``"ndcg"`` for the whole list."""
        return ["ndcg"] if self.ks is None else [f"ndcg@{k}" for k in self.ks]

    def resolve(self, length: int) -> tuple[list[int], int]:
        """The cut-offs for lists of ``length`` (``None`` = the list) and the positions needed."""
        ks = [length] if self.ks is None else list(self.ks)
        return ks, min(max(ks), length)


@dataclass(frozen=True)
class ListOptions:
    """The checked options of `ndcg`, `dcg`, `retrieval_ndcg` and both metrics."""

    cutoffs: Cutoffs
    gain: Gain
    discount: Discount
    ties: Ties
    empty_target_action: EmptyTargetAction
    ignore_index: int | None
    validate_args: bool
    # Set by the checks: the options admit a dense batch (`torch_ndcg._dcg_paths.dense_batch`).
    dense: bool = False
