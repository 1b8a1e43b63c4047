"""Option literals, their names, dtype rules and the checked configurations: the leaf module.

One place says which values an option takes; the kernels read the literals, the checks the
name tuples, and both the dtype rules. The public keywords are written here once too: their
types in the ``*Keywords`` TypedDicts, which the entry points take as ``**options:
Unpack[...]`` (so a type checker sees each keyword and its type, and flags a misspelt one),
and their defaults in `DEFAULTS` (one default per name, the same everywhere). The frozen
``*Options`` dataclasses are what `torch_ndcg._validation` returns once it has checked the
options a user gave (at a function call, or in a metric's or loss module's ``__init__``):
internals take them and check nothing again, so a metric ``update`` or a loss step checks
only its tensors.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypeAlias, TypedDict

import torch
from torch import Tensor

GainFn: TypeAlias = Callable[[Tensor], Tensor]
DiscountFn: TypeAlias = Callable[[Tensor], Tensor]
ScoreFn: TypeAlias = Callable[[Tensor, Tensor], Tensor]
Gain: TypeAlias = Literal["exponential", "linear"] | GainFn
Discount: TypeAlias = Literal["log2", "jarvelin"] | DiscountFn
Ties: TypeAlias = Literal["average", "first"]
EmptyTargetAction: TypeAlias = Literal["neg", "pos", "skip", "error"]
Weighting: TypeAlias = Literal["lambdarank", "ndcg2", "ndcg2pp"]
Reduction: TypeAlias = Literal["mean", "sum", "none"]
AggregationFn: TypeAlias = Callable[[Tensor], Tensor]
Aggregated: TypeAlias = Literal["mean", "median", "min", "max"] | AggregationFn
Aggregation: TypeAlias = Aggregated | Literal["none"]

GAIN_NAMES: tuple[str, ...] = ("exponential", "linear")
DISCOUNT_NAMES: tuple[str, ...] = ("log2", "jarvelin")
TIES_NAMES: tuple[str, ...] = ("average", "first")
EMPTY_TARGET_ACTIONS: tuple[str, ...] = ("neg", "pos", "skip", "error")
WEIGHTINGS: tuple[str, ...] = ("lambdarank", "ndcg2", "ndcg2pp")
REDUCTIONS: tuple[str, ...] = ("mean", "sum", "none")
AGGREGATIONS: tuple[str, ...] = ("mean", "median", "min", "max", "none")


def compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """Floating dtype the kernels work in: float64 stays, everything else is computed in float32."""
    return torch.float64 if dtype == torch.float64 else torch.float32


def as_dtype(tensor: Tensor, dtype: torch.dtype) -> Tensor:
    """``tensor.to(dtype)``, without the call where it is that dtype already.

    A ``Tensor.to`` that changes nothing still parses its arguments: about a microsecond and a
    half of host time, several times per call of a hot path on small input.
    """
    return tensor if tensor.dtype == dtype else tensor.to(dtype)


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

    # `ListKeywords` (below) types the keywords a user passes: a dataclass of checked values
    # (``cutoffs``, not ``k``) and those keywords cannot be one declaration.

    cutoffs: Cutoffs
    gain: Gain
    discount: Discount
    ties: Ties
    empty_target_action: EmptyTargetAction
    ignore_index: int | None
    validate_args: bool


@dataclass(frozen=True, kw_only=True)
class LossOptions:
    """The checked options every loss shares (``k``: the one cut-off, or ``None``)."""

    k: int | None
    gain: Gain
    discount: Discount
    reduction: Reduction
    ignore_index: int | None
    validate_args: bool


@dataclass(frozen=True, kw_only=True)
class LambdaRankOptions(LossOptions):
    """The checked options of `lambdarank_loss` / `LambdaRankLoss`."""

    sigma: float
    weighting: Weighting
    mu: float


@dataclass(frozen=True, kw_only=True)
class ApproxOptions(LossOptions):
    """The checked options of `approx_ndcg_loss` / `ApproxNDCGLoss`."""

    temperature: float


@dataclass(frozen=True, kw_only=True)
class NeuralOptions(LossOptions):
    """The checked options of `neural_ndcg_loss` / `NeuralNDCGLoss`."""

    temperature: float
    max_iter: int
    tol: float


# --- The public keywords: their types (TypedDicts for `Unpack`) and their defaults -----------
# Each entry point's keywords are declared once here; the classes are alike in shape only
# (`duplicates` pairs them), each a different set of names.


class SharedKeywords(TypedDict, total=False):
    """The keywords every metric, function and loss takes."""

    gain: Gain
    discount: Discount
    validate_args: bool


class ListKeywords(SharedKeywords, total=False):
    """The keywords of both metrics beside ``k`` (theirs is positional)."""

    ties: Ties
    empty_target_action: EmptyTargetAction
    ignore_index: int | None


class RetrievalKeywords(ListKeywords, total=False):
    """The keywords of `retrieval_ndcg`: the metrics' and ``k``."""

    k: int | Sequence[int] | None


