"""One live launcher per run id: the lock file dies with its holder."""

from __future__ import annotations

import subprocess
import sys

import pytest
from conftest import ROOT

from logbook.core.errors import RefusedError
from logbook.runs.runlock import RunLock

_HOLDER = """
import sys, time
from logbook.runs.runlock import RunLock
lock = RunLock(sys.argv[1])
lock.acquire()
print("locked", flush=True)
time.sleep(60)
"""


def _holder(path):
    proc = subprocess.Popen([sys.executable, "-c", _HOLDER, str(path)], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "locked"
    return proc


def test_a_live_holder_is_refused_with_its_pid(tmp_path):
    path = tmp_path / "locks" / "r1.lock"
    proc = _holder(path)
    try:
        with pytest.raises(RefusedError) as e:
            RunLock(path).acquire(what="run r1")
        assert f"pid {proc.pid}" in e.value.message
        assert "already live" in e.value.message
    finally:
        proc.kill()
        proc.wait()


def test_a_lock_left_by_a_killed_holder_is_taken_over_with_a_message(tmp_path):
    path = tmp_path / "locks" / "r1.lock"
    proc = _holder(path)
    proc.kill()  # SIGKILL: no chance to clean up, the file stays behind
    proc.wait()
    assert path.exists()
    lock = RunLock(path)
    message = lock.acquire(what="run r1")
    assert message is not None and "stale" in message and f"pid {proc.pid}" in message
    lock.release()
    assert not path.exists()


def test_a_released_lock_can_be_taken_again_silently(tmp_path):
    path = tmp_path / "r1.lock"
    first = RunLock(path)
    assert first.acquire() is None
    first.release()
    second = RunLock(path)
    assert second.acquire() is None
    second.release()


def test_a_second_lock_in_the_same_process_is_refused(tmp_path):
    path = tmp_path / "r1.lock"
    first = RunLock(path)
    first.acquire()
    try:
        with pytest.raises(RefusedError):
            RunLock(path).acquire()
    finally:
        first.release()
