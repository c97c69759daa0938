"""Reading a logbook never runs its code: a teammate's committed package, a shim in a run's snapshot.

A forger with push rights commits a `logbook/`, a `trainer/`, a `conftest.py`, a
`.pth` file and a `sitecustomize.py`, each of which would write a file when
imported. A teammate then pulls (merge and rebase: the hooks `logbook init`
installed run), renders, compares, asks for a run's status, verifies and
replays, as the installed `logbook` console script does at a terminal. No file
may appear. The user's own `logbook run` is the one command that runs the
repository's code, so the runs here are trained before anything is planted.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from runhelpers import micro_config
from team import _inside, make_team

from logbook.core.project import open_project
from logbook.launch.launcher import launch_run

_ARM = "LOGBOOK_TEST_PLANT_MARKS"
"""Where the planted code writes its marks; unset, it writes none (so the planting commit itself is harmless)."""


def _plant_line(name: str) -> str:
    return (f"import os, pathlib\nif os.environ.get({_ARM!r}):\n"
            f"    pathlib.Path(os.environ[{_ARM!r}], {name!r}).write_text('ran')\n")


PLANTS = {
    "logbook/__init__.py": _plant_line("logbook"),
    "logbook/__main__.py": _plant_line("logbook-main"),
    "trainer/__init__.py": _plant_line("trainer"),
    "trainer/__main__.py": _plant_line("trainer-main"),
    "conftest.py": _plant_line("conftest"),
    "sitecustomize.py": _plant_line("sitecustomize"),
    "usercustomize.py": _plant_line("usercustomize"),
    # A .pth line that starts with `import` runs, if Python ever takes the folder for a site directory.
    "zz-plant.pth": f"import os; os.environ.get({_ARM!r}) and open(os.path.join(os.environ[{_ARM!r}], 'pth'), 'w')\n",
}


def _logbook() -> str:
    """The installed console script, as a person runs it."""
    exe = shutil.which("logbook", path=os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]))
    assert exe, "the logbook console script is not installed"
    return exe


def _run(clone_path: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([_logbook(), *args], cwd=clone_path, capture_output=True, text=True, timeout=600)


def _plant(path: Path) -> None:
    for rel, text in PLANTS.items():
        (path / rel).parent.mkdir(parents=True, exist_ok=True)
        (path / rel).write_text(text)


@pytest.mark.slow
def test_no_hook_or_command_runs_code_a_teammate_committed(tmp_path, monkeypatch):
    team = make_team(tmp_path, ["ada", "bo"])
    ada, bo = team["ada"], team["bo"]
    cfg = micro_config(ada.path, steps=4, every=2)
    ada.git("add", "-A")
    ada.git("commit", "-q", "-m", "config")
    with _inside(ada.path):
        for run_id in ("r1", "r2"):
            res = launch_run(open_project(ada.path), cfg, [f"optim.lr={3e-3 if run_id == 'r1' else 1e-3}"],
                             exploratory=True, run_id=run_id, max_restarts=0)
            assert res.status == "finished", run_id
    ada.commit()
    ada.push()
    ada.ok("init")  # pushes the runs' code snapshots, which a plain `git push HEAD:main` leaves behind
    assert bo.pull().returncode == 0

    # The forger commits the plants at the top of the repository, with a note, and pushes.
    _plant(ada.path)
    ada.git("add", "-A")
    ada.git("commit", "-q", "-m", "tooling")
    ada.ok("note", "the forum dump is back")
    ada.commit()
    ada.push()

    marks = tmp_path / "marks"
    marks.mkdir()
    monkeypatch.setenv(_ARM, str(marks))
    hook = (bo.path / ".git" / "hooks" / "post-merge").read_text()
    assert " -m logbook" not in hook  # the hook names the installed console script
    pulled = bo.pull("merge")
    assert pulled.returncode == 0, pulled.stderr
    assert "run `logbook render`" not in pulled.stderr, pulled.stderr  # the hook ran render, and it succeeded
    assert (bo.path / "logbook" / "__init__.py").is_file()  # the plants are in bo's work tree now

    # A commit of bo's own, then a rebase onto another of ada's: the post-rewrite hook runs.
    bo.ok("note", "bo's own note")
    bo.commit()
    ada.ok("note", "and another")
    ada.commit()
    ada.push()
    rebased = bo.pull("rebase")
    assert rebased.returncode == 0, rebased.stderr
    assert "run `logbook render`" not in rebased.stderr

    for args in (["render"], ["compare", "r1", "r2"], ["status", "r1"], ["verify"], ["ls"]):
        res = _run(bo.path, *args)
        assert res.returncode in (0, 3, 4), f"logbook {' '.join(args)}: {res.returncode}\n{res.stderr}"
    assert sorted(p.name for p in marks.iterdir()) == []

    # The replay: the snapshot the run names now ships the plants too (a forger's rewritten snapshot).
    record_path = bo.entries() / "runs" / "r1" / "run.json"
    record = json.loads(record_path.read_text())
    forged = _snapshot_with_plants(bo.path, record["snapshot"]["commit"])
    record["snapshot"]["commit"] = forged
    record_path.write_text(json.dumps(record, indent=2) + "\n")
    res = _run(bo.path, "verify", "--replay", "2", "--run", "r1")
    assert res.returncode in (3, 4), res.stdout + res.stderr
    # conftest.py is pytest's, not Python's: not named.
    assert ("NOT REPLAYED  run r1 not replayed: the run's own code replaces the trainer (its snapshot ships "
            "logbook, sitecustomize.py, trainer, usercustomize.py, zz-plant.pth, which ran when it trained)"
            ) in res.stdout, res.stdout
    assert sorted(p.name for p in marks.iterdir()) == [], res.stdout + res.stderr


def _snapshot_with_plants(root: Path, commit: str) -> str:
    """A commit with `commit`'s tree plus the plants, made with plumbing (the work tree is not touched)."""
    env = {**os.environ, "GIT_INDEX_FILE": str(root / ".git" / "forger-index")}

    def git(*args: str, input: str | None = None) -> str:
        return subprocess.run(["git", *args], cwd=root, env=env, input=input, capture_output=True, text=True,
                              check=True).stdout.strip()

    git("read-tree", commit)
    for rel, text in PLANTS.items():
        blob = git("hash-object", "-w", "--stdin", input=text)
        git("update-index", "--add", "--cacheinfo", f"100644,{blob},{rel}")
    tree = git("write-tree")
    return git("commit-tree", tree, "-p", commit, "-m", "snapshot")


