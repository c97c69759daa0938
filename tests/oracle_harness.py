"""The oracle: drawn fault schedules for tiny real runs, and what the record must say about each.

Used by `tests/test_oracle.py` (a few drawn schedules) and `bench/oracle.py`
(many). A `Schedule` says what happens to one run: the checkpoint cadence,
where each attempt is killed (after a step, or in the middle of writing a
checkpoint) or hangs until the watchdog ends it, which attempts find a live
change waiting when they start, and whether the last attempt meets a loss spike or a NaN. `run_schedule` makes it
happen for real: a preregistration with a contingency rule naming the run's
own config, `logbook run` for the first attempt and the trainer's own command
for each relaunch (as torchrun or a requeue would), the kills as SIGKILL and hang
drills in the config and the live changes as requests left in the run's control
folder before the attempt starts (so each is applied at the attempt's first
step).

`expected` is the oracle. It knows the schedule and the checkpoint cadence
and nothing else: no event log, and no code from `logbook/` at all. The
rules it applies are the trainer's promises, stated here a second time:

- a kill (or hang) drill at step k fires after step k and before that step's
  checkpoint is written, so the attempt resumes from the newest multiple of `every`
  below k; a kill in the middle of writing step s's checkpoint leaves step s
  incomplete (a save started but not finished does not count), so it resumes
  from s - every; the attempt had reached step k, or step s when its saves
  are synchronous, and the steps between the resume point and it are lost;
- a kill inside a background save lands while training goes on: the writer
  meets the drill while the loop runs steps s+1, s+2, ..., and the loop waits
  for that save at the next checkpoint, so the attempt reached a step from s
  to s + every (at most the run's last). The schedule fixes no more than that
  range; the views must then agree with one another to the step (steps lost =
  the step reached - the resume step, in the report and the chronicle alike);
- attempts = kills + 1, restarts = kills, each attempt runs from where the one
  before resumed to the step it was killed at, and the run finishes at its last step;
- a live change counts once, however many restarts apply it again;
- a spike or NaN in the last attempt is met by the guard with the first rung
  of its ladder, skipping that one batch, as the contingency rule says, so it
  is no deviation; each live change is one (the rule does not cover it).

`observed` reads what the record says through the commands a reader uses:
`logbook outcome RUN --json`, `logbook report RUN` (Markdown) and the
chronicle's day files after `logbook render`. `disagreements` lists every
figure where the two differ.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass, field
from typing import Any

from hypothesis import strategies as st
from lab import Lab

RULE = "loss spike > 4 sigma twice within 50 steps -> rollback 5 steps, skip 10 batches, lr x 0.9"
"""The contingency rule every drawn run is preregistered with; its first rung is a skip of the spiking batch."""
GUARD_WARMUP = 8
HANG_TIMEOUT_S = 4.0
"""Far above any step of the tiny config, even on a busy machine; a hang drill costs this much wall time."""


@dataclass(frozen=True)
class Kill:
    """One drill that ends an attempt: a SIGKILL, or a hang the watchdog ends."""

    step: int
    """The step it fires at: after that step, or while that step's checkpoint is written."""
    during_save: bool
    """True: in the middle of writing the checkpoint of `step` (a multiple of `every`)."""
    hang: bool = False
    """True: after the step the attempt stops making progress, and the watchdog ends it (exit 124)."""


@dataclass(frozen=True)
class Schedule:
    """What happens to one drawn run."""

    steps: int
    """The run's length."""
    every: int
    """Checkpoint cadence."""
    background: bool
    """Checkpoints written in the background (kills then land only inside a save, which is deterministic)."""
    kills: tuple[Kill, ...]
    """One per attempt but the last, in order."""
    live_changes: tuple[int, ...]
    """Attempts (1-based) that find a live change (`lr_scale`) waiting when they start."""
    divergence: tuple[str, int] | None = None
    """("spike" | "nan", step) met by the last attempt, or None."""


