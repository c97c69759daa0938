"""Which git operation is half done in a clone, and the recovery steps that work in that state.

Hints that say "restore the file with `git checkout -- FILE`" fail in the middle
of a merge or a rebase (the file is unmerged, or the commit being replayed is
not the branch's). Every command that refuses because of the git state asks
this module for the sentence, so no two commands send a person in a circle.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class InProgress:
    """A git operation that stopped half way."""

    what: str
    """`a merge`, `a rebase`, ...: for a sentence."""
    recovery: str
    """The steps that finish or undo it, as git commands."""


_STATES = (
    ("rebase-merge", "a rebase", "resolve the conflicted files git lists in `git status` (a file the logbook "
     "renders, such as a report, takes either side, `git checkout --theirs -- FILE`, and is rendered again after), "
     "`git add` them and run `git rebase --continue`, or undo it all with `git rebase --abort`"),
    ("rebase-apply", "a rebase or `git am`", "resolve the conflicted files `git status` lists, `git add` them and run "
     "`git rebase --continue` (or `git am --continue`), or undo it with `git rebase --abort`"),
    ("MERGE_HEAD", "a merge", "resolve the conflicted files `git status` lists (a file the logbook renders, such as a "
     "report, takes either side, `git checkout --theirs -- FILE`, and is rendered again after), `git add` them "
     "and run `git commit`, or undo the merge with `git merge --abort`"),
    ("CHERRY_PICK_HEAD", "a cherry-pick", "resolve the conflicted files, `git add` them and run "
     "`git cherry-pick --continue`, or undo it with `git cherry-pick --abort`"),
    ("REVERT_HEAD", "a revert", "resolve the conflicted files, `git add` them and run `git revert --continue`, "
     "or undo it with `git revert --abort`"),
)


def git_dir(root: Path) -> Path | None:
    r = subprocess.run(["git", "rev-parse", "--absolute-git-dir"], cwd=root, capture_output=True, text=True)
    return Path(r.stdout.strip()) if r.returncode == 0 and r.stdout.strip() else None


def in_progress(gdir: Path | None) -> InProgress | None:
    """The half-done operation in the git directory `gdir`, or None."""
    if gdir is None:
        return None
    for name, what, recovery in _STATES:
        if (gdir / name).exists():
            return InProgress(what, recovery)
    return None


def state_of(root: Path) -> InProgress | None:
    """The half-done git operation in the clone at `root`, or None."""
    return in_progress(git_dir(root))


def restore_hint(root: Path | None, rel: str) -> str:
    """How to put a record back as committed, in the git state the clone is in."""
    op = state_of(root) if root is not None else None
    plain = f"restore it as committed: `git restore --source=HEAD --staged --worktree -- {rel}`"
    if op is None:
        return plain
    if op.what == "a merge":
        return (f"a merge is in progress: {plain} (for a record that came with the merge, "
                f"`--source=MERGE_HEAD`), then finish the merge: {op.recovery}")
    return f"{op.what} is in progress: first {op.recovery}; then {plain}"
