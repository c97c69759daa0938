"""An honest team with a timestamp authority and signing keys needs no extra command, and verifies everywhere.

Three clones with their own identities and SSH keys, a real local RFC 3161
authority, a bare origin. Ada preregisters and runs a tiny real training run
(`logbook run`), scores it; Bo pulls with rebase, writes a note and approves
an entry; Cy pulls with merge and approves another. Only the commands a team
uses today: prereg, run, outcome, note, review, commit, pull, push. Then every
clone and a fresh one verify offline (the authority taken down): intact, every
record signed by its author, the run "before" its preregistration.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from runhelpers import micro_config
from team import Clone, make_team
from test_signatures import ALLOWED, allowed_line, keypair, signed_by, use_key

from conftest import ROOT

pytestmark = pytest.mark.slow


def _sync(c: Clone, mode: str) -> None:
    """The README's habit: `logbook commit && git pull` (the hooks re-render what a pull brings)."""
    c.commit()
    assert c.pull(mode).returncode == 0, c.name


def _push(c: Clone) -> None:
    """A plain `git push`: the refspecs `logbook init` set push the branch and the runs' code snapshots."""
    c.git("push", "-q", "origin")


def _verify(c: Clone) -> dict:
    res = c.cli("verify", "--json")
    assert res.exit_code == 0, f"{c.name}: {res.output}"
    return json.loads(res.stdout)


def test_an_honest_team_with_a_tsa_and_keys_needs_no_extra_command_and_verifies_on_every_clone(tmp_path, local_tsa):
    team = make_team(tmp_path, ["ada", "bo", "cy"])
    ada, bo, cy = team["ada"], team["bo"], team["cy"]
    keys = {n: keypair(tmp_path / "keys", n) for n in ("ada", "bo", "cy")}
    # The lab's one-time set-up, committed by Ada: the authority, its CA, and who may sign.
    local_tsa.configure(ada.path, commit=False)
    (ada.path / ALLOWED).write_text("".join(allowed_line(f"{n}@lab.example", keys[n]) for n in keys))
    cfg = ada.path / "logbook.yaml"
    cfg.write_text(cfg.read_text() + f"signing:\n  allowed_signers: {ALLOWED}\n  require: true\n")
    micro_config(ada.path, steps=6, every=2)
    ada.git("add", "-A")
    ada.git("commit", "-q", "-m", "lab set-up: a timestamp authority, signing keys, a tiny config")
    _push(ada)
    for c in (ada, bo, cy):
        use_key(c, keys[c.name])  # each person's own git signing key, as for signed commits
    _sync(bo, "rebase")
    _sync(cy, "merge")

    made = ada.ok("prereg", "--title", "The micro loss falls", "--hypothesis", "Six steps lower the loss.",
                  "--predict", "restarts@final == 0", "--config", "configs/micro.yaml", "--json")
    pid = json.loads(made.stdout)["id"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    run = subprocess.run([sys.executable, "-m", "logbook", "run", "--prereg", pid, "--run-id", "micro",
                          "configs/micro.yaml"], cwd=ada.path, env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    ada.ok("outcome", "micro")
    _sync(ada, "rebase")
    _push(ada)

    _sync(bo, "rebase")
    bo.ok("note", "the micro run is the lab's smoke test", "--run", "micro")
    queue = json.loads(bo.ok("review", "--json").stdout)
    first, second = queue[0]["id"], queue[1]["id"]
    bo.ok("review", "approve", first, "--comment", "as planned")
    _sync(bo, "rebase")
    _push(bo)
    _sync(cy, "merge")
    cy.ok("review", "approve", second)
    _sync(cy, "merge")
    _push(cy)
    for c in (ada, bo):
        _sync(c, "rebase")

    local_tsa.stop()  # a reader checks offline
    fresh = team.join("reader")
    for c in (ada, bo, cy, fresh):
        report = _verify(c)
        assert report["problems"] == [] and report["warnings"] == [], (c.name, report["warnings"])
        assert report["timestamps"]["preregs"][pid]["runs"]["micro"]["order"] == "before"
        signers = signed_by(report)
        assert signers[f"entries/prereg/{pid}.md"] == ["ada@lab.example"]
        assert signers["entries/runs/micro/run.json"] == ["ada@lab.example"]
        reviews = {p: who for p, who in signers.items() if p.startswith("entries/reviews/")}
        assert sorted(w for who in reviews.values() for w in who) == ["bo@lab.example", "cy@lab.example"]
    fresh.ok("report", "micro")  # the retrospective a reader shares says when a third party saw the promise
    md = (fresh.path / "entries" / "reports" / "micro.md").read_text()
    assert f"Third-party time: stamped by {local_tsa.url} at " in md and "(RFC 3161)" in md
