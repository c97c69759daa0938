"""The few fields a view needs from each record of a folder, kept by file, so a view reads only what changed.

A lab's year holds thousands of notes and reviews, one file each. The
chronicle needs four fields of each note (which entry it corrects, when, by
whom) and a few of each review, yet reading every file costs more than the
rest of a one-day render together. So the fields are kept in a derived index
under `.logbook/`, one per folder and field set, keyed by each file's size,
modification and change times and inode, as git's own index keeps the stat of
every tracked file. A file whose stat differs, and a file written too recently
to be told from a second write in the same clock tick, is read again.

The index is derived data: rebuilt when missing, never committed, sealed like
every cache under `.logbook/` (a planted or foreign index is not read), and
never read by `verify`, which reads every record itself. Records are immutable
once written, so a changed stat is rare: a pull adds files, it does not edit
them.
"""

from __future__ import annotations

import hashlib
import os
import time
from pathlib import Path
from typing import Any

from logbook.core import statecache
from logbook.core.project import Project
from logbook.eventlog.files import read_record, record_files

_VERSION = 1
_RACY_NS = 2_000_000_000
"""A file changed within this long of the index being written is not kept: a second write in the same tick of a
coarse clock would leave its stat as it was."""


def folder_records(project: Project, folder: Path, fields: tuple[str, ...]) -> list[dict[str, Any]]:
    """The readable records of `folder` in id order, as `iter_folder` reads them, each cut to `fields`."""
    which = "\0".join([Path(folder).resolve().as_posix(), *fields])
    name = f"index-{hashlib.sha256(which.encode()).hexdigest()[:16]}.json"
    cache = statecache.load(project, name)
    kept: dict[str, Any] = {}
    if isinstance(cache, dict) and cache.get("v") == _VERSION and cache.get("fields") == list(fields) \
            and isinstance(cache.get("files"), dict):
        kept = cache["files"]
    now = time.time_ns()
    out: list[dict[str, Any]] = []
    files: dict[str, Any] = {}
    dirty = False
    for path in record_files(folder):
        try:
            st = os.stat(path)
        except OSError:
            continue
        stat = [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino]
        hit = kept.get(path.name)
        if isinstance(hit, list) and len(hit) == 2 and hit[0] == stat:
            cut = hit[1]
        else:
            rec = read_record(path)
            cut = None if rec is None else {k: rec[k] for k in fields if k in rec}
            dirty = True
        if isinstance(cut, dict):
            out.append(cut)
        if now - max(st.st_mtime_ns, st.st_ctime_ns) > _RACY_NS:
            files[path.name] = [stat, cut]
        else:
            dirty = True
    if dirty or len(files) != len(kept):
        statecache.save(project, name, {"v": _VERSION, "fields": list(fields), "files": files})
    return out
