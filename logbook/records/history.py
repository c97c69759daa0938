"""Tamper evidence over history: every record ever committed stays, byte for byte, in every later commit.

What is checked, for every commit in the history of HEAD and against every one
of its parents (so a merge is checked against each side):

- a ``record`` (see `recordkinds`) present in the parent is present in the
  commit with the same blob id and the same file mode: an edit, a deletion, a
  merge that drops it, or turning it into a symlink is a `Break` naming the
  record, the commit that had it and the commit that lost it;
- a ``log`` present in the parent is present in the commit and starts with
  every complete line the parent had (only read when the blob ids differ);
- ``derived`` files are not checked: they are regenerated.

Because each check compares one commit with its direct parents, a clean edge
stays clean: a commit is verified once. The id of the newest commit whose whole
history was clean is cached under `.logbook/` (outside the entries folder, so it
never travels and cannot vouch for another clone), and the next walk covers only
commits made since (`git rev-list HEAD ^<tip>`), one `git diff-tree --stdin`
process for all of them and one `git cat-file --batch` for the log blobs.

What this proves, and what it does not: within the history this clone has, no
committed record was changed or lost later on. It cannot tell a first version
that was forged from an honest one, nor a history rewritten from its root:
that is what `remote_breaks` is for (a record the remote has seen, changed or
missing here) and why a record should be pushed soon after it is made.
Commit ids play no part in the proof, so a rebase, a cherry-pick or a
squash-merge that carries the same bytes passes. In a shallow clone, history
starts at the shallow boundary: what lies before it is not checked here.
"""

from __future__ import annotations

import dataclasses
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from logbook.core import statecache
from logbook.core.project import Project
from logbook.core.recordkinds import TRACKED, classify
from logbook.records import gitbind

CACHE_FILE = "verified-history.json"
_CACHE_VERSION = 1
_NULL = "0" * 40
_SYMLINK = "120000"


@dataclass(frozen=True)
class Break:
    """One committed record or log that a later commit changed or lost."""

    path: str
    """The file, relative to the repository root."""
    kind: str
    """record_edited | record_deleted | record_dropped | record_symlink | log_rewritten | log_deleted |
    log_dropped | remote_differs"""
    had: str
    """The commit (or remote ref) that held the version that was lost."""
    lost: str
    """The commit (or `HEAD`) that no longer holds it."""
    message: str
    """One sentence for a person: the record, what happened, `had` and `lost`."""
    old_blob: str = ""
    """The blob `had` held: HEAD holding it again (a log: continuing it) means it was restored."""


@dataclass
class HistoryCheck:
    """What `check_history` walked and found."""

    head: str | None
    """The commit checked (None in a repository without commits)."""
    commits_checked: int = 0
    """Commits whose diffs were read in this call (0 when the cache covered everything)."""
    breaks: list[Break] = field(default_factory=list)
    restored: list[Break] = field(default_factory=list)
    """The first break of each file HEAD has undone: the record is back byte for byte (a log: as it was,
    or continued)."""
    introduced: dict[str, list[str]] = field(default_factory=dict)
    """Entries-relative path -> commits that added it against every parent (a root commit counts)."""


@dataclass(frozen=True)
class _Change:
    old_mode: str
    new_mode: str
    old_blob: str
    new_blob: str
    status: str
    path: str


def check_history(project: Project, *, use_cache: bool = True) -> HistoryCheck:
    """Walk the commits of HEAD's history not yet verified; return every break found."""
    root = project.root
    head = gitbind.head_commit(root)
    res = HistoryCheck(head)
    if head is None:
        return res
    folder = project.config.entries_dir.strip("/")
    cache = _load_cache(project, folder) if use_cache else None
    tip = cache["tip"] if cache else None
    if tip and not is_ancestor(root, tip, head):
        tip, cache = None, None  # history was rewritten or another branch checked out: walk it all
    res.introduced = {k: list(v) for k, v in (cache or {}).get("introduced", {}).items()}
    commits = _rev_list(root, head, tip)
    res.commits_checked = len(commits)
    if not commits:
        return res
    edges = _edges(root, commits, folder)
    _find_breaks(root, folder, commits, edges, res)
    clean = _clean_head(commits, res.breaks)  # a restored break is still walked again: it stays on the record
    if use_cache and clean:
        _save_cache(project, folder, clean, res.introduced)
    _sort_out_restored(root, head, folder, commits, res)
    return res


