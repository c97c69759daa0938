"""The fault matrix: each kind of failure, injected into a real tiny run, is classified and handled as designed.

Exception, SIGKILL, SIGTERM, hang and a corrupted checkpoint each end one
attempt of one run, relaunched after each; NaN and a loss spike hit its last
attempt, with two bad live-change requests waiting. A second run saves to a
filesystem that fills up. `bench/fault_matrix.py` prints the same cells as a
table; `fault_harness.py` says what each cell requires.
"""

from __future__ import annotations

import pytest
from lab import Lab, run_config
from fault_harness import STEPS, checkpoint_bytes, classify_disk, classify_matrix, guard_drills_available, run_disk, run_matrix

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def lab(tmp_path_factory) -> Lab:
    lab = Lab.create(tmp_path_factory.mktemp("faults"))
    ref = lab.train("reference", lab.write_config("reference.yaml", run_config(steps=STEPS, every=2)))
    assert ref.returncode == 0, ref.stderr
    return lab


@pytest.fixture(scope="module")
def cells(lab) -> dict[str, object]:
    outcome = run_matrix(lab)
    found = classify_matrix(lab, "matrix", outcome)
    disk = run_disk(lab, checkpoint_bytes=checkpoint_bytes(lab, "reference"))
    found += classify_disk(lab, "disk", disk, "reference")
    return {c.fault: c for c in found}


def test_the_nan_and_spike_drills_are_part_of_the_matrix():
    assert guard_drills_available()


@pytest.mark.parametrize("fault", [
    "exception", "SIGKILL", "SIGTERM", "hang", "corrupt checkpoint", "NaN", "loss spike",
    "bad live-change request", "(all of the above)", "full disk", "bad live-change request (full-disk run)",
])
def test_each_fault_is_classified_and_handled_as_designed(cells, fault):
    cell = cells[fault]
    assert cell.ok, f"{cell.fault}: injected {cell.injected}; got {cell.classification}; {cell.action} {cell.detail}"


def test_a_full_disk_is_reported_with_its_errno_and_costs_no_step(lab, cells):
    failed = [e for e in lab.events("disk") if e["kind"] == "checkpoint_failed"]
    assert failed and all(e["data"]["errno"] in (28, 27) for e in failed)  # ENOSPC (tmpfs) or EFBIG (size limit)
    steps = sorted(lab.losses("disk"))
    assert steps == list(range(1, STEPS + 1))


def test_bad_requests_are_answered_and_leave_the_config_alone(lab, cells):
    started = [e for e in lab.events("matrix") if e["kind"] == "run_started"]
    assert len({e["data"]["config_hash"] for e in started}) == 1
    rejected = [e for e in lab.events("matrix") if e["kind"] == "hparam_change_rejected"]
    assert {e["data"].get("file") for e in rejected} == {"20260101T000000.000000Z-garbage.json",
                                                         "20260101T000001.000000Z-out-of-range.json"}
