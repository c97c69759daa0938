"""Durable file writes (atomic replace, fsync'd appends) and the tail of an append-only log.

Every file the logbook writes goes through here, so that a kill at any moment
leaves either the old content or the new one, never half of it; and every
reader that must find where a log's complete lines end asks `log_tail`, and
reads the records among them with `json_records`.
"""

from __future__ import annotations

import fcntl
import json
import os
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO


def fsync_dir(path: Path) -> None:
    """Flush a directory entry (a rename or a new file) to disk."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass  # some filesystems do not support fsync on directories
    finally:
        os.close(fd)


def _umask() -> int:
    """The process's umask, read without changing it (os.umask can only be read by setting it)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    old = os.umask(0o022)
    os.umask(old)
    return old


def new_file_mode() -> int:
    """The mode `open()` would give a new file: 0666 less the umask.

    Temporary files are created 0600 for safety; the file a team shares must
    end up with the permissions its creator's umask asks for, like any other.
    """
    return 0o666 & ~_umask()


def _temp_beside(path: Path) -> tuple[int, str]:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.fchmod(fd, new_file_mode())
    return fd, tmp


def _durable_temp(path: Path, data: bytes) -> str:
    """A fsync'd temporary file holding `data`, next to `path` (same filesystem, so a rename is atomic)."""
    fd, tmp = _temp_beside(path)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
    except OSError as e:  # a full disk shows here: name the file meant, not a nameless descriptor
        _unlink_quietly(tmp)
        raise OSError(e.errno, e.strerror, str(path)) from e
    except BaseException:
        _unlink_quietly(tmp)
        raise
    return tmp


@contextmanager
def atomic_text_writer(path: Path) -> Iterator[Any]:
    """A text file to stream into; it replaces `path` whole when the block ends, or not at all."""
    path = Path(path)
    fd, tmp = _temp_beside(path)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        _unlink_quietly(tmp)
        raise
    fsync_dir(path.parent)


def _unlink_quietly(path: str | Path) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write `data` to `path` through a temporary file, fsync and rename."""
    path = Path(path)
    tmp = _durable_temp(path, data)
    try:
        os.replace(tmp, path)
    except BaseException:
        _unlink_quietly(tmp)
        raise
    fsync_dir(path.parent)


def atomic_create_bytes(path: Path, data: bytes) -> None:
    """Like `atomic_write_bytes`, but never over an existing file: FileExistsError if the name is taken.

    The complete file is linked into place, so a reader never sees it half
    written and two writers racing for one name cannot both win.
    """
    path = Path(path)
    tmp = _durable_temp(path, data)
    try:
        os.link(tmp, path)
    finally:
        _unlink_quietly(tmp)
    fsync_dir(path.parent)


def atomic_write_text(path: Path, text: str) -> None:
    """UTF-8 text variant of `atomic_write_bytes`."""
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: Path, obj: Any) -> None:
    """Write `obj` as indented, key-sorted JSON, atomically."""
    atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=True, ensure_ascii=False) + "\n")


@contextmanager
def exclusive(lock_path: Path) -> Iterator[None]:
    """Hold an exclusive lock on `lock_path` (created if missing): a check and the write it guards run alone.

    The lock is released by the kernel when the holder dies, so a killed
    process never leaves it stuck.
    """
    lock_path = Path(lock_path)
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the lock


@dataclass(frozen=True)
class LogTail:
    """Where an append-only log's complete lines end, and the last of them."""

    size: int
    """The file's size in bytes."""
    complete_end: int
    """Offset just past the last newline: what follows it (size - complete_end bytes) is a torn line."""
    last_line: bytes | None
    """The last complete line, without its newline; None when the file has no newline."""


def log_tail(f: BinaryIO, block: int = 1 << 16) -> LogTail:
    """Scan an open log backwards from its end for its last complete line.

    A log is appended to a line at a time, so a kill mid-append leaves a torn
    last line with no newline; readers and the next writer must know where the
    complete part ends. The window read grows fourfold until it holds the last
    line whole, so a line longer than `block` costs a few reads, not a scan.
    """
    size = f.seek(0, os.SEEK_END)
    span = block
    while True:
        start = max(0, size - span)
        f.seek(start)
        chunk = f.read(size - start)
        end = chunk.rfind(b"\n")
        if end >= 0:
            prev = chunk.rfind(b"\n", 0, end)
            if prev >= 0 or start == 0:
                return LogTail(size, start + end + 1, chunk[prev + 1 : end])
        if start == 0:
            return LogTail(size, 0, None)  # no newline at all: the whole file is one torn line
        span *= 4


def json_records(lines: Iterable[bytes]) -> list[dict[str, Any]]:
    """The JSON objects among a log's lines, in order: a line that does not parse (cut, torn) or is no object is
    skipped."""
    out = []
    for raw in lines:
        try:
            rec = json.loads(raw)
        except ValueError:
            continue
        if isinstance(rec, dict):
            out.append(rec)
    return out