def _sort_out_restored(root: Path, head: str, folder: str, commits: list[list[str]], res: HistoryCheck) -> None:
    """Move the breaks of each file that HEAD has undone from `breaks` to `restored`.

    Undone: HEAD holds the bytes the file's earliest break lost (every
    version it lost, where a merge lost one from each parent), as `git
    checkout <had> -- <path>` puts them back (a log: those lines, perhaps
    continued). Every later break of that file goes too (the restoring commit
    itself "edits" the tampered version); what every reader sees is again as
    first committed. HEAD holding some later version undoes nothing.
    """
    if not res.breaks:
        return
    age = {c[0]: i for i, c in enumerate(commits)}  # children before parents: larger is older
    by_path: dict[str, list[Break]] = {}
    for b in res.breaks:  # every break's losing commit is one of the commits walked
        by_path.setdefault(b.path, []).append(b)
    # Every version the earliest losing commit lost: a merge can lose one from each parent, and HEAD holding
    # one of them puts back only that one.
    first = {path: [b for b in bs if age[b.lost] == max(age[x.lost] for x in bs)] for path, bs in by_path.items()}
    now = gitbind.tree_files(root, head, folder)
    logs = [b for bs in first.values() for b in bs if b.kind.startswith("log_") and b.old_blob and b.path in now]
    blobs = gitbind.read_blobs(root, sorted({x for b in logs for x in (b.old_blob, now[b.path][1])}))
    undone = sorted(path for path, bs in first.items() if all(_put_back(b, now, blobs) for b in bs))
    res.restored = [first[p][0] for p in undone]  # one a file: what it first lost
    res.breaks = [b for b in res.breaks if b.path not in undone]


def _put_back(b: Break, now: dict[str, tuple[str, str]], blobs: dict[str, bytes]) -> bool:
    """Whether HEAD holds again what break `b` lost (a log: those complete lines, perhaps continued)."""
    if not b.old_blob or b.path not in now or now[b.path][0] == _SYMLINK:
        return False
    blob = now[b.path][1]
    if not b.kind.startswith("log_"):
        return blob == b.old_blob
    old, new = blobs.get(b.old_blob), blobs.get(blob)
    if old is None or new is None:  # a blob this clone cannot read proves nothing put back
        return False
    return new.startswith(old[: old.rfind(b"\n") + 1])


def is_ancestor(root: Path, a: str, b: str) -> bool:
    """True when commit `a` is `b` or one of its ancestors (False when either is unknown)."""
    return subprocess.run(["git", "merge-base", "--is-ancestor", a, b], cwd=root,
                          capture_output=True).returncode == 0


def _rev_list(root: Path, head: str, tip: str | None) -> list[list[str]]:
    """[commit, parent, ...] for each commit to check, children before parents."""
    args = ["rev-list", "--topo-order", "--parents", head]
    if tip:
        args += [f"^{tip}"]
    return [line.split() for line in gitbind.git(root, *args, "--").splitlines() if line.strip()]


