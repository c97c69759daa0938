"""Typed errors. Library code raises these; only the CLI turns them into exit codes.

Exit codes (documented in the README and in `logbook --help`):

- 0: success
- 1: internal error (a bug: please report it)
- 2: usage: bad arguments, bad input syntax, unknown names
- 3: refused: the request is well formed but cannot be honoured in this state
- 4: tampered: a verification found a record that was changed after it was written
- 5: the training run failed or was aborted
- 75: preempted: the run saved its state and stopped; resuming it continues (a Slurm job requeues on it)
- 130: interrupted (Ctrl-C)

The trainer process exits with 75 when it saved and stopped on a signal, and
with 124 (EXIT_HANG, as timeout(1) does) when its watchdog saw no progress;
torchrun restarts it on either. Its 5 (the guard aborted the run) is final:
the agent (trainer/launch/agent.py) stops instead of restarting, and exits 5 itself.
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_INTERNAL = 1
EXIT_USAGE = 2
EXIT_REFUSED = 3
EXIT_TAMPERED = 4
EXIT_RUN_FAILED = 5
EXIT_PREEMPTED = 75  # EX_TEMPFAIL in sysexits.h: try again later
EXIT_HANG = 124  # the trainer only: never an exit code of `logbook`
EXIT_INTERRUPTED = 130


class LogbookError(Exception):
    """Base class: a message for a person, an exit code, and an optional hint."""

    exit_code = EXIT_INTERNAL

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return self.message


class UsageError(LogbookError):
    """Bad arguments or input that does not parse."""

    exit_code = EXIT_USAGE


class RefusedError(LogbookError):
    """A well-formed request that the current state does not allow."""

    exit_code = EXIT_REFUSED


class NotFoundError(RefusedError):
    """An id, run or file that does not exist."""


class TamperedError(LogbookError):
    """A record no longer matches what was written and committed."""

    exit_code = EXIT_TAMPERED


class RunFailedError(LogbookError):
    """The training run ended in failure or was aborted."""

    exit_code = EXIT_RUN_FAILED


def did_you_mean(word: str, choices: list[str], otherwise: str, *, prefix: str = "", cutoff: float = 0.6) -> str:
    """A hint for an unknown name: the closest valid one if there is one, else `otherwise`."""
    import difflib  # only on the error path: keeps start-up light

    close = difflib.get_close_matches(str(word), choices, n=1, cutoff=cutoff)
    return f"did you mean `{prefix}{close[0]}`?" if close else otherwise
