"""The fault matrix: every kind of failure injected into a real tiny run, and what the run made of it.

Used by `tests/test_fault_matrix.py` (assertions) and `bench/fault_matrix.py`
(the table). Two real runs of the trainer, each a subprocess relaunched the
way torchrun would relaunch it:

- `matrix`: one fault per attempt, then the next attempt must say what ended
  the last one and carry on: an exception (a drill), SIGKILL and SIGTERM sent
  from outside, a hang (a drill; the watchdog ends it), a corrupted newest
  checkpoint followed by a SIGKILL; the last attempt meets a NaN and a loss
  spike (drills) and two bad live-change requests, and finishes.
- `disk`: its checkpoint folder is a small filesystem of its own that fills
  up after the first save (a tmpfs in a private mount namespace; where user
  namespaces are not allowed, a file-size limit instead), with a garbage
  request file waiting in its control folder. Nothing it meets may change
  what it computes: every step's loss equals an uninterrupted run's.

Each `Cell` says what was injected, how the run classified it (from the event
log), what it did about it, and whether that is what the design promises.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lab import Lab, run_config, wait_until

from logbook.launch.change_requests import new_request

STEPS = 24
HANG_TIMEOUT_S = 4.0  # far above any real step of the tiny config, even on a busy 2-core machine
DRILLS = [
    {"kind": "exception", "step": 3, "attempt": 1},
    {"kind": "hang", "step": 10, "attempt": 4},
    {"kind": "corrupt_checkpoint", "step": 13, "attempt": 5},
    {"kind": "sigkill", "step": 13, "attempt": 5},
]
GUARD_DRILLS = [
    {"kind": "nan", "step": 17, "attempt": 6},
    {"kind": "spike", "step": 20, "attempt": 6},
]


@dataclass
class Cell:
    """One row of the matrix."""

    fault: str
    injected: str
    classification: str
    action: str
    ok: bool
    detail: str = ""


def matrix_config(with_guard_drills: bool) -> dict[str, Any]:
    cfg = run_config(steps=STEPS, every=2)
    cfg["checkpoint"]["keep"] = 3  # the corrupted newest one needs an older one behind it
    cfg["train"]["hang_timeout_s"] = HANG_TIMEOUT_S
    cfg["guard"] = {"warmup": 8}  # a spike can be judged in a run this short
    cfg["faults"] = DRILLS + (GUARD_DRILLS if with_guard_drills else [])
    return cfg


def guard_drills_available() -> bool:
    """Whether the trainer has the NaN and spike drills (checked through its own config validation)."""
    from logbook.core.errors import UsageError
    from trainer.config import FaultConfig

    try:
        for d in GUARD_DRILLS:
            FaultConfig(kind=d["kind"], step=d["step"], attempt=d["attempt"]).validate("faults.0")
        return True
    except UsageError:
        return False


# --- injecting ----------------------------------------------------------------------


def _signal_at_step(lab: Lab, run: str, proc: subprocess.Popen, attempt: int, step: int, sig: int,
                    saved: int = 0) -> tuple[int, int]:
    """Send `sig` once attempt `attempt` has reached `step` and the checkpoint of step `saved` is complete.

    Returns the step it was at and the newest complete checkpoint just before
    the signal. Checkpoints are written in the background, so on a busy
    machine a step can be reached before the save behind it is done; waiting
    for it keeps "what must survive" well defined.
    """
    from trainer.checkpoints.checkpoint import list_checkpoints

    def newest() -> int:
        found = list_checkpoints(lab.ckpt_dir(run))
        return found[-1][0] if found else 0

    beat = lab.heartbeat
    reached = wait_until(proc, lambda: beat(run).get("attempt") == attempt and beat(run).get("step", 0) >= step
                         and newest() >= saved, 120)
    if not reached:
        raise AssertionError(f"attempt {attempt} never reached step {step} with step {saved} saved: "
                             f"{proc.communicate()[1][-3000:]}")
    at, complete = beat(run)["step"], newest()
    proc.send_signal(sig)
    return at, complete


def bad_requests(lab: Lab, run: str) -> list[str]:
    """Leave a garbage file and a well-formed but out-of-range request in the run's pending folder."""
    pending = lab.control_dir(run) / "pending"
    pending.mkdir(parents=True, exist_ok=True)
    garbage = pending / "20260101T000000.000000Z-garbage.json"
    garbage.write_bytes(b"\x00\xff{not json at all\n")
    req = new_request(run, {"lr": 0.5}, "try a big step", "Ada <ada@example.org>")
    req["changes"] = {"lr": -1.0}  # written by hand, past the CLI's checks
    bad = pending / "20260101T000001.000000Z-out-of-range.json"
    bad.write_text(json.dumps(req))
    old = time.time() - 3600  # long past the grace period for files still being written
    for p in (garbage, bad):
        os.utime(p, (old, old))
    return [garbage.name, bad.name]


