"""Binding records to git: one-file commits with trailers, trailer search, code snapshots.

Everything here drives the `git` command line with plumbing and explicit
arguments (paths after `--` or as arguments of options, never parsed as
options), so a title or an id can never become a git option. The user's index,
branch and working tree are only touched where the function says so:

- `commit_file` builds the commit in a temporary index (`GIT_INDEX_FILE`:
  read-tree HEAD, update-index --cacheinfo, write-tree, commit-tree), moves the
  branch with `update-ref` guarded by its old value, writes the working-tree
  file without clobbering, and adds that one path to the user's index, so their
  other staged and unstaged changes stay exactly as they were. Any failure
  undoes what was done: never a file without its commit, nor a commit without
  its file.
- `snapshot_worktree` records HEAD plus uncommitted and untracked files as a
  commit under `refs/logbook/snapshots/<run>`, touching nothing else.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from logbook.core.errors import RefusedError, UsageError
from logbook.core.fsutil import atomic_create_bytes
from logbook.core.identity import git_identity, signing_identity
from logbook.eventlog.timeline import check_run_id

if TYPE_CHECKING:
    from logbook.core.project import Project

SNAPSHOT_REF_PREFIX = "refs/logbook/snapshots/"
_INDEX_LOCK_WAIT_S = 3.0


class GitError(RefusedError):
    """A git command failed; the message carries git's own words."""

    def __init__(self, message: str, *, stderr: str = "", hint: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.stderr = stderr


def git(root: Path, *args: str, input: bytes | None = None, env: dict[str, str] | None = None,
        check: bool = True) -> str:
    """Run `git args...` in `root`; stdout as text. Raises GitError on failure when `check`."""
    return git_bytes(root, *args, input=input, env=env, check=check).decode("utf-8", "replace")


def git_bytes(root: Path, *args: str, input: bytes | None = None, env: dict[str, str] | None = None,
              check: bool = True) -> bytes:
    full_env = None if env is None else {**os.environ, **env}
    try:
        proc = subprocess.run(["git", *args], cwd=root, input=input, env=full_env,
                              capture_output=True, check=False)
    except FileNotFoundError:
        raise RefusedError("git is not installed or not on PATH") from None
    if check and proc.returncode != 0:
        stderr = proc.stderr.decode("utf-8", "replace").strip()
        lines = stderr.splitlines()
        first = next((ln for ln in lines if ln.startswith(("fatal:", "error:"))), lines[0] if lines else "")
        raise GitError(f"git {args[0]} failed: {first or f'exit {proc.returncode}'}", stderr=stderr)
    return proc.stdout


# --- repository state --------------------------------------------------------

@dataclass(frozen=True)
class RepoState:
    """Where HEAD stands, checked to be safe for a commit."""

    git_dir: Path
    head: str
    """The commit HEAD points to."""
    branch_ref: str
    """The branch HEAD is on, e.g. `refs/heads/main`."""


_IN_PROGRESS = [
    ("MERGE_HEAD", "a merge is in progress", "finish it (`git commit`) or abort it (`git merge --abort`)"),
    ("rebase-merge", "a rebase is in progress", "finish it (`git rebase --continue`) or abort it (`git rebase --abort`)"),
    ("rebase-apply", "a rebase or `git am` is in progress", "finish or abort it (`git rebase --abort` / `git am --abort`)"),
    ("CHERRY_PICK_HEAD", "a cherry-pick is in progress", "finish it or abort it (`git cherry-pick --abort`)"),
    ("REVERT_HEAD", "a revert is in progress", "finish it or abort it (`git revert --abort`)"),
    ("BISECT_LOG", "a bisect is in progress", "finish it first (`git bisect reset`)"),
]


def head_commit(root: Path) -> str | None:
    """The commit HEAD points to, or None in a repository without commits."""
    out = git(root, "rev-parse", "-q", "--verify", "HEAD^{commit}", check=False).strip()
    return out or None


def operation_in_progress(root: Path) -> tuple[str, str] | None:
    """(what, how to finish or abort it) when a merge, rebase, cherry-pick, revert or bisect is under way."""
    out = git(root, "rev-parse", "--absolute-git-dir", check=False).strip()
    if not out:
        return None
    for name, what, hint in _IN_PROGRESS:
        if (Path(out) / name).exists():
            return what, hint
    return None


def check_repo_state(root: Path) -> RepoState:
    """Refuse states in which committing a record would be wrong or surprising."""
    # One call: the git dir, the commit HEAD names, and the branch ("HEAD" when detached).
    out = git(root, "rev-parse", "--absolute-git-dir", "HEAD", "--symbolic-full-name", "HEAD", check=False).split("\n")
    if len(out) < 3 or not re.fullmatch(r"[0-9a-f]{40}|[0-9a-f]{64}", out[1]):
        if head_commit(root) is None:
            raise RefusedError("the repository has no commits yet",
                               hint="make a first commit (`git commit --allow-empty -m init`), then retry")
        raise RefusedError(f"cannot read HEAD in {root}", hint="check the repository with `git status`")
    git_dir, head, branch = Path(out[0]), out[1], out[2]
    for name, what, hint in _IN_PROGRESS:
        if (git_dir / name).exists():
            raise RefusedError(f"{what} in {root}", hint=hint)
    if not branch.startswith("refs/heads/"):
        raise RefusedError("HEAD is detached: a record committed here would belong to no branch",
                           hint="switch to a branch first (`git switch -c <name>` or `git switch main`)")
    return RepoState(git_dir, head, branch)


def author_ident(root: Path) -> str:
    """`Name <email>` of whoever commits here now (see `identity.git_identity`), or a refusal."""
    return str(signing_identity(root, "a preregistration"))


def path_known(root: Path, relpath: str) -> bool:
    """True when `relpath` exists in the working tree, the index or HEAD."""
    if (root / relpath).exists() or (root / relpath).is_symlink():
        return True
    # --with-tree lists paths in the index or in HEAD, in one call.
    return bool(git(root, "ls-files", "-z", "--with-tree=HEAD", "--", relpath).strip("\0"))


# --- commit one file ---------------------------------------------------------

def format_message(subject: str, body: str, trailers: list[tuple[str, str]]) -> str:
    """A commit message with trailers in the last paragraph, as `git interpret-trailers` reads them."""
    parts = [subject.strip()]
    if body.strip():
        parts.append(body.strip())
    parts.append("\n".join(f"{k}: {v}" for k, v in trailers))
    return "\n\n".join(parts) + "\n"


@dataclass(frozen=True)
class Committed:
    """What `commit_file` made."""

    commit: str
    blob: str
    parent: str
    branch_ref: str
    path: str


def commit_file(root: Path, relpath: str, data: bytes, message: str,
                state: RepoState | None = None) -> Committed:
    """Commit one new file on the current branch and write it to the working tree.

    The commit contains exactly that file on top of HEAD. The user's index gains
    only that path; everything else they staged or changed stays as it was.
    Refuses when the path already exists anywhere (working tree, index, HEAD).
    """
    root = Path(root)
    state = state or check_repo_state(root)
    if path_known(root, relpath):
        raise RefusedError(f"{relpath} already exists", hint="records are never overwritten; a new id is needed")
    blob = git(root, "hash-object", "-w", "--no-filters", "--stdin", input=data).strip()
    tree = _tree_with(root, state.head, relpath, blob)
    commit = git(root, "commit-tree", tree, "-p", state.head, "-F", "-", input=message.encode("utf-8")).strip()
    target = root / relpath
    try:
        atomic_create_bytes(target, data)
    except FileExistsError:
        raise RefusedError(f"{target.name} appeared while it was being written; nothing was committed") from None
    try:
        git(root, "update-ref", "-m", f"logbook: {message.splitlines()[0][:72]}", state.branch_ref, commit, state.head)
    except BaseException as e:
        _unlink_quietly(target)
        if isinstance(e, GitError):
            raise RefusedError("the branch moved while the record was being committed; nothing was written",
                               hint="run the command again") from None
        raise
    try:
        _add_to_user_index(root, relpath, blob)
    except BaseException:
        # Put the branch back (only if nobody moved it since) and remove the file.
        git(root, "update-ref", "-m", "logbook: undo", state.branch_ref, state.head, commit, check=False)
        _unlink_quietly(target)
        raise
    return Committed(commit, blob, state.head, state.branch_ref, relpath)


def _tree_with(root: Path, head: str, relpath: str, blob: str) -> str:
    with tempfile.TemporaryDirectory(prefix="logbook-index-") as tmp:
        env = {"GIT_INDEX_FILE": str(Path(tmp) / "index")}
        git(root, "read-tree", head, env=env)
        git(root, "update-index", "--add", "--cacheinfo", "100644", blob, relpath, env=env)
        return git(root, "write-tree", env=env).strip()


def _unlink_quietly(path: Path) -> None:
    try:
        path.unlink()
    except FileNotFoundError:
        pass


def _add_to_user_index(root: Path, relpath: str, blob: str) -> None:
    """Add one entry to the user's index, waiting briefly if another git holds its lock."""
    deadline = time.monotonic() + _INDEX_LOCK_WAIT_S
    while True:
        try:
            git(root, "update-index", "--add", "--cacheinfo", "100644", blob, relpath)
            return
        except GitError as e:
            if "index.lock" not in e.stderr or time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def uncommitted_blobs(root: Path, exclude: str, cap: int = 2000) -> dict[str, str | None] | None:
    """Every path whose working-tree content differs from HEAD, with the blob id of that content.

    Modified, added and untracked (not ignored) files get the id git would give
    their bytes; deleted ones get None. Paths under `exclude` (the logbook's own
    folder) are left out. None when there are more than `cap` such paths: too
    many to record, and the comparison then falls back to the commits alone.
    """
    out = git_bytes(root, "status", "--porcelain=v1", "-z", "--untracked-files=all", "--no-renames", "--", ".",
                    f":(exclude){exclude}")
    changed: dict[str, str | None] = {}
    present: list[str] = []
    for item in out.split(b"\0"):
        if len(item) < 4:
            continue
        code, path = item[:2].decode(), item[3:].decode("utf-8", "surrogateescape")
        if "D" in code:
            changed[path] = None
        else:
            present.append(path)
        if len(changed) + len(present) > cap:
            return None
    if present:
        ids = git(root, "hash-object", "--stdin-paths", input="\n".join(present).encode("utf-8", "surrogateescape"))
        changed.update(zip(present, ids.split()))
    return dict(sorted(changed.items()))


def blob_ids(root: Path, commit: str, paths: list[str]) -> dict[str, str | None]:
    """The blob id of each path in `commit` (None where the commit lacks it)."""
    if not paths:
        return {}
    out = git(root, "ls-tree", "-z", "--full-tree", commit, "--", *paths)
    found = {}
    for entry in out.split("\0"):
        if "\t" in entry:
            meta, path = entry.split("\t", 1)
            found[path] = meta.split()[2]
    return {p: found.get(p) for p in paths}


def tree_files(root: Path, rev: str, folder: str) -> dict[str, tuple[str, str]]:
    """Path -> (mode, blob id) of every file `rev` holds under `folder` (paths relative to the repository)."""
    out = git_bytes(root, "ls-tree", "-r", "-z", rev, "--", folder)
    files = {}
    for entry in out.split(b"\0"):
        if entry:
            meta, _, raw = entry.partition(b"\t")
            mode, _, blob = meta.decode().split()
            files[raw.decode("utf-8", "surrogateescape")] = (mode, blob)
    return files


# --- finding records by trailer ----------------------------------------------

@dataclass
class TrailerCommit:
    """A commit that carries logbook trailers."""

    commit: str
    parents: list[str]
    trailers: dict[str, str]
    files: list[str] = field(default_factory=list)
    """Paths the commit changes against its first parent."""


def trailer_commits(root: Path, key: str, revs: tuple[str, ...] = ("--all",)) -> list[TrailerCommit]:
    """Commits reachable from `revs` whose message has a `key:` trailer line, newest first."""
    fmt = "%x1e%H%x1f%P%x1f%(trailers:only,unfold)%x1f"
    out = git(root, "log", *revs, f"--grep=^{key}: ", "--name-only", "--no-renames", f"--format={fmt}", "--")
    found = []
    for chunk in out.split("\x1e")[1:]:
        sha, parents, trailers, rest = (chunk.split("\x1f") + ["", "", ""])[:4]
        tr = {}
        for line in trailers.splitlines():
            k, sep, v = line.partition(":")
            if sep:
                tr.setdefault(k.strip(), v.strip())
        if key in tr:
            files = [ln for ln in rest.splitlines() if ln.strip()]
            found.append(TrailerCommit(sha.strip(), parents.split(), tr, files))
    return found


def reachable_from_head(root: Path, key: str) -> set[str]:
    """Shas of commits with a `key:` trailer line that HEAD's history contains."""
    if head_commit(root) is None:
        return set()
    return set(git(root, "rev-list", f"--grep=^{key}: ", "HEAD", "--").split())


def read_blobs(root: Path, specs: list[str]) -> dict[str, bytes | None]:
    """Contents of `<rev>:<path>` objects in one `git cat-file --batch`; None when missing."""
    if not specs:
        return {}
    out = git_bytes(root, "cat-file", "--batch", input="".join(s + "\n" for s in specs).encode("utf-8"))
    result: dict[str, bytes | None] = {}
    pos = 0
    for spec in specs:
        nl = out.index(b"\n", pos)
        header = out[pos:nl].decode("utf-8", "replace").split()
        pos = nl + 1
        if len(header) == 3 and header[1] == "blob":
            size = int(header[2])
            result[spec] = out[pos:pos + size]
            pos += size + 1
        elif len(header) == 3:
            pos += int(header[2]) + 1  # a tree or another object type: not a file
            result[spec] = None
        else:
            result[spec] = None
    return result


# --- code snapshots ----------------------------------------------------------

def snapshot_worktree(project: Project, run_id: str) -> dict:
    """Record HEAD plus uncommitted and untracked files under `refs/logbook/snapshots/<run_id>`.

    Respects .gitignore; untracked files above `snapshot_max_file_mb` are left
    out and listed in `skipped`. Touches neither the index, the branch nor the
    working tree. Returns {"ref", "commit", "head", "dirty", "skipped"}; when the
    working tree equals HEAD, `commit` is HEAD itself.
    """
    root = Path(project.root)
    ref = SNAPSHOT_REF_PREFIX + check_run_id(run_id)
    if subprocess.run(["git", "check-ref-format", ref], cwd=root, capture_output=True).returncode != 0:
        raise UsageError(f"run id {run_id!r} cannot name a git ref", hint="avoid a trailing `.lock` and `@{`")
    head = head_commit(root)
    if head is None:
        raise RefusedError("the repository has no commits yet", hint="commit something before launching a run")
    if git(root, "rev-parse", "-q", "--verify", ref, check=False).strip():
        raise RefusedError(f"a code snapshot for run {run_id!r} already exists ({ref})", hint="use a new run id")
    cap = int(float(project.config.snapshot_max_file_mb) * 1024 * 1024)
    with tempfile.TemporaryDirectory(prefix="logbook-snapshot-") as tmp:
        env = {"GIT_INDEX_FILE": str(Path(tmp) / "index"), "GIT_LITERAL_PATHSPECS": "1"}
        _seed_index(root, head, Path(env["GIT_INDEX_FILE"]))
        git(root, "add", "-u", env=env)
        skipped = _add_untracked(root, env, cap)
        tree = git(root, "write-tree", env=env).strip()
    head_tree = git(root, "rev-parse", f"{head}^{{tree}}").strip()
    dirty = tree != head_tree
    commit = head
    if dirty:
        msg = f"logbook snapshot of the working tree for run {run_id}\n\nLogbook-Snapshot: {run_id}\n"
        commit = git(root, "commit-tree", tree, "-p", head, "-F", "-", input=msg.encode("utf-8"),
                     env=_identity_env(root)).strip()
    git(root, "update-ref", "-m", f"logbook: snapshot for run {run_id}", ref, commit, "")
    return {"ref": ref, "commit": commit, "head": head, "dirty": dirty, "skipped": skipped}


def _seed_index(root: Path, head: str, index: Path) -> None:
    """Start from a copy of the user's index (its stat data makes `add` fast), else from HEAD."""
    user_index = Path(os.environ.get("GIT_INDEX_FILE") or git(root, "rev-parse", "--git-path", "index").strip())
    if not user_index.is_absolute():
        user_index = root / user_index
    if user_index.exists():
        shutil.copyfile(user_index, index)
    else:
        git(root, "read-tree", head, env={"GIT_INDEX_FILE": str(index)})


def _add_untracked(root: Path, env: dict[str, str], cap: int) -> list[str]:
    out = git_bytes(root, "ls-files", "--others", "--exclude-standard", "-z", env=env)
    keep, skipped = [], []
    for raw in out.split(b"\0"):
        if not raw:
            continue
        rel = os.fsdecode(raw)
        try:
            size = os.lstat(root / rel).st_size
        except FileNotFoundError:
            continue  # vanished between listing and adding
        (skipped if size > cap else keep).append(rel)
    if keep:
        data = b"".join(os.fsencode(p) + b"\0" for p in keep)
        git(root, "add", "--pathspec-from-file=-", "--pathspec-file-nul", input=data, env=env)
    return sorted(skipped)


def _identity_env(root: Path) -> dict[str, str]:
    """Snapshots are made by launchers on machines that may have no git identity; a guess goes on no commit."""
    ident = git_identity(root)
    name, email = ("logbook", "logbook@localhost") if ident.guessed else (ident.name, ident.email)
    return {"GIT_AUTHOR_NAME": name, "GIT_AUTHOR_EMAIL": email,
            "GIT_COMMITTER_NAME": name, "GIT_COMMITTER_EMAIL": email}
