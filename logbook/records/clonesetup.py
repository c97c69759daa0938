"""What a team's logbook needs in the repository, and in each clone, so `git pull` never stops on it.

Records are one file each (`records.py`), so git merges them without help. What
is left are the *derived* files (`recordkinds.py`): the dated chronicle, plots
and indexes, rendered from the records. Two branches that both add a note on one
day both change that day's file. The design, in two layers:

- **In the repository** (committed, so every clone and a hosting service's merge
  button obey it): `entries/.gitattributes` gives derived files git's built-in
  `union` merge. A merge or a rebase never stops on a day file, with or without
  any set-up, and the merged day file still reads as a chronicle (both sides'
  entries are there), though it may be out of order until it is re-rendered.
- **In each clone** (`logbook init`): git hooks (`post-merge` after a merge or
  a `git pull`, `post-rewrite` after a rebase or `git pull --rebase`) run
  `logbook render --pulled ORIG_HEAD`, so the day files and the reports
  the pull merged match the records again as soon as git has brought new ones in, and `logbook render --check` passes without hand edits.
  Commit the re-rendered files with `logbook commit`. And refspecs, so that the
  code snapshots runs record (`refs/logbook/snapshots/<run>`) travel with
  `git fetch` and `git push` like branches do: without them a teammate's clone
  could not compare a run's code with its preregistration, and would score the
  run differently.

A clone that is not set up still merges without conflict; its day files are
then stale until someone runs `logbook render`, and every logbook command there
says so.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from logbook.core.fsutil import atomic_write_text
from logbook.core.project import Project
from logbook.eventlog.files import iter_folder
from logbook.core.textfmt import plural

SETUP_KEY = "logbook.records.clonesetup"
"""git config key a set-up clone carries; its value is the set-up's version."""
SETUP_VERSION = "3"
"""2: the hooks write merged reports again, and report PDFs are not committed.
3: the hooks run the installed `logbook` by absolute path, never `python -m logbook` in the repository."""
HOOKS = ("post-merge", "post-rewrite")
LOGBOOK_REFSPEC = "+refs/logbook/*:refs/logbook/*"
"""Code snapshots (`gitbind.SNAPSHOT_REF_PREFIX`) are neither fetched nor pushed by default."""
SNAPSHOTS = "refs/logbook/snapshots/"
"""Where `gitbind.snapshot_worktree` keeps each run's code snapshot."""
HOOK_MARK = "# logbook: re-render the chronicle after git brought in records"

GITATTRIBUTES = """\
# Written by `logbook init`. Files here that are rendered from the records (the dated chronicle
# and its indexes) merge with git's built-in union driver, so a `git pull`, a rebase or a pull
# request's merge button never stops on them; `logbook render` (run by the hooks `logbook init`
# installs in each clone) then makes them match the records again.
/[0-9][0-9][0-9][0-9]/** merge=union
/index.md merge=union
/reports/*.md merge=union
"""


@dataclass
class SetupResult:
    """What `set_up_clone` did, in sentences for the person who ran `logbook init`."""

    done: list[str] = field(default_factory=list)
    """Changes made in this run."""
    already: list[str] = field(default_factory=list)
    """Things found already in place."""
    todo: list[str] = field(default_factory=list)
    """Things left for a person to do (a hook of their own is in the way)."""


def _git(root: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True)


def hooks_dir(root: Path) -> Path:
    """Where git looks for this clone's hooks (honours core.hooksPath and worktrees)."""
    out = _git(root, "rev-parse", "--git-path", "hooks").stdout.strip() or ".git/hooks"
    p = Path(out)
    return p if p.is_absolute() else root / p


def _installed_logbook() -> list[str]:
    """How a hook starts this installed logbook without importing anything from the repository.

    git runs hooks in the repository, so `python -m logbook` there would import a
    `logbook/` committed by anyone with push rights, at every teammate's next
    pull. The console script by absolute path puts only its own folder on
    Python's path; without one, `python -P` keeps the working directory off it.
    """
    import sysconfig

    for folder in (sysconfig.get_path("scripts"), Path(sys.executable).parent):
        script = Path(folder) / "logbook"
        if script.is_file() and os.access(script, os.X_OK):
            return [str(script.resolve())]
    return [sys.executable, "-P", "-m", "logbook"]


