"""What `logbook run` shows while it runs: start-up phases, one live progress line, the events that matter.

At a terminal (stderr a TTY, no `CI`, not under Slurm, `TERM` not `dumb`): a
rich spinner names each start-up phase from the first moment, then a single
progress line (step, loss, tokens/s, ETA, attempt) redrawn in place, with each
event a person wants printed above it as its one-line summary from the event
registry as it happens. Anywhere else (a pipe, CI, a batch job): the same
phases, summaries and progress as plain lines, no control codes, progress at
most every `PLAIN_PROGRESS_EVERY_S`. torchrun's own output goes to its log
file only (see `logbook.launch.watch.StderrPump`); the trainer's `error:` and
`hint:` lines still come through.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any

PLAIN_PROGRESS_EVERY_S = 10.0
"""Least seconds between two plain progress lines (a log file need not hold every step)."""
SHOWN_ROUTINE = frozenset({"checkpoint_saved"})
"""Routine kinds the run's own console still shows (a person watching a run wants to see it save)."""


def interactive() -> bool:
    """True when a person is watching stderr in a terminal that can redraw a line."""
    return (sys.stderr.isatty() and not os.environ.get("CI") and not os.environ.get("SLURM_JOB_ID")
            and os.environ.get("TERM", "") != "dumb")


class RunConsole:
    """The terminal of one `logbook run`: `phase`, `say`, and `tick` (the launcher's watch loop) feed it."""

    def __init__(self, live: bool | None = None) -> None:
        self.live = interactive() if live is None else live
        self._status: Any = None
        self._tails: Any = None
        self._total: int | None = None
        self._said_progress_at = 0.0
        self._last_step: int | None = None
        if self.live:
            from rich.console import Console

            from logbook.cli._app import color_system

            self._console = Console(stderr=True, highlight=False, color_system=color_system())
            self._status = self._console.status("starting", spinner="dots")
            self._status.start()

    def phase(self, text: str) -> None:
        """A start-up phase: the spinner's text at a terminal, a plain line elsewhere."""
        if self._status is not None:
            self._status.update(text)
        else:
            self.say(f"{text} ...")

    def say(self, line: str, wrapped: bool = False) -> None:
        """One line above the live line (or a plain line), wrapped at spaces to the terminal (never mid-word)."""
        from logbook.cli.console_cmd import stderr_width, wrap_said

        if not wrapped:
            line = wrap_said(line, stderr_width())
        if self.live:
            self._console.print(line, markup=False, highlight=False, soft_wrap=True)
        else:
            print(line, file=sys.stderr, flush=True)

    def tick(self, project: Any, run_id: str, new_events: list[dict[str, Any]]) -> None:
        """New events of the run as their summaries, then the progress line from the metrics stream."""
        from logbook.launch.follow import progress_of, total_steps_of
        from logbook.launch.watch import EventTail
        from logbook.eventlog.kinds import is_kind
        from logbook.runs.status import event_line, follow_files, is_quiet

        if self._tails is None:
            self._tails = EventTail(follow_files(project, run_id)[1], from_end=True)
        self._total = total_steps_of(new_events) or self._total
        for rec in new_events:
            if is_kind(rec, "run_started") and self._last_step is None:
                self.phase(f"attempt {rec.get('attempt')}: loading data and model, waiting for the first step")
            if not is_quiet(rec) or is_kind(rec, *SHOWN_ROUTINE) or rec.get("drill") is True:
                self.say(_event_text(event_line(rec)), wrapped=True)
        rows = [r for r in self._tails.new() if isinstance(r.get("step"), int) and "loss" in r]
        if rows:
            self._show_progress(progress_of(rows[-1], self._total))

    def _show_progress(self, p: Any) -> None:
        from logbook.cli.console_cmd import progress_text

        self._last_step = p.step
        text = progress_text(p)
        if self._status is not None:
            self._status.update(text)
        elif time.monotonic() - self._said_progress_at >= PLAIN_PROGRESS_EVERY_S:
            self._said_progress_at = time.monotonic()
            self.say(text)

    def close(self) -> None:
        """Stop the live line (before the run's summary is printed)."""
        if self._status is not None:
            self._status.stop()
            self._status = None


def _event_text(ev: Any) -> str:
    """The event's line, wrapped under its summary at the terminal's width (a pipe or a log gets one line)."""
    from logbook.cli.console_cmd import event_text, stderr_width

    return event_text(ev, stderr_width())
