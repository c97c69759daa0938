"""`logbook demo`: a scratch logbook, a preregistration, and a real run with drills.

The demo is a list of small named steps over one `DemoState`: make a git
repository, `logbook init`, copy the tiny config with its drills (a SIGKILL,
then two loss spikes), preregister a hypothesis and a contingency rule, train
under torchrun with restarts while a person's live change (`logbook set`)
arrives after the first spike, verify, then share it the way a team does (a
teammate's `git clone`, `logbook init`, a note on each side, `git pull`,
`git push`: no conflict), summarise. The divergence guard skips
the first spike and rolls back after the second, as the rule says; the live
change is recorded with who, why, old and new. A later feature is one more
step in `STEPS`.
"""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from logbook.chronicle.build import render_chronicle, rerender_days
from logbook.chronicle.notes import add_note
from logbook.chronicle.report import write_report
from logbook.chronicle.site import build_site
from logbook.core.bundled import bundled_dir
from logbook.core.errors import EXIT_INTERRUPTED, RefusedError, UsageError
from logbook.core.identity import git_identity
from logbook.core.project import Project, open_project
from logbook.core.textfmt import fmt_int, fmt_num, fmt_setting, is_number, plural
from logbook.core.yamlsafe import load_yaml_file
from logbook.launch.change_requests import read_answer, REPLY_KEY, submit_change, wait_for_answer
from logbook.launch.launcher import launch_run, new_run_id, RunResult
from logbook.records.commit import commit_logbook
from logbook.eventlog.runlog import iter_events
from logbook.eventlog.kinds import get_kind, is_kind, kind_of
from logbook.records.init import init_logbook as init
from logbook.promises.prereg import create_prereg
from logbook.promises.prereg_input import PreregInput
from logbook.proof.verify import verify_project
from logbook.scoring.forecasts import run_summary, summary_text
from logbook.proof.scorecard import record_outcome

DEFAULT_STEPS = 120
"""Training steps of the demo run: under a minute of training on 2 idle CPU cores."""
MARKER = ".logbook-demo"
"""A file that marks a folder as a demo scratch folder (safe to replace)."""
TEAM_DIR = ".team"
"""Inside the scratch folder (and ignored there): the shared origin and a teammate's clone."""
SITE_DIR = "site"
"""Inside the scratch folder (and ignored there): the logbook as a static site (`logbook site`)."""
TINY_CONFIG = bundled_dir("configs") / "tiny-cpu.yaml"
LIVE_CHANGE = {"lr_scale": 0.8}
"""What the demo asks the running run for, after its first spike."""
LIVE_REASON = "demo: gentler after the spike"
GUARD = {"warmup": 8, "cooldown": 1, "rollback_after": 2, "rollback_window": 50, "rollback_steps": 5,
         "skip_batches": 10, "lr_factor": 0.9}
"""The guard as the demo's contingency rule says: two spikes within 50 steps -> back 5 steps, skip 10 batches, lr x 0.9."""

Say = Callable[[str], None]


@dataclass
class DemoState:
    """What the steps share."""

    root: Path
    """The scratch repository."""
    steps: int = DEFAULT_STEPS
    """Training steps."""
    nproc: int = 1
    """Worker processes under torchrun."""
    say: Say = lambda _m: None
    console: Callable[[], Any] | None = None
    """Makes the run's console (`logbook.cli.run_console.RunConsole`): the run's events in words and its
    progress, torchrun's own lines kept in its log file. None: torchrun's output passes through as it is."""
    project: Project | None = None
    config: Path | None = None
    kill_step: int = 0
    spike_steps: list[int] = field(default_factory=list)
    prereg_id: str | None = None
    run_id: str | None = None
    result: RunResult | None = None
    live_change: dict[str, Any] | None = None
    """The request sent with `logbook set` and the run's answer (None until sent)."""
    live_note: str = ""
    """Why no live change was sent (the run ended first), if so."""
    guard_lines: list[str] = field(default_factory=list)
    change_lines: list[str] = field(default_factory=list)
    chronicle: list[Path] = field(default_factory=list)
    restart_entry: list[str] = field(default_factory=list)
    spike_entry: list[str] = field(default_factory=list)
    change_entry: list[str] = field(default_factory=list)
    verify_ok: bool | None = None
    verify_lines: list[str] = field(default_factory=list)
    team_lines: list[str] = field(default_factory=list)
    site: Path | None = None
    site_note: str = ""