class NDCGKeywords(RetrievalKeywords, total=False):
    """The keywords of `ndcg`: its options, and the tensors that mark items out."""

    mask: Tensor | None
    exclude: Tensor | None


class DCGKeywords(SharedKeywords, total=False):
    """The keywords of `dcg`: those of `ndcg` but ``empty_target_action`` (no ideal DCG)."""

    k: int | Sequence[int] | None
    ties: Ties
    ignore_index: int | None
    mask: Tensor | None
    exclude: Tensor | None


class StreamingKeywords(TypedDict, total=False):
    """How `catalog_ndcg` and `NDCG.update_catalog` stream the catalog (and what it excludes)."""

    exclude: Tensor | None
    score_fn: ScoreFn | None
    chunk_size: int | None
    memory_budget: int | None
    item_offset: int
    process_group: Any | None


class CatalogKeywords(SharedKeywords, StreamingKeywords, total=False):
    """The keywords of `catalog_ndcg` beside ``k`` (required there): no ``ignore_index``."""

    ties: Ties
    empty_target_action: EmptyTargetAction


class LossKeywords(SharedKeywords, total=False):
    """The keywords every loss takes (``k``: one cut-off)."""

    k: int | None
    reduction: Reduction
    ignore_index: int | None


class LambdaRankKeywords(LossKeywords, total=False):
    """The keywords of `lambdarank_loss` / `LambdaRankLoss`."""

    sigma: float
    weighting: Weighting
    mu: float


class ApproxKeywords(LossKeywords, total=False):
    """The keywords of `approx_ndcg_loss` / `ApproxNDCGLoss`."""

    temperature: float


class NeuralKeywords(ApproxKeywords, total=False):
    """The keywords of `neural_ndcg_loss` / `NeuralNDCGLoss`: `approx_ndcg_loss`'s, Sinkhorn's."""

    max_iter: int
    tol: float


class UnbiasedKeywords(LossKeywords, total=False):
    """The keywords of `UnbiasedLambdaRankLoss` beside ``num_positions`` (which has no default)."""

    sigma: float
    bias_norm: float
    momentum: float
    match_exposure: bool


#: The default of every keyword above: a name has one default wherever it is taken. The
#: docstrings state each one; the API reference shows them in the signatures, in this order.
DEFAULTS: dict[str, Any] = {
    "mask": None,
    "exclude": None,
    "weight": None,
    "k": None,
    "sigma": 1.0,
    "weighting": "lambdarank",
    "mu": 10.0,
    "temperature": 1.0,
    "max_iter": 50,
    "tol": 1e-6,
    "bias_norm": 2.0,
    "momentum": 0.9,
    "match_exposure": True,
    "gain": "exponential",
    "discount": "log2",
    "ties": "average",
    "empty_target_action": "neg",
    "reduction": "mean",
    "ignore_index": None,
    "validate_args": True,
    "score_fn": None,
    "chunk_size": None,
    "memory_budget": None,
    "item_offset": 0,
    "process_group": None,
    "bootstrap_resamples": 1000,
    "bootstrap_seed": 0,
}


def keyword_defaults(keywords: type) -> dict[str, Any]:
    """The keywords of a ``*Keywords`` TypedDict (all optional), each with its `DEFAULTS` entry."""
    names: frozenset[str] = keywords.__optional_keys__  # type: ignore[attr-defined]
    return {name: DEFAULTS[name] for name in sorted(names)}
