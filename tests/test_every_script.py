"""Titles and notes in any of the world's scripts: readable ASCII ids, the title in its own script where shown,
and a PDF that draws what its fonts cover and names what they do not."""

from __future__ import annotations

import json
import re

import pytest

from conftest import git
from pdftext import pdf_text

ARGS = ["--hypothesis", "h", "--predict", "loss@final < 3"]
ID_PART = re.compile(r"^\d{4}-\d{2}-\d{2}-(?P<slug>[a-z0-9-]+)-[0-9a-f]{6}$")


@pytest.mark.parametrize("title, slug", [
    ("Нормализация", "normalizatsiya"),            # Cyrillic
    ("正規化", "zhengguihua"),                      # Han, read as pinyin
    ("スパイク", "supaiku"),                          # Katakana
    ("Κανονικοποίηση", "kanonikopoiisi"),            # Greek
    ("التطبيع", "lttby"),                            # Arabic
    ("נרמול", "nrmvl"),                              # Hebrew
    ("QK-norm Нормализация", "qk-norm-normalizatsiya"),  # mixed: neither script dropped
])
def test_a_title_in_any_script_is_accepted_and_its_id_is_readable_ascii(logbook_repo, cli, title, slug):
    res = cli("prereg", "--title", title, *ARGS, "--json")
    assert res.exit_code == 0, res.output
    pid = json.loads(res.stdout)["id"]
    assert ID_PART.match(pid).group("slug") == slug
    listed = json.loads(cli("ls", "--json").stdout)
    assert [p["title"] for p in listed if p["id"] == pid] == [title]  # shown in its own script
    record = (logbook_repo / "entries" / "prereg" / f"{pid}.md").read_text("utf-8")
    assert f"# {title}" in record or f"title: {title}" in record


def test_a_title_with_nothing_to_transliterate_is_still_refused(logbook_repo, cli):
    res = cli("prereg", "--title", "... --- ...", *ARGS)
    assert res.exit_code == 2 and "at least one letter or digit" in res.output


def _note_and_render(logbook_repo, cli, text, tmp_path):
    assert cli("note", text).exit_code == 0
    out = tmp_path / "week.pdf"
    res = cli("render", "--format", "pdf", "--out", str(out))
    assert res.exit_code == 0, res.output
    return res, pdf_text(out)


def test_the_pdf_draws_cyrillic_greek_hebrew_arabic_and_emoji_with_the_fonts_it_ships(logbook_repo, cli, tmp_path):
    res, text = _note_and_render(logbook_repo, cli, "Заметка Κανονικοποίηση נרמול التطبيع 😀", tmp_path)
    assert "for want of a font" not in text and "no font" not in res.stderr
    assert "Заметка" in text and "Κανονικοποίηση" in text


def test_the_pdf_names_each_character_no_font_covers(logbook_repo, cli, tmp_path):
    res, text = _note_and_render(logbook_repo, cli, "正規化 works", tmp_path)
    assert "no font for 3 characters" in res.stderr
    for cp in ("U+6B63", "U+898F", "U+5316"):
        assert cp in res.stderr and cp in text  # named in the command's warning and on the first page
    assert "templates/fonts/" in res.stderr


def test_a_font_committed_under_templates_fonts_draws_what_the_install_cannot(logbook_repo, cli, tmp_path):
    """A team adds a font (here a one-glyph font built with fontTools) and the character is drawn, not named."""
    from fontTools.fontBuilder import FontBuilder
    from fontTools.pens.ttGlyphPen import TTGlyphPen

    pen = TTGlyphPen(None)
    for x, y in ((100, 0), (100, 700), (600, 700), (600, 0)):
        (pen.lineTo if x != 100 or y != 0 else pen.moveTo)((x, y))
    pen.closePath()
    fb = FontBuilder(1000, isTTF=True)
    fb.setupGlyphOrder([".notdef", "sei"])
    fb.setupCharacterMap({0x6B63: "sei"})
    fb.setupGlyf({".notdef": TTGlyphPen(None).glyph(), "sei": pen.glyph()})
    fb.setupHorizontalMetrics({".notdef": (500, 0), "sei": (700, 100)})
    fb.setupHorizontalHeader(ascent=800, descent=-200)
    fb.setupNameTable({"familyName": "Team Han", "styleName": "Regular"})
    fb.setupOS2()
    fb.setupPost()
    (logbook_repo / "templates" / "fonts").mkdir(parents=True)
    fb.save(str(logbook_repo / "templates" / "fonts" / "team-han.ttf"))
    res, text = _note_and_render(logbook_repo, cli, "正規 done", tmp_path)
    assert "no font for 1 character" in res.stderr  # 規 still has none
    assert "U+898F" in res.stderr and "U+6B63" not in res.stderr


def test_wide_prints_the_table_one_row_per_line_in_a_narrow_terminal(logbook_repo, cli, monkeypatch):
    title = "Нормализация QK removes spikes in every layer of a very deep model"
    monkeypatch.setenv("COLUMNS", "60")
    git(logbook_repo, "config", "user.name", "Ada Lovelace-Byron of the Analytical Engine")
    assert cli("prereg", "--title", title, *ARGS).exit_code == 0
    narrow = cli("ls").stdout.splitlines()
    assert not narrow[0].startswith("id ")  # 60 columns: one block per preregistration
    wide = cli("ls", "--wide").stdout.splitlines()
    assert wide[0].split()[:3] == ["id", "date", "author"] and len(wide) == 2
    assert title in wide[1] and "Ada Lovelace-Byron of the Analytical Engine" in wide[1]  # nothing cut, one line