@dataclass
class Expected:
    """What the record must say, from the schedule alone."""

    attempts: int
    restarts: int
    resumes: list[int]
    """The resume step of each restart, in order."""
    reached: list[tuple[int, int]]
    """The lowest and highest step each killed attempt can have reached, in order (equal but for background saves)."""
    first_steps: list[int]
    """The step each attempt starts from: where the one before resumed (0 for the first)."""
    live_changes: int
    skipped: int
    deviations: int
    final_step: int
    finished: bool


@dataclass
class Observed:
    """What the record says, view by view (None: the view did not say)."""

    outcome: dict[str, Any] = field(default_factory=dict)
    report: dict[str, Any] = field(default_factory=dict)
    chronicle: dict[str, Any] = field(default_factory=dict)


# --- drawing -------------------------------------------------------------------------------


def _resume_after(kill: Kill, every: int) -> int:
    """The oracle's rule: the newest checkpoint complete when the kill landed."""
    if kill.during_save:
        return kill.step - every
    return (kill.step - 1) // every * every


@st.composite
def schedules(draw, max_kills: int = 3, min_kills: int = 0) -> Schedule:
    every = draw(st.integers(2, 5))
    steps = draw(st.integers(max(6, 2 * every), 16))
    background = draw(st.booleans())
    kills: list[Kill] = []
    start = 0
    for _ in range(draw(st.integers(min_kills, max_kills))):
        saves = [s for s in range(start + 1, steps) if s % every == 0]
        plain = list(range(start + 1, steps))
        options = [Kill(s, True) for s in saves]
        if not background:  # a kill after a step waits for no save in flight: only synchronous saves make it exact
            options += [Kill(s, False) for s in plain] + [Kill(s, False, hang=True) for s in plain]
        if not options:
            break
        kills.append(draw(st.sampled_from(options)))
        start = _resume_after(kills[-1], every)
    attempts = len(kills) + 1
    live = tuple(sorted(draw(st.sets(st.integers(1, attempts), max_size=2))))
    first = max(start + 2, GUARD_WARMUP + 2)  # the guard judges a spike once its warm-up is over
    divergence = None
    if first <= steps - 1 and draw(st.booleans()):
        divergence = (draw(st.sampled_from(["spike", "nan"])), draw(st.integers(first, steps - 1)))
    return Schedule(steps, every, background, tuple(kills), live, divergence)


# --- the oracle ----------------------------------------------------------------------------


def expected(s: Schedule) -> Expected:
    resumes = [_resume_after(k, s.every) for k in s.kills]
    reached = [(k.step, min(k.step + s.every, s.steps) if k.during_save and s.background else k.step)
               for k in s.kills]
    skipped = 1 if s.divergence else 0
    return Expected(attempts=len(s.kills) + 1, restarts=len(s.kills), resumes=resumes, reached=reached,
                    first_steps=[0, *resumes],
                    live_changes=len(s.live_changes), skipped=skipped, deviations=len(s.live_changes),
                    final_step=s.steps, finished=True)


def predictions(exp: Expected) -> list[str]:
    """Counts preregistered as predictions: the scorecard measures each, and its value is one more figure to check."""
    return [f"restarts@final == {exp.restarts}", f"lr_changes@final == {exp.live_changes}",
            f"skipped_steps@final == {exp.skipped}"]


# --- running it for real -------------------------------------------------------------------


def config_of(s: Schedule) -> dict[str, Any]:
    faults = [{"kind": "hang" if k.hang else "sigkill", "step": k.step, "attempt": i + 1,
               **({"when": "save"} if k.during_save else {})} for i, k in enumerate(s.kills)]
    if s.divergence:
        kind, step = s.divergence
        faults.append({"kind": kind, "step": step, "attempt": len(s.kills) + 1,
                       **({"factor": 1000.0} if kind == "spike" else {})})
    return {
        "model": {"n_layer": 1, "n_head": 2, "n_embd": 32, "block_size": 32},
        "data": {"sources": [{"name": "stdlib", "kind": "stdlib", "max_mb": 0.2}]},
        "train": {"steps": s.steps, "batch_size": 4, "eval_every": 0, "eval_batches": 1, "threads": 1,
                  "hang_timeout_s": HANG_TIMEOUT_S},
        "checkpoint": {"every": s.every, "keep": 2, "background": s.background},
        "guard": {"warmup": GUARD_WARMUP, "cooldown": 3},
        "faults": faults,
    }


