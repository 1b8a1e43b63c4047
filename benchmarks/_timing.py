"""Shared timing helper for the benchmark scripts: best of several runs, in milliseconds."""

from __future__ import annotations

import time
from collections.abc import Callable


def best_ms(fn: Callable[[], object], *, repeats: int = 7, warmup: int = 1) -> float:
    """Best wall time of ``fn()`` over ``repeats`` runs after ``warmup`` runs, in milliseconds."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times) * 1e3
