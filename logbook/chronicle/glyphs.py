"""The fonts a PDF is set in, and the characters none of them can draw.

Typst is given only fonts that travel with the install or the repository, never
the machine's own (two clones must lay out the same PDF): its embedded fonts,
the DejaVu families matplotlib ships (Latin, Greek, Cyrillic, Armenian,
Georgian, Hebrew, Arabic and many symbols), and any font a team commits under
`templates/fonts/` (a CJK or emoji font, say). Typst falls back from one to the
next glyph by glyph. A character that none covers would print as an empty box,
so it is named instead: in the command's warnings and on the PDF's first page.
"""

from __future__ import annotations

import functools
import unicodedata
from logbook.core.textfmt import plural
from pathlib import Path
from typing import Any, Iterable

FONT_SUFFIXES = (".ttf", ".otf", ".ttc", ".otc")


def font_sources(project: Any) -> list[Path]:
    """The font files Typst gets beyond its own: matplotlib's DejaVu, then the repository's templates/fonts/.

    Files, not folders: matplotlib's folder also holds a last-resort font
    whose every glyph is a box, which would hide what cannot be drawn.
    """
    import matplotlib

    ours = sorted((Path(matplotlib.__file__).parent / "mpl-data" / "fonts" / "ttf").glob("DejaVu*.ttf"))
    team = Path(project.root) / "templates" / "fonts"
    return ours + (sorted(p for p in team.rglob("*") if p.suffix.lower() in FONT_SUFFIXES and p.is_file())
                   if team.is_dir() else [])


def font_dir(sources: list[Path], into: Path) -> Path:
    """A folder of links to `sources` (Typst reads fonts by folder), inside the compile's own root."""
    into.mkdir()
    for i, src in enumerate(sources):
        (into / f"{i:03d}-{src.name}").symlink_to(src.resolve())
    return into


@functools.lru_cache(maxsize=64)
def _cmap(path: str, mtime_ns: int) -> frozenset[int]:
    """The code points one font file maps (every face of a collection)."""
    from fontTools.ttLib import TTCollection, TTFont

    try:
        fonts = TTCollection(path).fonts if path.lower().endswith((".ttc", ".otc")) else [TTFont(path, lazy=True)]
        return frozenset(cp for f in fonts for cp in (f.getBestCmap() or {}))
    except Exception:  # an unreadable file draws nothing: its characters are named, not hidden
        return frozenset()


def _ignorable(ch: str) -> bool:
    """Characters that are never drawn as glyphs: controls, joiners, variation selectors, spaces, marks of emoji."""
    cat = unicodedata.category(ch)
    return cat in ("Cc", "Cf", "Zs", "Zl", "Zp") or 0xFE00 <= ord(ch) <= 0xFE0F or 0x1F3FB <= ord(ch) <= 0x1F3FF


def undrawable(text: str, fonts: Iterable[Path]) -> list[str]:
    """The characters of `text` that none of `fonts` covers, in order of first appearance.

    ASCII is always drawn (every embedded font has it), so only the rest is looked up.
    """
    wanted = dict.fromkeys(ch for ch in text if ord(ch) > 0x7E and not _ignorable(ch))
    if not wanted:
        return []
    covered: set[int] = set()
    for f in fonts:
        covered |= _cmap(str(f), f.stat().st_mtime_ns)
    return [ch for ch in wanted if ord(ch) not in covered]


def describe(chars: list[str], limit: int = 12) -> str:
    """'日 (U+65E5), 😀 (U+1F600)…': what a reader can look up."""
    shown = ", ".join(f"{ch} (U+{ord(ch):04X})" for ch in chars[:limit])
    return shown + (f" and {len(chars) - limit} more" if len(chars) > limit else "")


def warning(chars: list[str]) -> str:
    return (f"the PDF has no font for {plural(len(chars), 'character')}, drawn as empty boxes: {describe(chars)}; "
            "commit a font that covers them under templates/fonts/ (e.g. Noto Sans CJK, Noto Emoji)")


def compile_pdf(project: Any, template: str, root: Path, warnings: list[str], **kwargs: Any) -> bytes:
    """Typst's PDF of `root/template` (beside its data.json), set in the fonts above.

    Each character of data.json that no font covers is named in `warnings` and,
    as data.json's own `undrawable` (added as its last key), on the PDF's first
    page. The fonts sit in a folder of their own, outside the root that the
    template can read.
    """
    import tempfile

    import typst

    sources = font_sources(project)
    data = root / "data.json"
    missing = undrawable(data.read_text("utf-8"), sources)
    if missing:
        warnings.append(warning(missing))
    _add_last_key(data, "undrawable", describe(missing) if missing else "")
    with tempfile.TemporaryDirectory(prefix="logbook-fonts-") as tmp:
        return typst.compile(str(root / template), root=str(root), ignore_system_fonts=True,
                             font_paths=[str(font_dir(sources, Path(tmp) / "fonts"))], **kwargs)


def _add_last_key(path: Path, key: str, value: Any) -> None:
    """Append `"key": value` to the JSON object in `path` in place (a chronicle's data can be large: no rewrite)."""
    import json

    with open(path, "r+b") as f:
        f.seek(0, 2)
        end = f.tell()
        while end > 0:
            f.seek(end - 1)
            last = f.read(1)
            if not last.isspace():
                break
            end -= 1
        if last != b"}":
            raise ValueError(f"{path} does not hold a JSON object")
        f.seek(end - 1)
        f.truncate()
        f.write(f', {json.dumps(key)}: {json.dumps(value, ensure_ascii=False)}}}'.encode("utf-8"))
