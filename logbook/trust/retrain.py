"""Retrain a run's first steps from its own code snapshot, in a scratch folder, for `verify --replay`.

The snapshot commit (`refs/logbook/snapshots/<run>`, named in `run.json`) is
exported with `git archive` into a temporary folder, which becomes a scratch
logbook: the user's repository, index and working tree are never touched. The
run's record and preregistration go in beside it (the trainer reads the
contingency plan from them, and the plan sets the guard), then the trainer
runs there as a subprocess, exactly as `logbook run` starts it (`python -m
trainer ... CONFIG OVERRIDES train.seed=SEED`), on the CPU, with the thread
count the run recorded. The trainer that runs is always the reader's own
installed one (`python -P`: the snapshot, the working directory, is never on
Python's path), so a `trainer/` or `logbook/` the snapshot ships cannot stand
in for it; the snapshot supplies only the config and the data.

Stopping after N steps must not change the config (its hash is compared): the
replay watches the trainer's heartbeat and sends SIGTERM once step N is done,
which the trainer treats as a preemption: it finishes the step, writes its
metrics and exits. A few steps more do not matter: only steps 1..N are read.
torch is never imported here.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import tarfile
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from logbook.core.bundled import safe_env, safe_python
from logbook.core.errors import LogbookError, RefusedError
from logbook.core.project import Project, open_project
from logbook.core.settings import CONFIG_FILE
from logbook.core.yamlsafe import load_training_config
from logbook.records import gitbind
from logbook.eventlog.chain import iter_records
from logbook.eventlog.timeline import run_log_path
from logbook.eventlog.sink import full_metrics_path
from logbook.eventlog.kinds import is_kind

_POLL_S = 0.05


class ReplayImpossible(RefusedError):
    """The run's first steps cannot be retrained here (no snapshot, no config, the trainer failed...)."""


@dataclass
class Retrained:
    """What the replay computed."""

    losses: dict[int, float]
    """step -> the first training loss the replay logged for it."""
    started: dict[str, Any]
    """The payload of the replay's own `run_started`."""
    config_altered: bool
    """True when a setting had to change for the replay (a checkpoint folder outside the scratch folder)."""
    seconds: float
    """Wall time of the whole replay (export, training, reading back)."""


def retrain(project: Project, run_id: str, raw: dict[str, Any], *, seed: int, steps: int, threads: Any,
            timeout_s: float) -> Retrained:
    """Retrain run `run_id` (its `run.json` is `raw`) for at least `steps` steps from `seed`."""
    t0 = time.monotonic()
    commit = _snapshot_commit(project, run_id, raw)
    with tempfile.TemporaryDirectory(prefix="logbook-replay-") as tmp:
        work = Path(tmp) / "tree"
        _export(project.root, commit, work)
        scratch = _scratch_project(project, work)
        config = _config_file(project, work, Path(tmp), raw)
        _bring_records(project, scratch, run_id, raw)
        _link_data(project, work, config)
        extra = _checkpoint_override(config, raw.get("overrides") or [], work)
        overrides = [*(raw.get("overrides") or []), *extra, f"train.seed={seed}"]
        err = _train(work, run_id, config, overrides, steps, threads, timeout_s)
        losses = first_losses(full_metrics_path(scratch.state_dir, run_id), steps)
        for step, loss in first_losses(scratch.run_dir(run_id) / "metrics.jsonl", steps).items():
            losses.setdefault(step, loss)
        started = next((e.get("data") or {} for e in iter_records(run_log_path(scratch, run_id))
                        if is_kind(e, "run_started")), None)
        if started is None or not losses:
            raise ReplayImpossible(f"the trainer did not train in the replay: {err or 'no run_started, no loss'}")
    return Retrained(losses, started, bool(extra), time.monotonic() - t0)


SHADOWING_NAMES = ("trainer", "logbook", "torch", "numpy", "yaml", "sitecustomize", "usercustomize")
"""Top-level modules that, shipped in a repository, stand in for the installed ones when Python runs there."""