def test_an_older_logbook_hook_is_rewritten_by_the_next_command_that_writes(logbook_repo, cli):
    from logbook.records.clonesetup import HOOK_MARK, SETUP_KEY, hooks_dir

    old = f"#!/bin/sh\n{HOOK_MARK} (written by `logbook init`)\n/usr/bin/python3 -m logbook render || true\n"
    path = hooks_dir(logbook_repo) / "post-merge"
    path.write_text(old)
    subprocess.run(["git", "config", SETUP_KEY, "2"], cwd=logbook_repo, check=True)
    res = cli("note", "a first note")
    assert res.exit_code == 0, res.output
    assert "rewrote this clone's post-merge hook" in res.stderr
    text = path.read_text()
    assert HOOK_MARK in text and " -m logbook" not in text and "render --pulled ORIG_HEAD" in text
    assert "rewrote" not in cli("note", "a second note").stderr  # said once
    mine = hooks_dir(logbook_repo) / "post-rewrite"
    mine.write_text("#!/bin/sh\necho mine\n")
    cli("note", "a third note")
    assert mine.read_text() == "#!/bin/sh\necho mine\n"  # a person's own hook is theirs


@pytest.mark.parametrize("planted, named", [
    ({"trainer/__main__.py": "x"}, ["trainer"]),
    ({"trainer.py": "x"}, ["trainer.py"]),
    ({"logbook/__init__.py": "x"}, ["logbook"]),
    ({"torch/__init__.py": "x"}, ["torch"]),
    ({"sitecustomize.py": "x"}, ["sitecustomize.py"]),
    ({"a.pth": "import os"}, ["a.pth"]),
    ({"train.py": "x", "src/trainer/__init__.py": "x", "configs/trainer.yaml": "x"}, []),
])
def test_a_snapshot_that_ships_what_would_replace_the_trainer_is_named(logbook_repo, planted, named):
    from conftest import git

    from logbook.trust.retrain import shadowing_paths

    for rel, text in planted.items():
        (logbook_repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (logbook_repo / rel).write_text(text)
    git(logbook_repo, "add", "-A")
    git(logbook_repo, "commit", "-q", "-m", "code")
    commit = git(logbook_repo, "rev-parse", "HEAD").strip()
    assert shadowing_paths(open_project(logbook_repo), "r", {"snapshot": {"commit": commit}}) == named


def test_a_committed_template_runs_nothing_at_a_pull_a_render_or_a_site_build(tmp_path, monkeypatch):
    """The repository's `templates/` overrides the bundled ones, and the hooks render it at every pull: a template
    that climbs from a jinja global to Python's `os` is refused by the sandbox, with the file's fault named."""
    team = make_team(tmp_path, ["ada", "bo"])
    ada, bo = team["ada"], team["bo"]
    ada.ok("note", "a first day")
    ada.commit()
    ada.push()
    assert bo.pull().returncode == 0
    marks = tmp_path / "marks"
    marks.mkdir()
    climb = "{{ cycler.__init__.__globals__.os.system('touch %s') }}\n"
    bundled = Path(__file__).resolve().parents[1] / "templates"
    for rel in ("chronicle/day.md.j2", "site/base.html.j2"):
        (ada.path / "templates" / rel).parent.mkdir(parents=True, exist_ok=True)
        (ada.path / "templates" / rel).write_text(climb % (marks / rel.replace("/", "-")) + (bundled / rel).read_text())
    ada.git("add", "templates")
    ada.git("commit", "-q", "-m", "our own day template")
    kept = ada.cli("note", "a second note")  # so the pull brings a record the hook renders
    assert kept.exit_code == 3 and "is written and kept" in kept.stderr and "no template may" in kept.stderr
    ada.commit()
    ada.push()

    pulled = bo.pull("merge")
    assert pulled.returncode == 0, pulled.stderr  # the records are merged either way
    assert "a template tried what no template may" in pulled.stderr and "run `logbook render`" in pulled.stderr
    res = _run(bo.path, "render")
    assert res.returncode == 3, res.stderr
    assert "no template may" in res.stderr and "'__init__' of 'type'" in res.stderr  # worded in full: test_wording_templates
    site = _run(bo.path, "site", "--out", str(tmp_path / "site"))
    assert site.returncode == 3 and "a template tried what no template may" in site.stderr, site.stderr
    assert sorted(p.name for p in marks.iterdir()) == []


@pytest.mark.parametrize("climb", ["cycler.__init__.__globals__", "joiner.__init__.__globals__",
                                   "''.__class__.__mro__", "range.__globals__.os", "lipsum.__globals__.os",
                                   "namespace.__init__.__globals__", "[].__class__.__base__"])
def test_the_template_sandbox_refuses_each_way_out_asked_twice(climb):
    """The sandbox's verdicts are remembered by (type, attribute): the second asking is refused like the first."""
    from logbook.chronicle.sandbox import TemplateEnvironment
    from logbook.core.errors import RefusedError

    env = TemplateEnvironment()
    for _ in range(2):
        with pytest.raises(RefusedError, match="a template tried what no template may"):
            env.from_string("{{ %s }}" % climb).render()