def _edges(root: Path, commits: list[list[str]], folder: str) -> list[tuple[str, str | None, list[_Change]]]:
    """(commit, parent or None for a root commit, changes under the entries folder) for every edge.

    One `git diff-tree --stdin` reads them all; `--always` prints a header for
    every edge, even an empty one, so the output maps back to the input in order.
    """
    order: list[tuple[str, str | None]] = []
    lines = []
    for c, *parents in commits:
        for p in parents or [None]:
            order.append((c, p))
            lines.append(" ".join(filter(None, (c, p))))
    out = gitbind.git_bytes(root, "diff-tree", "--stdin", "--always", "--root", "-r", "-z",
                            "--no-renames", "--", folder, input=("\n".join(lines) + "\n").encode())
    tokens = [t for t in out.split(b"\0") if t]  # no header, mode line or path is ever empty
    result: list[tuple[str, str | None, list[_Change]]] = []
    i = 0
    for c, p in order:
        i += 1  # the header: this edge's commit id
        changes: list[_Change] = []
        while i < len(tokens) and tokens[i].startswith(b":"):
            meta = tokens[i][1:].decode().split()
            changes.append(_Change(meta[0], meta[1], meta[2], meta[3], meta[4][0],
                                   tokens[i + 1].decode("utf-8", "surrogateescape")))
            i += 2
        result.append((c, p, changes))
    return result


def _find_breaks(root: Path, folder: str, commits: list[list[str]],
                 edges: list[tuple[str, str | None, list[_Change]]], res: HistoryCheck) -> None:
    n_parents = {c[0]: max(1, len(c) - 1) for c in commits}
    added: dict[tuple[str, str], int] = {}
    edited: dict[tuple[str, str], str] = {}  # (path, old blob) -> new blob, for the line that changed
    log_pairs: list[tuple[str, str | None, _Change]] = []
    for c, p, changes in edges:
        for ch in changes:
            rel = ch.path[len(folder) + 1:]
            kind = classify(rel)
            if kind not in TRACKED:  # derived or stray: no reader takes it in as a record
                continue
            if ch.status == "A":
                added[(c, rel)] = added.get((c, rel), 0) + 1
                if ch.new_mode == _SYMLINK:
                    res.breaks.append(_break(ch.path, "record_symlink", p or c, c,
                                             f"is added as a symlink in {c[:7]} (a record must be a plain file)"))
            elif kind == "log" and ch.status == "M" and ch.new_mode == ch.old_mode:
                log_pairs.append((c, p, ch))
            else:
                res.breaks.append(_lost(ch, kind, c, p or c, n_parents[c] > 1))
                if ch.status == "M" and kind == "record" and ch.new_mode != _SYMLINK:
                    edited[(ch.path, ch.old_blob)] = ch.new_blob
    for (c, rel), n in added.items():
        if n == n_parents[c]:
            res.introduced.setdefault(rel, [])
            if c not in res.introduced[rel]:
                res.introduced[rel].append(c)
    _check_log_prefixes(root, log_pairs, res)
    _say_which_line(root, edited, res)
    _say_who(root, res)


def _say_who(root: Path, res: HistoryCheck) -> None:
    """After the commit that lost a record, who made it and when: `in d14e991 (Ada, 2026-12-01)`."""
    commits = sorted({b.lost for b in res.breaks})
    if not commits:
        return
    out = gitbind.git(root, "show", "-s", "--no-walk", "--format=%H%x00%an%x00%ad", "--date=short", *commits,
                      check=False)
    who = {h: f"{name}, {day}" for h, name, day in (ln.split("\0") for ln in out.splitlines() if ln.count("\0") == 2)}
    for i, b in enumerate(res.breaks):
        at = f" in {b.lost[:7]}"
        if b.lost in who and at in b.message:
            head, _, tail = b.message.rpartition(at)  # the losing commit is named last
            res.breaks[i] = dataclasses.replace(b, message=f"{head}{at} ({who[b.lost]}){tail}")


def _say_which_line(root: Path, edited: dict[tuple[str, str], str], res: HistoryCheck) -> None:
    """Add the first changed line to each edited record's sentence: which line, as well as where and when."""
    if not edited:
        return
    from logbook.records.worktree import first_change

    blobs = gitbind.read_blobs(root, sorted({b for k, new in edited.items() for b in (k[1], new)}))
    for i, b in enumerate(res.breaks):
        old, new = blobs.get(b.old_blob), blobs.get(edited.get((b.path, b.old_blob), ""))
        if b.kind == "record_edited" and None not in (old, new):  # a blob this clone lacks: no line to name
            _, what = first_change(old, new)
            res.breaks[i] = dataclasses.replace(b, message=f"{b.message}: {what}")


