"""The full wording of `logbook verify` for an intact logbook and for each change a reader meets, pinned once.

tests/test_verify.py checks each finding's kind, line and exit code; the
words a reader sees, stdout and stderr together, live in
__snapshots__/test_wording_verify.ambr (`pytest --snapshot-update` after a
deliberate change). One repository: each change is made, read, and undone.
"""

from __future__ import annotations

import json

from conftest import git
from normalise import normalise
from test_verify import _amend, _path, _prereg, _run_log


def _said(cli, **known: str) -> dict:
    res = cli("verify")
    return {"exit": res.exit_code, "output": normalise(res.stdout + res.stderr, **known)}


def test_what_verify_says_of_an_intact_logbook_and_of_each_change_reads_in_full(logbook_repo, cli, snapshot):
    pid = _prereg(cli)
    _amend(cli, pid)
    log = _run_log(logbook_repo)
    pre = _path(logbook_repo, pid)
    said = {"intact": _said(cli, prereg=pid)}

    def undo():
        git(logbook_repo, "checkout", "-q", "--", "entries")
        assert cli("verify").exit_code == 0

    text = pre.read_text()
    pre.write_text(text.replace("QK-norm keeps attention logits bounded.", "QK-norm keeps them bounded, mostly.", 1))
    said["a preregistration's body edited"] = _said(cli, prereg=pid)
    undo()
    pre.write_text(text.replace("spikes@final == 0", "spikes@final <= 3", 1))
    said["a prediction edited"] = _said(cli, prereg=pid)
    undo()
    pre.unlink()
    said["a preregistration deleted"] = _said(cli, prereg=pid)
    undo()

    lines = log.read_text().splitlines(keepends=True)
    rec = json.loads(lines[2])
    rec["data"]["fraction"] = 0.99
    log.write_text("".join([*lines[:2], json.dumps(rec) + "\n", *lines[3:]]))
    said["an event edited"] = _said(cli, prereg=pid)
    undo()
    log.write_text("".join(lines[:1] + lines[2:]))
    said["an event deleted"] = _said(cli, prereg=pid)
    undo()
    log.write_text("".join(lines[:-2]))
    said["the last events cut"] = _said(cli, prereg=pid)
    undo()
    log.unlink()
    said["a log deleted"] = _said(cli, prereg=pid)
    undo()
    with open(log, "ab") as f:
        f.write(b'{"kind": "milest')
    said["a torn last line"] = _said(cli, prereg=pid)
    assert said == snapshot
