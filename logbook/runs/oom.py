"""The kernel's own count of OOM kills in this process's memory cgroup: evidence, not a guess.

A worker killed by SIGKILL leaves no record of who sent it: the kernel's OOM
killer, a scheduler's hard stop and a person's `kill -9` look the same from
the exit status. The memory cgroup counts the OOM killer's kills
(`oom_kill` in cgroup v2's `memory.events`, or in v1's `memory.oom_control`),
so an attempt that records the count when it starts lets the next one say
whether the OOM killer struck in between. Where there is no such file (no
cgroup, macOS), the count is None and nothing is claimed either way.
"""

from __future__ import annotations

from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")


def oom_kill_count(proc_cgroup: Path = Path("/proc/self/cgroup"), root: Path = CGROUP_ROOT) -> int | None:
    """OOM kills the kernel counted in this process's memory cgroup, or None where it keeps no count."""
    try:
        lines = proc_cgroup.read_text("utf-8").splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, path = (line.split(":", 2) + ["", ""])[:3]
        rel = path.lstrip("/")
        if controllers == "":  # cgroup v2: one unified hierarchy
            found = _read_count(root / rel / "memory.events")
        elif "memory" in controllers.split(","):
            found = _read_count(root / "memory" / rel / "memory.oom_control")
        else:
            continue
        if found is not None:
            return found
    return None


def _read_count(path: Path) -> int | None:
    try:
        text = path.read_text("utf-8")
    except OSError:
        return None
    for line in text.splitlines():
        key, _, value = line.partition(" ")
        if key == "oom_kill" and value.strip().isdigit():
            return int(value.strip())
    return None


def oom_kills_between(before: object, after: object) -> int | None:
    """OOM kills counted between two readings (None: either reading is missing, or the cgroup changed)."""
    if isinstance(before, bool) or isinstance(after, bool) or not isinstance(before, int) or not isinstance(after, int):
        return None
    return after - before if after >= before else None