def _break(path: str, kind: str, had: str, lost: str, what: str, old_blob: str = "") -> Break:
    return Break(path, kind, had, lost, f"{path} {what}", old_blob)


def _lost(ch: _Change, kind: str, c: str, p: str, merge: bool) -> Break:
    """A record or log changed (M/T) or removed (D) between parent `p` and commit `c`."""
    noun = "record" if kind == "record" else "log"
    if ch.status == "D":
        how = "dropped by the merge" if merge else "deleted"
        return _break(ch.path, f"{noun}_{'dropped' if merge else 'deleted'}", p, c,
                      f"({noun}, committed in {p[:7]}) was {how} in {c[:7]}", ch.old_blob)
    if ch.new_mode == _SYMLINK:
        return _break(ch.path, "record_symlink", p, c, f"({noun} in {p[:7]}) was replaced by a symlink in {c[:7]}",
                      ch.old_blob)
    verb = "changed by the merge" if merge else "edited"
    return _break(ch.path, f"{noun}_edited" if noun == "record" else "log_rewritten", p, c,
                  f"({noun}, as committed in {p[:7]}) was {verb} in {c[:7]}", ch.old_blob)


def _check_log_prefixes(root: Path, pairs: list[tuple[str, str | None, _Change]], res: HistoryCheck) -> None:
    """A later version of a log must start with every complete line of the earlier one."""
    if not pairs:
        return
    blobs = gitbind.read_blobs(root, sorted({b for _, _, ch in pairs for b in (ch.old_blob, ch.new_blob)}))
    for c, p, ch in pairs:
        old, new = blobs.get(ch.old_blob), blobs.get(ch.new_blob)
        if old is None or new is None:  # a blob this clone lacks: nothing to compare
            continue
        complete = old[: old.rfind(b"\n") + 1]
        if new.startswith(complete):
            continue
        old_n, new_n = complete.count(b"\n"), new.count(b"\n")
        span = f"line {old_n}" if new_n + 1 == old_n else f"lines {new_n + 1}-{old_n}"
        # Not continued, yet a prefix of the complete lines: it lost at least the last of them.
        what = (f"lost {span} of the {old_n} committed" if complete.startswith(new)
                else f"was rewritten from line {_first_differing_line(complete, new)}")
        res.breaks.append(_break(ch.path, "log_rewritten", p or c, c,
                                 f"(log, {old_n} lines in {(p or c)[:7]}) {what} in {c[:7]}", ch.old_blob))


def _first_differing_line(a: bytes, b: bytes) -> int:
    """The first line (1-based) where two logs differ; called only when neither is a prefix of the other."""
    pairs = zip(a.split(b"\n"), b.split(b"\n"))  # lines as the log writes them: a stray \r is content
    return next(i + 1 for i, (x, y) in enumerate(pairs) if x != y)


def _clean_head(commits: list[list[str]], breaks: list[Break]) -> str | None:
    """HEAD when its whole history is clean, else None (the cache then stays where it was)."""
    bad = {b.lost for b in breaks}
    ok: dict[str, bool] = {}
    for c, *parents in reversed(commits):  # parents first
        ok[c] = c not in bad and all(ok.get(p, True) for p in parents)  # a parent not walked is below the tip
    head = commits[0][0]
    return head if ok.get(head) else None


# --- the cache ---------------------------------------------------------------

def _load_cache(project: Project, folder: str) -> dict | None:
    data = statecache.load(project, CACHE_FILE)  # sealed: a planted cache naming HEAD clean is not read
    if not isinstance(data, dict) or data.get("version") != _CACHE_VERSION or data.get("entries") != folder \
            or not isinstance(data.get("tip"), str) or not isinstance(data.get("introduced"), dict):
        return None
    return data


def _save_cache(project: Project, folder: str, tip: str, introduced: dict[str, list[str]]) -> None:
    statecache.save(project, CACHE_FILE, {"version": _CACHE_VERSION, "entries": folder, "tip": tip,
                                          "introduced": introduced})