def _hook_text() -> str:
    # ORIG_HEAD: where the branch was before the merge or rebase, so only the days and reports it changed are
    # written again (a pull of ten commits re-renders a handful of days, not a lab's year).
    cmd = " ".join(shlex.quote(a) for a in [*_installed_logbook(), "render", "--pulled", "ORIG_HEAD"])
    # A failed render must not turn a successful pull into a failed one: the records are merged either way.
    return f"#!/bin/sh\n{HOOK_MARK} (written by `logbook init`)\n{cmd} || echo 'logbook: run `logbook render`' >&2\n"


GITIGNORE = """\
# Written by `logbook init`. A report's PDF is rendered from the records like its Markdown, but git
# cannot merge two versions of a PDF: it is not committed (`logbook report RUN --format pdf` makes it).
/reports/*.pdf
"""


def write_gitignore(project: Project) -> bool:
    """Write entries/.gitignore when it is missing or differs; True when written."""
    return _write_if_changed(project.entries / ".gitignore", GITIGNORE)


def write_gitattributes(project: Project) -> bool:
    """Write entries/.gitattributes when it is missing or differs; True when written."""
    return _write_if_changed(project.entries / ".gitattributes", GITATTRIBUTES)


def _write_if_changed(path: Path, text: str) -> bool:
    if path.is_file() and path.read_text("utf-8", errors="replace") == text:
        return False
    atomic_write_text(path, text)
    return True


def _install_hook(root: Path, name: str, res: SetupResult) -> None:
    path = hooks_dir(root) / name
    text = _hook_text()
    if path.is_file():
        current = path.read_text("utf-8", errors="replace")
        if current == text:
            res.already.append(f"{name} hook")
            return
        if HOOK_MARK not in current:
            res.todo.append(f"{path} is your own hook: add the line `{text.splitlines()[-1]}` to it")
            return
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, text)
    os.chmod(path, 0o755)
    res.done.append(f"installed the {name} hook (re-renders the chronicle after a pull, merge or rebase)")


def set_up_clone(project: Project) -> SetupResult:
    """Make this clone ready for a shared logbook; idempotent."""
    res = SetupResult()
    if write_gitattributes(project):
        res.done.append(f"wrote {(project.entries / '.gitattributes').relative_to(project.root).as_posix()} "
                        "(day files and plots merge without conflict; commit it)")
    else:
        res.already.append("entries/.gitattributes")
    if write_gitignore(project):
        res.done.append(f"wrote {(project.entries / '.gitignore').relative_to(project.root).as_posix()} "
                        "(report PDFs stay out of git: two of them cannot be merged; commit it)")
    else:
        res.already.append("entries/.gitignore")
    for name in HOOKS:
        _install_hook(project.root, name, res)
    for remote in [r for r in _git(project.root, "remote").stdout.split() if r]:
        _add_refspecs(project.root, remote, res)
        _share_snapshots(project.root, remote, res)
    if _git(project.root, "config", "--get", SETUP_KEY).stdout.strip() != SETUP_VERSION:
        _git(project.root, "config", SETUP_KEY, SETUP_VERSION)
        res.done.append(f"marked this clone as set up (git config {SETUP_KEY})")
    return res


def _add_refspecs(root: Path, remote: str, res: SetupResult) -> None:
    """Fetch and push refs/logbook/* with `remote`; a push list of one's own keeps its entries."""
    fetch = _git(root, "config", "--get-all", f"remote.{remote}.fetch").stdout.split()
    if LOGBOOK_REFSPEC not in fetch:
        _git(root, "config", "--add", f"remote.{remote}.fetch", LOGBOOK_REFSPEC)
        res.done.append(f"`git fetch {remote}` now also brings the runs' code snapshots (refs/logbook/*)")
    push = _git(root, "config", "--get-all", f"remote.{remote}.push").stdout.split()
    if LOGBOOK_REFSPEC in push:
        res.already.append(f"refspecs for {remote}")
        return
    if not push:
        # A configured push list replaces git's default, so the current branch goes first in it.
        _git(root, "config", "--add", f"remote.{remote}.push", "HEAD")
    _git(root, "config", "--add", f"remote.{remote}.push", LOGBOOK_REFSPEC)
    res.done.append(f"`git push {remote}` now pushes the current branch and the runs' code snapshots "
                    f"(remote.{remote}.push)")


