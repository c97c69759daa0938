"""One live launcher per run id: a lock file that dies with its holder.

The lock is an `flock` on a file that names the holder (pid, host, time).
The kernel releases an flock when its process dies, however it dies, so a
lock file left behind by a killed launcher is recognised as stale and taken
over, while a live holder is refused with its pid.
"""

from __future__ import annotations

import fcntl
import os
import socket
from pathlib import Path

from logbook.core.errors import RefusedError
from logbook.eventlog.chain import utc_now


class RunLock:
    """An exclusive, non-blocking lock held for the lifetime of a launch."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._fd: int | None = None

    def acquire(self, what: str = "this run") -> str | None:
        """Take the lock or raise RefusedError naming the live holder.

        Returns a message when a stale lock left by a dead process was taken
        over, else None.
        """
        self.path.parent.mkdir(parents=True, exist_ok=True)
        while True:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o666)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = _read(fd)
                os.close(fd)
                raise RefusedError(
                    f"{what} is already live ({holder or 'holder unknown'})",
                    hint="wait for it to end, or stop it (Ctrl-C or SIGTERM to its launcher) first",
                ) from None
            # The holder may have unlinked the file between our open and our
            # lock: then we hold a lock on a dead inode and must start over.
            try:
                same = os.stat(self.path).st_ino == os.fstat(fd).st_ino
            except FileNotFoundError:
                same = False
            if not same:
                os.close(fd)
                continue
            break
        previous = _read(fd)
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {os.getpid()} on {socket.gethostname()} since {utc_now()}\n".encode(), 0)
        self._fd = fd
        if previous:
            return f"took over a stale lock on {what} ({previous}, no longer running)"
        return None

    def fileno(self) -> int:
        """The locked descriptor: a child that inherits it holds the lock while it lives."""
        if self._fd is None:
            raise ValueError("the lock is not held")
        return self._fd

    def release(self) -> None:
        if self._fd is None:
            return
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass
        fcntl.flock(self._fd, fcntl.LOCK_UN)
        os.close(self._fd)
        self._fd = None

    def __enter__(self) -> RunLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def dead_holder(path: Path) -> str | None:
    """The holder a lock file names when that process is gone (it was killed with its lock held), else None.

    Read, never locked: taking the lock even for a moment could refuse a
    launcher starting that same moment. Only a holder on this host can be
    known dead; one elsewhere, or a file that names none, counts as alive.
    """
    try:
        text = Path(path).read_text("utf-8", errors="replace").strip()
    except OSError:
        return None
    parts = text.split()
    if len(parts) < 4 or parts[0] != "pid" or parts[2] != "on" or parts[3] != socket.gethostname():
        return None
    try:
        os.kill(int(parts[1]), 0)
    except ProcessLookupError:
        return text
    except (PermissionError, ValueError):
        return None
    return None


def _read(fd: int) -> str:
    try:
        return os.pread(fd, 512, 0).decode("utf-8", "replace").strip()
    except OSError:
        return ""
