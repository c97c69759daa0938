"""`logbook commit`: one commit of the logbook folder that leaves the user's own git work alone.

The commit is built with plumbing on a temporary index seeded from HEAD, so
whatever the user has staged (inside or outside the logbook) is neither
committed nor disturbed, and files outside the logbook folder are never
included. After the branch moves, the real index is brought up to date for the
committed paths only (`git reset -q <commit> -- <paths>`): without that, those
paths would show as staged reversals of the new commit. Anything the user had
staged inside the logbook folder is replaced by what was committed, which is
what is in the working tree. No hooks run: this is bookkeeping, not code.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from logbook.core.errors import RefusedError, TamperedError
from logbook.core.gitstate import in_progress
from logbook.core.project import Project
from logbook.core.recordkinds import classify, where_it_could_go
from logbook.records.worktree import ignored_records
from logbook.core.textfmt import plural

_DAY_FILE = re.compile(r"/\d{4}/\d{2}/\d{2}\.md$")


@dataclass
class CommitResult:
    """The commit made and what it holds."""

    commit: str
    """The new commit's id; "" when there was nothing to commit."""
    branch: str
    message: str
    paths: list[str] = field(default_factory=list)
    runs: list[str] = field(default_factory=list)
    events: int = 0
    notes: int = 0
    reviews: int = 0
    days: list[str] = field(default_factory=list)


def _git(root: Path, *args: str, env: dict[str, str] | None = None, input: bytes | None = None,
         check: bool = True) -> subprocess.CompletedProcess:
    full_env = {**os.environ, **(env or {})}
    for attempt in range(20):
        r = subprocess.run(["git", *args], cwd=root, env=full_env, input=input, capture_output=True)
        if r.returncode == 0 or b"index.lock" not in r.stderr:
            break
        time.sleep(0.1 * (attempt + 1))  # someone else's git is writing the index: wait, then retry
    if check and r.returncode != 0:
        msg = r.stderr.decode("utf-8", "replace").strip().splitlines()
        raise RefusedError(f"git {args[0]} failed: {msg[-1] if msg else 'exit ' + str(r.returncode)}")
    return r


def _out(root: Path, *args: str, **kw) -> str:
    return _git(root, *args, **kw).stdout.decode("utf-8", "replace").strip()


def _check_state(root: Path) -> tuple[str, str, Path]:
    """(branch ref, HEAD commit, git dir), or a refusal for states where a commit would surprise."""
    git_dir = Path(_out(root, "rev-parse", "--absolute-git-dir"))
    # A rebase detaches HEAD: name the rebase first, since `git switch` would walk away from it.

    op = in_progress(git_dir)
    if op is not None:
        raise RefusedError(f"{op.what} is in progress: committing the logbook now would mix into it",
                           hint=f"{op.recovery}; then run `logbook commit`")
    r = _git(root, "symbolic-ref", "-q", "HEAD", check=False)
    if r.returncode != 0:
        raise RefusedError("HEAD is detached: a logbook commit needs a branch to land on",
                           hint="check out your branch (`git switch main`), then run `logbook commit` again")
    branch = r.stdout.decode().strip()
    head = _git(root, "rev-parse", "-q", "--verify", "HEAD^{commit}", check=False)
    if head.returncode != 0:
        raise RefusedError("the branch has no commits yet", hint="make a first commit, then run `logbook commit`")
    return branch, head.stdout.decode().strip(), git_dir


def _changed(root: Path, env: dict[str, str], folder: str) -> list[tuple[str, str]]:
    raw = _git(root, "--literal-pathspecs", "diff", "--cached", "--name-status", "-z", "--no-renames", "HEAD", "--", folder, env=env).stdout
    parts = raw.decode("utf-8", "surrogateescape").split("\0")
    return [(parts[i], parts[i + 1]) for i in range(0, len(parts) - 1, 2)]


