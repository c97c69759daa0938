"""A scratch logbook for tests and benchmarks that train for real: a git repository, the trainer as a subprocess.

`Lab` makes the repository (git init, a first commit, `logbook init`), keeps
the environment its processes run in (this source tree on PYTHONPATH, a
private HOME and git identity) and reads what a run left behind: events,
heartbeat, metrics, checkpoints. Used by the chaos and fault-matrix harnesses.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from logbook.eventlog.runlog import iter_events  # noqa: E402
from logbook.eventlog.sink import read_metrics  # noqa: E402


def run_config(steps: int = 60, every: int = 2) -> dict[str, Any]:
    """A two-layer GPT whose steps take a few milliseconds, saved in the background every `every` steps."""
    return {
        "model": {"n_layer": 2, "n_head": 2, "n_embd": 64, "block_size": 64},
        "data": {"sources": [{"name": "stdlib", "kind": "stdlib", "max_mb": 0.3}]},
        "train": {"steps": steps, "batch_size": 8, "eval_every": 0, "eval_batches": 1, "threads": 1, "log_every": 1},
        "checkpoint": {"every": every, "keep": 2, "background": True},
    }


class Lab:
    """A scratch git repository with a logbook, and the environment every process of it runs in."""

    def __init__(self, root: Path, home: Path) -> None:
        self.root = root
        self.home = home
        self.env = {**os.environ, "PYTHONPATH": str(ROOT), "HOME": str(home), "CI": "true",
                    "GIT_CONFIG_GLOBAL": str(home / ".gitconfig"), "GIT_CONFIG_NOSYSTEM": "1"}
        for key in ("TORCHELASTIC_ERROR_FILE", "TORCHELASTIC_RESTART_COUNT", "LOGBOOK_DEBUG", "WORLD_SIZE", "RANK"):
            self.env.pop(key, None)

    @classmethod
    def create(cls, base: Path) -> Lab:
        root, home = base / "repo", base / "home"
        root.mkdir(parents=True)
        home.mkdir(parents=True)
        (home / ".gitconfig").write_text("[user]\n\tname = Ada Tester\n\temail = ada@example.org\n")
        lab = cls(root, home)
        for args in (["init", "-q", "-b", "main"], ["commit", "-q", "--allow-empty", "-m", "initial"]):
            subprocess.run(["git", *args], cwd=root, env=lab.env, check=True)
        res = lab.logbook("init")
        assert res.returncode == 0, res.stderr
        return lab

    def write_config(self, name: str, cfg: dict[str, Any]) -> Path:
        path = self.root / "configs" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(yaml.safe_dump(cfg, sort_keys=False))
        return path

    # processes

    def trainer_command(self, run: str, config: Path, *overrides: str) -> list[str]:
        return [sys.executable, "-m", "trainer", "--project", str(self.root), "--run", run, str(config), *overrides]

    def start(self, argv: list[str], **kw: Any) -> subprocess.Popen:
        return subprocess.Popen(argv, cwd=self.root, env=kw.pop("env", self.env), stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, text=True, **kw)

    def train(self, run: str, config: Path, *overrides: str, timeout: float = 300) -> subprocess.CompletedProcess:
        return subprocess.run(self.trainer_command(run, config, *overrides), cwd=self.root, env=self.env,
                              capture_output=True, text=True, timeout=timeout)

    def logbook(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "logbook", *args], cwd=self.root, env=self.env,
                              capture_output=True, text=True, timeout=timeout)

    # what a run left behind

    def run_dir(self, run: str) -> Path:
        return self.root / "entries" / "runs" / run

    def events_path(self, run: str) -> Path:
        return self.run_dir(run) / "events.jsonl"

    def events(self, run: str) -> list[dict[str, Any]]:
        return list(iter_events(self.events_path(run)))

    def ckpt_dir(self, run: str) -> Path:
        return self.root / ".logbook" / "checkpoints" / run

    def control_dir(self, run: str) -> Path:
        return self.root / ".logbook" / "control" / run

    def heartbeat(self, run: str) -> dict[str, Any]:
        try:
            beat = json.loads((self.root / ".logbook" / "heartbeat" / f"{run}.json").read_bytes().strip() or b"{}")
        except (OSError, ValueError):
            return {}
        return beat if isinstance(beat, dict) else {}

    def last_attempt(self, run: str) -> int:
        """The highest attempt number the run has left a trace of (events or heartbeat)."""
        seen = [e.get("attempt") for e in self.events(run) if isinstance(e.get("attempt"), int)]
        beat = self.heartbeat(run).get("attempt")
        return max([*seen, beat if isinstance(beat, int) else 0], default=0)

    def losses(self, run: str) -> dict[int, float]:
        """Each step's training loss; a step recomputed by a later attempt keeps its latest value."""
        return {r["step"]: r["loss"] for r in read_metrics(self.run_dir(run)) if "loss" in r}

    def final_weights(self, run: str, step: int):
        from trainer.checkpoints.checkpoint_dcp import read_model  # either format: DCP where more than one rank saved

        return read_model(self.ckpt_dir(run) / f"step_{step:06d}")


def complete_checkpoints(ckpt_dir: Path) -> dict[int, str]:
    """step -> "ok" or the reason it fails its manifest, for every folder with a COMPLETE marker."""
    from trainer.checkpoints.checkpoint import CorruptCheckpoint, list_checkpoints, verify_checkpoint

    out = {}
    for step, path in list_checkpoints(ckpt_dir):
        try:
            verify_checkpoint(path)
            out[step] = "ok"
        except CorruptCheckpoint as e:
            out[step] = str(e)
    return out


def wait_until(proc: subprocess.Popen, cond: Callable[[], bool], timeout: float, poll: float = 0.001) -> bool:
    """Poll `cond` while `proc` lives; True as soon as it holds."""
    deadline = time.monotonic() + timeout
    while proc.poll() is None and time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(poll)
    return False