def shadowing_paths(project: Project, run_id: str, raw: dict[str, Any]) -> list[str]:
    """What in the run's code snapshot would replace the installed trainer when the run trained in it.

    `logbook run` trains with the repository as the working directory, so a
    `trainer/` (or `logbook/`, `torch/`, `sitecustomize.py`, a `.pth` file...)
    at its top ran instead of, or inside, the installed trainer. The replay
    trains with the reader's own trainer, so its losses say nothing of such a run.
    """
    commit = _snapshot_commit(project, run_id, raw)
    names = gitbind.git(project.root, "ls-tree", "--name-only", commit).splitlines()
    return sorted(n for n in names if n.endswith(".pth") or n.removesuffix(".py") in SHADOWING_NAMES)


def _snapshot_commit(project: Project, run_id: str, raw: dict[str, Any]) -> str:
    """The commit of the run's code snapshot: as run.json names it, else as its ref points."""
    named = str((raw.get("snapshot") or {}).get("commit") or "")
    ref = gitbind.SNAPSHOT_REF_PREFIX + run_id
    for rev in (named, ref):
        if rev and gitbind.git(project.root, "rev-parse", "-q", "--verify", f"{rev}^{{commit}}", check=False).strip():
            return gitbind.git(project.root, "rev-parse", f"{rev}^{{commit}}").strip()
    raise ReplayImpossible(f"its code snapshot {named[:12] or ref} is not in this clone",
                           hint="fetch the snapshots from a clone that has them (`logbook init` sets up the refspec)")


def _export(root: Path, commit: str, dest: Path) -> None:
    """The snapshot's files into `dest` (git archive), plus an empty repository there for the trainer to find."""
    dest.mkdir(parents=True)
    proc = subprocess.Popen(["git", "archive", "--format=tar", commit], cwd=root, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL)
    try:
        with tarfile.open(fileobj=proc.stdout, mode="r|") as tar:
            tar.extractall(dest, filter=_inside)
        while proc.stdout.read(1 << 16):  # the padding after the archive's end: git dies of SIGPIPE if it is left
            pass
    except (tarfile.TarError, OSError) as e:
        proc.kill()
        raise ReplayImpossible(f"the snapshot {commit[:12]} cannot be checked out in a scratch folder: {e}") from None
    finally:
        proc.stdout.close()
        proc.wait()
    if proc.returncode != 0:
        raise ReplayImpossible(f"git archive of the snapshot {commit[:12]} failed (exit {proc.returncode})")
    subprocess.run(["git", "init", "-q", str(dest)], check=True, capture_output=True)


def _inside(member: tarfile.TarInfo, dest: str) -> tarfile.TarInfo | None:
    """tarfile's `data` filter, except that a file or link that would leave the scratch copy is left out, not fatal:
    a link to a dataset at an absolute path is the user's business, and the replay links its data itself."""
    try:
        return tarfile.data_filter(member, dest)
    except tarfile.FilterError:
        return None


def _scratch_project(project: Project, work: Path) -> Project:
    """The scratch folder as a logbook, with the snapshot's logbook.yaml (the current one if it had none)."""
    if not (work / CONFIG_FILE).is_file() and (project.root / CONFIG_FILE).is_file():
        shutil.copyfile(project.root / CONFIG_FILE, work / CONFIG_FILE)
    try:
        return open_project(work)
    except LogbookError as e:
        raise ReplayImpossible(f"the snapshot's {CONFIG_FILE} does not load: {e.message}") from None


def _config_file(project: Project, work: Path, tmp: Path, raw: dict[str, Any]) -> Path:
    """The config the run launched with (sha256 as run.json records it): the snapshot's copy, else the current one."""
    rel, digest = str(raw.get("config_path") or ""), raw.get("config_hash")
    if not Path(rel).is_absolute():
        inside = work / rel
        if inside.is_file() and _sha256(inside) == digest:
            return inside
    here = Path(rel) if Path(rel).is_absolute() else project.root / rel
    if here.is_file() and _sha256(here) == digest:
        target = tmp / "config" / here.name if Path(rel).is_absolute() else work / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(here, target)
        return target
    raise ReplayImpossible(f"its config {rel} with sha256 {str(digest)[:12]} is neither in its snapshot nor here")


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _bring_records(project: Project, scratch: Project, run_id: str, raw: dict[str, Any]) -> None:
    """The run's record and its preregistration's files, as this clone has them, into the scratch logbook."""
    run_dir = scratch.run_dir(run_id)
    if run_dir.exists():
        shutil.rmtree(run_dir)  # a snapshot taken with the run's folder in it: the replay starts the run afresh
    run_dir.mkdir(parents=True)
    shutil.copyfile(project.run_dir(run_id) / "run.json", run_dir / "run.json")
    pid = raw.get("prereg_id")
    if pid and project.prereg_dir.is_dir():
        scratch.prereg_dir.mkdir(parents=True, exist_ok=True)
        for path in project.prereg_dir.glob(f"{pid}.*"):
            shutil.copyfile(path, scratch.prereg_dir / path.name)


