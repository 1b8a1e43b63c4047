"""Learning from clicks: per-item weights and display positions.

Their checks are in `torch_ndcg._validation`.
"""

from __future__ import annotations

import torch
from torch import Tensor

from torch_ndcg._options import NOT_SHOWN

__all__ = ["NOT_SHOWN", "weighted_gains"]


def weighted_gains(gains: Tensor, weight: Tensor, mask: Tensor | None) -> Tensor:
    r"""Gains times weights, $w_i G_i$, in the gains' dtype; 0 on padded items.

    The losses call it on gains already divided by the ideal DCG of the unweighted gains: the
    weights re-weight the evidence for each item (``1 / propensity``), not what an ideal
    ranking would gain. Dividing by the ideal DCG of the weighted gains instead would cancel the
    weight of a list with one click (the usual click log), turning inverse-propensity weighting
    back into naive training.
    """
    scaled = gains * weight.to(gains.dtype)
    return scaled if mask is None else torch.where(mask, scaled, 0)
