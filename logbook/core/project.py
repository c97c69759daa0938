"""Where things live: the git repository, `logbook.yaml`, and the logbook folders.

Layout under the entries folder (default `entries/`), all of it committed:

    prereg/<id>.md                 preregistrations (Markdown + YAML front matter)
    prereg/<id>.amend-<rid>.md     amendments, one file each, ordered by (time, id)
    runs/<run>/run.json            the run record (written once, before the first step)
    runs/<run>/events.jsonl        the run's hash-chained event log (source of truth; the run is its only writer)
    runs/<run>/outcomes/<rid>.json scorecards, one file each; the newest supersedes
    notes/<rid>.json               human notes and errata, one file each
    reviews/<rid>.json             review records, one file each
    YYYY/MM/DD.md                  the dated chronicle, rendered from the records (derived)
    assets/                        plots referenced by the chronicle (derived)

`<rid>` is a record id (`records.py`): unique without coordination, so no two
people ever write the same file and `git pull` has nothing to reconcile.

Runtime state that must not be committed lives under `.logbook/` at the
repository root (checkpoints, live-change requests); it ignores itself.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from logbook.core.errors import RefusedError
from logbook.core.settings import CONFIG_FILE, LogbookConfig, load_config

STATE_DIR = ".logbook"


def find_git_root(start: Path | None = None) -> Path | None:
    """The top of the git work tree containing `start` (default: cwd), or None."""
    p = Path(start or os.getcwd()).resolve()
    for d in (p, *p.parents):
        if (d / ".git").exists():
            return d
    return None


@dataclass(frozen=True)
class Project:
    """A git repository with a logbook in it."""

    root: Path
    config: LogbookConfig

    @property
    def entries(self) -> Path:
        return self.root / self.config.entries_dir

    @property
    def prereg_dir(self) -> Path:
        return self.entries / "prereg"

    @property
    def runs_dir(self) -> Path:
        return self.entries / "runs"

    def run_dir(self, run_id: str) -> Path:
        return self.runs_dir / run_id

    @property
    def notes_dir(self) -> Path:
        """One file per note or erratum: `notes/<record id>.json`."""
        return self.entries / "notes"

    @property
    def reviews_dir(self) -> Path:
        """One file per review action: `reviews/<record id>.json`."""
        return self.entries / "reviews"

    @property
    def notes_log(self) -> Path:
        """The shared notes log of the old layout (read only by `logbook migrate`)."""
        return self.entries / "notes" / "notes.jsonl"

    @property
    def reviews_log(self) -> Path:
        """The shared reviews log of the old layout (read only by `logbook migrate`)."""
        return self.entries / "reviews" / "reviews.jsonl"

    @property
    def assets_dir(self) -> Path:
        return self.entries / "assets"

    @property
    def state_dir(self) -> Path:
        """Uncommitted runtime state: checkpoints, live-change requests."""
        d = self.root / STATE_DIR
        if not d.exists():
            d.mkdir(parents=True, exist_ok=True)
            # A folder that ignores itself keeps checkpoints out of git
            # without touching the user's own .gitignore.
            (d / ".gitignore").write_text("*\n")
        return d

    def checkpoint_dir(self, run_id: str) -> Path:
        return self.state_dir / "checkpoints" / run_id

    def control_dir(self, run_id: str) -> Path:
        return self.state_dir / "control" / run_id


def open_project(start: Path | None = None, *, require_config: bool = True) -> Project:
    """Locate the repository and its logbook, or raise with what to do."""
    root = find_git_root(start)
    if root is None:
        raise RefusedError(
            "not inside a git repository",
            hint="run `git init` and make a first commit, then `logbook init`",
        )
    cfg_path = root / CONFIG_FILE
    if not cfg_path.exists():
        if require_config:
            raise RefusedError(
                f"no {CONFIG_FILE} in {root}",
                hint="run `logbook init` at the top of the repository first",
            )
        return Project(root=root, config=LogbookConfig())
    return Project(root=root, config=load_config(cfg_path))
