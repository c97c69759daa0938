"""Chaos: one training run SIGKILLed at random moments, relaunched until it finishes, then audited.

Used by `tests/test_chaos.py` (a handful of kills) and `bench/chaos_long.py`
(fifty and more). Everything is real: a scratch logbook (`lab.Lab`), the
trainer as a subprocess (`python -m trainer`, the command torchrun runs),
`logbook run` with torchrun for the first leg, SIGKILL from outside, `logbook
verify` and `logbook render` at the end.

A run goes through three legs:

1. `logbook run` (torchrun, `--max-restarts 1`): the worker is SIGKILLed once
   and torchrun restarts it; then the launcher gets SIGTERM and the run is
   preempted (exit 75), as a scheduler would do.
2. Direct relaunches of the trainer's own command: each attempt is SIGKILLed
   at a moment drawn (seeded) from one of several kinds (`KILL_KINDS`), then
   started again, as torchrun or a Slurm requeue would.
3. A last attempt that is left alone to finish.

`audit` then checks what must hold after any number of kills: the run
finished; its weights and every step's loss equal an uninterrupted run's bit
for bit; every attempt after the first has exactly one `restart` naming the
attempt before it, in the event log and in the rendered chronicle, one for
each kill of an attempt that had announced itself and one for the
preemption (a kill before that leaves no trace: that start is downtime); the
logbook verifies; no checkpoint that failed its manifest was ever loaded; each
progress note was written once.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lab import Lab, complete_checkpoints, wait_until

from logbook.eventlog.runlog import read_events

KILL_KINDS = ("delay", "startup", "step", "save", "append", "milestone")
"""delay: a random time after the start (imports, loading, steps alike);
startup: late in start-up, while building and restoring, from how long the last start took;
step: once the attempt reaches a random step past its checkpoint;
save: while a checkpoint is being written (its temporary folder exists);
append: just after the attempt's first event was appended;
milestone: just after a progress note was appended (before the launcher has drawn its plot)."""


# --- killing ------------------------------------------------------------------------


@dataclass
class Kill:
    """One SIGKILL and what it hit."""

    n: int
    kind: str
    """One of KILL_KINDS, or `torchrun-worker` in the launcher leg."""
    pid: int
    landed: str
    """What the process was doing, as far as its files tell."""
    attempt: int | None
    """The attempt it ended; None when it died before announcing itself (no trace: its start is downtime)."""
    valid_before_relaunch: dict[int, str] = field(default_factory=dict)


def _tmp_saves(ckpt_dir: Path) -> list[str]:
    try:
        return [e.name for e in os.scandir(ckpt_dir) if e.name.startswith(".tmp-step_")]
    except FileNotFoundError:
        return []


class Chaos:
    """Drives one run through the three legs and records every kill."""

    def __init__(self, lab: Lab, run: str, config: Path, *, seed: int, kills: int, steps: int,
                 launcher_leg: bool = True, plan: list[str] | None = None, max_delay_s: float = 4.0,
                 kinds: tuple[str, ...] = KILL_KINDS, say: Callable[[str], None] = lambda s: None) -> None:
        """`kills` in all (the launcher leg's included); `plan` fixes the kinds in order, else they are drawn."""
        self.lab, self.run, self.config = lab, run, config
        self.rng = random.Random(seed)
        self.n_kills = kills
        self.steps = steps
        self.plan = list(plan or [])
        self.launcher_leg = launcher_leg
        self.max_delay_s = max_delay_s
        self.kinds = kinds
        self.say = say
        self.kills: list[Kill] = []
        self.preemptions = 0
        self.launches = 0
        self.final_rc: int | None = None
        self.final_stderr = ""
        self.resumes: list[tuple[int, dict[int, str]]] = []  # (launch number, valid checkpoints before it)
        self._startup_s = 3.0

    # legs

    def drive(self) -> Chaos:
        if self.launcher_leg:
            self._launcher_leg()
        while len(self.kills) < self.n_kills:
            proc = self._launch()
            kill = self._kill(proc, self._next_kind())
            if kill is None:
                break  # the run finished before the kill: nothing left to hit
        if self.final_rc is None:
            proc = self._launch()
            _, err = proc.communicate(timeout=600)
            self.final_rc, self.final_stderr = proc.returncode, err
        return self

    def _next_kind(self) -> str:
        if self.plan:
            return self.plan.pop(0)
        kinds = [k for k in self.kinds if k != "milestone" or self._milestones_left()]
        return self.rng.choice(kinds)

    def _milestones_left(self) -> bool:
        from logbook.core.settings import load_config

        done = {e["data"].get("fraction") for e in self.lab.events(self.run) if e["kind"] == "milestone"}
        return any(f not in done and f < 1.0 for f in load_config(self.lab.root / "logbook.yaml").milestones)

    def _launch(self) -> subprocess.Popen:
        self.launches += 1
        self.resumes.append((self.launches, complete_checkpoints(self.lab.ckpt_dir(self.run))))
        self._known = self.lab.last_attempt(self.run)
        self._events_size = self.lab.events_path(self.run).stat().st_size if self.lab.events_path(self.run).exists() else 0
        self._start = time.monotonic()
        self._seen = False
        return self.lab.start(self.lab.trainer_command(self.run, self.config))

    def _registered(self) -> bool:
        """Whether this launch's attempt has announced itself (its heartbeat carries the new number)."""
        beat = self.lab.heartbeat(self.run)
        new = isinstance(beat.get("attempt"), int) and beat["attempt"] > self._known
        if new and not self._seen:
            self._seen = True
            self._startup_s = time.monotonic() - self._start  # what the next `startup` kill aims at
        return new

    def _timed(self, cond: Callable[[], bool]) -> Callable[[], bool]:
        """`cond`, also noting when this launch announced itself (what `startup` kills aim by)."""
        return lambda: (self._registered(), cond())[1]

    def _new_milestone(self) -> bool:
        """Whether this launch has appended a `milestone` event (reads only what it appended)."""
        try:
            with open(self.lab.events_path(self.run), "rb") as f:
                f.seek(self._events_size)
                return b'"kind":"milestone"' in f.read()
        except FileNotFoundError:
            return False

    def _kill(self, proc: subprocess.Popen, kind: str) -> Kill | None:
        ckpt = self.lab.ckpt_dir(self.run)
        base = max(complete_checkpoints(ckpt), default=0)
        if kind == "delay":
            wait_until(proc, self._timed(lambda: False), self.rng.uniform(0.05, self.max_delay_s), poll=0.005)
        elif kind == "startup":
            wait_until(proc, self._timed(lambda: False), self.rng.uniform(0.6, 1.0) * self._startup_s, poll=0.005)
        elif kind == "step":
            target = min(base + self.rng.randint(1, 6), self.steps - 1)
            wait_until(proc, lambda: self._registered() and self.lab.heartbeat(self.run).get("step", 0) >= target, 60)
        elif kind == "save":
            before = set(_tmp_saves(ckpt))
            wait_until(proc, lambda: self._registered() and bool(set(_tmp_saves(ckpt)) - before), 60, poll=0.0002)
        elif kind == "append":
            path = self.lab.events_path(self.run)
            grown = lambda: path.exists() and path.stat().st_size > self._events_size  # noqa: E731
            if wait_until(proc, self._timed(grown), 60):
                time.sleep(self.rng.uniform(0.0, 0.03))
        elif kind == "milestone":
            wait_until(proc, self._timed(self._new_milestone), 60, poll=0.002)
        if proc.poll() is not None:
            return self._ended_by_itself(proc)
        step = self.lab.heartbeat(self.run).get("step") if self._registered() else None
        tmp = bool(_tmp_saves(ckpt))
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=60)
        if proc.returncode != -signal.SIGKILL:
            return self._ended_by_itself(proc)
        left = [n for n in _tmp_saves(ckpt)] if tmp else []
        landed = self._landed(step, left)
        after = self.lab.last_attempt(self.run)
        kill = Kill(len(self.kills) + 1, kind, proc.pid, landed, after if after > self._known else None)
        self.kills.append(kill)
        self.say(f"kill {kill.n:3d} ({kind:7s}): {landed}; attempt {kill.attempt or '- (no trace)'}")
        return kill

    def _landed(self, step: int | None, tmp_left: list[str]) -> str:
        if step is None:
            return f"{time.monotonic() - self._start:.2f} s after its start, before it announced itself"
        where = "before its first step" if step == 0 else f"at step {step}"
        if tmp_left:
            where += f", mid-way through writing {tmp_left[0].split('-')[1]}"
        return where

    def _ended_by_itself(self, proc: subprocess.Popen) -> None:
        _, err = proc.communicate(timeout=600)
        self.final_rc, self.final_stderr = proc.returncode, err or ""
        if proc.returncode != 0:
            raise AssertionError(f"attempt ended by itself with exit {proc.returncode}:\n{self.final_stderr[-3000:]}")
        return None

    def _launcher_leg(self) -> None:
        """`logbook run` under torchrun: one worker SIGKILLed and restarted by torchrun, then SIGTERM (preemption)."""
        self.launches += 1
        self.resumes.append((self.launches, {}))
        self._known = 0
        self._start = time.monotonic()
        proc = self.lab.start([sys.executable, "-m", "logbook", "run", "--exploratory", "--run-id", self.run,
                               "--max-restarts", "1", str(self.config)])
        hb = lambda: self.lab.heartbeat(self.run)  # noqa: E731
        first = self.rng.randint(1, 4)
        if not wait_until(proc, lambda: hb().get("attempt") == 1 and hb().get("step", 0) >= first, 120):
            raise AssertionError(f"the launched run never reached its first steps:\n{proc.communicate()[1][-3000:]}")
        victim, step = hb()["pid"], hb()["step"]
        os.kill(victim, signal.SIGKILL)
        self.kills.append(Kill(1, "torchrun-worker", victim, f"at step {step}, under torchrun", 1))
        self.say(f"kill   1 (torchrun-worker): at step {step}; attempt 1")
        base = max(complete_checkpoints(self.lab.ckpt_dir(self.run)), default=0)
        if not wait_until(proc, lambda: hb().get("attempt") == 2 and hb().get("step", 0) >= base + 2, 120):
            raise AssertionError(f"torchrun did not restart the worker:\n{proc.communicate()[1][-3000:]}")
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=120)
        if proc.returncode != 75:
            raise AssertionError(f"`logbook run` did not stop as preempted (exit {proc.returncode}):\n{err[-3000:]}")
        self.preemptions += 1
        self.say("preempted: SIGTERM to `logbook run`, exit 75")