def run_matrix(lab: Lab, run: str = "matrix") -> dict[str, Any]:
    """Train `run` through one fault per attempt; returns the exit codes and what was sent when."""
    guard = guard_drills_available()
    config = lab.write_config(f"{run}.yaml", matrix_config(guard))
    codes: list[int] = []
    sent: dict[str, int] = {}
    for attempt in range(1, 7):
        if attempt == 6:
            sent["requests"] = len(bad_requests(lab, run))
        proc = lab.start(lab.trainer_command(run, config))
        if attempt == 2:
            sent["sigkill"], sent["saved_at_kill"] = _signal_at_step(lab, run, proc, 2, 5, signal.SIGKILL, saved=4)
        elif attempt == 3:
            sent["sigterm"], _ = _signal_at_step(lab, run, proc, 3, 7, signal.SIGTERM)
        _, err = proc.communicate(timeout=300)
        codes.append(proc.returncode)
        if proc.returncode == 0:
            break
    return {"codes": codes, "sent": sent, "guard_drills": guard, "stderr": err}


def full_disk_wrapper(mount: Path, size_bytes: int) -> tuple[list[str], str]:
    """The argv prefix that runs a command with `mount` as a full-after-`size_bytes` filesystem, and its name.

    A tmpfs mounted in a private user and mount namespace is a real filesystem
    that really fills up (ENOSPC), needs no privileges and disappears with the
    process. Where user namespaces are off, the caller falls back to a file
    size limit (EFBIG), see `run_disk`.
    """
    if shutil.which("unshare") is None:
        return [], "rlimit"
    probe = subprocess.run(["unshare", "-rm", "sh", "-c", f"mount -t tmpfs -o size=64k tmpfs {mount}"],
                           capture_output=True)
    if probe.returncode != 0:
        return [], "rlimit"
    script = 'mount -t tmpfs -o size="$1" tmpfs "$2" && shift 2 && exec "$@"'
    return ["unshare", "-rm", "sh", "-c", script, "sh", str(size_bytes), str(mount)], "tmpfs"


def _fsize_limit(limit: int):
    def apply() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG instead
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    return apply


def run_disk(lab: Lab, run: str = "disk", checkpoint_bytes: int = 0) -> dict[str, Any]:
    """A run whose checkpoints go to a filesystem that fills up after the first one."""
    cfg = run_config(steps=STEPS, every=2)
    mount = lab.root.parent / "small-disk"
    mount.mkdir(exist_ok=True)
    cfg["checkpoint"]["dir"] = str(mount)
    config = lab.write_config(f"{run}.yaml", cfg)
    requests = bad_requests(lab, run)
    prefix, how = full_disk_wrapper(mount, int(checkpoint_bytes * 1.5))
    argv = [*prefix, *lab.trainer_command(run, config)]
    kw: dict[str, Any] = {}
    if how == "rlimit":  # bigger than the event log and metrics, smaller than one checkpoint file
        kw["preexec_fn"] = _fsize_limit(256 * 1024)
    proc = subprocess.run(argv, cwd=lab.root, env=lab.env, capture_output=True, text=True, timeout=300, **kw)
    return {"code": proc.returncode, "stderr": proc.stderr, "how": how, "requests": requests}


