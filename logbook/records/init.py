"""`logbook init`: a logbook in a git repository."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from logbook.core.errors import RefusedError
from logbook.core.fsutil import atomic_write_text
from logbook.core.project import Project, find_git_root
from logbook.core.settings import CONFIG_FILE, LogbookConfig, load_config
from logbook.records.clonesetup import SetupResult, set_up_clone
from logbook.records.gitbind import check_repo_state, commit_file, git


@dataclass
class InitResult:
    root: Path
    config_path: Path
    entries: Path
    created: bool
    setup: SetupResult
    """What was set up in this clone (hooks, git config) and the repository (entries/.gitattributes)."""
    committed: str | None = None
    """The commit that added logbook.yaml, when this call created it."""
    first_commit: bool = False
    """The repository had no commits yet: this call made an empty first one."""


def init_logbook(start: Path | None = None, entries_dir: str = "entries") -> InitResult:
    """Write `logbook.yaml`, create the entries folder and set this clone up for sharing; idempotent.

    In a fresh clone of a repository that already has a logbook, this only does
    the per-clone part (`clonesetup.set_up_clone`).
    """
    root = find_git_root(start)
    if root is None:
        raise RefusedError("not inside a git repository", hint="run `git init`, commit something, then `logbook init`")
    import git  # deferred: GitPython costs start-up time

    with git.Repo(root) as repo:
        unborn = not repo.head.is_valid()
    if unborn:
        _root_commit(root)
    cfg_path = root / CONFIG_FILE
    created = not cfg_path.exists()
    committed = None
    if created:
        cfg = LogbookConfig(entries_dir=entries_dir)
        cfg.validate()
        # Committed at once, alone (the user's index and work stay as they are):
        # a preregistration made next binds to a commit that already has the
        # logbook's settings, so the run's snapshot shows no false code change.
        state = check_repo_state(root)
        message = f"Start a logbook\n\nSettings in {CONFIG_FILE}; records under {entries_dir}/.\n"
        committed = commit_file(root, CONFIG_FILE, cfg.to_yaml().encode("utf-8"), message, state).commit
    else:
        cfg = load_config(cfg_path)
    entries = root / cfg.entries_dir
    entries.mkdir(parents=True, exist_ok=True)
    keep = entries / "README.md"
    if not keep.exists():
        atomic_write_text(
            keep,
            "# Logbook\n\nPreregistrations, run logs and the dated chronicle live here.\n"
            "The event logs under `runs/` are the source of truth; the dated Markdown is rendered from them.\n",
        )
    setup = set_up_clone(Project(root=root, config=cfg))
    return InitResult(root=root, config_path=cfg_path, entries=entries, created=created, setup=setup,
                      committed=committed, first_commit=unborn)


_EMPTY_TREE = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"
"""git's empty tree (sha1 repositories; a sha256 one gets its own from `mktree`)."""


def _root_commit(root: Path) -> None:
    """Give a repository with no commits yet its first, empty one, on the branch HEAD names.

    Preregistrations are bound to commits, and `logbook.yaml` is committed on
    top of HEAD: a fresh `git init` needs a first commit, which a newcomer
    should not have to be told to make. The user's index is not touched.
    """
    branch = git(root, "symbolic-ref", "HEAD").strip()
    tree = git(root, "mktree", input=b"").strip() or _EMPTY_TREE
    commit = git(root, "commit-tree", tree, "-m", "Start the repository").strip()
    # The old value 0{40} makes update-ref refuse if someone created the branch meanwhile.
    git(root, "update-ref", "-m", "logbook init: first commit", branch, commit, "0" * len(commit))
