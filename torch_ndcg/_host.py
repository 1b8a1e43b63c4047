"""Host read-backs: where they are allowed, and all of a call's values in one.

On an accelerator every value read back to the host (``.item()``, ``bool(tensor)``,
``.tolist()``, a data-dependent shape) stalls the stream, and under ``torch.compile`` it breaks
the graph. So the package reads values back only on the CPU in eager mode (`may_read_back`),
and there at most once per call: the input checks hand their values over as a
`DeferredCheck`, which the kernel reads together with the values that pick its fast
paths (`read_together`). Elsewhere checks are device-side assertions
(`assert_on_device`) and the kernels take their branch-free paths.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor


def may_read_back(device: torch.device) -> bool:
    """Whether a value on ``device`` may be read back: on the CPU, outside ``torch.compile``."""
    return device.type == "cpu" and not torch.compiler.is_compiling()


@dataclass(frozen=True)
class DeferredCheck:
    """An input check waiting for its values to reach the host.

    Attributes:
        values: 1-D tensor of the values the check needs (reductions of the input).
        judge: takes those values as floats, raises on bad input, and returns what it learnt.
    """

    values: Tensor
    judge: Callable[[list[float]], Any]

    def resolve(self) -> Any:
        """Read the values back (one read-back) and judge them."""
        return self.judge(read_together([self.values])[0])


def read_together(tensors: Sequence[Tensor | None]) -> list[list[float]]:
    """Each tensor's values as floats, from one read-back of them all ([] for ``None``)."""
    present = [t.reshape(-1).to(torch.float64) for t in tensors if t is not None]
    flat: list[float] = (
        (torch.cat(present) if len(present) > 1 else present[0]).tolist() if present else []
    )
    out: list[list[float]] = []
    start = 0
    for tensor in tensors:  # a loop, not a comprehension: no Python call
        size = 0 if tensor is None else tensor.numel()
        out.append(flat[start : start + size])
        start += size
    return out


# Raise a message where a bool scalar tensor is False, without a read-back:
# ``torch._assert_async``. On CUDA a device-side assertion (the error surfaces at the next
# synchronisation, and the CUDA context cannot be used afterwards, as with torch's own losses on
# bad targets); on the CPU and under ``torch.compile`` a ``RuntimeError``; on ``meta`` tensors
# nothing.
assert_on_device = torch._assert_async