def _share_snapshots(root: Path, remote: str, res: SetupResult) -> None:
    """Fetch the runs' code snapshots, and push back those the remote lacks (deleted there, e.g. by a forger).

    A snapshot ref is written once and never moves, so pushing one the remote
    lacks restores it and never overwrites anything; a clone that still has
    it is how a deletion on the remote is undone (`verify` reports the loss).
    """
    if _git(root, "fetch", "-q", remote, LOGBOOK_REFSPEC).returncode != 0:
        res.todo.append(f"could not fetch the runs' code snapshots from {remote}; run `logbook init` again later")
        return
    theirs = {line.split("\t", 1)[1] for line in
              _git(root, "ls-remote", remote, f"{SNAPSHOTS}*").stdout.splitlines() if "\t" in line}
    mine = [r for r in _git(root, "for-each-ref", "--format=%(refname)", SNAPSHOTS).stdout.split() if r]
    missing = [r for r in mine if r not in theirs]
    if not missing:
        return
    pushed = _git(root, "push", "-q", remote, *(f"{r}:{r}" for r in missing))
    if pushed.returncode != 0:
        res.todo.append(f"{remote} lacks {plural(len(missing), 'code snapshot')} this clone has; `git push {remote} "
                        f"{missing[0]}` failed: {pushed.stderr.strip().splitlines()[-1:]}")
        return
    names = ", ".join(r[len(SNAPSHOTS):] for r in missing[:5]) + (" ..." if len(missing) > 5 else "")
    res.done.append(f"restored {plural(len(missing), 'code snapshot')} that {remote} lacked: {names}")


def refresh_own_hooks(root: Path) -> list[str]:
    """Rewrite this clone's logbook hooks that an older logbook wrote; the names of those rewritten.

    A hook of an older version may run `python -m logbook` in the repository, so
    it is replaced by any logbook command that writes, before the next pull runs
    it, rather than waiting for someone to run `logbook init` again. Hooks
    without logbook's mark are a person's own and are left alone.
    """
    text, done = _hook_text(), []
    for name in HOOKS:
        path = hooks_dir(root) / name
        try:
            current = path.read_text("utf-8", errors="replace")
        except OSError:
            continue
        if HOOK_MARK in current and current != text:
            atomic_write_text(path, text)
            os.chmod(path, 0o755)
            done.append(name)
    if done and _git(root, "config", "--get", SETUP_KEY).stdout.strip() == "2":
        _git(root, "config", SETUP_KEY, SETUP_VERSION)  # 3 differs from 2 in the hooks alone
    return done


def clone_is_set_up(root: Path) -> bool:
    return _git(root, "config", "--get", SETUP_KEY).stdout.strip() == SETUP_VERSION


def setup_warning(project: Project) -> str | None:
    """A sentence for a clone that is not set up, or for a logbook still in the shared-log layout; else None."""
    if project.notes_log.is_file() or project.reviews_log.is_file():
        if not any(isinstance(r.get("legacy"), str) for r in iter_folder(project.notes_dir)) and \
                not any(isinstance(r.get("legacy"), str) for r in iter_folder(project.reviews_dir)):
            return ("this logbook still keeps notes or reviews in shared logs (notes.jsonl, reviews.jsonl), "
                    "which are no longer read: run `logbook migrate` once, then `logbook commit`")
    refreshed = refresh_own_hooks(project.root)
    if clone_is_set_up(project.root):
        return (f"rewrote this clone's {' and '.join(refreshed)} hooks: an older logbook's ran `python -m logbook` "
                "inside the repository, where a committed `logbook/` could run; they now run the installed "
                "logbook") if refreshed else None
    return ("this clone is not set up for a shared logbook: after a `git pull` its day files stay stale "
            "until someone renders them; run `logbook init` once here")
