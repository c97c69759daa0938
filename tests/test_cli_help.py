"""Every command has help, and every help text ends with an example."""

from __future__ import annotations

import typer.main

from logbook.cli import app


def _commands(group, prefix: tuple[str, ...] = ()):
    yield prefix, group
    if hasattr(group, "commands"):
        for name, cmd in group.commands.items():
            yield from _commands(cmd, prefix + (name,))


def test_every_command_help_ends_with_an_example():
    root = typer.main.get_command(app)
    seen = []
    for path, cmd in _commands(root):
        if not path:
            continue
        seen.append(" ".join(path))
        text = (cmd.help or "").strip()
        assert text, f"`logbook {' '.join(path)}` has no help"
        last = text.splitlines()[-1].strip()
        assert last.startswith("Example"), f"`logbook {' '.join(path)}` help does not end with an example: {last!r}"
    assert "init" in seen


def test_every_command_answers_help(cli):
    root = typer.main.get_command(app)
    for path, _ in _commands(root):
        res = cli(*path, "--help")
        assert res.exit_code == 0, (path, res.output)
        assert "Usage:" in res.stdout


def test_cli_reference_in_docs_is_generated_from_help():
    from conftest import ROOT

    from logbook.cli.docgen import reference

    on_disk = (ROOT / "docs" / "cli.md").read_text()
    assert on_disk == reference(), "docs/cli.md is stale: python3 -m logbook.cli.docgen > docs/cli.md"


def test_a_full_disk_is_refused_with_the_file_named_and_nothing_half_written(logbook_repo, cli, monkeypatch):
    import errno
    import os

    def full(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    notes = logbook_repo / "entries" / "notes"
    before = sorted(notes.iterdir()) if notes.is_dir() else []
    monkeypatch.setattr(os, "fsync", full)
    res = cli("note", "the disk is full")
    assert res.exit_code == 3 and "Traceback" not in res.output and "internal error" not in res.output
    assert "No space left on device: " in res.stderr and "entries/notes/" in res.stderr
    assert "nothing was half-written" in res.stderr
    assert (sorted(notes.iterdir()) if notes.is_dir() else []) == before  # no record, no temporary file