@dataclass
class DemoResult:
    """What the demo did, for the summary and for scripts."""

    root: Path
    kept: bool
    seconds: float
    run: RunResult
    prereg_id: str
    chronicle: list[Path]
    restart_entry: list[str]
    """The chronicle's entry for the first restart, as rendered."""
    verify_ok: bool
    verify_lines: list[str]
    guard_lines: list[str] = field(default_factory=list)
    """One line per action of the divergence guard (from the event log)."""
    change_lines: list[str] = field(default_factory=list)
    """One line per hyperparameter change (from the event log), or why none was made."""
    spike_entry: list[str] = field(default_factory=list)
    """The chronicle's entry for the rollback, as rendered."""
    change_entry: list[str] = field(default_factory=list)
    """The chronicle's entry for the live change, as rendered."""
    live_change: dict[str, Any] | None = None
    team_lines: list[str] = field(default_factory=list)
    """The team workflow as it ran: clone, init, a note on each clone, pull, push."""
    site: Path | None = None
    """The static site's index page (None when it was not built; `site_note` says why)."""
    site_note: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"root": str(self.root), "kept": self.kept, "seconds": round(self.seconds, 1),
                "run": self.run.to_dict(), "prereg_id": self.prereg_id,
                "chronicle": [str(p) for p in self.chronicle], "restart_entry": self.restart_entry,
                "guard": self.guard_lines, "changes": self.change_lines, "live_change": self.live_change,
                "spike_entry": self.spike_entry, "change_entry": self.change_entry,
                "verify_ok": self.verify_ok,
                "verify": self.verify_lines, "team": self.team_lines,
                "site": str(self.site) if self.site else None, "site_note": self.site_note}


# --- the steps -----------------------------------------------------------------------


def _git(root: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=root, check=True, capture_output=True, text=True).stdout


def make_repository(st: DemoState) -> None:
    """A fresh git repository with one commit, as a researcher's project would be."""
    st.root.mkdir(parents=True, exist_ok=True)
    (st.root / MARKER).write_text("scratch folder made by `logbook demo`; safe to delete\n")
    _git(st.root, "init", "-q", "-b", "main")
    if git_identity(st.root).guessed:
        # A fresh machine may have no git identity; the scratch repository gets its own.
        _git(st.root, "config", "user.name", "Logbook Demo")
        _git(st.root, "config", "user.email", "demo@logbook.invalid")
    (st.root / "README.md").write_text("# A scratch research project made by `logbook demo`\n")
    (st.root / ".gitignore").write_text(f"{MARKER}\n/{TEAM_DIR}/\n/{SITE_DIR}/\n")
    _git(st.root, "add", "README.md", ".gitignore")
    _git(st.root, "commit", "-q", "-m", "Start a research project")


def init_logbook(st: DemoState) -> None:
    """`logbook init`, committed."""
    init(start=st.root)
    _git(st.root, "add", "-A")
    _git(st.root, "commit", "-q", "-m", "Set up the logbook")
    st.project = open_project(st.root)


