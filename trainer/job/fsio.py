"""Durable small writes of the trainer's own files (compile-cache stamps, torchrun error files, rank marks).

A file is written beside its final name, flushed, then renamed over it, and
the folder's entry is flushed too: a kill at any moment leaves the old file or
the new one, never half of one. Checkpoints use `fsync_dir` for their folders.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any


def fsync_dir(path: Path | str) -> None:
    """Flush a folder's entries (a rename, a new file) to disk; a no-op where the filesystem refuses."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass  # not every filesystem can fsync a folder
    finally:
        os.close(fd)


def atomic_write_json(path: Path | str, obj: Any) -> None:
    """`obj` as indented, key-sorted JSON at `path`, all of it or none."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", encoding="utf-8", dir=path.parent, prefix=f".{path.name}.",
                                     suffix=".tmp", delete=False) as f:
        json.dump(obj, f, indent=2, sort_keys=True, ensure_ascii=False)
        f.write("\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(f.name, path)
    fsync_dir(path.parent)