# --- reading what happened ------------------------------------------------------------


def _of(events: list[dict[str, Any]], kind: str, attempt: int | None = None) -> list[dict[str, Any]]:
    return [e for e in events if e["kind"] == kind and (attempt is None or e["attempt"] == attempt)]


def _restart(events: list[dict[str, Any]], attempt: int) -> dict[str, Any]:
    found = _of(events, "restart", attempt)
    return found[0]["data"] if len(found) == 1 else {}


def classify_matrix(lab: Lab, run: str, outcome: dict[str, Any]) -> list[Cell]:
    ev = lab.events(run)
    codes = outcome["codes"] + [None] * 6
    cells = []

    r = _restart(ev, 2)
    failed = _of(ev, "attempt_failed", 1)
    cells.append(Cell("exception", "drill: InjectedFault after step 3", f"restart cause {r.get('cause')}",
                      f"exit {codes[0]}; restarted from step {r.get('resumed_from_step')}",
                      codes[0] == 1 and r.get("cause") == "exception" and r.get("exception_type") == "InjectedFault"
                      and len(failed) == 1 and r.get("resumed_from_step") == 2))

    r = _restart(ev, 3)
    sent = outcome["sent"]
    cells.append(Cell("SIGKILL", f"kill -9 from outside at step {sent.get('sigkill')} (step {sent.get('saved_at_kill')} saved)",
                      f"restart cause {r.get('cause')}", f"exit {codes[1]}; restarted from step {r.get('resumed_from_step')}",
                      codes[1] == -signal.SIGKILL and r.get("cause") == "signal"
                      # the newest checkpoint complete when the kill was sent, or one finished just after it
                      and sent.get("saved_at_kill", 0) >= 4
                      and sent["saved_at_kill"] <= r.get("resumed_from_step", 0) <= sent["sigkill"]))

    r = _restart(ev, 4)
    pre = _of(ev, "preempted", 3)
    saved = pre[0]["data"].get("saved_step") if pre else None
    cells.append(Cell("SIGTERM", f"kill -TERM from outside at step {outcome['sent'].get('sigterm')}",
                      f"preempted, restart cause {r.get('cause')}",
                      f"saved step {saved}, exit {codes[2]}; resumed from step {r.get('resumed_from_step')}, "
                      f"{r.get('steps_lost')} steps lost",
                      codes[2] == 75 and len(pre) == 1 and r.get("cause") == "preempted"
                      and r.get("resumed_from_step") == saved and r.get("steps_lost") == 0))

    r = _restart(ev, 5)
    hang = _of(ev, "hang", 4)
    cells.append(Cell("hang", f"drill: no progress after step 10 (timeout {HANG_TIMEOUT_S:g} s)",
                      f"hang event, restart cause {r.get('cause')}",
                      f"exit {codes[3]}; restarted from step {r.get('resumed_from_step')}",
                      codes[3] == 124 and len(hang) == 1 and hang[0]["step"] == 10 and r.get("cause") == "hang"))

    rej = _of(ev, "checkpoint_rejected", 6)
    started = _of(ev, "run_started", 6)
    resumed = started[0]["data"].get("resumed_from_step") if started else None
    cells.append(Cell("corrupt checkpoint", "drill: bytes flipped in the newest checkpoint (step 12), then SIGKILL",
                      f"checkpoint_rejected ({(rej[0]['data'].get('reason') or '')[:40]}...)" if rej else "not rejected",
                      f"resumed from step {resumed}, the one before",
                      codes[4] == -signal.SIGKILL and len(rej) == 1 and rej[0]["data"].get("ckpt_step") == 12
                      and resumed == 10))

    if outcome["guard_drills"]:
        cells += _guard_cells(ev)
    cells += _request_cells(ev, 6, lab, run)
    finished = _of(ev, "run_finished")
    cells.append(Cell("(all of the above)", "one run, six attempts", f"{len(_of(ev, 'restart'))} restarts",
                      f"finished at step {finished[0]['step'] if finished else None}",
                      len(finished) == 1 and finished[0]["step"] == STEPS and codes[5] == 0))
    return cells


