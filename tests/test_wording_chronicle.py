"""The chronicle's day pages of the qknorm story, pinned whole: every entry's wording as a reader of the logbook sees it.

tests/test_chronicle.py checks each entry's facts (steps, losses, causes,
links); the pages themselves live in __snapshots__/test_wording_chronicle.ambr
(`pytest --snapshot-update` after a deliberate change). The story's clock is
fixed, so the pages are the same bytes on every run.
"""

from __future__ import annotations

from chronicle_helpers import clock, project_of, qknorm_story  # noqa: F401  (clock is a fixture)

from logbook.chronicle.build import day_path, render_chronicle


def test_the_day_pages_of_a_run_with_a_restart_a_spike_a_rollback_and_a_live_change_read_in_full(
        logbook_repo, clock, snapshot):
    project = project_of(logbook_repo)
    qknorm_story(project, clock)
    render_chronicle(project)
    assert {day: day_path(project, day).read_text() for day in ("2026-11-30", "2026-12-01")} == snapshot
