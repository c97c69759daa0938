"""YAML loading that refuses what a config file never needs: aliases, duplicate keys, huge input.

Anchors and aliases are how "billion laughs" bombs are built, and no logbook or
trainer file needs them, so they are refused outright rather than expanded.
A key written twice in one mapping is refused too: YAML's loaders keep the last
one silently, so a second `predictions:` list would drop the first.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from logbook.core.bundled import bundled_dir
from logbook.core.errors import UsageError

MAX_YAML_BYTES = 4 * 1024 * 1024


class _NoDuplicateKeys:
    """A loader mixin that raises on a key written twice in one mapping."""

    def construct_mapping(self, node, deep=False):  # type: ignore[no-untyped-def]
        if isinstance(node, yaml.MappingNode):
            seen: dict[Any, int] = {}
            for key_node, _ in node.value:
                if not isinstance(key_node, yaml.ScalarNode):
                    continue
                key = self.construct_object(key_node, deep=True)  # type: ignore[attr-defined]
                line = key_node.start_mark.line + 1
                if key in seen:
                    raise UsageError(f"duplicate key {key!r} on lines {seen[key]} and {line}",
                                     hint="each key may appear once in a mapping; merge the two entries")
                seen[key] = line
        return super().construct_mapping(node, deep=deep)  # type: ignore[misc]


class _NoAliasLoader(_NoDuplicateKeys, yaml.SafeLoader):
    """SafeLoader that raises on the first alias (`*name`)."""

    def compose_node(self, parent, index):  # type: ignore[override]
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            mark = event.start_mark
            raise UsageError(
                f"YAML aliases are not allowed (line {mark.line + 1}, column {mark.column + 1})",
                hint="write the value out in full instead of using &anchor / *alias",
            )
        return super().compose_node(parent, index)


# libyaml's parser, where PyYAML was built with it: about 7x faster, which is most of what `verify` spends
# reading a lab's preregistrations. Its composer is C and cannot refuse an alias as it meets one, so it reads
# only text in which no alias can be written (no `*`), with no tab (libyaml takes `a:<tab>b`, PyYAML refuses it)
# and no character PyYAML's reader refuses; anything else, and any error, goes to the loader above, whose answer
# it has always been.
_FastLoader = type("_FastLoader", (_NoDuplicateKeys, yaml.CSafeLoader), {}) if yaml.__with_libyaml__ else None
_NOT_FOR_LIBYAML = re.compile("[*\t]|" + yaml.reader.Reader.NON_PRINTABLE.pattern)


def load_yaml_text(text: str, source: str = "<input>") -> Any:
    """Parse YAML text safely; errors name the source and the line."""
    if len(text.encode("utf-8", "surrogatepass")) > MAX_YAML_BYTES:
        raise UsageError(f"{source}: larger than {MAX_YAML_BYTES // (1024 * 1024)} MiB, refusing to parse")
    if _FastLoader is not None and not _NOT_FOR_LIBYAML.search(text):
        try:
            return yaml.load(text, Loader=_FastLoader)  # noqa: S506 - a CSafeLoader subclass
        except (UsageError, yaml.YAMLError):
            pass  # worded, with its line, by the loader below
    try:
        return yaml.load(text, Loader=_NoAliasLoader)  # noqa: S506 - a SafeLoader subclass
    except UsageError as e:
        raise UsageError(f"{source}: {e.message}", hint=e.hint) from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise UsageError(f"{source}: not valid YAML{where}: {problem}") from None


def read_text_utf8(path: Path, what: str = "file") -> str:
    """Read a file as UTF-8 or raise a UsageError that says which file and where."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise UsageError(f"{what} not found: {path}") from None
    except IsADirectoryError:
        raise UsageError(f"{what} is a directory, expected a file: {path}") from None
    except PermissionError:
        raise UsageError(f"{what} is not readable: {path}") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise UsageError(f"{what} is not UTF-8 text: {path} (invalid byte at offset {e.start})") from None


def load_yaml_file(path: Path, what: str = "YAML file") -> Any:
    """Read and parse a YAML file with the checks above."""
    path = Path(path)
    if path.exists() and path.is_file() and path.stat().st_size > MAX_YAML_BYTES:
        raise UsageError(f"{what} {path} is larger than {MAX_YAML_BYTES // (1024 * 1024)} MiB, refusing to parse")
    return load_yaml_text(read_text_utf8(path, what), str(path))


def load_yaml_mapping(path: Path, what: str, noun: str = "settings") -> dict[str, Any]:
    """A YAML file that must hold a mapping (an empty file is an empty one)."""
    data = load_yaml_file(path, what)
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise UsageError(f"{what} {path}: expected a mapping of {noun}, got {type(data).__name__}")
    return data


def load_training_config(path: Path) -> dict[str, Any]:
    """A training config file: a mapping of sections, and never empty.

    An empty (or `null`) file would train the defaults for hundreds of steps,
    which nobody means to do by handing over a file; it is refused, naming the
    example configs to start from.
    """
    data = load_yaml_mapping(path, "training config", "sections")
    if not data:
        examples = ", ".join(f"configs/{p.name}" for p in sorted(bundled_dir("configs").glob("*.yaml")))
        raise UsageError(f"training config {path} is empty",
                         hint=f"start from an example config ({examples}); the defaults alone are never trained by accident")
    return data