# --- the audit ----------------------------------------------------------------------


@dataclass
class Audit:
    """What the logs say after the chaos, next to what the driver saw."""

    kills: int
    traced_kills: int
    restarts: int
    restart_causes: dict[str, int]
    chronicle_restarts: int
    kill_kinds: dict[str, int]
    mid_save_kills: int
    checks: dict[str, list[str]]
    """Invariant -> what does not hold (an empty list: it holds)."""

    @property
    def problems(self) -> list[str]:
        return [f"{name}: {p}" for name, ps in self.checks.items() for p in ps]

    def summary(self) -> dict[str, Any]:
        return {**{k: v for k, v in self.__dict__.items() if k != "checks"}, "problems": self.problems}


def audit(chaos: Chaos, reference: str) -> Audit:
    """Check every invariant after the chaos."""
    lab, run = chaos.lab, chaos.run
    log = read_events(lab.events_path(run))
    events = log.records
    restarts = [e for e in events if e["kind"] == "restart"]
    chronicle, chronicle_problems = check_chronicle(lab, run, restarts)
    checks = {
        "finished": [] if chaos.final_rc == 0 else [f"the last attempt exited {chaos.final_rc}: {chaos.final_stderr[-2000:]}"],
        "log intact": [p.message for p in log.problems],
        "same result": check_result(lab, run, reference, chaos.steps, events),
        "restarts in the log": check_restarts(chaos, events, restarts),
        "restarts in the chronicle": chronicle_problems,
        "checkpoints": check_checkpoints(chaos, events),
        "milestones": check_milestones(lab, events),
        "verify": check_verify(lab),
    }
    causes: dict[str, int] = {}
    for e in restarts:
        causes[e["data"].get("cause")] = causes.get(e["data"].get("cause"), 0) + 1
    kinds: dict[str, int] = {}
    for k in chaos.kills:
        kinds[k.kind] = kinds.get(k.kind, 0) + 1
    return Audit(kills=len(chaos.kills), traced_kills=sum(k.attempt is not None for k in chaos.kills),
                 restarts=len(restarts), restart_causes=causes, chronicle_restarts=chronicle, kill_kinds=kinds,
                 mid_save_kills=sum("mid-way through writing" in k.landed for k in chaos.kills), checks=checks)


