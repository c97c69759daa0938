"""The text of a PDF, read with a pure-Python library so every machine checks it."""

from __future__ import annotations

from pathlib import Path

from pypdf import PdfReader


def pdf_text(pdf: Path) -> str:
    """Every page's text, pages separated by a blank line."""
    return "\n\n".join(page.extract_text() or "" for page in PdfReader(str(pdf)).pages)
