"""nanoGPT's own `train.py`, unmodified, under `logbook run --`: SIGKILLed once, resumed by nanoGPT's own resume.

nanoGPT is not on the package index, and the project ships no copy of it: the
test runs where NANOGPT_DIR names a checkout of karpathy/nanoGPT (its
train.py, model.py and configurator.py are copied into the test's repository,
as a lab vendors them), and says so and skips elsewhere. The data is made by
the test: random tokens in nanoGPT's own format (train.bin, val.bin, meta.pkl).
"""

from __future__ import annotations

import json
import os
import pickle
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import ROOT, git

from logbook.eventlog.runlog import iter_events

CHECKOUT = Path(os.environ.get("NANOGPT_DIR", "/nonexistent"))
FILES = ("train.py", "model.py", "configurator.py")
REGEX = r"^iter (?P<step>\d+): loss (?P<loss>[\d.]+)"
ARGS = ["--device=cpu", "--compile=False", "--dtype=float32", "--dataset=tiny", "--n_layer=2", "--n_head=2",
        "--n_embd=64", "--block_size=64", "--batch_size=48", "--gradient_accumulation_steps=1", "--max_iters=40",
        "--lr_decay_iters=40", "--warmup_iters=2", "--eval_interval=10", "--eval_iters=2", "--log_interval=1",
        "--always_save_checkpoint=True", "--out_dir=out"]

pytestmark = pytest.mark.skipif(
    not all((CHECKOUT / f).is_file() for f in FILES),
    reason="nanoGPT is not on the package index and the project ships no copy: set NANOGPT_DIR to a checkout of "
           "karpathy/nanoGPT to run this test")


def _data(repo: Path) -> None:
    import numpy as np

    folder = repo / "data" / "tiny"
    folder.mkdir(parents=True)
    rng = np.random.default_rng(0)
    for name, n in (("train.bin", 20_000), ("val.bin", 4_000)):
        rng.integers(0, 65, n, dtype=np.uint16).tofile(folder / name)
    (folder / "meta.pkl").write_bytes(pickle.dumps({"vocab_size": 65}))


def _trainer_pid() -> int:
    """The process running `python train.py` (not the launcher, whose command line names it too)."""
    for p in Path("/proc").iterdir():
        try:
            if p.name.isdigit() and (p / "cmdline").read_bytes().split(b"\0")[1:2] == [b"train.py"]:
                return int(p.name)
        except OSError:  # a process that ended while we looked
            continue
    raise AssertionError("no train.py process")


def test_nanogpt_train_py_unmodified_is_killed_resumed_and_chronicled(logbook_repo, cli):
    for f in FILES:
        shutil.copyfile(CHECKOUT / f, logbook_repo / f)
    _data(logbook_repo)
    (logbook_repo / ".gitignore").write_text("out/\ndata/\n")
    git(logbook_repo, "add", *FILES, ".gitignore")
    git(logbook_repo, "commit", "-q", "-m", "nanoGPT, vendored")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "CI": "true"}
    proc = subprocess.Popen([sys.executable, "-m", "logbook", "run", "--exploratory", "--run-id", "nanogpt",
                             "--steps", "40", "--metrics-regex", REGEX, "--resume-arg=--init_from=resume", "--json",
                             "--", sys.executable, "train.py", *ARGS],
                            cwd=logbook_repo, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    metrics = logbook_repo / ".logbook" / "metrics" / "nanogpt" / "metrics.jsonl"
    deadline = time.monotonic() + 180
    while True:  # after the checkpoint of iter 10, and never while one is written (every 10th iter)
        rows = [json.loads(ln) for ln in metrics.read_text().splitlines() if ln.strip()] if metrics.exists() else []
        last = rows[-1]["step"] if rows else -1
        if last >= 13 and last % 10 not in (9, 0):
            break
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.02)
    os.kill(_trainer_pid(), signal.SIGKILL)
    out, errs = proc.communicate(timeout=300)
    assert proc.returncode == 0, errs[-3000:]
    assert json.loads(out)["restarts"] == 1
    events = list(iter_events(logbook_repo / "entries" / "runs" / "nanogpt" / "events.jsonl"))
    restart = next(e for e in events if e["kind"] == "restart")
    # nanoGPT, unmodified, does not say which iteration it resumed from: unknown, not guessed from its first print.
    assert restart["data"]["cause"] == "signal" and restart["data"]["resumed_from_step"] is None
    assert restart["data"]["steps_lost"] is None and restart["data"]["failed_at_step"] >= 9
    assert events[-1]["kind"] == "run_finished" and cli("verify").exit_code == 0
    assert cli("render").exit_code == 0
    day = "".join(p.read_text() for p in (logbook_repo / "entries").glob("20*/*/*.md"))
    assert "Attempt 1 was killed by signal 9 (SIGKILL)" in day and "**100% of the run**" in day
