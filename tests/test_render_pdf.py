"""The PDF: notes reach Typst as data, never as markup, and no file outside the logbook gets in."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from chronicle_helpers import clock, project_of, qknorm_story, write_metrics  # noqa: F401  (clock is a fixture)
from pdftext import pdf_text

from logbook.chronicle.mdconvert import Converter, ImageStore
from logbook.chronicle.pdf import render_pdf

NASTY = ('#import "/etc/passwd" \n#read("/etc/passwd") and #include "../../../README.md"\n\n'
         '$x^2$ <script>alert(1)</script> `a ` b` ] [ *star* _under_ \\ #set page(width: 1cm)\n\n'
         '| a | b |\n|---|---|\n| `\\|` | ] |\n')


def _png(path: Path) -> None:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(1, 1), dpi=20)
    FigureCanvasAgg(fig)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format="png")


def _texts(node) -> list[str]:
    """Every string in a converted tree."""
    if isinstance(node, str):
        return [node]
    if isinstance(node, list):
        return [s for x in node for s in _texts(x)]
    if isinstance(node, dict):
        return [s for k, v in node.items() if k != "t" for s in _texts(v)]
    return []


def test_markdown_becomes_plain_data_with_special_characters_as_text():
    blocks = Converter().blocks(NASTY)
    assert blocks[0] == {"t": "p", "c": ['#import "/etc/passwd" #read("/etc/passwd") and #include "../../../README.md"']}
    texts = "".join(_texts(blocks))
    for s in ("$x^2$", "<script>alert(1)</script>", "#set page(width: 1cm)", "] [ "):
        assert s in texts
    assert {"t": "em", "c": ["under"]} in blocks[1]["c"] and {"t": "strong", "c": ["star"]} not in blocks[1]["c"]
    table = blocks[2]
    assert table["t"] == "table" and table["rows"] == [[[{"t": "code", "v": "|"}], ["]"]]]


def test_links_to_other_entries_become_internal_references():
    (blocks,) = Converter().blocks("see [note](../../2026/12/02.md#note-3), [web](https://example.org) and [x](javascript:alert(1))")
    c = blocks["c"]
    assert {"t": "ref", "target": "note-3", "c": ["note"]} in c
    assert {"t": "link", "url": "https://example.org", "c": ["web"]} in c
    assert not any(isinstance(x, dict) and x.get("t") == "link" and "javascript" in x["url"] for x in c)


def test_only_images_under_the_assets_folder_are_shown(tmp_path):
    entries = tmp_path / "repo" / "entries"
    assets = entries / "assets"
    _png(assets / "run" / "ok.png")
    _png(tmp_path / "secret.png")
    os.symlink(tmp_path / "secret.png", assets / "run" / "escape.png")
    (assets / "run" / "fake.png").write_text("not an image")
    root = tmp_path / "typst-root"
    root.mkdir()
    conv = Converter(ImageStore(entries, assets, root))
    md = ("![ok](../../assets/run/ok.png) ![abs](/etc/passwd) ![up](../../../../secret.png) "
          "![link](../../assets/run/escape.png) ![enc](..%2F..%2F..%2F..%2Fsecret.png) ![fake](../../assets/run/fake.png)")
    (para,) = conv.blocks(md, entries / "2026" / "12")
    c = para["c"]
    assert c[0] == {"t": "img", "src": "img/00000.png", "alt": "ok"}
    text = "".join(x for x in c if isinstance(x, str))
    assert "[image outside the logbook not shown: /etc/passwd]" in text
    assert "[image outside the logbook not shown: ../../../../secret.png]" in text
    assert "[image outside the logbook not shown: ../../assets/run/escape.png]" in text
    assert "[image outside the logbook not shown: ../../../../secret.png]" in text.split("escape.png]")[1]
    assert "[image not shown (not a PNG, JPEG or GIF file, or too large): ../../assets/run/fake.png]" in text
    assert sorted(p.name for p in (root / "img").iterdir()) == ["00000.png"]  # only the allowed copy


@pytest.mark.slow
def test_pdf_of_injection_attempts_shows_them_as_text(logbook_repo, clock, cli, tmp_path):
    project = project_of(logbook_repo)
    qknorm_story(project, clock)
    write_metrics(project, "qknorm", 12_000)
    secret = tmp_path / "secret.txt"
    secret.write_text("TOPSECRET-LINE\n")
    clock.set("2026-12-01T12:00:00")
    assert cli("note", NASTY + f"\n![s]({secret})\n").exit_code == 0
    out = tmp_path / "c.pdf"
    res = cli("render", "--format", "pdf", "--out", str(out))
    assert res.exit_code == 0, res.output
    pdf = out.read_bytes()
    assert pdf.startswith(b"%PDF") and b"TOPSECRET" not in pdf
    text = pdf_text(out)
    assert '#read("/etc/passwd")' in text and "#import" in text and "<script>alert(1)</script>" in text
    assert "$x^2$" in text and "#set page(width: 1cm)" in text
    assert "root:x:0:0" not in text and "TOPSECRET" not in text
    # A long path wraps anywhere in the PDF, even inside a path component: compare without spacing.
    unspaced = "".join(text.split())
    assert "".join(f"[image outside the logbook not shown: {secret}]".split()) in unspaced
    for symbol in ("σ", "→", "×"):
        assert symbol in text


@pytest.mark.slow
def test_pdf_has_title_contents_lineage_entries_and_plots(logbook_repo, clock, cli, tmp_path):
    project = project_of(logbook_repo)
    qknorm_story(project, clock)
    write_metrics(project, "qknorm", 12_000)
    clock.set("2026-12-02T08:00:00")
    assert cli("note", "--about", "qknorm:15", "Forum dump ⚠ see data issue #88").exit_code == 0
    out = tmp_path / "c.pdf"
    res = render_pdf(project, out)
    assert res.days == ["2026-11-30", "2026-12-01", "2026-12-02"] and res.images == 1
    text = pdf_text(out)
    flat = " ".join(text.split())
    assert "Chronicle" in text and "Contents" in text
    assert "Runs and their attempts" in text and "killed by signal 9 (SIGKILL)" in flat
    assert "2026-12-01 · Tuesday" in text
    assert "attempt 3 → 4 · step 41,200 (10.8B tokens) · restart" in flat
    assert "⚠ Erratum (2026-12-02, Ada Tester): see note" in flat
    assert "Forum dump ⚠ see data issue #88" in flat
    assert "6.1 robust σ" in flat and "× 0.9" in flat


@pytest.mark.slow
def test_pdf_for_one_run_leaves_the_others_out(logbook_repo, clock, tmp_path):
    project = project_of(logbook_repo)
    qknorm_story(project, clock)
    qknorm_story(project, clock, run="other")
    out = tmp_path / "one.pdf"
    res = render_pdf(project, out, run="other", since="2026-12-01")
    assert res.days == ["2026-12-01"] and res.events == 7
    text = " ".join(pdf_text(out).split())
    assert "run other" in text and "run qknorm" not in text


def test_the_file_name_decides_the_format_and_a_contradicting_format_is_refused(logbook_repo, clock, cli, tmp_path):
    project = project_of(logbook_repo)
    qknorm_story(project, clock)
    res = cli("render", "--out", str(tmp_path / "week.pdf"))
    assert res.exit_code == 0, res.output
    assert (tmp_path / "week.pdf").read_bytes().startswith(b"%PDF")
    assert cli("render", "--out", str(tmp_path / "week.md")).exit_code == 0
    assert (tmp_path / "week.md").read_text().startswith("#")
    for fmt, name in (("md", "x.pdf"), ("pdf", "x.md")):
        res = cli("render", "--format", fmt, "--out", str(tmp_path / name))
        assert res.exit_code == 2 and "is named as" in res.stderr and "Traceback" not in res.output
        assert not (tmp_path / name).exists()


def test_a_pdf_of_days_without_entries_says_so_and_lists_no_runs_from_other_days(logbook_repo, clock, cli, tmp_path):
    project = project_of(logbook_repo)
    qknorm_story(project, clock)
    out = tmp_path / "november.pdf"
    res = cli("render", "--since", "2026-11-01", "--until", "2026-11-15", "--out", str(out))
    assert res.exit_code == 0, res.output
    text = pdf_text(out)
    assert "No entries from 2026-11-01 to 2026-11-15." in text and "qknorm" not in text
    assert "No run has an attempt in these days." in text
