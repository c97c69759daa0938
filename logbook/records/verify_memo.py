"""The last `verify`'s report, given again while nothing it reads has changed.

A second `verify` with nothing new would read every record, log and stamp
again to reach the same answer. Instead the report is kept in
`.logbook/verified-report.json` beside a fingerprint of everything the checks
read, taken by `git status` itself: one stat per file, no reading. Any difference in the fingerprint and `verify` runs in full.

The fingerprint covers:
- HEAD and every ref (`git show-ref --head`): new commits, fetched remotes,
  code snapshots under `refs/logbook/`;
- a merge, rebase, cherry-pick, revert or bisect under way, and git's config
  and `info/exclude`;
- the entries folder as `git status` sees it against HEAD (git's stat of
  every file, in C), and for each path it lists as changed, untracked or
  ignored: type, size, mtime, ctime and inode (ctime cannot be set from user
  space, so a rewrite that restores size and mtime still shows);
- the settings file, the CA and allowed-signers files it names, the
  repository's top `.gitignore`, the user's git config and ignore files, the
  reader's pins file;
- the environment variables that steer git and the logbook, and the
  `logbook` code itself (a new version may check more);
- what the caller asked: the preregistration in scope and the reader's pin.

The memo is sealed as every cache in `.logbook/` is (`core.statecache`): one
copied in from elsewhere is not read.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
from pathlib import Path
from typing import Any

from logbook.core import statecache
from logbook.core.project import Project
from logbook.records import gitbind

MEMO_FILE = "verified-report.json"
VERSION = 1
# Git's index is left out: git rewrites it to refresh its stat cache, and what it stages under the entries
# folder shows in `git status`.
_IN_PROGRESS = ("MERGE_HEAD", "CHERRY_PICK_HEAD", "REVERT_HEAD", "rebase-merge", "rebase-apply", "BISECT_LOG",
                "config", "info/exclude", "shallow")
_CODE = Path(__file__).resolve().parent.parent  # the logbook package


def _stat(path: str | Path) -> tuple[Any, ...]:
    """Type, size, times and inode of `path` itself; its name is given by where it stands in the fingerprint."""
    try:
        st = os.lstat(path)
    except OSError:  # missing, or gone since a listing named it
        return (None,)
    return (st.st_mode, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino)


def _tree_stats(top: Path, skip: tuple[str, ...] = ()) -> list[tuple[Any, ...]]:
    """A stat of every file and folder under `top`, in a stable order (os.scandir: no extra stat per entry type)."""
    out: list[tuple[Any, ...]] = [_stat(top)]
    stack = [top]
    while stack:
        folder = stack.pop()
        try:
            entries = sorted(os.scandir(folder), key=lambda e: e.name)
        except OSError:
            continue
        for e in entries:
            if e.name in skip:
                continue
            out.append((e.path, *_stat(e.path)))
            if e.is_dir(follow_symlinks=False):
                stack.append(Path(e.path))
    return out


def _worktree(project: Project) -> list[Any]:
    """What the entries folder holds beyond HEAD: git's own status of it (a stat per file, in C, with git's
    care for files changed within the same timestamp tick), and a stat of every path it names."""
    folder = project.entries.relative_to(project.root).as_posix()
    out = gitbind.git_bytes(project.root, "--no-optional-locks", "status", "--porcelain=v1", "-z",
                            "--untracked-files=all", "--ignored=matching", "--no-renames", "--", folder)
    listed: list[Any] = [out.decode("utf-8", "surrogateescape")]
    for entry in filter(None, out.split(b"\0")):
        path = project.root / entry[3:].decode("utf-8", "surrogateescape")
        listed += _tree_stats(path) if path.is_dir() and not path.is_symlink() else [_stat(path)]
    return listed


def _named_files(project: Project) -> list[Path]:
    """Files outside the entries folder that the checks read: settings, CA files, allowed signers, ignore rules."""
    root = project.root
    names = [root / "logbook.yaml", root / ".gitignore"]
    stamping = project.config.timestamping
    names += [root / a.ca for a in (stamping.authorities if stamping else [])]
    if project.config.signing is not None:
        names.append(root / project.config.signing.allowed_signers)
    home = Path.home()  # $HOME, as git reads it
    xdg = Path(os.environ.get("XDG_CONFIG_HOME") or home / ".config")
    names += [Path(os.environ.get("GIT_CONFIG_GLOBAL") or home / ".gitconfig"), xdg / "git" / "config",
              xdg / "git" / "ignore", Path("/etc/gitconfig"), xdg / "logbook" / "pins.yaml"]
    return names


def fingerprint(project: Project, scope: dict[str, Any]) -> str | None:
    """A digest of everything `verify_project` reads, for the call described by `scope`; None: no memo (no HEAD)."""
    root = project.root  # a git repository: `open_project` refuses any other folder
    refs = gitbind.git(root, "show-ref", "--head", check=False)  # exit 1 when there is no ref
    if not refs:
        return None  # no commit and no ref yet: nothing to remember
    git_dir = Path(gitbind.git(root, "rev-parse", "--absolute-git-dir").strip())
    return hashlib.sha256(json.dumps(_parts(project, scope, git_dir, refs)).encode()).hexdigest()


def _parts(project: Project, scope: dict[str, Any], git_dir: Path, refs: str) -> list[Any]:
    """What the fingerprint digests, each part in its own place (plain JSON: the scope's keys come in one order)."""
    env = sorted((k, v) for k, v in os.environ.items() if k.startswith(("GIT_", "LOGBOOK_")))
    return [VERSION, scope, refs, env,
            [_stat(git_dir / name) for name in _IN_PROGRESS],
            [_stat(p) for p in _named_files(project)],
            _worktree(project),
            _tree_stats(_CODE, skip=("__pycache__",))]


@functools.lru_cache(maxsize=1)
def code_digest() -> str:
    """A digest of the `logbook` code as installed (a stat of each file): a cache of verdicts is this code's."""
    return hashlib.sha256(json.dumps(_tree_stats(_CODE, skip=("__pycache__",))).encode()).hexdigest()


def recall(project: Project, digest: str) -> dict[str, Any] | None:
    """The report kept under `digest`, or None."""
    kept = statecache.load(project, MEMO_FILE)
    if not isinstance(kept, dict) or kept.get("fingerprint") != digest or not isinstance(kept.get("report"), dict):
        return None
    return kept["report"]


def remember(project: Project, digest: str, report: dict[str, Any]) -> None:
    """Keep `report` under `digest` (one memo: the last call's)."""
    statecache.save(project, MEMO_FILE, {"fingerprint": digest, "report": report})  # read-only: in full each time
