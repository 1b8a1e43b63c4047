"""Learning from clicks: per-item weights, display positions and the position-bias updates.

The checks here follow `torch_ndcg._validation`: metadata (types, dtypes, shapes) is always
checked; values only with ``validate_args``, as one `torch_ndcg._host.DeferredCheck` read back
together with the other checks of the call on the CPU (`resolve_checks`), or as device-side
assertions elsewhere (no read-back).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor

from torch_ndcg import _host
from torch_ndcg._host import DeferredCheck, assert_on_device
from torch_ndcg._options import is_integer_tensor

# The position of an item that was not shown: it takes no part in the clicked/unclicked pairs.
NOT_SHOWN = -1


def _shown(value: float) -> str:
    """A value found, as the message names it: integers without a trailing ``.0``."""
    if math.isfinite(value) and value.is_integer():
        return repr(int(value))
    return repr(value)


def value_checks(checks: Sequence[tuple[Tensor, Tensor, str]]) -> DeferredCheck | None:
    """Checks ``(ok, found, message)`` of bool scalars ``ok`` on the device.

    Where a read-back is allowed, a `DeferredCheck` raising ``ValueError(message)`` for the
    first ``ok`` that is False, with ``{found}`` replaced by the value of ``found``; elsewhere
    one device-side assertion each (``{found}`` reads "a value") and ``None``.
    """
    if not checks:
        return None
    if not _host.may_read_back(checks[0][0].device):
        for ok, _, message in checks:
            assert_on_device(ok, message.format(found="a value"))
        return None
    values = torch.stack(
        [v.to(torch.float64) for ok, found, _ in checks for v in (ok, found)]
    ).reshape(-1)

    def judge(read: list[float]) -> None:
        for index, (_, _, message) in enumerate(checks):
            if not read[2 * index]:
                raise ValueError(message.format(found=_shown(read[2 * index + 1])))

    return DeferredCheck(values, judge)


def resolve_checks(
    first: DeferredCheck | None,
    *others: DeferredCheck | None,
    judged_before: DeferredCheck | None = None,
) -> Any:
    """Judge every check from one read-back of all their values; ``first``'s result.

    ``judged_before`` is judged first, then ``first``, then ``others``, so the errors of the
    earlier ones win: the order in which the checks are made where they are device-side
    assertions (the first to fail raises), so that both name the same error. ``None`` where
    ``first`` is ``None``.
    """
    ordered = (judged_before, first, *others)
    present = [check for check in ordered if check is not None]
    if not present:
        return None
    read = _host.read_together([check.values for check in present])
    results = {id(check): check.judge(values) for check, values in zip(present, read, strict=True)}
    return None if first is None else results[id(first)]


def _check_tensor(name: str, value: Any, shape: torch.Size, *, kind: str) -> Tensor:
    """``value`` is a tensor of ``shape`` of a ``kind`` dtype (``"floating"``, ``"integer"``)."""
    if not isinstance(value, Tensor):
        raise TypeError(f"Expected `{name}` to be a torch.Tensor, but got {type(value).__name__}.")
    integer = is_integer_tensor(value)
    if (kind == "floating" and not value.is_floating_point()) or (
        kind == "integer" and not integer
    ):
        article = "an" if kind == "integer" else "a"
        raise TypeError(
            f"Expected `{name}` to be {article} {kind} tensor, but got dtype {value.dtype}."
        )
    if value.shape != shape:
        raise ValueError(
            f"Expected `{name}` to have the shape of `preds` {tuple(shape)}, but got "
            f"{tuple(value.shape)}."
        )
    return value


def check_weight(
    weight: Any, shape: torch.Size, real: Tensor | None, *, validate_args: bool
) -> DeferredCheck | None:
    """``weight`` is ``None`` or a floating tensor of ``shape``, finite and >= 0 on real items.

    Padded items' weights are not checked: they never count.
    """
    if weight is None:
        return None
    _check_tensor("weight", weight, shape, kind="floating")
    if not validate_args or weight.numel() == 0:
        return None
    real_weight = weight if real is None else torch.where(real, weight, 1)
    low, high = torch.aminmax(real_weight.detach())  # both NaN where one is
    return value_checks(
        [
            (low == low, low, "Expected `weight` to contain no NaN, but found {found}."),
            (high < torch.inf, high, "Expected `weight` to be finite, but found {found}."),
            (low >= 0, low, "Expected `weight` to be non-negative, but found {found}."),
        ]
    )


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


def _largest(values: Tensor) -> Tensor:
    """The value of largest magnitude, as a 0-d tensor (gathered: no read-back)."""
    flat = values.flatten()
    return flat.gather(0, flat.abs().argmax().reshape(1))[0]


def check_positions(
    positions: Any,
    shape: torch.Size,
    num_positions: int | None,
    real: Tensor | None,
    *,
    validate_args: bool = True,
) -> list[tuple[Tensor, Tensor, str]]:
    """``positions`` is an integer tensor of ``shape``; its value checks on real items.

    A real item's position is `NOT_SHOWN` or in ``[0, num_positions)`` (``None``: no bound).
    """
    _check_tensor("positions", positions, shape, kind="integer")
    if not validate_args or positions.numel() == 0:
        return []
    real_positions = positions if real is None else torch.where(real, positions, NOT_SHOWN)
    bad = (real_positions != NOT_SHOWN) & (real_positions < 0)
    expected = "non-negative"
    if num_positions is not None:
        bad = bad | (real_positions >= num_positions)
        expected = f"in [0, {num_positions}) (`num_positions`={num_positions})"
    # The bad position of largest magnitude (0 where there is none).
    found = _largest(torch.where(bad, real_positions, 0))
    message = (
        f"Expected `positions` to be {expected}, or {NOT_SHOWN} for an item not shown, but "
        "found {found}."
    )
    return [(~bad.any(), found, message)]


def check_binary(
    name: str, values: Tensor, real: Tensor | None
) -> list[tuple[Tensor, Tensor, str]]:
    """The value check that ``values`` are 0 or 1 on real items (none for bool tensors)."""
    if values.dtype == torch.bool or values.numel() == 0:
        return []
    real_values = values if real is None else torch.where(real, values, 0)
    bad = (real_values != 0) & (real_values != 1)
    found = _largest(torch.where(bad, real_values, 0))
    message = f"Expected `{name}` to be 0 or 1 (a click or none), but found {{found}}."
    return [(~bad.any(), found, message)]