def _leave_change(lab: Lab, run: str, attempt: int) -> None:
    """A live change waiting in the run's control folder, as `logbook set` leaves it, old enough to be read at once."""
    import os

    from logbook.launch.change_requests import new_request, write_request

    req = new_request(run, {"lr_scale": round(1.0 - 0.05 * attempt, 2)}, f"change before attempt {attempt}",
                      "Ada Tester <ada@example.org>")
    from logbook.core.project import open_project

    # Through the project, as `logbook set` goes: the state folder is made (ignoring itself) if it is not there yet.
    path = write_request(open_project(lab.root).control_dir(run), req)
    old = time.time() - 60
    os.utime(path, (old, old))
    time.sleep(0.01)  # request names carry the time: keep them in order


def run_schedule(lab: Lab, run: str, s: Schedule) -> dict[str, Any]:
    """Prereg, launch, relaunch after each kill; returns the exit codes and the prereg id."""
    import sys

    config = lab.write_config(f"{run}.yaml", config_of(s))
    rel = str(config.relative_to(lab.root))
    res = lab.logbook("prereg", "--title", f"oracle {run}", "--hypothesis", "The record says what happened.",
                      *[a for p in predictions(expected(s)) for a in ("--predict", p)],
                      "--config", rel, "--contingency", RULE, "--json")
    if res.returncode != 0:
        raise AssertionError(f"prereg failed: {res.stdout}{res.stderr}")
    pid = json.loads(res.stdout)["id"]
    codes = []
    for attempt in range(1, len(s.kills) + 2):
        if attempt in s.live_changes:
            _leave_change(lab, run, attempt)
        if attempt == 1:
            argv = [sys.executable, "-m", "logbook", "run", "--prereg", pid, "--run-id", run, "--max-restarts", "0", rel]
        else:
            argv = lab.trainer_command(run, config)
        import subprocess

        proc = subprocess.run(argv, cwd=lab.root, env=lab.env, capture_output=True, text=True, timeout=300)
        codes.append(proc.returncode)
        if attempt == len(s.kills) + 1 and proc.returncode != 0:
            raise AssertionError(f"the last attempt exited {proc.returncode}: {proc.stderr[-3000:]}")
    return {"codes": codes, "prereg": pid}


# --- what the record says ------------------------------------------------------------------


def observe(lab: Lab, run: str) -> Observed:
    obs = Observed()
    res = lab.logbook("outcome", run, "--json")
    if res.returncode not in (0,):
        raise AssertionError(f"outcome exited {res.returncode}: {res.stdout[-2000:]}{res.stderr[-2000:]}")
    card = json.loads(res.stdout)
    devs = card.get("deviations") or []
    measured = {p["metric"]: p.get("value") for p in card.get("predictions") or []}
    statuses = [p["status"] for p in card.get("predictions") or []]
    obs.outcome = {"final_step": card.get("last_step"), "finished": card.get("run_state") == "finished",
                   "deviations": len(devs), "live_changes": sum(d.get("kind") == "live_change" for d in devs),
                   "restarts": measured.get("restarts"), "lr_changes": measured.get("lr_changes"),
                   "skipped": measured.get("skipped_steps"), "predictions": statuses}
    res = lab.logbook("report", run)
    if res.returncode != 0:
        raise AssertionError(f"report exited {res.returncode}: {res.stderr[-2000:]}")
    obs.report = report_figures((lab.root / res.stdout.strip().splitlines()[-1]).read_text("utf-8"))
    res = lab.logbook("render")
    if res.returncode != 0:
        raise AssertionError(f"render exited {res.returncode}: {res.stderr[-2000:]}")
    text = "".join(p.read_text("utf-8") for p in sorted(lab.root.glob("entries/[0-9]*/[0-9]*/[0-9]*.md")))
    obs.chronicle = chronicle_figures(text, run)
    return obs