def check_result(lab: Lab, run: str, reference: str, steps: int, events: list[dict[str, Any]]) -> list[str]:
    import torch

    out = []
    finished = [e for e in events if e["kind"] == "run_finished"]
    if len(finished) != 1 or events[-1]["kind"] != "run_finished":
        out.append(f"expected one run_finished at the end, found {len(finished)} (last event {events[-1]['kind']})")
    ref, got = lab.final_weights(reference, steps), lab.final_weights(run, steps)
    if ref.keys() != got.keys() or not all(torch.equal(ref[k], got[k]) for k in ref):
        differ = [k for k in ref if k not in got or not torch.equal(ref[k], got[k])]
        out.append(f"final weights differ from the uninterrupted run: {differ[:5]}")
    ref_loss, got_loss = lab.losses(reference), lab.losses(run)
    if ref_loss != got_loss:
        bad = sorted(s for s in ref_loss if got_loss.get(s) != ref_loss[s])
        out.append(f"losses differ from the uninterrupted run at steps {bad[:10]}")
    return out


def check_restarts(chaos: Chaos, events: list[dict[str, Any]], restarts: list[dict[str, Any]]) -> list[str]:
    """One restart per attempt after the first, naming the attempt before it; one per traced kill or preemption."""
    out = []
    attempts = sorted({e["attempt"] for e in events if isinstance(e.get("attempt"), int)})
    last = max(attempts)
    if attempts != list(range(1, last + 1)):
        out.append(f"attempt numbers are not consecutive: {attempts}")
    by_attempt: dict[int, list[dict[str, Any]]] = {}
    for e in restarts:
        by_attempt.setdefault(e["attempt"], []).append(e)
    for a in range(2, last + 1):
        got = by_attempt.get(a, [])
        if len(got) != 1:
            out.append(f"attempt {a} has {len(got)} restart events (expected exactly one)")
        elif got[0]["data"].get("prev_attempt") != a - 1:
            out.append(f"the restart of attempt {a} names attempt {got[0]['data'].get('prev_attempt')} before it")
    expected = sum(k.attempt is not None for k in chaos.kills) + chaos.preemptions
    if len(restarts) != expected:
        out.append(f"{len(restarts)} restart events for {expected} traced kills and preemptions")
    for e in restarts:
        cause = e["data"].get("cause")
        if cause not in ("signal", "preempted"):
            out.append(f"restart of attempt {e['attempt']} has cause {cause!r} (only kills and a preemption happened)")
    return out