def _guard_cells(ev: list[dict[str, Any]]) -> list[Cell]:
    cells = []
    div = {e["step"]: e for e in _of(ev, "divergence_detected", 6)}
    skipped = {e["step"] for e in _of(ev, "step_skipped", 6)}
    nan = div.get(17, {}).get("data", {})
    cells.append(Cell("NaN", "drill: the loss of step 17 is NaN", f"divergence_detected nonfinite={nan.get('nonfinite')}",
                      f"action {nan.get('action')}; step skipped: {17 in skipped}",
                      bool(nan.get("nonfinite")) and nan.get("action") == "skip" and 17 in skipped))
    spike = div.get(20, {}).get("data", {})
    cells.append(Cell("loss spike", "drill: the loss of step 20 jumps", f"divergence_detected metric={spike.get('metric')}",
                      f"action {spike.get('action')}", bool(spike) and not spike.get("nonfinite")
                      and spike.get("action") in ("skip", "rollback", "lr_scale")))
    return cells


def _request_cells(ev: list[dict[str, Any]], attempt: int, lab: Lab, run: str) -> list[Cell]:
    rejected = _of(ev, "hparam_change_rejected", attempt)
    changes = _of(ev, "hparam_change")
    answers = [json.loads(p.read_text()) for p in sorted((lab.control_dir(run) / "processed").glob("*.json"))]
    pending = list((lab.control_dir(run) / "pending").glob("*.json"))
    reasons = "; ".join(str(e["data"].get("reason"))[:50] for e in rejected)
    return [Cell("bad live-change request", "a garbage file and lr=-1 written into pending/",
                 f"{len(rejected)} hparam_change_rejected", f"{len(changes)} changes applied; answered: "
                 + ", ".join(a["outcome"]["status"] for a in answers),
                 len(rejected) == 2 and not changes and not pending
                 and [a["outcome"]["status"] for a in answers] == ["rejected", "rejected"], reasons)]


def classify_disk(lab: Lab, run: str, outcome: dict[str, Any], reference: str) -> list[Cell]:
    ev = lab.events(run)
    failed = _of(ev, "checkpoint_failed")
    saved = _of(ev, "checkpoint_saved")
    finished = _of(ev, "run_finished")
    same = lab.losses(run) == lab.losses(reference) and len(lab.losses(reference)) == STEPS
    why = failed[0]["data"].get("reason") if failed else ""
    where = ("checkpoint folder on a tmpfs that fills after one save" if outcome["how"] == "tmpfs"
             else "a 256 KiB file-size limit: every checkpoint write fails")
    cells = [Cell("full disk", where,
                  f"{len(failed)} checkpoint_failed ({why})",
                  f"{len(saved)} saved; training went on to step {finished[0]['step'] if finished else None}; "
                  f"losses {'equal' if same else 'DIFFER from'} the uninterrupted run's",
                  outcome["code"] == 0 and len(failed) >= 1 and len(finished) == 1 and same
                  and all(e["attempt"] == 1 for e in ev))]
    cells += _request_cells(ev, 1, lab, run)
    cells[-1].fault += " (full-disk run)"
    cells[-1].ok = cells[-1].ok and same
    return cells


def checkpoint_bytes(lab: Lab, run: str) -> int:
    """The size of one complete checkpoint of `run`."""
    saved = [e for e in lab.events(run) if e["kind"] == "checkpoint_saved"]
    return int(saved[-1]["data"]["bytes"]) + 64 * 1024  # the manifest and the filesystem's own blocks


def table(cells: list[Cell]) -> str:
    rows = [("fault", "injected", "classification", "action", "ok")]
    rows += [(c.fault, c.injected, c.classification, c.action, "yes" if c.ok else "NO") for c in cells]
    widths = [max(len(r[i]) for r in rows) for i in range(5)]
    lines = ["  ".join(v.ljust(w) for v, w in zip(r, widths)).rstrip() for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)