def report_figures(md: str) -> dict[str, Any]:
    """The figures the report's Markdown states: restarts in its incidents table, and interventions."""
    rows = [ln for ln in md.splitlines() if ln.startswith("| ") and " | restart: " in ln]
    lost = [int(m.group(1).replace(",", "")) if (m := re.search(r"\| ([\d,]+) steps", r)) else None for r in rows]
    both: dict[str, tuple[int, int]] = {}
    for ln in md.splitlines():
        m = re.match(r"\| ([a-z ,()-]+?) \| (\d+) \| (\d+) \|$", ln)
        if m:
            both[m.group(1)] = (int(m.group(2)), int(m.group(3)))
    manual = {k: a + b for k, (a, b) in both.items()}
    skipped = sum(both["updates skipped by the guard"]) if "updates skipped by the guard" in both else None
    spans = [(int(m.group(1).replace(",", "")), int(m.group(2).replace(",", "")))
             for ln in md.splitlines() if (m := re.match(r"\| \d+ \| [^|]* \| [^|]* \| ([\d,]+) → ([\d,]+) \|", ln))]
    return {"restarts": len(rows), "lost": lost, "interventions": manual, "skipped": skipped, "spans": spans}


def chronicle_figures(text: str, run: str) -> dict[str, Any]:
    """What the rendered day files say about `run`: its restarts (with the resume step and steps lost each
    states), its live changes (an entry that says it re-applies one is not another), the updates its guard
    skipped, and the step of its `run finished` entry."""
    entries = [b for b in re.split(r"(?m)^### ", text) if f"· run {run} ·" in b.splitlines()[0]]

    def titled(*ends: str) -> list[str]:
        return [b for b in entries if b.splitlines()[0].rstrip().endswith(ends)]

    resumes, lost = [], []
    for b in titled("· restart", "· restart (drill)"):
        m = re.search(r"Resumed from the checkpoint at step ([\d,]+)", b)
        resumes.append(int(m.group(1).replace(",", "")) if m else (0 if "Started again from step 0" in b else None))
        m = re.search(r": ([\d,]+) steps? (?:\([^)]*\) )?lost", b)
        lost.append(int(m.group(1).replace(",", "")) if m else None)
    changes = [b for b in titled("· change", "· change (drill)") if "Re-applied after restart" not in b]
    skipped = sum("update skipped" in b for b in titled("· divergence", "· divergence (drill)"))
    finished = [int(m.group(1).replace(",", "")) for b in titled("· run finished")
                if (m := re.search(r"· step ([\d,]+)", b.splitlines()[0]))]
    return {"restarts": len(resumes), "resumes": resumes, "lost": lost, "live_changes": len(changes),
            "skipped": skipped, "finished_at": finished}


def _lost_per_restart(exp: Expected, said: list[Any] | None) -> str | None:
    """Why `said` (steps lost per restart, as a view states them) cannot be right, or None."""
    said = list(said or [])
    if len(said) != exp.restarts:
        return f"{len(said)} figures for {exp.restarts} restarts"
    for i, (n, (lo, hi), r) in enumerate(zip(said, exp.reached, exp.resumes), 1):
        if not isinstance(n, int) or not lo - r <= n <= hi - r:
            want = lo - r if lo == hi else f"{lo - r} to {hi - r}"
            return f"restart {i}: {n} steps, expected {want}"
    return None


