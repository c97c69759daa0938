"""Fuzzing Markdown-to-Typst: any note becomes plain JSON data, and the PDF of random notes compiles.

The converter must turn any text into the closed tree the Typst template
reads (a few node types, strings, ints), so that nothing a note says can
become Typst code: `#read(...)`, `$...$`, raw HTML and deep nesting all stay
text. A handful of random notes go all the way through `logbook render
--format pdf` with the real Typst compiler.
"""

from __future__ import annotations

import json

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from logbook.chronicle.mdconvert import Converter, ImageStore

BLOCKS = {"p", "h", "ul", "ol", "quote", "code", "hr", "table"}
INLINES = {"strong", "em", "strike", "code", "link", "ref", "img", "br"}
_TOKENS = ["#", "# ", "## ", "*", "**", "_", "__", "`", "```", "~~", "[", "]", "(", ")", "](", "![", "|", "|---|",
           "---", "> ", ">> ", "1. ", "- ", "* ", "\n", "\n\n", "  \n", "\\", "$", "$x^2$", "#read(\"/etc/passwd\")",
           "#image(\"/etc/passwd\")", "#include \"../x.typ\"", "#set page(width: 1cm)", "<script>", "</div>", "&amp;",
           "&#35;", "http://example.org", "javascript:alert(1)", "../../assets/a.png", "/etc/passwd", "{{ x }}",
           "{% raw %}", "@ref", "<label>", "=", "+", "/", "//", "/*", "*/", "\t", " ", "é", "→", "\u202e", "x"]
_markdown = st.one_of(
    st.text(max_size=200),
    st.lists(st.sampled_from(_TOKENS), max_size=60).map("".join),
    st.tuples(st.sampled_from(["> ", "- ", "1. ", "* ", "  - ", "[", "*", "_", "**"]), st.integers(1, 60),
              st.sampled_from(_TOKENS)).map(lambda t: t[0] * t[1] + t[2]),
)
FUZZ = settings(max_examples=200, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


def _check_tree(node, block: bool, depth: int = 0) -> None:
    """Only lists, plain strings, ints and the known node dicts; a string is never anything but text."""
    assert depth < 60
    if isinstance(node, str):
        return
    if isinstance(node, list):
        for x in node:
            _check_tree(x, block, depth + 1)
        return
    assert isinstance(node, dict), node
    assert node["t"] in (BLOCKS | INLINES), node
    for key, value in node.items():
        if key == "t":
            continue
        if isinstance(value, (bool, int)) or value is None:
            continue
        _check_tree(value, block, depth + 1)


@FUZZ
@given(_markdown)
@example("```  \n")  # a fence whose info string is only blanks
def test_any_text_converts_to_plain_json_data(text):
    conv = Converter()
    for tree in (conv.blocks(text), conv.inline(text)):
        _check_tree(tree, True)
        assert json.loads(json.dumps(tree)) == tree
    assert not any(isinstance(x, dict) and x.get("t") == "img" for x in _walk(conv.blocks(text)))


@FUZZ
@given(_markdown)
def test_images_in_any_text_are_only_copies_inside_the_compile_root(tmp_path_factory, text):
    base = tmp_path_factory.mktemp("md")
    entries, root = base / "entries", base / "root"
    (entries / "assets").mkdir(parents=True)
    root.mkdir()
    conv = Converter(ImageStore(entries, entries / "assets", root))
    tree = conv.blocks(text + "\n\n![x](/etc/passwd) ![y](../../../etc/passwd)", entries / "2026" / "12")
    _check_tree(tree, True)
    imgs = [x for x in _walk(tree) if isinstance(x, dict) and x.get("t") == "img"]
    assert imgs == []  # nothing under assets/ exists, so nothing is shown as an image
    assert sorted(p.name for p in root.iterdir()) == []


def _walk(node):
    if isinstance(node, list):
        for x in node:
            yield from _walk(x)
    elif isinstance(node, dict):
        yield node
        for k, v in node.items():
            if k != "t":
                yield from _walk(v)


def _a_note(text: str) -> bool:
    """Text `logbook note` accepts (no control characters, not empty)."""
    from logbook.core.errors import UsageError
    from logbook.chronicle.notes import check_note_text

    try:
        check_note_text(text)
        return True
    except UsageError:
        return False


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(notes=st.lists(_markdown.filter(_a_note), min_size=1, max_size=3))
def test_random_notes_compile_to_a_pdf(tmp_path_factory, notes):
    import subprocess

    from logbook.records.init import init_logbook
    from logbook.chronicle.notes import add_note
    from logbook.core.project import open_project
    from logbook.chronicle.pdf import render_pdf

    repo = tmp_path_factory.mktemp("pdf") / "repo"
    repo.mkdir()
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    subprocess.run(["git", "-c", "user.name=A", "-c", "user.email=a@x", "commit", "-q", "--allow-empty", "-m", "i"],
                   cwd=repo, check=True)
    subprocess.run(["git", "config", "user.name", "Ada"], cwd=repo, check=True)
    subprocess.run(["git", "config", "user.email", "ada@example.org"], cwd=repo, check=True)
    init_logbook(start=repo)
    project = open_project(repo)
    for text in notes:
        add_note(project, text, render=False)
    out = repo / "chronicle.pdf"
    res = render_pdf(project, out)
    assert out.read_bytes().startswith(b"%PDF") and res.notes == len(notes)
