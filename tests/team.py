"""A team sharing one logbook through git: a bare origin and clones with their own identities.

    team = make_team(tmp_path, monkeypatch, ["ada", "bo", "cy"])
    ada, bo = team["ada"], team["bo"]
    ada.cli("note", "hello"); ada.cli("commit"); ada.push()
    bo.pull("rebase")

Everything is real: `git clone`, `git pull` (merge or rebase), `git push`, and
the logbook CLI called in-process inside the clone's folder. The first member
creates the repository and runs `logbook init`; every other member clones it
and runs `logbook init` in the clone, as a new teammate would. `setup=False`
leaves a clone without `logbook init` (a stand-in for a hosting service).
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from conftest import CliResult


def run_git(cwd: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    """git in `cwd`; raises with git's own message when `check` and git fails."""
    r = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True)
    if check and r.returncode != 0:
        raise AssertionError(f"git {' '.join(args)} failed in {cwd}:\n{r.stdout}\n{r.stderr}")
    return r


@contextmanager
def _inside(path: Path) -> Iterator[None]:
    old = os.getcwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(old)


@dataclass
class Clone:
    """One person's clone of the team's repository."""

    name: str
    """Also git's user.name in this clone."""
    email: str
    """git's user.email in this clone."""
    path: Path
    """The clone's work tree."""

    def git(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        return run_git(self.path, *args, check=check)

    def cli(self, *args: str, input: str | None = None) -> CliResult:
        """The logbook CLI, in-process, with this clone as the working directory."""
        from typer.testing import CliRunner

        from logbook.cli import app

        with _inside(self.path):
            res = CliRunner().invoke(app, list(args), input=input, catch_exceptions=False)
        return CliResult(res.exit_code, res.stdout, res.stderr)

    def ok(self, *args: str, input: str | None = None) -> CliResult:
        """Like `cli`, asserting exit 0."""
        res = self.cli(*args, input=input)
        assert res.exit_code == 0, f"{self.name}: logbook {' '.join(args)} -> {res.exit_code}\n{res.output}"
        return res

    def commit(self, message: str | None = None) -> None:
        """`logbook commit`: everything the logbook wrote, in one commit."""
        self.ok("commit", *(["-m", message] if message else []))

    def pull(self, mode: str = "merge") -> subprocess.CompletedProcess:
        """`git pull` by merge or by rebase; returns git's result (check it: a conflict is a failure)."""
        flag = "--rebase" if mode == "rebase" else "--no-rebase"
        return self.git("pull", "-q", flag, check=False)  # no refspec: the configured ones fetch refs/logbook/* too

    def push(self) -> None:
        self.git("push", "-q", "origin", "HEAD:main")

    def conflicts(self) -> list[str]:
        """Paths git left unmerged."""
        out = self.git("diff", "--name-only", "--diff-filter=U").stdout
        return [p for p in out.splitlines() if p]

    def entries(self) -> Path:
        return self.path / "entries"


@dataclass
class Team:
    """A bare origin and its clones, by member name."""

    origin: Path
    clones: dict[str, Clone] = field(default_factory=dict)

    def __getitem__(self, name: str) -> Clone:
        return self.clones[name]

    def join(self, name: str, *, setup: bool = True) -> Clone:
        """A new member clones the origin (and runs `logbook init` unless `setup` is False)."""
        path = self.origin.parent / name
        run_git(self.origin.parent, "clone", "-q", str(self.origin), str(path))
        c = _identify(name, path)
        if setup:
            c.ok("init")
        self.clones[name] = c
        return c


def _identify(name: str, path: Path) -> Clone:
    c = Clone(name, f"{name}@lab.example", path)
    c.git("config", "user.name", name.capitalize())
    c.git("config", "user.email", c.email)
    return c


def make_team(tmp_path: Path, names: list[str]) -> Team:
    """A bare origin whose first commit holds a logbook, and one set-up clone per name."""
    origin = tmp_path / "origin.git"
    run_git(tmp_path, "init", "-q", "--bare", "-b", "main", str(origin))
    first = tmp_path / names[0]
    run_git(tmp_path, "init", "-q", "-b", "main", str(first))
    founder = _identify(names[0], first)
    (first / "README.md").write_text("the lab's experiments\n")
    founder.git("add", "README.md")
    founder.git("commit", "-q", "-m", "initial")
    founder.ok("init")
    founder.git("add", "-A")
    founder.git("commit", "-q", "-m", "logbook init")
    founder.git("remote", "add", "origin", str(origin))
    founder.push()
    founder.git("branch", "-q", "--set-upstream-to=origin/main")
    founder.ok("init")  # again, now that there is a remote: its refspecs are per clone
    team = Team(origin, {names[0]: founder})
    for name in names[1:]:
        team.join(name)
    return team


def kind_violations(c: Clone, entries: str = "entries") -> list[str]:
    """Every commit of every branch, against each of its parents: a record changed or deleted, or a log that did
    not only grow. Empty when every file under the entries folder obeyed its class (`logbook.core.recordkinds`)."""
    from logbook.core.recordkinds import classify

    out = []
    for line in c.git("rev-list", "--all", "--parents").stdout.splitlines():
        commit, *parents = line.split()
        for parent in parents:
            diff = c.git("diff-tree", "-r", "--no-renames", "--name-status", parent, commit, "--", entries).stdout
            for row in diff.splitlines():
                status, path = row.split("\t", 1)
                kind = classify(path[len(entries) + 1:])
                if kind == "record" and status in ("M", "D"):
                    out.append(f"{commit[:7]}: record {path} {'changed' if status == 'M' else 'deleted'}")
                elif kind == "log" and status == "D":
                    out.append(f"{commit[:7]}: log {path} deleted")
                elif kind == "log" and status == "M":
                    old = c.git("cat-file", "blob", f"{parent}:{path}").stdout
                    if not c.git("cat-file", "blob", f"{commit}:{path}").stdout.startswith(old):
                        out.append(f"{commit[:7]}: log {path} did not only grow")
    return out
