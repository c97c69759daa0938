"""The memory under a CPU step: kept by malloc from one step to the next, on huge pages where the launcher asked for them.

A training step on a CPU allocates and frees the same activations (1-30 MB
each) every step, and streams through them in element-wise ops. What those
cost beyond their arithmetic is paging: fresh page faults when freed memory
goes back to the kernel (`keep_freed_memory`), and page-table walks when
it comes in 4 KB pages (`heap_pages`; the launcher asks glibc for huge pages,
logbook/launch/launcher.py `with_huge_pages`).
"""

from __future__ import annotations

import ctypes
import os
import sys
from collections.abc import Mapping
from pathlib import Path

THP_MODE = Path("/sys/kernel/mm/transparent_hugepage/enabled")
"""The kernel's transparent huge page mode: always, madvise or never, the chosen one in brackets."""


def keep_freed_memory() -> bool:
    """Have glibc's malloc keep freed blocks for reuse rather than hand them back to the OS; True if it could.

    A training step on a CPU allocates and frees the same activations (1-30 MB
    each) every step. By default glibc serves blocks that large with fresh
    `mmap`s, or trims the heap once its top is free, so each step faults its
    memory in again, zero-filled by the kernel: thousands of page faults and
    milliseconds of system time a step. Kept, the second step finds its blocks
    already mapped. The cost is that the process keeps its peak heap resident,
    which a trainer does anyway. A no-op off glibc.
    """
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    m_trim_threshold, m_mmap_threshold = -1, -3
    # 32 MB is the largest mmap threshold glibc accepts on 64-bit; the trim threshold is
    # the free bytes the heap's top may hold before they go back: as many as an int says.
    return bool(mallopt(m_mmap_threshold, 32 << 20)) and bool(mallopt(m_trim_threshold, 2**31 - 1))


def heap_pages(env: Mapping[str, str] = os.environ, thp_mode: Path = THP_MODE) -> str:
    """How this process's malloc pages its memory, as `run_started` records it: "huge", or "4 KB (why)".

    Huge when glibc (2.35 or later) was started with `glibc.malloc.hugetlb=1`
    in `GLIBC_TUNABLES` and the kernel's transparent huge pages are `madvise`,
    or when they are `always`: then the kernel backs large regions with huge
    pages whatever malloc asks.
    """
    mode = _thp_mode(thp_mode)
    if mode == "always":
        return "huge"
    if mode != "madvise":
        return f"4 KB (transparent huge pages: {mode})"
    tunables = env.get("GLIBC_TUNABLES", "")
    setting = next((t.partition("=")[2] for t in reversed(tunables.split(":")) if t.startswith("glibc.malloc.hugetlb=")),
                   None)
    if setting != "1":
        return "4 KB (glibc.malloc.hugetlb not set)" if setting is None else f"4 KB (glibc.malloc.hugetlb={setting})"
    version = _glibc_version()
    if version is None:
        return "4 KB (not glibc)"
    if version < (2, 35):
        return f"4 KB (glibc {version[0]}.{version[1]} has no glibc.malloc.hugetlb)"
    return "huge"


def _thp_mode(path: Path) -> str:
    try:
        text = path.read_text()
    except OSError:
        return "not offered by this kernel"
    start, end = text.find("["), text.find("]")
    return text[start + 1 : end] if 0 <= start < end else text.strip() or "unknown"


def _glibc_version() -> tuple[int, int] | None:
    try:
        name, _, version = os.confstr("CS_GNU_LIBC_VERSION").partition(" ")  # "glibc 2.36"
        major, minor = version.split(".")[:2]
        return (int(major), int(minor)) if name == "glibc" else None
    except (ValueError, OSError, AttributeError, TypeError):
        return None
