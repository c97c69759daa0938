"""What a check that reads one file alone found, kept by the file's git blob: an unchanged file is not read again.

`verify` reads every record file and every event log. Most of them are the
same bytes as at the last `verify`: a lab's year has 14,000 record files and a
thousand logs, and a new commit changes a handful. A check whose verdict is a
function of one file's bytes (a record matches its own hash, a log's chain
holds, nothing follows a run's end) is therefore kept under the blob id git
gives those bytes, with the path, in a sealed cache (`core.statecache`).

A file is looked up only when git says the working tree holds what HEAD holds
there (`git status` lists it neither modified, staged, nor deleted; git
handles files changed within its own timestamp tick): then its bytes are the
blob's, and the kept verdict is theirs. Any other file is read and checked as
if nothing were kept. A verdict that also reads other files names them by a
path prefix (`depends_on`): the blobs of every file under it are part of its
key, and while any of them is changed, untracked or not a regular file, the
verdict is computed afresh. Checks that
compare many files with each other (order, scorecards, acknowledgements) are
not kept here.
"""

from __future__ import annotations

import bisect
import hashlib
from collections.abc import Callable
from typing import Any

from logbook.core import statecache
from logbook.core.project import Project
from logbook.records import gitbind
from logbook.records.verify_memo import code_digest

CACHE = "file-verdicts.json"
_VERSION = 1


class FileVerdicts:
    """Verdicts by (check, path, blob) for the entries folder of `project`, as HEAD and the working tree hold it."""

    def __init__(self, project: Project, *, use_cache: bool = True) -> None:
        self.project = project
        self._blobs: dict[str, str] = {}
        self._paths: list[str] = []  # every path in HEAD or changed in the tree, sorted: for `depends_on`
        self._kept: dict[str, Any] = {}
        self._seen: dict[str, Any] = {}
        if not use_cache or gitbind.head_commit(project.root) is None:
            return
        folder = project.entries.relative_to(project.root).as_posix()
        tree = gitbind.tree_files(project.root, "HEAD", folder)
        dirty = set(_changed(project, folder))
        self._paths = sorted(tree.keys() | dirty)
        # Regular files only: a symlink's blob is where it points, not the bytes a reader gets through it.
        self._blobs = {p: blob for p, (mode, blob) in tree.items() if mode in ("100644", "100755") and p not in dirty}
        kept = statecache.load(project, CACHE)
        if isinstance(kept, dict) and kept.get("version") == _VERSION and kept.get("code") == code_digest() \
                and isinstance(kept.get("verdicts"), dict):
            self._kept = kept["verdicts"]  # another version of the checks may find more: nothing is kept

    def get(self, check: str, rel: str, compute: Callable[[], Any], *, depends_on: str | None = None) -> Any:
        """`compute()`'s answer for the file at `rel` (repository-relative), kept when git vouches for its bytes
        (and for those of every file whose path starts with `depends_on`)."""
        blob = self._blobs.get(rel)
        if blob is None:
            return compute()
        key = f"{check}\0{rel}\0{blob}"
        if depends_on is not None:
            state = self._state_under(depends_on)
            if state is None:
                return compute()
            key += "\0" + state
        value = self._kept[key] if key in self._kept else compute()
        self._seen[key] = value
        return value

    def _state_under(self, prefix: str) -> str | None:
        """A digest of the blobs of every file under `prefix`; None while one is not a clean regular file."""
        i = bisect.bisect_left(self._paths, prefix)
        parts = []
        while i < len(self._paths) and self._paths[i].startswith(prefix):
            blob = self._blobs.get(self._paths[i])
            if blob is None:
                return None
            parts.append(f"{self._paths[i]}\0{blob}")
            i += 1
        return hashlib.sha256("\n".join(parts).encode("utf-8", "surrogateescape")).hexdigest()

    def save(self) -> None:
        """Keep the verdicts of files HEAD still holds as they are (a verdict of an older blob is dropped)."""
        if not self._blobs or not self._seen.keys() - self._kept.keys():
            return
        merged = {**self._kept, **self._seen}
        live = {k: v for k, v in merged.items() if self._blobs.get(k.split("\0")[1]) == k.split("\0")[2]}
        statecache.save(self.project, CACHE, {"version": _VERSION, "code": code_digest(), "verdicts": live})


def _changed(project: Project, folder: str) -> list[str]:
    """Paths under `folder` whose working-tree or staged bytes may differ from HEAD's, and untracked ones."""
    out = gitbind.git_bytes(project.root, "--no-optional-locks", "status", "--porcelain=v1", "-z",
                            "--untracked-files=all", "--no-renames", "--", folder)
    return [entry[3:].decode("utf-8", "surrogateescape") for entry in out.split(b"\0") if len(entry) > 3]