def _new_lines(root: Path, path: str, head_has: bool) -> list[bytes]:
    """Lines appended to a log since HEAD (the logs are append-only, so a count suffices)."""
    try:
        now = (root / path).read_bytes()
    except OSError:
        return []
    old = 0
    if head_has:
        old = _git(root, "cat-file", "blob", f"HEAD:{path}", check=False).stdout.count(b"\n")
    return now.split(b"\n")[old:-1] if now.endswith(b"\n") else now.split(b"\n")[old:]


def _summarise(root: Path, folder: str, changed: list[tuple[str, str]], res: CommitResult) -> None:
    dates: list[str] = []
    runs: set[str] = set()
    for status, path in changed:
        rel = path[len(folder) + 1 :]
        if rel.startswith("runs/"):
            runs.add(rel.split("/")[1])
        if _DAY_FILE.search("/" + rel):
            res.days.append(rel[:10].replace("/", "-"))
        record = {"notes": "notes", "reviews": "reviews"}.get(rel.split("/")[0])
        if record and rel.endswith(".json") and status == "A":
            setattr(res, record, getattr(res, record) + 1)
            dates.append(f"{rel.split('/')[1][:4]}-{rel.split('/')[1][4:6]}-{rel.split('/')[1][6:8]}")
            continue
        kind = "events" if rel.startswith("runs/") and rel.endswith("/events.jsonl") else None
        if kind is None or status == "D":
            continue
        lines = _new_lines(root, path, status != "A")
        setattr(res, kind, getattr(res, kind) + len(lines))
        for line in lines:
            try:
                ts = json.loads(line).get("ts")
            except (ValueError, AttributeError):
                continue
            if isinstance(ts, str):
                dates.append(ts[:10])
    res.runs = sorted(runs)
    parts = []
    for n, one in ((len(res.runs), "run"), (res.events, "event"), (res.notes, "note"), (res.reviews, "review")):
        if n:
            parts.append(f"{n:,} {one}{'' if n == 1 else 's'}")
    if not (res.events or res.notes or res.reviews) and res.days:
        parts.append(f"{len(res.days)} day file{'' if len(res.days) == 1 else 's'} updated")
    if not parts:
        parts.append(f"{len(changed)} file{'' if len(changed) == 1 else 's'} updated")
    span = ""
    if dates:
        lo, hi = min(dates), max(dates)
        span = f" ({lo})" if lo == hi else f" ({lo} – {hi})"
    res.message = "logbook: " + ", ".join(parts) + span


def commit_logbook(project: Project, message: str | None = None) -> CommitResult:
    """Commit every change under the logbook folder in one commit; other work stays as it was.

    `message` replaces the generated subject line; the generated summary then
    follows in the body. Refuses on a detached HEAD, during a merge, rebase,
    cherry-pick or revert. When the logbook folder matches HEAD nothing is
    committed: the result's `commit` is "" and its message says so.
    """
    root = project.root
    folder = project.config.entries_dir.strip("/")
    branch, head, git_dir = _check_state(root)
    _refuse_ignored_records(project)
    with tempfile.TemporaryDirectory(prefix="logbook-index-") as tmp:
        env = {"GIT_INDEX_FILE": str(Path(tmp) / "index")}
        _git(root, "read-tree", "HEAD", env=env)
        _git(root, "--literal-pathspecs", "add", "-A", "--", folder, env=env)
        changed = _changed(root, env, folder)
        if not changed:  # not an error: `logbook commit && git pull --rebase` must go on to the pull
            return CommitResult(commit="", branch=branch, message=f"nothing to commit: {folder}/ matches HEAD")
        _refuse_what_no_record_may_do(root, folder, changed)
        res = CommitResult(commit="", branch=branch, message="", paths=[p for _, p in changed])
        _summarise(root, folder, changed, res)
        tree = _out(root, "write-tree", env=env)
    body = res.message if message else ""
    subject = message.strip() if message and message.strip() else res.message
    args = ["commit-tree", tree, "-p", head, "-m", subject]
    if body:
        args += ["-m", body]
    commit = _commit_tree(root, args)
    # Compare-and-swap: if someone committed meanwhile, refuse instead of dropping their commit.
    r = _git(root, "update-ref", "-m", f"logbook commit: {subject[:60]}", branch, commit, head, check=False)
    if r.returncode != 0:
        raise RefusedError(f"{branch} moved while the logbook commit was being made; nothing was changed",
                           hint="run `logbook commit` again")
    _sync_index(root, commit, res.paths)
    res.commit, res.message = commit, subject + ("\n\n" + body if body else "")
    return res


