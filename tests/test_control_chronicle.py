"""How live changes read in the rendered chronicle."""

from __future__ import annotations

from logbook.chronicle.build import render_chronicle
from logbook.core.project import open_project
from logbook.eventlog.sink import EventSink


def test_a_change_reapplied_after_a_restart_reads_as_the_same_change(logbook_repo):
    project = open_project(logbook_repo)
    change = {"key": "lr_scale", "old": 1.0, "new": 0.5, "reason": "gentler after the spike", "who": "Ada <ada@example.org>",
              "source": "live", "request_id": "5f0c2a9e81d34b7a", "config_diff": None, "plan": None}
    first = EventSink(project.run_dir("r1"), "r1", attempt=1)
    first.emit("run_started", step=0)
    first.emit("hparam_change", step=7, **change)
    second = EventSink(project.run_dir("r1"), "r1", attempt=2)
    second.emit("restart", step=5, cause="signal")
    second.emit("hparam_change", step=6, reapplied=True, **change)
    render_chronicle(project)
    (day,) = sorted(project.entries.glob("[0-9][0-9][0-9][0-9]/[0-9][0-9]/[0-9][0-9].md"))
    text = day.read_text("utf-8")
    assert text.count("`lr_scale` 1.0 → 0.5") == 2
    assert text.count("Re-applied after restart (the same change, not a new one): `lr_scale`") == 1
    assert text.count("by Ada \\<ada@example.org\\>") == 2 and "5f0c2a9e81d34b7a" in text