def _link_data(project: Project, work: Path, config: Path) -> None:
    """Data files the config names that git does not hold (large token files are ignored): linked from here."""
    try:
        sources = ((load_training_config(config).get("data") or {}).get("sources")) or []
    except (LogbookError, AttributeError):
        return  # the trainer reports a bad config itself
    for s in sources if isinstance(sources, list) else []:
        rel = s.get("path") if isinstance(s, dict) else None
        if isinstance(rel, str) and rel and not Path(rel).is_absolute():
            there, here = work / rel, project.root / rel
            if not there.exists() and here.exists():
                there.parent.mkdir(parents=True, exist_ok=True)
                there.symlink_to(here.resolve())


def _checkpoint_override(config: Path, overrides: list[str], work: Path) -> list[str]:
    """A checkpoint folder outside the repository would be the run's own: the replay must neither resume from it
    nor write to it."""
    try:
        folder = (load_training_config(config).get("checkpoint") or {}).get("dir")
    except (LogbookError, AttributeError):
        folder = None
    for o in overrides:
        if o.startswith("checkpoint.dir="):
            folder = o.split("=", 1)[1]
    if isinstance(folder, str) and Path(folder).expanduser().is_absolute():
        return [f"checkpoint.dir={work / '.logbook' / 'replay-checkpoints'}"]
    return []


def _train(work: Path, run_id: str, config: Path, overrides: list[str], steps: int, threads: Any,
           timeout_s: float) -> str:
    """Run the trainer in `work` until step `steps` is done (or the run ends); its error lines, if it failed."""
    # The reader's own installed trainer: `-P` keeps the snapshot (the working directory) off sys.path,
    # so a `trainer/`, `logbook/` or `sitecustomize.py` it ships cannot stand in for it.
    env = safe_env(os.environ)
    env.update(PYTHONUNBUFFERED="1", CUDA_VISIBLE_DEVICES="", WANDB_MODE="disabled")
    if isinstance(threads, int) and threads > 0:
        env["OMP_NUM_THREADS"] = str(threads)  # what torch's default thread count follows (train.threads: 0)
    cmd = [*safe_python("-m", "trainer"), "--project", str(work), "--run", run_id, str(config), *overrides]
    heartbeat = work / ".logbook" / "heartbeat" / f"{run_id}.json"
    with tempfile.TemporaryFile() as out:
        proc = subprocess.Popen(cmd, cwd=work, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            _stop_after(proc, heartbeat, steps, timeout_s)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        out.seek(0)
        text = out.read().decode("utf-8", "replace")
    if proc.returncode in (0, 75):  # finished, or stopped by the SIGTERM sent after step N
        return ""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return next((ln for ln in lines if ln.startswith("error:")), lines[-1] if lines else f"exit {proc.returncode}")


def _stop_after(proc: subprocess.Popen, heartbeat: Path, steps: int, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    stopping = False
    while proc.poll() is None:
        if time.monotonic() > deadline:
            raise ReplayImpossible(f"the replay did not reach step {steps} within {timeout_s:g} s")
        if not stopping and _beat_step(heartbeat) >= steps:
            os.killpg(proc.pid, signal.SIGTERM)  # the trainer's preemption: it ends the step and saves, then exits
            stopping = True
        time.sleep(_POLL_S)


def _beat_step(heartbeat: Path) -> int:
    try:
        beat = json.loads(heartbeat.read_bytes().strip() or b"null")
    except (OSError, ValueError):
        return 0
    step = beat.get("step") if isinstance(beat, dict) else None
    return step if isinstance(step, int) else 0


def first_losses(path: Path, limit: int) -> dict[int, float]:
    """step -> the first training loss logged for it (steps 1..limit) in one metrics file; a torn line is skipped."""
    out: dict[int, float] = {}
    for row in iter_records(path):
        step, loss = row.get("step"), row.get("loss")
        if isinstance(step, int) and 1 <= step <= limit and isinstance(loss, (int, float)) and step not in out:
            out[step] = float(loss)
    return out
