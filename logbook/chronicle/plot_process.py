"""A progress plot drawn in a process of its own, so training never pays for matplotlib.

A thread would not do: drawing is Python through and through, and every
millisecond of it holds the interpreter lock the training loop needs. On the
tiny CPU config a plot drawn beside the loop took 95 ms of the loop's time
(343 ms for the first, which imports matplotlib). A child process draws it on
another core, at a lower priority, and the loop only pays for starting it.

    python -m logbook.chronicle.plot_process '{"root": ..., "run": ..., "step": ..., "out": ...}'
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from logbook.core.bundled import with_own_source
from logbook.core.project import Project


def spawn_progress_plot(project: Project, run_id: str, upto_step: int, out_path: Path, *,
                        upto_seq: int | None = None, max_attempt: int | None = None) -> subprocess.Popen:
    """Start drawing `write_progress_plot(...)` in a child process; returns it (wait on it to be sure it is there)."""
    args = {"root": str(project.root), "run": run_id, "step": int(upto_step), "out": str(out_path),
            "upto_seq": upto_seq, "max_attempt": max_attempt}
    return subprocess.Popen([sys.executable, "-m", "logbook.chronicle.plot_process", json.dumps(args)],
                            env=with_own_source(os.environ), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)


def main(argv: list[str] | None = None) -> int:
    """Draw the plot that `spawn_progress_plot` describes; 0 when it is written."""
    from logbook.chronicle.plots import write_progress_plot
    from logbook.core.project import open_project

    try:
        os.nice(10)  # a nicety: it yields to training on a busy machine
    except OSError:
        pass
    args = json.loads((sys.argv[1:] if argv is None else argv)[0])
    project = open_project(Path(args["root"]), require_config=False)
    write_progress_plot(project, args["run"], args["step"], Path(args["out"]),
                        upto_seq=args["upto_seq"], max_attempt=args["max_attempt"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
