"""The runs of a logbook as `logbook ls --runs` lists them: one row per run, filtered as a person picks runs.

Every figure in a row is read from the run's `RunFacts` (logbook/runs/facts.py),
the one place run figures are computed, so the list agrees with `compare`,
`status`, the chronicle and the scorecard.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

from logbook.core.errors import NotFoundError, UsageError
from logbook.core.project import Project
from logbook.eventlog.kinds import run_states
from logbook.runs.facts import load_facts
from logbook.runs.run_record import all_run_ids, read_run_record


_AGO = re.compile(r"^(\d+)([hdw])$")
_UNIT = {"h": timedelta(hours=1), "d": timedelta(days=1), "w": timedelta(weeks=1)}


@dataclass
class RunRow:
    """One run, as the list shows it."""

    id: str
    """The run id, printed whole (it is what a person copies into the next command)."""
    state: str
    """running | finished | failed | aborted | preempted."""
    prereg: str | None
    """The preregistration it answers to; None for an exploratory run."""
    steps: int | None
    """The step the run stands at (its last step when it ended)."""
    total_steps: int | None
    """The steps it was launched to train."""
    final_loss: float | None
    """Training loss at `steps`, on the branch that counts (after rollbacks)."""
    restarts: int
    """Restarts recorded (re-applied live changes are not restarts)."""
    goodput: float | None
    """Productive time over wall time, 0..1; None before any wall time was recorded."""
    created: str
    """UTC time the run was launched."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def parse_since(text: str, now: datetime | None = None) -> datetime:
    """`2026-12-01`, `2026-12-01T09:00` (UTC unless it says otherwise), or an age: `12h`, `3d`, `2w`."""
    now = now or datetime.now(timezone.utc)
    m = _AGO.match(text.strip())
    if m:
        return now - int(m.group(1)) * _UNIT[m.group(2)]
    try:
        when = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise UsageError(f"--since {text!r} is neither a date nor an age",
                         hint="give a UTC date or time (2026-12-01, 2026-12-01T09:00) or an age (12h, 3d, 2w)") from None
    return when if when.tzinfo else when.replace(tzinfo=timezone.utc)


def _created_at(created: str) -> datetime | None:
    try:
        when = datetime.fromisoformat(created.replace("Z", "+00:00"))
    except (AttributeError, ValueError):
        return None
    return when if when.tzinfo else when.replace(tzinfo=timezone.utc)


def created_since(created: str, since: datetime | None) -> bool:
    """Whether a record created at `created` (ISO time) passes `--since` (None: no filter)."""
    if since is None:
        return True
    at = _created_at(created)
    return at is not None and at >= since


def run_row(project: Project, run_id: str) -> RunRow:
    """One run's row, from its record (who launched it, when, for which preregistration) and its facts."""
    rec = read_run_record(project, run_id)
    facts = load_facts(project, run_id, rec)
    at = facts.value_at_or_before("loss", facts.last_step) if facts.last_step is not None else None
    return RunRow(id=run_id, state=facts.state, prereg=rec.prereg_id, steps=facts.last_step,
                  total_steps=facts.total_steps, final_loss=at[1] if at else None,
                  restarts=facts.count("restarts"), goodput=facts.goodput().value, created=rec.created)


def list_runs(project: Project, *, state: str | None = None, prereg: str | None = None,
              since: datetime | None = None) -> list[RunRow]:
    """The runs that pass every filter given, oldest first.

    `prereg` is a preregistration id or a unique prefix of it (or of its title
    part), as everywhere else; `none` picks the exploratory runs.
    """
    states = run_states()  # what `--state` accepts: a run's state as its event log says (a `run_state` of the registry)
    if state is not None and state not in states:
        raise UsageError(f"--state {state!r} is no run state", hint=f"one of: {', '.join(states)}")
    wanted = _prereg_filter(project, prereg)
    rows = []
    for run_id in all_run_ids(project):
        rec = read_run_record(project, run_id)
        if prereg is not None and rec.prereg_id != wanted:
            continue
        if not created_since(rec.created, since):
            continue
        row = run_row(project, run_id)
        if state is None or row.state == state:
            rows.append(row)
    return sorted(rows, key=lambda r: (r.created, r.id))


def _prereg_filter(project: Project, prereg: str | None) -> str | None:
    """The preregistration id `--prereg` names (None for `none`: exploratory runs)."""
    if prereg is None or prereg == "none":
        return None
    from logbook.promises.prereg import resolve_prereg_id

    pid = resolve_prereg_id(project, prereg)
    if pid is None:
        raise NotFoundError(f"no preregistration called {prereg!r}", hint="see `logbook ls`; `--prereg none` "
                                                                          "lists the exploratory runs")
    return pid
