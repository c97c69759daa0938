"""Markdown -> a plain JSON tree that the Typst template turns into content.

The PDF never sees Markdown or Typst markup written by anyone: notes and
rendered entries are parsed here with markdown-it (preset `js-default`: raw
HTML off, tables on) into lists and dicts of strings, and the template builds
content from those values with functions. A string is only ever displayed as
text, so `#read("/etc/passwd")`, `$x$` or `<script>` in a note stays text.

Block nodes:  {"t": "p" | "h" | "ul" | "ol" | "quote" | "code" | "hr" | "table", ...}
Inline nodes: a plain string, or {"t": "strong" | "em" | "strike" | "code" | "link" | "ref" | "img" | "br", ...}

Images are the one thing that reaches outside the text: only regular PNG, JPEG
or GIF files under the logbook's assets folder are allowed, and they are
copied into the compile folder; anything else becomes a visible line of text.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path
from typing import Any
from urllib.parse import unquote

MAX_DEPTH = 8  # deeper nesting is flattened to text: Typst's call depth is limited
MAX_IMAGE_BYTES = 20 * 1024 * 1024
_IMAGE_MAGIC = {b"\x89PNG\r\n\x1a\n": ".png", b"\xff\xd8\xff": ".jpg", b"GIF87a": ".gif", b"GIF89a": ".gif"}
_DAY_LINK = re.compile(r"^(?:\.\./\.\./)?\d{4}/\d{2}/\d{2}\.md#([A-Za-z0-9._:-]+)$")
_FRAGMENT = re.compile(r"^#([A-Za-z0-9._:-]+)$")
_EXTERNAL = re.compile(r"^(https?:|mailto:)", re.IGNORECASE)
_INLINE_SYNTAX = re.compile(r"[\\`*_\[\]<>&!~\n]|  |https?:")  # anything that could make inline Markdown
_parser = None


def parser():
    """The shared markdown-it parser: CommonMark plus tables and strikethrough, raw HTML off."""
    global _parser
    if _parser is None:
        from markdown_it import MarkdownIt

        _parser = MarkdownIt("js-default")
    return _parser


class ImageStore:
    """Decides which images may appear and copies those into the Typst root."""

    def __init__(self, entries: Path, assets: Path, root: Path) -> None:
        self.entries = Path(entries)
        self.assets = Path(assets)
        self.assets_real = Path(assets).resolve()
        self.root = Path(root)
        self._copied: dict[Path, str] = {}

    def allowed(self, src: str, base_dir: Path) -> tuple[Path | None, str]:
        """(file, "") for an allowed image, else (None, why it is not shown)."""
        if not src or "\x00" in src or "://" in src or src.startswith(("/", "\\", "data:", "file:")) or re.match(r"^[A-Za-z]:", src):
            return None, "outside"
        for base in (Path(base_dir), self.entries):
            lexical = Path(os.path.normpath(base / src))
            if not lexical.is_relative_to(self.assets):
                continue
            try:
                real = lexical.resolve(strict=True)
            except (OSError, RuntimeError):
                return None, "missing"
            if not real.is_relative_to(self.assets_real):
                return None, "outside"  # a symlink that leads out of the logbook
            if not real.is_file() or real.stat().st_size > MAX_IMAGE_BYTES:
                return None, "unsupported"
            return real, ""
        return None, "outside"

    def store(self, real: Path) -> str | None:
        """Copy an allowed image into the root; the name the template loads it by."""
        if real in self._copied:
            return self._copied[real]
        with open(real, "rb") as f:
            head = f.read(8)
        ext = next((e for magic, e in _IMAGE_MAGIC.items() if head.startswith(magic)), None)
        if ext is None:
            return None
        name = f"img/{len(self._copied):05d}{ext}"
        (self.root / "img").mkdir(exist_ok=True)
        shutil.copyfile(real, self.root / name)
        self._copied[real] = name
        return name


_REFUSALS = {
    "outside": "[image outside the logbook not shown: {src}]",
    "missing": "[image not found: {src}]",
    "unsupported": "[image not shown (not a PNG, JPEG or GIF file, or too large): {src}]",
}


class Converter:
    """Converts Markdown to the JSON tree; `images` None shows every image as text."""

    def __init__(self, images: ImageStore | None = None) -> None:
        self.images = images
        self.base_dir = Path(".")

    def blocks(self, text: str, base_dir: Path | None = None) -> list[Any]:
        from markdown_it.tree import SyntaxTreeNode

        if base_dir is not None:
            self.base_dir = Path(base_dir)
        return self._blocks(SyntaxTreeNode(parser().parse(text)).children, 0)

    def inline(self, text: str, base_dir: Path | None = None) -> list[Any]:
        if not _INLINE_SYNTAX.search(text):
            return [text] if text else []  # plain text (most entry headings): nothing to parse
        from markdown_it.tree import SyntaxTreeNode

        if base_dir is not None:
            self.base_dir = Path(base_dir)
        out: list[Any] = []
        for node in SyntaxTreeNode(parser().parseInline(text)).children:
            out.extend(self._inlines(node.children, 0))
        return _merge(out)

    def _blocks(self, nodes, depth: int) -> list[Any]:
        return [b for n in nodes for b in [self._block(n, depth)] if b is not None]

    def _block(self, n, depth: int) -> dict[str, Any] | None:
        t = n.type
        if depth > MAX_DEPTH:
            return {"t": "p", "c": [_plain_text(n)]}
        if t == "paragraph":
            return {"t": "p", "c": self._inline_children(n, depth)}
        if t == "heading":
            return {"t": "h", "level": int(n.tag[1:]), "c": self._inline_children(n, depth)}
        if t in ("bullet_list", "ordered_list"):
            items = [self._blocks(li.children, depth + 1) for li in n.children]
            if t == "bullet_list":
                return {"t": "ul", "items": items}
            start = n.attrs.get("start", 1)
            return {"t": "ol", "start": int(start) if str(start).isdigit() else 1, "items": items}
        if t == "blockquote":
            return {"t": "quote", "c": self._blocks(n.children, depth + 1)}
        if t in ("fence", "code_block"):
            words = (n.info or "").split() if t == "fence" else []  # an info string of blanks names no language
            lang = words[0] if words else ""
            return {"t": "code", "text": n.content.rstrip("\n"), "lang": lang if re.fullmatch(r"[A-Za-z0-9_+-]{1,20}", lang) else None}
        if t == "hr":
            return {"t": "hr"}
        if t == "table":
            return self._table(n, depth)
        return {"t": "p", "c": [_plain_text(n)]}  # anything else (html off: should not occur) as text

    def _inline_children(self, n, depth: int) -> list[Any]:
        out: list[Any] = []
        for child in n.children:
            out.extend(self._inlines(child.children, depth))
        return _merge(out)

    def _table(self, n, depth: int) -> dict[str, Any]:
        rows: list[list[list[Any]]] = []
        align: list[str] = []
        header: list[list[Any]] = []
        for section in n.children:
            for tr in section.children:
                cells = [self._inline_children(c, depth) for c in tr.children]
                if section.type == "thead":
                    header = cells
                    align = [_align(c) for c in tr.children]
                else:
                    rows.append(cells)
        width = max([len(header), *(len(r) for r in rows)], default=1) or 1
        pad = lambda r: r + [[] for _ in range(width - len(r))]  # noqa: E731
        return {"t": "table", "align": (align + ["left"] * width)[:width], "header": pad(header), "rows": [pad(r) for r in rows]}

    def _inlines(self, nodes, depth: int) -> list[Any]:
        out: list[Any] = []
        for n in nodes:
            out.extend(self._inline(n, depth))
        return out

    def _inline(self, n, depth: int) -> list[Any]:
        t = n.type
        if t == "text":
            return [n.content]
        if t == "softbreak":
            return [" "]
        if t == "hardbreak":
            return [{"t": "br"}]
        if t == "code_inline":
            return [{"t": "code", "v": n.content}]
        if depth > MAX_DEPTH:
            return [_plain_text(n)]
        if t in ("strong", "em", "s"):
            return [{"t": {"s": "strike"}.get(t, t), "c": _merge(self._inlines(n.children, depth + 1))}]
        if t == "link":
            return self._link(n, depth)
        if t == "image":
            return self._image(n)
        return [_plain_text(n) or n.content]

    def _link(self, n, depth: int) -> list[Any]:
        href = str(n.attrs.get("href", ""))
        body = _merge(self._inlines(n.children, depth + 1))
        m = _DAY_LINK.match(href) or _FRAGMENT.match(href)
        if m:
            return [{"t": "ref", "target": m.group(1), "c": body}]
        if _EXTERNAL.match(href):
            return [{"t": "link", "url": href, "c": body}]
        return [*body, f" ({unquote(href)})"] if href else body

    def _image(self, n) -> list[Any]:
        src = unquote(str(n.attrs.get("src", "")))
        alt = _plain_text(n)
        if self.images is None:
            return [_REFUSALS["outside"].format(src=src)]
        real, why = self.images.allowed(src, self.base_dir)
        if real is not None:
            name = self.images.store(real)
            if name is not None:
                return [{"t": "img", "src": name, "alt": alt}]
            why = "unsupported"
        return [_REFUSALS[why].format(src=src)]


def _align(cell) -> str:
    style = str(cell.attrs.get("style", ""))
    return "center" if "center" in style else "right" if "right" in style else "left"


def _plain_text(n) -> str:
    """All text under a node, for content that is shown but not structured."""
    if n.type in ("text", "code_inline", "code_block", "fence", "html_inline", "html_block"):
        return n.content
    if n.type in ("softbreak", "hardbreak"):
        return " "
    return "".join(_plain_text(c) for c in n.children)


def _merge(items: list[Any]) -> list[Any]:
    """Join neighbouring strings so the template walks fewer nodes."""
    out: list[Any] = []
    for x in items:
        if isinstance(x, str) and out and isinstance(out[-1], str):
            out[-1] += x
        elif x != "":
            out.append(x)
    return out
