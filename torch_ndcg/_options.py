"""Option literals, their names, dtype rules, what each gain declares, the checked options.

The leaf module. One place says which values an option takes; the kernels read the literals,
the checks the name tuples, and both the dtype rules and the gains' properties (`monotone`,
`largest_label`, ...). The public signatures annotate their keyword parameters
with these literals and state each default there, once. `ListOptions` is what
`torch_ndcg._validation` returns once it has checked the options of a metric (at a function
call, or in a metric's ``__init__``; a loss's are `torch_ndcg.functional._loss_input.LossOptions`):
internals take them and check nothing again, so an ``update`` checks only its tensors.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple, TypeAlias, TypeGuard, get_args

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


# The gains, and what each kind declares: the one place that tells the kinds apart. A checked
# ``gain`` is a name, a table or a callable; per label y, and for a largest allowed gain G (the
# overflow limit of `torch_ndcg._validation`):
#
# | kind            | gain           | monotone in y     | largest label         |
# |-----------------|----------------|-------------------|-----------------------|
# | "exponential"   | 2^y - 1        | yes               | log2(G + 1)           |
# | "linear"        | y              | yes               | G                     |
# | a table t       | t[y], whole y  | if non-decreasing | before a t[y] > G     |
# | a callable f    | f(y)           | not known         | none                  |
#
# Names and tables are *declared*: never negative (so nDCG is at most 1), with a largest label.
# A table is LightGBM's and XGBoost's ``label_gain``, checked (`torch_ndcg._validation.check_gain`)
# into a tuple of finite non-negative floats. A monotone gain lets the ideal DCG come from the
# label order (or the label counts). The rest of the package asks the questions below and
# branches on nothing else: a new named gain is a row of `NAMED_GAINS` and its literal in
# `GainName` (its formula is computed by `torch_ndcg._kernels.gains`).


class _Named(NamedTuple):
    """What a named gain declares: its formula, its inverse, and how its limit is worded."""

    formula: Callable[[Tensor], Tensor]
    inverse: Callable[[float], float]  # the largest label whose gain is at most a given gain
    shown: Callable[[float], str]  # the limit as the message gives it (never above it)
    symbolic: str  # the limit where the list length is a traced symbol
    advice: str


NAMED_GAINS: dict[str, _Named] = {
    "exponential": _Named(
        lambda y: torch.exp2(y) - 1,
        lambda largest: math.log2(largest + 1),  # 2^y - 1 <= largest
        lambda limit: f"{math.floor(limit * 100) / 100:.2f}",
        "log2(max(float64) / L + 1)",
        "use `gain`='linear' or rescale",
    ),
    "linear": _Named(
        lambda y: y, lambda largest: largest, "{:.6g}".format, "max(float64) / L", "rescale"
    ),
}


def elementwise(gain: Any) -> bool:
    """A name or a callable, taken as given; any other ``gain`` is checked as a table."""
    return isinstance(gain, str) or callable(gain)


def named(gain: Gain) -> TypeGuard[GainName]:
    """A built-in name: the small paths take only these (their checks are the label range's)."""
    return isinstance(gain, str)


def declared(gain: Gain) -> bool:
    """A name or a table: non-negative (nDCG at most 1), with a largest label; not a callable."""
    return not callable(gain)


def indexed(gain: Gain) -> TypeGuard[tuple[float, ...]]:
    """A table: the labels index it, so they must be whole numbers in its range."""
    return isinstance(gain, tuple)


def monotone(gain: Gain) -> bool:
    """Whether the gain never decreases with the label: then the ideal order is the label order."""
    if isinstance(gain, str):
        return True
    return isinstance(gain, tuple) and all(low <= high for low, high in itertools.pairwise(gain))


def largest_label(gain: Gain, largest_gain: Any) -> Any:
    """The largest label whose gain (and every smaller label's) is at most ``largest_gain``.

    ``None`` for a callable (no limit); for a table, the last label before the first entry
    above ``largest_gain`` (its length less one where none is).
    """
    if isinstance(gain, str):
        return NAMED_GAINS[gain].inverse(largest_gain)
    if isinstance(gain, tuple):
        return next((label for label, g in enumerate(gain) if g > largest_gain), len(gain)) - 1
    return None


def limit_words(gain: Gain, limit: Any, number: bool) -> tuple[str, str, str]:
    """How a message names the gain, its label limit (a formula unless ``number``), the remedy."""
    if isinstance(gain, tuple):
        what = f" a table of {len(gain)} per-label gains"
        return what, str(limit), "give every label a finite gain in the table or rescale"
    words = NAMED_GAINS[str(gain)]
    return f"={gain!r}", words.shown(limit) if number else words.symbolic, words.advice
