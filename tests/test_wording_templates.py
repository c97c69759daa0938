"""What a person reads when a repository's own template fails: refused by the sandbox, or broken, from `render`
and from a `note` whose record is kept. Checked in full against __snapshots__/test_wording_templates.ambr."""

from __future__ import annotations

from pathlib import Path

BUNDLED = Path(__file__).resolve().parents[1] / "templates"


def _own_day_template(repo: Path, first_line: str) -> None:
    path = repo / "templates" / "chronicle" / "day.md.j2"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(first_line + "\n" + (BUNDLED / "chronicle" / "day.md.j2").read_text())


def _said(res) -> dict:
    return {"exit_code": res.exit_code, "stderr": res.stderr.replace("\r", "")}


def test_a_refused_or_broken_template_is_named_with_what_to_do(logbook_repo, cli, snapshot):
    assert cli("note", "a first note").exit_code == 0
    _own_day_template(logbook_repo, "{{ cycler.__init__.__globals__.os.getcwd() }}")
    refused = {"render": _said(cli("render"))}
    note = cli("note", "a second note")
    refused["note"] = {"exit_code": note.exit_code, "stderr": note.stderr.replace(note.stdout.strip(), "NOTE-ID")}
    _own_day_template(logbook_repo, "{% if %}")
    broken = _said(cli("render"))
    assert {"refused": refused, "broken": broken} == snapshot
