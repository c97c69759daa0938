"""What a command under `logbook run -- CMD` tells its launcher about an attempt, through one small file.

The launcher sees a wrapped command from outside: its exit and its output.
What only the command knows reaches it here, written by `logbook.api`'s `Run`
on rank 0 (`.logbook/attempts/RUN/ATTEMPT.json`, outside git, rewritten
atomically):

- `world_size`: torchrun's WORLD_SIZE as the process saw it;
- `resumed_from_step`: the checkpoint step the attempt resumed from
  (`Run.resumed(step)`, which the HF and Lightning callbacks call with the
  step the framework restored);
- `first_step`, `first_step_at`: the attempt's first logged step and when;
- `first_event_at`: when it was about to write its first event.

The launcher writes the attempt's `restart` and `run_started` once any of
these arrives (the step it resumed from is known by then), and then leaves
`ATTEMPT.started` beside the file; a process about to write its first event
waits for that mark (`wait_for_start`), so the start comes first in the log.

A command that does not use the API can tell the resume step on its output
instead, with a line `logbook: resumed from step N` (`RESUMED_LINE`). Where
neither says, the resume step is unknown: never guessed from the first step
printed. The file is data from another process: every value is checked for
its type when read, and anything else is ignored.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

from logbook.core.fsutil import atomic_write_json

RESUMED_LINE = re.compile(r"^\s*logbook: resumed from step (\d+)\s*$")
"""The output line a wrapped script prints to say which step it resumed from."""

_INT_FIELDS = ("world_size", "resumed_from_step", "first_step", "closed_at_step", "total_steps")
START_WAIT_S = 30.0
"""How long a launched process waits for its start to be written before it writes its first event anyway."""


def handshake_path(state_dir: Path, run_id: str, attempt: int) -> Path:
    """The file attempt `attempt` of run `run_id` tells its launcher through."""
    return Path(state_dir) / "attempts" / run_id / f"{int(attempt)}.json"


def read_handshake(path: Path) -> dict[str, Any]:
    """What the command said, checked: {world_size, resumed_from_step, first_step, closed_at_step, total_steps:
    int >= 0, first_step_at, first_event_at: float}."""
    try:
        raw = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError, UnicodeDecodeError):
        return {}
    if not isinstance(raw, dict):
        return {}
    out: dict[str, Any] = {k: raw[k] for k in _INT_FIELDS
                           if isinstance(raw.get(k), int) and not isinstance(raw[k], bool) and raw[k] >= 0}
    for key in ("first_step_at", "first_event_at"):
        at = raw.get(key)
        if isinstance(at, (int, float)) and not isinstance(at, bool) and at > 0:
            out[key] = float(at)
    return out


def started_mark(path: Path) -> Path:
    """The mark the launcher leaves once the attempt's start is in the log."""
    return Path(path).with_suffix(".started")


def mark_started(path: Path) -> None:
    mark = started_mark(path)
    mark.parent.mkdir(parents=True, exist_ok=True)
    mark.touch()


def wait_for_start(path: Path, timeout_s: float = START_WAIT_S) -> bool:
    """Wait until the launcher has written the attempt's start; False if it did not within `timeout_s`."""
    mark, deadline = started_mark(path), time.monotonic() + timeout_s
    while not mark.exists():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def tell_launcher(path: Path, **fields: Any) -> None:
    """Add `fields` to what the attempt has told its launcher (a field said once is not said again)."""
    known = read_handshake(path)
    new = {k: v for k, v in fields.items() if v is not None and k not in known}
    if new:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        atomic_write_json(path, {**known, **new})
