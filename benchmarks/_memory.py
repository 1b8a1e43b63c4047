"""Peak resident set size of the running process, for the CPU memory columns (Linux only).

Read from ``VmHWM``, not ``ru_maxrss``: after ``exec`` Linux starts a child's ``ru_maxrss`` at
its parent's peak, which would hide any growth below it.
"""

from __future__ import annotations

import ctypes


def peak_rss_kib() -> int:
    """Peak resident set size since the last :func:`reset_peak_rss`, in KiB."""
    with open("/proc/self/status") as status:
        line = next(line for line in status if line.startswith("VmHWM:"))
    return int(line.split()[1])


def reset_peak_rss() -> int:
    """Hand freed memory back to the OS, reset the peak to the current RSS and return it (KiB)."""
    ctypes.CDLL("libc.so.6").malloc_trim(0)
    with open("/proc/self/clear_refs", "w") as clear_refs:
        clear_refs.write("5")  # resets VmHWM to the current RSS
    return peak_rss_kib()
