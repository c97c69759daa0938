"""Folders shipped with logbook (the templates and the example training configs), and its source for child processes.

In a source checkout (and an editable install) they sit at the top of the
repository, beside the package, where a team edits them. A wheel carries them
inside the package (`logbook/templates`, `logbook/configs`; see
pyproject.toml), found here through importlib.resources.
"""

from __future__ import annotations

import os
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
