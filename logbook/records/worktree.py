"""The working tree against HEAD: what is on disk now, before it is committed.

`history` proves that committed versions agree with each other; this module
checks the last step, from HEAD to the files a command is about to read:

- a ``record`` HEAD holds must be on disk with the same bytes (else edited, named
  by line, or deleted);
- a ``log`` HEAD holds must still start with every complete line HEAD has;
- no record or log (nor a folder on the way to one) may be a symlink: a record
  read through one could be any file on the machine;
- a record or log that git ignores can never be committed, so it can never be
  verified: it is listed (`ignored`) so `verify` and `commit` can say so.

Derived files (see `recordkinds`) are not checked: they are regenerated.
"""

from __future__ import annotations

import difflib
import os
from dataclasses import dataclass
from pathlib import Path

from logbook.core.project import Project
from logbook.core.recordkinds import TRACKED, classify
from logbook.records import gitbind


@dataclass(frozen=True)
class WorkFinding:
    """One file on disk that is not as HEAD committed it, or cannot be trusted."""

    path: str
    """Relative to the repository root."""
    kind: str
    """edited | deleted | log_lines_missing | log_deleted | symlink | ignored"""
    message: str
    """One sentence for a person."""
    line: int | None = None
    """First line that differs, where there is one."""


def check_worktree(project: Project) -> list[WorkFinding]:
    """Every record and log on disk that differs from HEAD, is a symlink, or is ignored by git."""
    folder = project.config.entries_dir.strip("/")
    found = _symlinks(project, folder)
    linked = {f.path for f in found}
    if gitbind.head_commit(project.root) is not None:
        found += [f for f in _against_head(project, folder) if f.path not in linked]
    found += ignored_records(project)
    return found


def _against_head(project: Project, folder: str) -> list[WorkFinding]:
    root = project.root
    out = gitbind.git_bytes(root, "--literal-pathspecs", "diff", "--raw", "-z", "--no-renames", "HEAD", "--", folder)
    tokens = out.split(b"\0")
    changes = [(tokens[i][1:].decode().split(), tokens[i + 1].decode("utf-8", "surrogateescape"))
               for i in range(0, len(tokens) - 1, 2) if tokens[i].startswith(b":")]
    changes = [(meta, path) for meta, path in changes if meta[4] != "A" and classify(path[len(folder) + 1:]) in TRACKED]
    blobs = gitbind.read_blobs(root, [meta[2] for meta, _ in changes])
    found = []
    for meta, path in changes:
        kind = classify(path[len(folder) + 1:])
        finding = _compare(root, path, kind, meta[4], blobs.get(meta[2]) or b"")
        if finding is not None:
            found.append(finding)
    return found


def _compare(root: Path, path: str, kind: str, status: str, old: bytes) -> WorkFinding | None:
    if status == "D" or not (root / path).is_file():
        return WorkFinding(path, "deleted" if kind == "record" else "log_deleted",
                           f"{path} was deleted from the working tree; HEAD has it committed "
                           f"(restore it: `git checkout HEAD -- {path}`)")
    new = (root / path).read_bytes()
    if kind == "record":
        if new == old:
            return None  # only the file's stat data changed
        line, what = first_change(old, new)
        return WorkFinding(path, "edited", f"{path} was edited after HEAD committed it: {what}", line)
    complete = old[: old.rfind(b"\n") + 1]
    if new.startswith(complete):
        return None
    old_lines, new_lines = complete.splitlines(), new.splitlines()
    line = next((i + 1 for i, (a, b) in enumerate(zip(old_lines, new_lines)) if a != b),
                min(len(old_lines), len(new_lines)) + 1)
    return WorkFinding(path, "log_lines_missing", (
        f"{path}: HEAD committed {len(old_lines)} lines, the file now has {len(new_lines)}; "
        f"they differ from line {line} (lines were removed or replaced)"), line)


def _symlinks(project: Project, folder: str) -> list[WorkFinding]:
    top = project.root / folder
    if top.is_symlink():
        return [_linked(project.root, top)]
    found: list[WorkFinding] = []
    stack = [(str(top), "")]
    while stack:  # os.scandir: the entry type comes with the listing, no stat per file
        path, rel = stack.pop()
        try:
            entries = list(os.scandir(path))
        except (FileNotFoundError, NotADirectoryError):
            continue
        for e in entries:
            sub = f"{rel}{e.name}"
            if e.is_symlink():
                # Derived files (plots, day files) may be links: the renderers only follow those that stay inside.
                if classify(sub) != "derived":
                    found.append(_linked(project.root, Path(e.path)))
            elif e.is_dir():
                stack.append((e.path, sub + "/"))
    return sorted(found, key=lambda f: f.path)


def _linked(root: Path, p: Path) -> WorkFinding:
    rel = p.relative_to(root).as_posix()
    try:
        target = os.readlink(p)
    except OSError:
        target = "?"
    return WorkFinding(rel, "symlink", f"{rel} is a symlink (to {target}): the logbook reads and writes only "
                                       "plain files inside its folder")


def ignored_records(project: Project) -> list[WorkFinding]:
    """Records and logs under the entries folder that git ignores (never committable, never verifiable)."""
    folder = project.config.entries_dir.strip("/")
    out = gitbind.git_bytes(project.root, "--literal-pathspecs", "ls-files", "-z", "--others", "--ignored",
                            "--exclude-standard", "--", folder)
    paths = [p.decode("utf-8", "surrogateescape") for p in out.split(b"\0") if p]
    return [WorkFinding(p, "ignored", f"{p} is ignored by git, so it can never be committed or verified "
                                      f"(`git check-ignore -v {p}` names the rule)")
            for p in paths if classify(p[len(folder) + 1:]) in TRACKED]


def first_change(old: bytes, new: bytes) -> tuple[int, str]:
    """The first changed line, in words: `line 12 changed: 'a' -> 'b'`."""
    a = old.decode("utf-8", "replace").splitlines()
    b = new.decode("utf-8", "replace").splitlines()
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if tag == "equal":
            continue
        if tag == "replace":
            return j1 + 1, f"line {j1 + 1} changed: {_clip(a[i1])} -> {_clip(b[j1])}"
        if tag == "delete":
            return j1 + 1, f"{_span(i1, i2)} removed: {_first_text(a[i1:i2])}"
        return j1 + 1, f"{_span(j1, j2)} added: {_first_text(b[j1:j2])}"
    return 1, "the line endings or the final newline changed"


def _span(start: int, end: int) -> str:
    return f"line {start + 1} was" if end - start == 1 else f"lines {start + 1}-{end} were"


def _first_text(lines: list[str]) -> str:
    return _clip(next((ln for ln in lines if ln.strip()), lines[0]))


def _clip(s: str, n: int = 80) -> str:
    return repr(s if len(s) <= n else s[:n] + "…")
