"""Example files by name: `logbook run tiny-cpu`, `logbook prereg --from-file qknorm`.

A newcomer follows the README in a new repository, where neither the example
training configs nor the example preregistration exist. A bare name (no `/`,
no `.yaml`) that is not a file in the current directory means
`configs/NAME.yaml` (a training config) or `prereg/NAME.yaml` (a
preregistration) in the repository; when that is missing too and logbook ships
an example of that name, the example is copied there first and the copy is
said. The file then lives in the repository, where a run must find its config
to be reproducible from its commit, and where the user edits it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from logbook.core.bundled import bundled_dir
from logbook.core.errors import UsageError
from logbook.core.fsutil import atomic_create_bytes

KINDS = {"config": "configs", "prereg": "prereg"}
"""Kind of example -> the folder it lives in, in the repository and (under `configs/`) in the install."""


@dataclass(frozen=True)
class Resolved:
    """What a name given on the command line stands for."""

    path: Path
    """The file to read (absolute)."""
    copied: bool
    """True when this call copied logbook's example of that name into the repository."""


def is_bare_name(text: str) -> bool:
    """True for `tiny-cpu`, false for `tiny-cpu.yaml`, `configs/tiny-cpu.yaml` or `./x`."""
    return bool(text) and "/" not in text and "\\" not in text and not text.endswith((".yaml", ".yml")) \
        and text not in (".", "..")


def shipped(kind: str) -> dict[str, Path]:
    """name -> path of every example of `kind` that comes with the install."""
    folder = _shipped_dir(kind)
    return {p.stem: p for p in sorted(folder.glob("*.yaml"))} if folder.is_dir() else {}


def resolve(root: Path, text: str, kind: str, say: Callable[[str], None] | None = None) -> Resolved | None:
    """The file a bare name stands for, copying a shipped example into the repository if needed.

    Returns None when `text` is not a bare name or is an existing file (the
    caller reads it as a path). Raises UsageError for a bare name that is
    neither in the repository nor shipped.
    """
    if not is_bare_name(text) or Path(text).is_file():
        return None
    target = root / KINDS[kind] / f"{text}.yaml"
    if target.is_file():
        return Resolved(target, copied=False)
    examples = shipped(kind)
    if text not in examples:
        known = ", ".join(examples) or "none"
        raise UsageError(f"no {kind} named {text!r}: neither {target.relative_to(root)} nor an example of that name",
                         hint=f"give a path to a YAML file, or one of the examples: {known}")
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        atomic_create_bytes(target, examples[text].read_bytes())
    except FileExistsError:  # written by a concurrent call: the same bytes, use it
        return Resolved(target, copied=False)
    if say is not None:
        say(f"{target.relative_to(root)}: copied from logbook's example {text!r} (edit it, and commit it with your code)")
    return Resolved(target, copied=True)


def _shipped_dir(kind: str) -> Path:
    configs = bundled_dir("configs")
    return configs if kind == "config" else configs / KINDS[kind]
