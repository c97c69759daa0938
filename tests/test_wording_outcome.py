"""The full wording of `logbook outcome`'s scorecard lines and refusals, pinned once.

Other tests assert the status, value, step and a key phrase; the sentences live in
__snapshots__/test_wording_outcome.ambr (`pytest --snapshot-update` after a deliberate change).
"""

from __future__ import annotations

import pytest
from normalise import normalise
from scoring_helpers import STORY_PREDICTIONS, make_prereg, project_of, story_clock, story_run  # noqa: F401

from logbook.core.errors import RefusedError, TamperedError
from logbook.proof.scorecard import evaluate


def test_each_prediction_of_the_story_run_reads_in_full(logbook_repo, story_clock, snapshot):
    project = project_of(logbook_repo)
    pid = make_prereg(project, [*STORY_PREDICTIONS, "val_loss@step:60 < 1", "val_loss@~60±5 < 10"])
    story_run(project, story_clock, "story", pid)
    card = evaluate(project, "story")
    lines = {p.text: {"status": p.status, "rule": p.rule, "reason": p.reason} for p in card.predictions}
    assert {text: {k: normalise(str(v), prereg=pid) for k, v in line.items()} for text, line in lines.items()} \
        == snapshot


def test_the_refusals_to_score_read_in_full(logbook_repo, story_clock, cli, snapshot):
    project = project_of(logbook_repo)
    story_run(project, story_clock, "explore", None, exploratory=True)
    pid = make_prereg(project, ["loss@final < 4"])
    story_run(project, story_clock, "story", pid)
    with pytest.raises(RefusedError) as exploratory:
        evaluate(project, "explore")
    (project.prereg_dir / f"{pid}.md").write_text("no front matter at all\n")
    with pytest.raises(TamperedError) as unreadable:
        evaluate(project, "story")
    res = cli("outcome", "story")
    assert res.exit_code == 4
    assert {
        "exploratory": [exploratory.value.message, exploratory.value.hint],
        "unreadable preregistration": [normalise(unreadable.value.message, prereg=pid),
                                       normalise(unreadable.value.hint, prereg=pid)],
        "cli, unreadable preregistration": normalise(res.stderr, prereg=pid),
    } == snapshot
