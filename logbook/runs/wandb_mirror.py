"""Weights & Biases, optional: one W&B run per logical run, mirrored from the logbook.

The logbook stays the source of truth; W&B is a view of it. Everything here
is best effort: when wandb is missing, or any call into it fails, one warning
line is said, the mirror turns itself off, and training goes on.

- One W&B run per logbook run: its id is derived from the run id, and every
  attempt resumes it (`resume="allow"`), so restarts do not scatter a run.
- Replayed steps are kept. W&B drops rows whose step is lower than one it has
  seen, which is exactly what a restart or a rollback produces. So rows carry
  their own x-axis, `train/step` (every `train/*`, `val/*` and `events/*` key
  is plotted against it), and the W&B step is a private counter that only
  grows: it lives in `.logbook/wandb/<run>.json` across attempts, together
  with how far the event log has been mirrored.
- Events are mirrored from the run's event log (whoever wrote them): a count
  per kind against `train/step`, a table of this attempt's events at its end,
  and W&B alerts for the kinds the registry marks (`Kind.alert`: restarts,
  rollbacks, divergences, hangs and failures). All of it works offline and is
  uploaded by `wandb sync`.
- The W&B run's id, path and mode go into the event log once, as a
  `wandb_run` event, so the chronicle can link to it.

`WandbMirror` knows nothing of the loop that drives it: a training loop (the
bundled trainer's `WandbSink` callback) hands it plain numbers on its writing
rank, and hands it the `wandb` package too: the logbook never imports wandb
itself, and the loop's own import, made when the mirror starts, is guarded
like every other call into W&B.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from logbook.core.textfmt import is_number
from logbook.core.typedconfig import check_choice, check_config, check_positive
from logbook.eventlog.kinds import get_kind, is_kind, kind_of
from logbook.runs.goodput import goodput_of_run

MODES = ("offline", "online")
_STATE_BYTES = 4096
_MAX_ID = 64


@dataclass
class WandbConfig:
    """Mirroring the run into Weights & Biases."""

    enabled: bool = False
    """Log to W&B at all (needs the `wandb` package; training goes on without it)."""
    mode: str = "offline"
    """offline (files only, upload later with `wandb sync`) | online."""
    project: str = "logbook"
    """W&B project."""
    entity: str | None = None
    """W&B entity (user or team); None uses the account's default."""
    dir: str | None = None
    """Where W&B writes its files; default .logbook/wandb in the project (never committed). Relative to the project root."""
    init_timeout_s: float = 60.0
    """Give up starting W&B after this many seconds (then train without it)."""
    alerts: bool = True
    """Raise W&B alerts for restarts, rollbacks, divergences, hangs and failures."""

    def validate(self, where: str) -> None:
        check_choice(self, where, "mode", MODES)
        check_config(bool(self.project) and "/" not in self.project, f"{where}.project",
                     f"must be a non-empty name without '/', got {self.project!r}")
        check_positive(self, where, "init_timeout_s")


def wandb_run_id(run_id: str) -> str:
    """The W&B run id of a logbook run: the same on every attempt, within W&B's rules."""
    safe = re.sub(r"[^A-Za-z0-9._-]", "-", run_id)
    if safe == run_id and len(safe) <= _MAX_ID:
        return safe
    digest = hashlib.sha256(run_id.encode("utf-8")).hexdigest()[:8]
    return f"{safe[: _MAX_ID - 9]}-{digest}"


class MirrorState:
    """The counter and mirror position that must outlive an attempt.

    Rewritten in place after every log (one `pwrite` of a fixed-size record,
    no fsync), like the heartbeat: a killed process's writes survive in the
    page cache, and the cost is microseconds.
    """

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._fd: int | None = None

    def read(self) -> dict[str, Any]:
        try:
            data = json.loads(self.path.read_bytes().strip() or b"{}")
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    def write(self, state: dict[str, Any]) -> None:
        if self._fd is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o666)
        raw = json.dumps(state, sort_keys=True).encode("utf-8")
        if len(raw) > _STATE_BYTES:  # too many kinds to count: keep the counter and the position
            raw = json.dumps({k: state[k] for k in ("id", "counter", "offset")}).encode("utf-8")
        os.pwrite(self._fd, raw.ljust(_STATE_BYTES), 0)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def _summary(event: dict[str, Any]) -> str:
    d = event.get("data") if isinstance(event.get("data"), dict) else {}
    for key in ("detail", "reason", "exception_message"):
        if isinstance(d.get(key), str) and d[key]:
            return d[key][:500]
    if is_kind(event, "rollback"):
        return f"rolled back from step {d.get('from_step')} to {d.get('to_step')}"
    return json.dumps(d, sort_keys=True, default=str)[:500]