def _refuse_ignored_records(project: Project) -> None:
    """`git add` skips ignored files without a word: a note or a run log would silently never be committed."""
    ignored = ignored_records(project)
    if ignored:
        names = ", ".join(f.path for f in ignored[:3]) + (f" and {len(ignored) - 3} more" if len(ignored) > 3 else "")
        raise RefusedError(f"git ignores {plural(len(ignored), 'logbook record')}, so they cannot be committed: {names}",
                           hint=f"`git check-ignore -v {ignored[0].path}` names the rule; remove it from that "
                                "file, then run `logbook commit` again")


def _refuse_what_no_record_may_do(root: Path, folder: str, changed: list[tuple[str, str]]) -> None:
    """An edit or deletion of a committed record (or a log that did not only grow) is refused, exit 4: committed,
    it would be a history break on every clone. A file no record kind knows is refused, exit 3: committed, it
    would look like a record to nobody and be in everyone's way. Removing a stray file is allowed."""
    for status, path in changed:
        rel = path[len(folder) + 1:]
        kind = classify(rel)
        if kind == "stray" and status != "D":
            raise RefusedError(f"{path} is not a logbook record (no record kind has a file there), so `logbook "
                               "commit` will not commit it", hint=f"{where_it_could_go(rel)}; then run `logbook commit`")
        if kind == "record" and status != "A":
            what = "deletes" if status == "D" else "edits"
            raise TamperedError(f"{path} is a committed record and the working tree {what} it: committed, that would "
                                "break its history on every clone; nothing was committed",
                                hint=f"restore it (`git checkout HEAD -- {path}`); a correction is a new record "
                                     "that supersedes it (`logbook note --about ...`), never an edit")
        if kind == "log" and status != "A" and not _only_grew(root, path, status):
            raise TamperedError(f"{path} is a committed log and the working tree does not only add lines to it: "
                                "committed, that would break its history on every clone; nothing was committed",
                                hint=f"restore it (`git checkout HEAD -- {path}`); a log only grows")


def _only_grew(root: Path, path: str, status: str) -> bool:
    if status != "M":
        return False
    old = _git(root, "cat-file", "blob", f"HEAD:{path}", check=False).stdout
    try:
        return (root / path).read_bytes().startswith(old)
    except OSError:
        return False


def _commit_tree(root: Path, args: list[str]) -> str:
    r = _git(root, *args, check=False)
    if r.returncode != 0:
        err = r.stderr.decode("utf-8", "replace")
        if "tell me who you are" in err or "empty ident" in err or "user.email" in err:
            raise RefusedError("no git identity: a commit needs git's user.name and user.email",
                               hint='run `git config user.name "Your Name"` and `git config user.email you@example.org`')
        raise RefusedError(f"git commit-tree failed: {err.strip().splitlines()[-1] if err.strip() else r.returncode}")
    return r.stdout.decode().strip()


def _sync_index(root: Path, commit: str, paths: list[str]) -> None:
    """Make the real index agree with the new commit for exactly the committed paths."""
    with tempfile.NamedTemporaryFile("wb", prefix="logbook-paths-", delete=False) as f:
        f.write(b"\0".join(p.encode("utf-8", "surrogateescape") for p in paths) + b"\0")
        spec = f.name
    try:
        _git(root, "--literal-pathspecs", "reset", "-q", commit, f"--pathspec-from-file={spec}", "--pathspec-file-nul")
    finally:
        os.unlink(spec)
