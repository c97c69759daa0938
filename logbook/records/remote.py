"""What the remotes have seen: a record a remote-tracking branch holds, changed or missing here.

`history` proves that this clone's history never changed a committed record;
a history rewritten here (an amended first version, a reset that dropped
commits) leaves no trace in it. What a remote already received still holds
the bytes as they were, so each remote-tracking branch (`refs/remotes/*`, as
last fetched) is compared with HEAD:

- a record both hold with different bytes is a problem (`remote_differs`);
- a log both hold must agree: one must start with the other's complete lines;
- a record the remote has, HEAD lacks and an earlier tip of the checked-out
  branch held (its reflog, the last 200 moves) was dropped here by a reset or
  a rewrite: a problem (`remote_dropped`). The branch's own reflog, not HEAD's:
  HEAD's also lists every other branch checked out, whose records this branch
  never had;
- a record a remote-tracking branch held at an earlier tip (its reflog: what
  earlier fetches and pushes saw) that neither its tip nor HEAD holds now was
  erased by a force-push (`remote_erased`): a problem on the branch this one
  tracks, a warning on any other (a pull request's branch rewritten by its author);
- other records the branch this one tracks (or the remote's default branch) has
  and HEAD lacks are one warning (`remote_missing`): most likely not pulled yet.
  Other branches' records are theirs until they are merged: not a finding.

Nothing is fetched: this reads what the last `git fetch`/`git pull` brought.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from logbook.core.project import Project
from logbook.core.recordkinds import TRACKED, classify
from logbook.records import gitbind
from logbook.core.textfmt import plural

_REFLOG_DEPTH = 200  # earlier HEADs looked at for a record dropped here


@dataclass(frozen=True)
class RemoteFinding:
    """One record where a remote-tracking branch and HEAD disagree."""

    path: str
    """Relative to the repository root."""
    kind: str
    """remote_differs | remote_dropped | remote_erased | remote_erased_elsewhere | remote_missing"""
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
    branch = gitbind.git(root, "symbolic-ref", "-q", "HEAD", check=False).strip() or "HEAD"
    followed = _followed(root, branch)
    found: list[RemoteFinding] = []
    for name, commit in refs:
        theirs = _tree(root, commit, folder)
        differ = [p for p, blob in theirs.items() if p in mine and mine[p] != blob]
        found += _differing(root, name, differ, mine, theirs, folder)
        found += _erased(root, name, commit, mine, theirs, folder, upstream=name in followed)
        missing = sorted(p for p in theirs if p not in mine and classify(p[len(folder) + 1:]) in TRACKED)
        dropped = _held_before(root, {p: theirs[p] for p in missing}, branch)
        for p, old in dropped.items():
            found.append(RemoteFinding(p, "remote_dropped", name, "HEAD", (
                f"{p} is in {name} and this branch had it ({old[:7]}, in its reflog), but HEAD does not: "
                "it was dropped here by a reset or a rewrite")))
        missing = [p for p in missing if p not in dropped]
        if missing and name in followed:
            more = f" and {len(missing) - 3} more" if len(missing) > 3 else ""
            found.append(RemoteFinding(missing[0], "remote_missing", name, "HEAD", (
                f"{name} has {plural(len(missing), 'record')} HEAD does not: {', '.join(missing[:3])}{more} "
                f"(not pulled yet: `git pull` brings them)")))
    return found


def _followed(root: Path, branch: str) -> set[str]:
    """The remote-tracking branches whose records HEAD should have.

    The one `branch` tracks, its namesake on each remote (`origin/main` for
    `main`, where no upstream was set), and each remote's default branch.
    """
    out = {gitbind.git(root, "rev-parse", "--abbrev-ref", "-q", f"{branch}@{{upstream}}", check=False).strip()}
    if branch.startswith("refs/heads/"):
        out |= {f"{r}/{branch.removeprefix('refs/heads/')}" for r in gitbind.git(root, "remote", check=False).split()}
    heads = gitbind.git(root, "for-each-ref", "--format=%(symref:short)", "refs/remotes/*/HEAD", check=False)
    return {n for n in out | set(heads.split()) if n and "@{" not in n}


def _erased(root: Path, name: str, tip: str, mine: dict[str, str], theirs: dict[str, str], folder: str,
            upstream: bool) -> list[RemoteFinding]:
    """Records `name` held at an earlier tip (its reflog) that neither its tip nor HEAD holds: a force-push erased them."""
    earlier = [c for c in dict.fromkeys(_reflog(root, f"refs/remotes/{name}")) if c != tip]
    if not earlier:
        return []
    # Earlier tips still inside the tip's history were fast-forwarded, not erased: one walk finds the rest.
    # (--ignore-missing: a tip git has since pruned away cannot be read either way.)
    outside = set(gitbind.git(root, "rev-list", "--ignore-missing", *earlier, "--not", tip, check=False).split())
    found: list[RemoteFinding] = []
    seen: set[str] = set()
    for old in (c for c in earlier if c in outside):
        gone = {p: blob for p, blob in _tree(root, old, folder).items()
                if p not in seen and blob not in (theirs.get(p), mine.get(p))}
        for p in _not_extended(root, gone, mine, theirs, folder):
            seen.add(p)
            where = "the branch this one tracks" if upstream else "another branch"
            found.append(RemoteFinding(p, "remote_erased" if upstream else "remote_erased_elsewhere", old, "HEAD", (
                f"{p} was in {name} at {old[:7]} (as an earlier fetch or push saw it; {where}), but neither "
                f"{name} nor HEAD holds it now: a force-push erased it")))
    return found


def _not_extended(root: Path, gone: dict[str, str], mine: dict[str, str], theirs: dict[str, str],
                  folder: str) -> list[str]:
    """The paths of `gone` that are lost: every record, and each log that neither HEAD's nor the tip's version continues."""
    logs = [p for p in gone if classify(p[len(folder) + 1:]) == "log" and (p in mine or p in theirs)]
    blobs = gitbind.read_blobs(root, sorted({b for p in logs for b in (gone[p], mine.get(p), theirs.get(p)) if b}))
    kept = {p for p in logs
            if any(b and _one_extends_the_other(blobs.get(gone[p]) or b"", blobs.get(b) or b"")
                   and len(blobs.get(b) or b"") >= len(blobs.get(gone[p]) or b"") for b in (mine.get(p), theirs.get(p)))}
    return sorted(p for p in gone if p not in kept)


def _reflog(root: Path, ref: str) -> list[str]:
    """The commits `ref` pointed to, newest first (the last 200 moves); none where git keeps no reflog for it."""
    return gitbind.git(root, "reflog", "show", "--format=%H", "-n", str(_REFLOG_DEPTH), ref, "--", check=False).split()


def _held_before(root: Path, wanted: dict[str, str], branch: str) -> dict[str, str]:
    """Paths whose exact blob an earlier tip of `branch` (its reflog) held: path -> that commit."""
    if not wanted:
        return {}
    earlier = list(dict.fromkeys(_reflog(root, branch)))  # one look per commit, newest first
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
    return {p: blob for p, (_mode, blob) in gitbind.tree_files(root, rev, folder).items()
            if classify(p[len(folder) + 1:]) in TRACKED}


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