def check_checkpoints(chaos: Chaos, events: list[dict[str, Any]]) -> list[str]:
    """No checkpoint was rejected, every complete one verified before each launch, and each resume used one of those."""
    out = []
    rejected = [e for e in events if e["kind"] == "checkpoint_rejected"]
    if rejected:
        out.append(f"checkpoints were rejected: {[e['data'].get('reason') for e in rejected]}")
    for launch, valid in chaos.resumes:
        bad = {s: why for s, why in valid.items() if why != "ok"}
        if bad:
            out.append(f"before launch {launch} a checkpoint with a COMPLETE marker failed its manifest: {bad}")
    started = [e for e in events if e["kind"] == "run_started"]
    valid_steps = set().union(*(set(v) for _, v in chaos.resumes)) | {0}
    for e in started:
        step = e["data"].get("resumed_from_step")
        if step not in valid_steps:
            out.append(f"attempt {e['attempt']} resumed from step {step}, which was never a verified checkpoint")
    return out


def check_verify(lab: Lab) -> list[str]:
    """`logbook verify`, the command, must pass."""
    res = lab.logbook("verify")
    return [] if res.returncode == 0 else [f"`logbook verify` exited {res.returncode}: {res.stdout[-1000:]} {res.stderr[-1000:]}"]


def check_milestones(lab: Lab, events: list[dict[str, Any]]) -> list[str]:
    """One progress note per configured fraction, however many times the run was killed around them."""
    from logbook.core.settings import load_config

    fractions = load_config(lab.root / "logbook.yaml").milestones
    got = sorted(e["data"].get("fraction") for e in events if e["kind"] == "milestone")
    return [] if got == sorted(fractions) else [f"milestone fractions {got}, expected each of {fractions} once"]


def check_chronicle(lab: Lab, run: str, restarts: list[dict[str, Any]]) -> tuple[int, list[str]]:
    """Render the chronicle; every restart event must be one entry, under its own anchor, exactly once."""
    res = lab.logbook("render")
    if res.returncode != 0:
        return 0, [f"`logbook render` exited {res.returncode}: {res.stderr[-1000:]}"]
    text = "".join(p.read_text("utf-8") for p in sorted(lab.root.glob("entries/[0-9]*/[0-9]*/[0-9]*.md")))
    headings = [ln for ln in text.splitlines() if ln.startswith("### ") and f"run {run}" in ln
                and (ln.endswith("· restart") or ln.endswith("· restart (drill)"))]
    problems = []
    for e in restarts:
        anchor = f'<a id="run-{run}-{e["seq"]}"></a>'
        if text.count(anchor) != 1:
            problems.append(f"restart seq {e['seq']} appears {text.count(anchor)} times in the chronicle")
    if len(headings) != len(restarts):
        problems.append(f"the chronicle shows {len(headings)} restart entries for {len(restarts)} restart events")
    return len(headings), problems
