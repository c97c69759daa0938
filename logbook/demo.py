"""`logbook demo`: a scratch logbook, a preregistration, and a real run with a drill kill.

The demo is a list of small named steps over one `DemoState`: make a git
repository, `logbook init`, copy the tiny config with a SIGKILL drill in it,
preregister a hypothesis about the run, train under torchrun with restarts,
verify, summarise. A later feature (a spike, a live change, the outcome, the
report) is one more step in `STEPS`.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import RefusedError, UsageError
from .launch import RunResult, launch_run
from .project import Project, open_project

DEFAULT_STEPS = 120
"""Training steps of the demo run: under a minute of training on 2 idle CPU cores."""
MARKER = ".logbook-demo"
"""A file that marks a folder as a demo scratch folder (safe to replace)."""
TINY_CONFIG = Path(__file__).resolve().parents[1] / "configs" / "tiny-cpu.yaml"

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
    project: Project | None = None
    config: Path | None = None
    kill_step: int = 0
    prereg_id: str | None = None
    result: RunResult | None = None
    chronicle: list[Path] = field(default_factory=list)
    restart_entry: list[str] = field(default_factory=list)
    verify_ok: bool | None = None
    verify_lines: list[str] = field(default_factory=list)


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

    def to_dict(self) -> dict[str, Any]:
        return {"root": str(self.root), "kept": self.kept, "seconds": round(self.seconds, 1),
                "run": self.run.to_dict(), "prereg_id": self.prereg_id,
                "chronicle": [str(p) for p in self.chronicle], "restart_entry": self.restart_entry,
                "verify_ok": self.verify_ok,
                "verify": self.verify_lines}


# --- the steps -----------------------------------------------------------------------


def _git(root: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=root, check=True, capture_output=True, text=True).stdout


def make_repository(st: DemoState) -> None:
    """A fresh git repository with one commit, as a researcher's project would be."""
    st.root.mkdir(parents=True, exist_ok=True)
    (st.root / MARKER).write_text("scratch folder made by `logbook demo`; safe to delete\n")
    _git(st.root, "init", "-q", "-b", "main")
    if not _git_identity(st.root):
        # A fresh machine may have no git identity; the scratch repository gets its own.
        _git(st.root, "config", "user.name", "Logbook Demo")
        _git(st.root, "config", "user.email", "demo@logbook.invalid")
    (st.root / "README.md").write_text("# A scratch research project made by `logbook demo`\n")
    (st.root / ".gitignore").write_text(f"{MARKER}\n")
    _git(st.root, "add", "README.md", ".gitignore")
    _git(st.root, "commit", "-q", "-m", "Start a research project")


def _git_identity(root: Path) -> bool:
    p = subprocess.run(["git", "config", "user.email"], cwd=root, capture_output=True, text=True)
    return bool(p.stdout.strip())


def init_logbook(st: DemoState) -> None:
    """`logbook init`, committed."""
    from .init import init_logbook as init

    init(start=st.root)
    _git(st.root, "add", "-A")
    _git(st.root, "commit", "-q", "-m", "Set up the logbook")
    st.project = open_project(st.root)


