"""How much memory this machine has free, and the error for work that would not fit in
it: refused up front with the figure, never a MemoryError part-way through."""

from __future__ import annotations

import os

from superopt.ir.errors import IRError

# Below this many bytes nothing asks the system how much memory is free (it costs a file
# read, and small graphs are run millions of times by the generator).
SMALL_BYTES = 1 << 30


class MemoryLimitError(IRError):
    """Work whose data would not fit in this machine's memory."""


def available_bytes() -> int:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 1 << 62  # unknown: do not refuse


def human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024:
            return f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} PiB"


def ensure_fits(need: int, what: str) -> None:
    """Raise MemoryLimitError when `need` bytes exceed the memory available now."""
    if need < SMALL_BYTES:
        return
    have = available_bytes()
    if need > have:
        raise MemoryLimitError(f"{what} needs about {human_bytes(need)}, more than the "
                               f"{human_bytes(have)} of memory available")


__all__ = ["MemoryLimitError", "available_bytes", "ensure_fits", "human_bytes"]
