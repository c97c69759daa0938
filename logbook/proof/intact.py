"""Commands that build on records refuse records that fail their check.

`render`, `outcome`, `report`, `calibration` and `review` read records and
logs to write something people will believe (a chronicle, a scorecard, a
retrospective). Each first runs `verify` (cheap once its history cache is warm)
and refuses, exit 4, naming the first record that fails, instead of building
on an edited scorecard, a truncated log or a file reached through a symlink.
Warnings (a torn last line, a record a remote has and HEAD lacks) do not stop
them.
"""

from __future__ import annotations

from logbook.core.errors import TamperedError
from logbook.core.project import Project
from logbook.proof.verify import verify_project


def require_intact(project: Project, command: str, *, run: str | None = None,
                   except_paths: frozenset[str] = frozenset()) -> None:
    """Raise TamperedError when a record `command` reads fails its check.

    With `run`, other runs' folders are out of scope: one run's damaged log
    does not stop scoring another. Everything else (preregistrations, notes,
    reviews) is read by every such command and always in scope. `except_paths`:
    files whose findings an acknowledgement under review names (reviewing it
    must not wait for itself).
    """
    report = verify_project(project)
    runs = f"{project.config.entries_dir.strip('/')}/runs/"
    mine = f"{runs}{run}/"
    problems = [p for p in report.problems if (run is None or not p.path.startswith(runs) or p.path.startswith(mine))
                and p.path not in except_paths]
    if problems:
        first = problems[0]
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise TamperedError(f"`logbook {command}` will not build on {first.path}, which fails its check: "
                            f"{first.message}{more}", hint=report.hint_for(first))