def copy_config(st: DemoState) -> None:
    """The tiny CPU config with a SIGKILL drill between two checkpoints, committed."""
    import yaml

    from .yamlsafe import load_yaml_file

    if not TINY_CONFIG.is_file():
        raise RefusedError(f"the tiny config is missing: {TINY_CONFIG}",
                           hint="run the demo from a source checkout (`python3 -m pip install -e '.[train]'`)")
    cfg = load_yaml_file(TINY_CONFIG, "tiny config") or {}
    every = max(2, st.steps // 6)
    st.kill_step = every + max(1, every // 2)
    cfg.setdefault("train", {})["steps"] = st.steps
    cfg["train"]["eval_every"] = max(1, st.steps // 3)
    cfg.setdefault("checkpoint", {})["every"] = every
    cfg["faults"] = [{"kind": "sigkill", "step": st.kill_step}]
    st.config = st.root / "configs" / "demo.yaml"
    st.config.parent.mkdir(parents=True, exist_ok=True)
    header = (f"# {TINY_CONFIG.name} for {st.steps} steps, checkpoints every {every}, and a drill:\n"
              f"# SIGKILL after step {st.kill_step}, so torchrun restarts the trainer once.\n")
    st.config.write_text(header + yaml.safe_dump(cfg, sort_keys=False))
    _git(st.root, "add", "configs/demo.yaml")
    _git(st.root, "commit", "-q", "-m", "Add the demo training config")


def preregister(st: DemoState) -> None:
    """A hypothesis, three predictions and a contingency rule, committed before the run."""
    from .prereg import PreregInput, create_prereg

    inp = PreregInput(
        title="Tiny GPT survives a node loss",
        hypothesis=("A 2-layer GPT trained on the Python standard library's source learns byte statistics "
                    "and resumes from its last checkpoint after a SIGKILL without diverging."),
        predictions=["val_loss@final < 3.0", "restarts@final <= 1", "spikes@final == 0"],
        contingency=["spike > 4σ twice within 50 steps -> rollback 10 steps, skip 10 batches, lr × 0.9"],
        config=str(st.config),
        budget=f"{st.steps} steps",
        rationale="The demo's drill kills the trainer once; torchrun restarts it and the trainer resumes.",
    )
    st.prereg_id = create_prereg(_project(st), inp).id


def train(st: DemoState) -> None:
    """The run: torchrun, up to 3 restarts, the trainer kills itself once (the drill)."""
    st.result = launch_run(_project(st), st.config, [], prereg_id=st.prereg_id, nproc=st.nproc,
                           max_restarts=3, say=st.say)


def render(st: DemoState) -> None:
    """The dated chronicle, rendered once more from the final event log."""
    from .chronicle import render_chronicle

    render_chronicle(_project(st))
    st.chronicle = sorted(_project(st).entries.glob("[0-9][0-9][0-9][0-9]/[0-9][0-9]/[0-9][0-9].md"))
    for path in st.chronicle:
        st.restart_entry = st.restart_entry or _entry_with(path.read_text("utf-8"), "· restart")


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
    from .outcome import record_outcome
    from .report import write_report

    if st.result is None:
        return
    card = record_outcome(_project(st), st.result.run_id)
    c = card.counts
    st.say(f"  outcome ({card.label.lower()}): {c['confirmed']} confirmed, {c['refuted']} refuted, "
           f"{c['inconclusive']} inconclusive, {len(card.deviations)} deviation(s)")
    for fmt in ("md", "pdf"):
        st.say(f"  report: {write_report(_project(st), st.result.run_id, fmt=fmt).path}")


def verify(st: DemoState) -> None:
    """`logbook verify`: the preregistration and the run's event log are intact."""
    from .verify import verify_project

    report = verify_project(_project(st))
    st.verify_ok = bool(report.ok)
    st.verify_lines = [p.message for p in report.problems]


def _project(st: DemoState) -> Project:
    if st.project is None:
        raise RefusedError("the demo's logbook is not set up yet")
    return st.project


STEPS: list[tuple[str, Callable[[DemoState], None]]] = [
    ("make a scratch git repository", make_repository),
    ("logbook init", init_logbook),
    ("copy the tiny config with a drill kill", copy_config),
    ("preregister the hypothesis", preregister),
    ("train under torchrun (max 3 restarts)", train),
    ("score the outcome and write the report", score_and_report),
    ("render the chronicle", render),
    ("verify", verify),
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
             say: Say = lambda _m: None) -> DemoResult:
    """Run every step in a scratch folder (see `scratch_dir`); return what happened.

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
    st = DemoState(root=root, steps=steps, nproc=nproc, say=say)
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
                      verify_lines=st.verify_lines)
