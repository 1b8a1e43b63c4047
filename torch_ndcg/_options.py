"""Option literals, their names and dtype rules: the leaf module every other one may import.

One place says which values an option takes; the kernels read the literals, the checks the
name tuples, and both the dtype rules.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal, TypeAlias

import torch
from torch import Tensor

GainFn: TypeAlias = Callable[[Tensor], Tensor]
DiscountFn: TypeAlias = Callable[[Tensor], Tensor]
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


def accumulate_dtype(device: torch.device) -> torch.dtype:
    """Dtype of DCG sums: float64 wherever the device has it (MPS has not)."""
    return torch.float32 if device.type == "mps" else torch.float64
