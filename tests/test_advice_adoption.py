"""`checkpoint.adopt_advice`: a real run changes its own checkpoint interval to Young's, on the record."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from conftest import ROOT
from runhelpers import events, of_kind

pytestmark = pytest.mark.slow

MICRO = ROOT / "configs" / "micro-test.yaml"
STEPS, FIRST_EVERY = 100, 20


def test_adopted_advice_changes_checkpoint_every_once_per_change_and_the_saves_follow_it(logbook_repo):
    repo = logbook_repo
    # MTBF 0.05 s with saves of milliseconds to a tenth of a second: Young's interval is a few
    # hundredths of a second, a handful of steps, far below the first interval of 20. The advice
    # is taken the step after a boundary, once that boundary's save is on the record.
    cmd = [sys.executable, "-m", "trainer", "--project", str(repo), "--run", "adopt", str(MICRO),
           f"train.steps={STEPS}", "train.eval_every=0", f"checkpoint.every={FIRST_EVERY}",
           "checkpoint.background=false", "checkpoint.keep=2", "checkpoint.adopt_advice=true", "checkpoint.mtbf_s=0.05"]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "CI": "true"}
    env.pop("TORCHELASTIC_ERROR_FILE", None)
    res = subprocess.run(cmd, cwd=repo, env=env, capture_output=True, text=True, timeout=180)
    assert res.returncode == 0, res.stderr[-2000:]

    evs = events(repo, "adopt")
    changes = [e for e in of_kind(evs, "hparam_change") if e["data"]["source"] == "advice"]
    assert changes, "the advice was never adopted"
    assert all(e["data"]["key"] == "checkpoint.every" for e in changes)
    assert changes[0]["step"] % FIRST_EVERY == 1 and changes[0]["data"]["old"] == FIRST_EVERY
    for prev, cur in zip(changes, changes[1:]):
        assert cur["data"]["old"] == prev["data"]["new"] and cur["step"] > prev["step"]  # a chain, none repeated
    for e in changes:
        new = e["data"]["new"]
        assert new != e["data"]["old"] and 1 <= new <= STEPS
        assert f"every {new} steps" in e["data"]["reason"]

    # Every boundary due under the first interval was saved, and from one change to the next the
    # run saves at exactly the multiples of the adopted interval (and at the last step).
    saved = sorted({e["step"] for e in of_kind(evs, "checkpoint_saved")})
    first = changes[0]["step"]
    assert [s for s in saved if s < first] == list(range(FIRST_EVERY, first, FIRST_EVERY))
    bounds = [e["step"] for e in changes] + [STEPS + 1]
    for e, end in zip(changes, bounds[1:]):
        every, start = e["data"]["new"], e["step"]
        want = [s for s in range(start, end) if s % every == 0 or s == STEPS]
        assert [s for s in saved if start <= s < end] == want, (every, start, end, saved)
    assert len(of_kind(evs, "run_finished")) == 1, [(e["step"], e["data"]["new"]) for e in changes]
