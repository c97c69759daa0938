"""Every file the shared layout writes under entries/ has the lifetime `recordkinds` says."""

from __future__ import annotations

import pytest

from logbook.core.recordkinds import classify

RID = "20261130T101500123456Z-3f9a1c2e"


@pytest.mark.parametrize("path, kind", [
    (f"notes/{RID}.json", "record"),
    (f"reviews/{RID}.json", "record"),
    (f"runs/qknorm/outcomes/{RID}.json", "record"),
    (f"prereg/2026-11-30-qknorm-3f9a1c.amend-{RID}.md", "record"),
    ("runs/qknorm/run.json", "record"),
    ("runs/qknorm/events.jsonl", "log"),
    ("runs/qknorm/metrics.jsonl", "log"),
    ("2026/11/30.md", "derived"),
    ("assets/qknorm/progress-050.png", "derived"),
    ("reports/qknorm.md", "derived"),
    ("reports/qknorm.pdf", "derived"),
    (".gitattributes", "derived"),
])
def test_each_file_of_the_shared_layout_has_its_lifetime(path, kind):
    assert classify(path) == kind