def spike_steps(steps: int) -> list[int]:
    """Steps of the two spike drills: past the guard's warm-up, close enough to count as one incident."""
    if steps < 12:
        return []  # too short for the guard to know what normal looks like
    first = max(steps // 2, 10)
    return [first, min(first + 6, steps)]


def copy_config(st: DemoState) -> None:
    """The tiny CPU config with a SIGKILL drill between two checkpoints and two spikes after it, committed."""
    import yaml


    if not TINY_CONFIG.is_file():
        raise RefusedError(f"the tiny config is missing: {TINY_CONFIG}",
                           hint="run the demo from a source checkout (`python3 -m pip install -e '.[train]'`)")
    cfg = load_yaml_file(TINY_CONFIG, "tiny config") or {}
    every = max(2, st.steps // 6)
    st.kill_step = every + max(1, every // 2)
    cfg.setdefault("train", {})["steps"] = st.steps
    cfg["train"]["eval_every"] = max(1, st.steps // 3)
    cfg.setdefault("checkpoint", {})["every"] = every
    cfg["checkpoint"]["keep"] = 5  # the rollback's target (5 steps before the first spike) must still be there
    st.spike_steps = spike_steps(st.steps)
    # The spikes come after the kill, so they belong to the attempt that follows it.
    cfg["faults"] = ([{"kind": "sigkill", "step": st.kill_step}]
                     + [{"kind": "spike", "step": s, "attempt": 2} for s in st.spike_steps])
    cfg["guard"] = dict(GUARD)
    st.config = st.root / "configs" / "demo.yaml"
    st.config.parent.mkdir(parents=True, exist_ok=True)
    spikes = " and ".join(str(s) for s in st.spike_steps)
    header = (f"# {TINY_CONFIG.name} for {st.steps} steps, checkpoints every {every}, and drills:\n"
              f"# SIGKILL after step {st.kill_step}, so torchrun restarts the trainer once"
              + (f";\n# the loss blown up 100x at steps {spikes}, for the divergence guard to catch.\n" if spikes else ".\n"))
    st.config.write_text(header + yaml.safe_dump(cfg, sort_keys=False))
    _git(st.root, "add", "configs/demo.yaml")
    _git(st.root, "commit", "-q", "-m", "Add the demo training config")


def preregister(st: DemoState) -> None:
    """A hypothesis, predictions and forecasts (a stated confidence, a point forecast with its interval, a
    trajectory of the training loss) and a contingency rule, committed before the run."""
    inp = PreregInput(
        title="Tiny GPT survives a killed trainer and two loss spikes",
        hypothesis=("A 2-layer GPT trained on the Python standard library's source learns byte statistics, "
                    "resumes from its last checkpoint after a SIGKILL, and gets past two loss spikes by "
                    "skipping and rolling back as planned."),
        predictions=["val_loss@final < 3.0 (85%)", "restarts@final <= 1",
                     "val_loss@final ≈ 2.75 [2.5, 3.0] 80%",
                     "loss ≈ {25%: 3.3 [3.0, 3.7], 50%: 2.9 [2.6, 3.2], 75%: 2.75 [2.5, 3.0], final: 2.7 [2.45, 2.95]} 80%"],
        contingency=["spike > 4σ twice within 50 steps -> rollback 5 steps, skip 10 batches, lr × 0.9"],
        config=str(st.config),
        budget=f"{st.steps} steps",
        rationale=("The demo's drills kill the trainer once and blow up the loss twice; torchrun restarts the "
                   "trainer, it resumes, and the divergence guard answers the spikes."),
    )
    st.prereg_id = create_prereg(_project(st), inp).id


def train(st: DemoState) -> None:
    """The run: torchrun, up to 3 restarts, the drills; a live change arrives after the first spike."""
    project = _project(st)
    st.run_id = new_run_id(project, st.prereg_id, st.config)
    stop = threading.Event()
    console = st.console() if st.console is not None else None
    say = console.say if console is not None else st.say  # above the console's live line, not through it
    asker = threading.Thread(target=_ask_after_first_spike, args=(st, stop, say), name="demo-logbook-set",
                             daemon=True)
    asker.start()
    try:
        st.result = launch_run(project, st.config, [], prereg_id=st.prereg_id, nproc=st.nproc,
                               max_restarts=3, run_id=st.run_id, say=say, console=console)
    finally:
        stop.set()
        asker.join(timeout=30)
        if console is not None:
            console.close()
    if st.result.exit_code == EXIT_INTERRUPTED:
        # Ctrl-C reached the run, which saved and stopped: the demo stops with it (exit 130), not
        # scoring, reporting and pushing a run cut short as if it had been the demo's.
        raise KeyboardInterrupt
    events = _run_events(st)
    st.guard_lines = [_guard_line(e) for e in events if _by_guard(e)]
    st.change_lines = [_change_line(e) for e in events if is_kind(e, "hparam_change", "hparam_change_rejected")]
    if st.live_note:
        st.change_lines.append(st.live_note)


def _ask_after_first_spike(st: DemoState, stop: threading.Event, say: Say) -> None:
    """`logbook set RUN lr_scale=0.8` through the library, once the guard has skipped the first spike."""
    if not st.spike_steps:
        return
    while not stop.wait(0.05):
        if any(is_kind(e, "step_skipped") for e in _run_events(st)):
            break
    else:
        st.live_note = "no live change: the run ended before its first spike"
        return
    project = _project(st)
    try:
        sub = submit_change(project, st.run_id, LIVE_CHANGE, LIVE_REASON)
    except RefusedError as e:
        st.live_note = f"no live change: {e.message}"
        return
    what = ", ".join(f"{k}={v}" for k, v in LIVE_CHANGE.items())
    say(f"  logbook set {st.run_id} {what} --reason {shlex.quote(LIVE_REASON)} (request {sub.request['request_id']})")
    answer = None
    while answer is None and not stop.is_set():  # the run answers at its next step, or has ended
        answer = wait_for_answer(project.control_dir(st.run_id), sub.name, timeout_s=0.2, poll_s=0.05)
    answer = answer or read_answer(project.control_dir(st.run_id), sub.name)
    st.live_change = {"request": sub.request, REPLY_KEY: (answer or {}).get(REPLY_KEY)}
    if answer is None:
        st.live_note = "the live change was never answered: the run ended first"


def _run_events(st: DemoState) -> list[dict[str, Any]]:
    if st.run_id is None:
        return []
    return list(iter_events(_project(st).run_dir(st.run_id) / "events.jsonl"))


def _by_guard(e: dict[str, Any]) -> bool:
    """Written by the divergence guard (a detection or an action), asked of the registry as the events are read."""
    k = get_kind(kind_of(e))
    return k is not None and k.guard is not None


def _guard_line(e: dict[str, Any]) -> str:
    """What the guard did, in words, from its event: the spike it saw, the step it skipped, the rollback."""
    d, step = e.get("data", {}), e.get("step")
    drill = " (a drill)" if e.get("drill") else ""
    if is_kind(e, "divergence_detected"):
        return f"the guard saw a {d.get('metric') or 'loss'} spike at step {step}{drill}: {_spike_words(d)}"
    if is_kind(e, "step_skipped"):
        batch = f" (batch {d['batch_id']})" if d.get("batch_id") is not None else ""
        return f"the guard skipped step {step}: its update was never applied{batch}"
    if is_kind(e, "rollback"):
        lo_hi = d.get("batches_skipped") or []
        skipped = f"; batches {lo_hi[0]}–{lo_hi[1]} are skipped, never trained on" if len(lo_hi) == 2 else ""
        return (f"the guard rolled back from step {d.get('from_step')} to the checkpoint at step "
                f"{d.get('to_step', step)}{skipped}")
    if is_kind(e, "lr_scaled"):
        factor = f" (× {fmt_setting(d['factor'])})" if is_number(d.get("factor")) else ""
        return (f"the guard lowered the learning rate at step {step}: lr_scale {fmt_setting(d.get('old'))} → "
                f"{fmt_setting(d.get('new'))}{factor}")
    return f"the guard at step {step}: {d.get('reason')}"


def _spike_words(d: dict[str, Any]) -> str:
    """`loss 296 against its rolling median 3 (1,209σ)`, or the guard's own reason where the numbers are missing."""
    if d.get("nonfinite"):
        return f"{d.get('metric') or 'the loss'} was not finite"
    if not (is_number(d.get("value")) and is_number(d.get("baseline"))):
        return str(d.get("reason") or "no reason recorded")
    sigma = next((s.get("z") for s in d.get("signals") or [] if s.get("metric") == d.get("metric")), None)
    spread = f" ({fmt_int(sigma)}σ)" if is_number(sigma) else ""
    return f"{fmt_num(d['value'])} against its rolling median {fmt_num(d['baseline'])}{spread}"


def _change_line(e: dict[str, Any]) -> str:
    """A change of a hyperparameter in words: which, from what to what, who asked and why."""
    d, step = e.get("data", {}), e.get("step")
    if is_kind(e, "hparam_change_rejected"):
        return f"a change was refused at step {step}: {d.get('reason')}"
    how = "a live change (`logbook set`)" if d.get("source") == "live" else f"a change ({d.get('source')})"
    again = ", re-applied after a restart" if d.get("reapplied") else ""
    why = f": {_quoted(d['reason'])}" if d.get("reason") else ""
    return (f"{how} at step {step}{again}: {d.get('key')} {fmt_setting(d.get('old'))} → "
            f"{fmt_setting(d.get('new'))}, by {d.get('who') or 'unknown'}{why}")


def _quoted(text: Any) -> str:
    """A person's words in quotes, as they wrote them: “demo: gentler after the spike”."""
    return f"“{text}”"


def render(st: DemoState) -> None:
    """The dated chronicle, rendered once more from the final event log."""
    render_chronicle(_project(st))
    st.chronicle = sorted(_project(st).entries.glob("[0-9][0-9][0-9][0-9]/[0-9][0-9]/[0-9][0-9].md"))
    for path in st.chronicle:
        text = path.read_text("utf-8")
        st.restart_entry = st.restart_entry or _entry_with(text, "· restart")
        st.spike_entry = st.spike_entry or _entry_with(text, "· rollback")
        st.change_entry = st.change_entry or _entry_with(text, "· change")


def _entry_with(markdown: str, marker: str) -> list[str]:
    """The lines of the first `###` entry whose heading contains `marker`, without its id line."""
    lines = markdown.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("### ") and marker in line:
            out = [re.sub(r"<a id=[^>]*></a>", "", line[4:])]
            for nxt in lines[i + 1:]:
                if nxt.startswith(("### ", "id: ")):
                    break
                if nxt.strip():
                    out.append(nxt)
            return out
    return []


def score_and_report(st: DemoState) -> None:
    """`logbook outcome` scores the run; `logbook report` writes its retrospective as Markdown and PDF."""
    if st.result is None:
        return
    card = record_outcome(_project(st), st.result.run_id)
    if card.final and not card.already_recorded:
        card.warnings = rerender_days(_project(st), [card.computed_at[:10]])
    c = card.counts
    st.say(f"  outcome ({card.label.lower()}): {c['confirmed']} confirmed, {c['refuted']} refuted, "
           f"{c['inconclusive']} inconclusive, {plural(len(card.deviations), 'deviation')}")

    forecasts = summary_text(run_summary([p.to_dict() for p in card.predictions]))
    if forecasts:
        st.say(f"  {forecasts}")
    for fmt in ("md", "pdf"):
        st.say(f"  report: {write_report(_project(st), st.result.run_id, fmt=fmt).path}")


def verify(st: DemoState) -> None:
    """`logbook verify`: the preregistration and the run's event log are intact."""
    report = verify_project(_project(st))
    st.verify_ok = bool(report.ok)
    st.verify_lines = [p.message for p in report.problems]


def share(st: DemoState) -> None:
    """A teammate clones and runs `logbook init`; both write a note; `git pull` and `git push` meet no conflict."""
    team = st.root / TEAM_DIR
    origin, mate = team / "origin.git", team / "teammate"
    _git(st.root, "init", "-q", "--bare", "-b", "main", str(origin))
    commit_logbook(_project(st), "The demo's run")
    _git(st.root, "remote", "add", "origin", str(origin))
    _git(st.root, "push", "-q", "-u", "origin", "main")
    _git(st.root, "clone", "-q", str(origin), str(mate))
    _git(mate, "config", "user.name", "Demo Teammate")
    _git(mate, "config", "user.email", "teammate@logbook.invalid")
    done = init(start=mate).setup.done
    theirs = add_note(open_project(mate), "Read the chronicle on my clone: the rollback looks right.").id
    commit_logbook(open_project(mate))
    _git(mate, "push", "-q", "origin", "main")
    mine = add_note(_project(st), "Same day, another clone: no one coordinates note ids.").id
    commit_logbook(_project(st))
    _git(st.root, "pull", "-q", "--rebase", "origin", "main")  # the hook logbook init installed re-renders
    conflicts = [p for p in _git(st.root, "diff", "--name-only", "--diff-filter=U").splitlines() if p]
    commit_logbook(_project(st), "Re-rendered after the pull")  # the day file both notes landed on, if any
    _git(st.root, "push", "-q", "origin", "main")
    st.team_lines = [
        f"git clone {origin.name} && logbook init   # {plural(len(done), 'thing')} set up in the clone",
        f"logbook note ... (teammate: {theirs}) ; logbook note ... (you: {mine})",
        f"logbook commit ; git pull --rebase ; logbook commit ; git push   # {plural(len(conflicts), 'conflict')}",
    ]
    for line in st.team_lines:
        st.say(f"  {line}")


def site(st: DemoState) -> None:
    """`logbook site`: the whole logbook as static pages, from the commit the teammate's push left."""
    try:
        res = build_site(_project(st), st.root / SITE_DIR)
    except UsageError as e:  # the `site` extra is not installed: the demo stands without its pages
        st.site_note = f"not built: {e.message} ({e.hint})"
        st.say(f"  site {st.site_note}")
        return
    st.site = res.out / "index.html"
    st.say(f"  site: {len(res.pages)} pages in {res.out}")


def _project(st: DemoState) -> Project:
    if st.project is None:
        raise RefusedError("the demo's logbook is not set up yet")
    return st.project


STEPS: list[tuple[str, Callable[[DemoState], None]]] = [
    ("make a scratch git repository", make_repository),
    ("logbook init", init_logbook),
    ("copy the tiny config with a drill kill and two spikes", copy_config),
    ("preregister the hypothesis", preregister),
    ("train under torchrun (max 3 restarts); a live change after the first spike", train),
    ("score the outcome and write the report", score_and_report),
    ("render the chronicle", render),
    ("verify", verify),
    ("share it: a teammate clones, both write notes, pull and push", share),
    ("build the static site", site),
]


# --- running it ----------------------------------------------------------------------


def scratch_dir(path: Path | None) -> Path:
    """The folder for the demo: empty or absent, or an earlier demo (which is replaced)."""
    if path is None:
        return Path(tempfile.mkdtemp(prefix="logbook-demo-"))
    path = Path(path).expanduser().resolve()
    if path.exists() and not path.is_dir():
        raise UsageError(f"{path} is a file, not a folder")
    if path.is_dir() and any(path.iterdir()):
        if not (path / MARKER).exists():
            raise RefusedError(f"{path} is not empty and was not made by `logbook demo`",
                               hint="give an empty or new folder with --dir")
        shutil.rmtree(path)
    path.mkdir(parents=True, exist_ok=True)
    return path


def run_demo(where: Path | None = None, *, steps: int = DEFAULT_STEPS, nproc: int = 1, keep: bool = False,
             say: Say = lambda _m: None, console: Callable[[], Any] | None = None) -> DemoResult:
    """Run every step in a scratch folder (see `scratch_dir`); return what happened.

    `console` makes the training step's console (see `DemoState.console`).

    A temporary folder (no `where`) is removed at the end unless `keep`; a
    folder given as `where` is always kept. A step that raises leaves the
    folder in place, for a look at what went wrong.
    """
    if steps < 6:
        raise UsageError(f"--steps must be at least 6 (the drill needs checkpoints before and after it), got {steps}")
    if nproc < 1:
        raise UsageError(f"--nproc must be at least 1, got {nproc}")
    root = scratch_dir(where)
    keep = keep or where is not None
    say(f"Scratch repository: {root}" + ("" if keep else " (removed at the end; --keep keeps it)"))
    st = DemoState(root=root, steps=steps, nproc=nproc, say=say, console=console)
    t0 = time.monotonic()
    for i, (name, step) in enumerate(STEPS, start=1):
        say(f"[{i}/{len(STEPS)}] {name}")
        step(st)
    if not keep:
        shutil.rmtree(root, ignore_errors=True)
    if st.result is None or st.prereg_id is None:
        raise RefusedError("the demo ended before its run")
    return DemoResult(root=root, kept=keep, seconds=time.monotonic() - t0, run=st.result, prereg_id=st.prereg_id,
                      chronicle=st.chronicle, restart_entry=st.restart_entry, verify_ok=bool(st.verify_ok),
                      verify_lines=st.verify_lines, guard_lines=st.guard_lines, change_lines=st.change_lines,
                      spike_entry=st.spike_entry, change_entry=st.change_entry, live_change=st.live_change,
                      team_lines=st.team_lines, site=st.site if keep else None, site_note=st.site_note)
