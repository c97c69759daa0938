"""What the remotes have seen: a record a remote-tracking branch holds, changed or missing here.

`history` proves that this clone's history never changed a committed record;
a history rewritten here (an amended first version, a reset that dropped
commits) leaves no trace in it. What a remote already received still holds
the bytes as they were, so each remote-tracking branch (`refs/remotes/*`, as
last fetched) is compared with HEAD:

- a record both hold with different bytes is a problem (`remote_differs`);
- a log both hold must agree: one must start with the other's complete lines;
- a record the remote has, HEAD lacks and an earlier HEAD of this clone held
  (its reflog, the last 200 moves) was dropped here by a reset or a rewrite:
  a problem (`remote_dropped`);
- other records the remote has and HEAD lacks are one warning per branch
  (`remote_missing`): most likely not pulled yet.

Nothing is fetched: this reads what the last `git fetch`/`git pull` brought.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from logbook.core.project import Project
from logbook.core.recordkinds import classify
from logbook.records import gitbind

_REFLOG_DEPTH = 200  # earlier HEADs looked at for a record dropped here


@dataclass(frozen=True)
class RemoteFinding:
    """One record where a remote-tracking branch and HEAD disagree."""

    path: str
    """Relative to the repository root."""
    kind: str
    """remote_differs | remote_dropped | remote_missing"""
    had: str
    """The remote-tracking branch, e.g. `origin/main`."""
    lost: str
    """Always `HEAD`."""
    message: str
    """One sentence for a person."""


def check_remotes(project: Project) -> list[RemoteFinding]:
    """Compare HEAD with every remote-tracking branch, for records and logs under the entries folder."""
    root = project.root
    if gitbind.head_commit(root) is None:
        return []
    folder = project.config.entries_dir.strip("/")
    refs = _remote_refs(root)
    if not refs:
        return []
    mine = _tree(root, "HEAD", folder)
    found: list[RemoteFinding] = []
    for name, commit in refs:
        theirs = _tree(root, commit, folder)
        differ = [p for p, blob in theirs.items() if p in mine and mine[p] != blob]
        found += _differing(root, name, differ, mine, theirs, folder)
        missing = sorted(p for p in theirs if p not in mine and classify(p[len(folder) + 1:]) != "derived")
        dropped = _held_before(root, {p: theirs[p] for p in missing})
        for p, old in dropped.items():
            found.append(RemoteFinding(p, "remote_dropped", name, "HEAD", (
                f"{p} is in {name} and this clone had it ({old[:7]}, in the reflog), but HEAD does not: "
                "it was dropped here by a reset or a rewrite")))
        missing = [p for p in missing if p not in dropped]
        if missing:
            more = f" and {len(missing) - 3} more" if len(missing) > 3 else ""
            found.append(RemoteFinding(missing[0], "remote_missing", name, "HEAD", (
                f"{name} has {len(missing)} record(s) HEAD does not: {', '.join(missing[:3])}{more} "
                f"(not pulled yet, or dropped here: `git pull` brings them)")))
    return found


def _held_before(root: Path, wanted: dict[str, str]) -> dict[str, str]:
    """Paths whose exact blob an earlier HEAD of this clone (its reflog) held: path -> that commit."""
    if not wanted:
        return {}
    earlier = gitbind.git(root, "reflog", "--format=%H", "-n", str(_REFLOG_DEPTH), check=False).split()
    earlier = list(dict.fromkeys(earlier))  # one look per commit, newest first
    specs = [f"{c}:{p}" for c in earlier for p in wanted]
    if not specs:
        return {}
    out = gitbind.git(root, "cat-file", "--batch-check=%(objectname)", input="".join(s + "\n" for s in specs).encode())
    held: dict[str, str] = {}
    for spec, line in zip(specs, out.splitlines()):
        commit, path = spec.split(":", 1)
        if path not in held and line.strip() == wanted[path]:
            held[path] = commit
    return held


def _remote_refs(root: Path) -> list[tuple[str, str]]:
    out = gitbind.git(root, "for-each-ref", "--format=%(refname:short)%00%(objectname)%00%(symref)", "refs/remotes")
    refs = []
    for line in out.splitlines():
        name, commit, symref = (line.split("\0") + ["", ""])[:3]
        if name and not symref:
            refs.append((name, commit))
    return refs


def _tree(root: Path, rev: str, folder: str) -> dict[str, str]:
    """Path -> blob id of every record and log `rev` holds under the entries folder."""
    out = gitbind.git_bytes(root, "ls-tree", "-r", "-z", rev, "--", folder)
    files = {}
    for entry in out.split(b"\0"):
        if entry:
            meta, _, raw = entry.partition(b"\t")
            path = raw.decode("utf-8", "surrogateescape")
            if classify(path[len(folder) + 1:]) != "derived":
                files[path] = meta.split()[2].decode()
    return files


def _differing(root: Path, name: str, paths: list[str], mine: dict[str, str], theirs: dict[str, str],
               folder: str) -> list[RemoteFinding]:
    logs = [p for p in paths if classify(p[len(folder) + 1:]) == "log"]
    blobs = gitbind.read_blobs(root, sorted({b for p in logs for b in (mine[p], theirs[p])}))
    found = []
    for p in sorted(paths):
        if p in logs and _one_extends_the_other(blobs.get(mine[p]) or b"", blobs.get(theirs[p]) or b""):
            continue
        noun = "log" if p in logs else "record"
        found.append(RemoteFinding(p, "remote_differs", name, "HEAD", (
            f"{p} ({noun}) differs from the version {name} has: it was changed here after the remote saw it")))
    return found


def _one_extends_the_other(a: bytes, b: bytes) -> bool:
    """Two versions of an append-only log agree when one starts with the other's complete lines."""
    a_done, b_done = a[: a.rfind(b"\n") + 1], b[: b.rfind(b"\n") + 1]
    return b.startswith(a_done) or a.startswith(b_done)