class WandbMirror:
    """One attempt's mirror of a logbook run into its W&B run: `start`, `log_step` at each log step, `finish`.

    Every public method is guarded: the first failure of wandb (missing,
    refusing to start, failing to log) says one line, turns the mirror off
    (`run` None, `disabled_reason` set) and returns; nothing it does raises.
    """

    def __init__(self, cfg: WandbConfig, *, root: Path, state_dir: Path, run_id: str, run_dir: Path,
                 config: dict[str, Any], emit: Callable[..., Any], say: Callable[[str], None],
                 load_wandb: Callable[[], Any]) -> None:
        """`root`, `state_dir`: the project's; `config`: what the W&B run records as its config; `emit(kind,
        **fields)` writes the `wandb_run` event; `say(line)` reports that the mirror turned itself off."""
        self.cfg = cfg
        self.root, self.run_id, self.run_dir = Path(root), run_id, Path(run_dir)
        self.config, self.emit, self.say = config, emit, say
        self.run = None
        self.disabled_reason: str | None = None
        self.counter = 0
        self.offset = 0
        self.counts: dict[str, int] = {}
        self._state_dir = Path(state_dir)
        self._state = MirrorState(self._state_dir / "wandb" / f"{run_id}.json")
        self._table: list[list[Any]] = []
        self._last_val: tuple[int, float] | None = None
        self._last_step = 0
        self._load_wandb = load_wandb
        """Returns the `wandb` package (the loop imports it); raising turns the mirror off, as any failure does."""
        self.wandb: Any = None

    # --- the loop's calls: each one guarded ------------------------------------------

    def start(self) -> None:
        """Start (or resume) the run's W&B run and mirror the events logged so far."""
        self._guarded(self._start)

    def log_step(self, step: int, attempt: int, metrics: dict[str, Any], val: tuple[int, float] | None) -> None:
        """One log step's numeric `metrics` as `train/*`, the latest validation `(step, loss)` when new, new events."""
        self._last_step = step
        if self.run is not None:
            self._guarded(self._log_step, step, attempt, metrics, val)

    def finish(self, step: int, val: tuple[int, float] | None, *, failing: bool) -> None:
        """End this attempt's W&B run at `step` (exit code 1 when `failing`): last events, their table, goodput."""
        self._last_step = step
        if self.run is not None:
            self._guarded(self._finish, val, failing)
        self._state.close()

    def _guarded(self, fn, *args) -> None:
        try:
            fn(*args)
        except Exception as e:  # wandb is an observer: its failure must never end training
            self._disable(f"{type(e).__name__}: {e}")

    def _disable(self, reason: str) -> None:
        self.disabled_reason = reason
        self.run = None
        self.say(f"wandb: disabled for this attempt ({reason.strip().splitlines()[0][:300]}); training goes on")

    # --- starting -------------------------------------------------------------------

    def _start(self) -> None:
        self.wandb = wandb = self._load_wandb()  # optional: missing or broken means no W&B, not no training
        wid = wandb_run_id(self.run_id)
        saved = self._state.read()
        resumed = saved.get("id") == wid
        directory = self._directory()
        run = wandb.init(
            project=self.cfg.project, entity=self.cfg.entity, id=wid, name=self.run_id, resume="allow",
            mode=self.cfg.mode, dir=str(directory), config=self.config, reinit="finish_previous",
            settings=wandb.Settings(silent=True, console="off", init_timeout=self.cfg.init_timeout_s),
        )
        self.run = run
        run.define_metric("train/step")
        for prefix in ("train/*", "val/*", "events/*"):
            run.define_metric(prefix, step_metric="train/step")
        self.counter = max(int(saved.get("counter", -1)) + 1 if resumed else 0, int(run.step or 0))
        self.offset = int(saved.get("offset", 0)) if resumed else 0
        self.counts = dict(saved.get("counts", {})) if resumed else {}
        self._announce(run, directory)
        self._mirror_events()
        self._save_state()

    def _directory(self) -> Path:
        d = Path(self.cfg.dir) if self.cfg.dir else self._state_dir / "wandb"
        d = d if d.is_absolute() else self.root / d
        d.mkdir(parents=True, exist_ok=True)
        return d

    def _announce(self, run, directory: Path) -> None:
        """Write `wandb_run` once per W&B run id and mode (not on every attempt)."""
        path = self.run_dir / "events.jsonl"
        if path.exists():
            for line in path.read_bytes().splitlines():
                if b'"wandb_run"' in line:
                    try:
                        d = json.loads(line).get("data", {})
                    except ValueError:
                        continue
                    if d.get("id") == run.id and d.get("mode") == self.cfg.mode:
                        return
        url = run.url if self.cfg.mode == "online" else None  # offline runs have no URL until synced
        self.emit("wandb_run", id=run.id, path=str(run.path), project=run.project, entity=run.entity or None,
                  mode=self.cfg.mode, dir=str(directory), url=url)

    # --- logging --------------------------------------------------------------------

    def _log(self, row: dict[str, Any]) -> None:
        self.run.log(row, step=self.counter)
        self.counter += 1

    def _log_step(self, step: int, attempt: int, metrics: dict[str, Any], val: tuple[int, float] | None) -> None:
        row: dict[str, Any] = {"train/step": step, "train/attempt": attempt}
        row.update({f"train/{k}": v for k, v in metrics.items() if k != "step" and is_number(v)})
        self._log(row)
        self._log_val(val)
        self._mirror_events()
        self._save_state()

    def _log_val(self, val: tuple[int, float] | None) -> None:
        if val is not None and val != self._last_val:
            self._last_val = val
            self._log({"train/step": val[0], "val/loss": val[1]})

    def _mirror_events(self) -> None:
        """Events appended to the run's log since the last look (complete lines only)."""
        path = self.run_dir / "events.jsonl"
        try:
            size = path.stat().st_size
        except FileNotFoundError:
            return
        if size <= self.offset:
            return
        with open(path, "rb") as f:
            f.seek(self.offset)
            chunk = f.read(size - self.offset)
        end = chunk.rfind(b"\n") + 1
        self.offset += end
        for line in chunk[:end].splitlines():
            try:
                event = json.loads(line)
            except ValueError:
                continue  # a torn or repaired line, or a position that was not a line start
            if isinstance(event, dict) and kind_of(event) is not None:
                self._mirror(event)

    def _mirror(self, e: dict[str, Any]) -> None:
        kind = kind_of(e)
        self.counts[kind] = self.counts.get(kind, 0) + 1
        step = e.get("step") if isinstance(e.get("step"), int) else self._last_step
        self._log({"train/step": step, f"events/{kind}": self.counts[kind]})
        self._table.append([e.get("ts"), e.get("attempt"), step, kind, bool(e.get("drill")), _summary(e)])
        schema = get_kind(kind)  # asked per event: a kind registered after import alerts too
        if self.cfg.alerts and schema is not None and schema.alert:
            level = getattr(self.wandb.AlertLevel, schema.alert)
            self.run.alert(title=f"{self.run_id}: {kind} at step {step}", text=_summary(e), level=level,
                           wait_duration=0)

    def _save_state(self) -> None:
        self._state.write({"id": self.run.id, "counter": self.counter - 1, "offset": self.offset, "counts": self.counts})

    # --- ending ---------------------------------------------------------------------

    def _finish(self, val: tuple[int, float] | None, failing: bool) -> None:
        self._log_val(val)
        self._mirror_events()
        if self._table:
            table = self.wandb.Table(columns=["ts", "attempt", "step", "kind", "drill", "detail"], data=self._table)
            self._log({"train/step": self._last_step, "events/table": table})
        self._summarise()
        self._save_state()
        run, self.run = self.run, None
        run.finish(exit_code=1 if failing else 0)

    def _summarise(self) -> None:
        """Goodput so far into the W&B summary (the logbook's own figure, from its logs)."""
        rep = goodput_of_run(self.run_dir)
        if rep.goodput is not None:
            self.run.summary.update({"goodput": rep.goodput, **{f"badput/{k}": v for k, v in rep.fractions().items()
                                                              if k != "productive_s"}})
