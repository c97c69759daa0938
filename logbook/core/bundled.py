"""Folders shipped with logbook (the templates and the example training configs), and its source for child processes.

In a source checkout (and an editable install) they sit at the top of the
repository, beside the package, where a team edits them. A wheel carries them
inside the package (`logbook/templates`, `logbook/configs`; see
pyproject.toml), found here through importlib.resources.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from importlib import resources
from pathlib import Path


def bundled_dir(name: str) -> Path:
    """The shipped folder `name` ("templates" or "configs")."""
    packaged = Path(str(resources.files("logbook"))) / name
    if packaged.is_dir():
        return packaged
    return Path(__file__).resolve().parents[2] / name


def with_own_source(env: Mapping[str, str]) -> dict[str, str]:
    """`env` with the folder holding this `logbook` first on PYTHONPATH: a child Python imports this same copy."""
    src = str(Path(__file__).resolve().parents[2])
    return {**env, "PYTHONPATH": os.pathsep.join(p for p in (src, env.get("PYTHONPATH", "")) if p)}


def safe_python(*args: str) -> list[str]:
    """The command line of a child Python that imports nothing from its working directory.

    `-P` (PYTHONSAFEPATH) keeps Python from putting the working directory, or
    the script's folder, first on `sys.path`: a `logbook/`, `trainer/` or
    `sitecustomize.py` committed to the repository the child runs in cannot
    shadow the installed packages. A repository is data to every command but
    the user's own `logbook run`.
    """
    return [sys.executable, "-P", *args]


def safe_env(env: Mapping[str, str]) -> dict[str, str]:
    """`with_own_source(env)` for a child that must not run the repository's code.

    Relative PYTHONPATH entries (an empty one means the working directory) are
    dropped, since they name folders of whatever repository the child runs in;
    PYTHONSAFEPATH is set so that any Python the child starts in turn is safe too.
    """
    kept = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and os.path.isabs(p)]
    out = with_own_source({**env, "PYTHONPATH": os.pathsep.join(kept)})
    out["PYTHONSAFEPATH"] = "1"
    return out