def _spans(exp: Expected, said: list[tuple[int, int]] | None) -> str | None:
    """Why the report's attempts table (first step → last step of each attempt) cannot be right, or None."""
    said = list(said or [])
    if len(said) != exp.attempts:
        return f"{len(said)} attempts, expected {exp.attempts}"
    for i, ((first, last), start) in enumerate(zip(said, exp.first_steps), 1):
        lo, hi = exp.reached[i - 1] if i <= exp.restarts else (exp.final_step, exp.final_step)
        if first != start or not lo <= last <= hi:
            return f"attempt {i}: {first} → {last}, expected {start} → {lo if lo == hi else f'{lo}..{hi}'}"
    return None


def disagreements(exp: Expected, obs: Observed) -> list[str]:
    """Every figure where the record and the oracle differ, as 'view: figure: said X, expected Y'."""
    checks = [
        ("outcome", "final step", obs.outcome.get("final_step"), exp.final_step),
        ("outcome", "finished", obs.outcome.get("finished"), exp.finished),
        ("outcome", "deviations", obs.outcome.get("deviations"), exp.deviations),
        ("outcome", "live-change deviations", obs.outcome.get("live_changes"), exp.live_changes),
        ("outcome", "restarts measured", obs.outcome.get("restarts"), exp.restarts),
        ("outcome", "live changes measured", obs.outcome.get("lr_changes"), exp.live_changes),
        ("outcome", "skipped steps measured", obs.outcome.get("skipped"), exp.skipped),
        ("outcome", "predictions made from the oracle", obs.outcome.get("predictions"), ["confirmed"] * 3),
        ("report", "restarts", obs.report.get("restarts"), exp.restarts),
        ("report", "hyperparameter changes", obs.report.get("interventions", {}).get("hyperparameter changes"),
         exp.live_changes),
        ("report", "restarts (interventions)", obs.report.get("interventions", {}).get("restarts"), exp.restarts),
        ("report", "updates skipped by the guard", obs.report.get("skipped"), exp.skipped),
        ("chronicle", "restarts", obs.chronicle.get("restarts"), exp.restarts),
        ("chronicle", "resume steps", obs.chronicle.get("resumes"), exp.resumes),
        ("chronicle", "live changes", obs.chronicle.get("live_changes"), exp.live_changes),
        ("chronicle", "updates skipped by the guard", obs.chronicle.get("skipped"), exp.skipped),
        ("chronicle", "run finished at", obs.chronicle.get("finished_at"), [exp.final_step] if exp.finished else []),
    ]
    out = [f"{view}: {what}: said {got!r}, expected {want!r}" for view, what, got, want in checks if got != want]
    for view, what, why in (("report", "steps lost per restart", _lost_per_restart(exp, obs.report.get("lost"))),
                            ("chronicle", "steps lost per restart", _lost_per_restart(exp, obs.chronicle.get("lost"))),
                            ("report", "attempts (first → last step)", _spans(exp, obs.report.get("spans")))):
        if why:
            out.append(f"{view}: {what}: {why}")
    # Where the schedule fixes only a range, the views must still agree with each other to the step.
    spans, lost = obs.report.get("spans") or [], obs.report.get("lost")
    if lost != obs.chronicle.get("lost"):
        out.append(f"report and chronicle: steps lost per restart: {lost!r} and {obs.chronicle.get('lost')!r}")
    implied = [last - r for (_, last), r in zip(spans, exp.resumes)]
    if len(spans) == exp.attempts and lost != implied:
        out.append(f"report: steps lost per restart {lost!r}, but its attempts table implies {implied!r}")
    return out


@dataclass
class Checked:
    """One drawn schedule run for real and compared with the oracle."""

    run: str
    schedule: Schedule
    expected: Expected
    observed: Observed
    disagreements: list[str]
    seconds: float


def check(lab: Lab, run: str, s: Schedule) -> Checked:
    """Run `s` as `run` in `lab`, read the record, compare it with the oracle."""
    t0 = time.monotonic()
    run_schedule(lab, run, s)
    obs = observe(lab, run)
    exp = expected(s)
    return Checked(run, s, exp, obs, disagreements(exp, obs), time.monotonic() - t0)
