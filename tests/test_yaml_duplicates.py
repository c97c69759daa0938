"""A key written twice in any YAML file logbook reads is refused, naming the key and both lines."""

from __future__ import annotations

from conftest import git


def test_a_preregistration_file_with_two_prediction_lists_is_refused_and_nothing_is_committed(logbook_repo, cli):
    spec = logbook_repo / "p.yaml"
    spec.write_text("title: Twice\nhypothesis: The loss falls.\npredictions:\n  - val_loss@final < 3\n"
                    "predictions:\n  - spikes@final == 0\n")
    head = git(logbook_repo, "rev-parse", "HEAD")
    res = cli("prereg", "--from-file", str(spec))
    assert res.exit_code == 2, res.output
    assert "duplicate key 'predictions' on lines 3 and 5" in res.stderr and "Traceback" not in res.output
    assert git(logbook_repo, "rev-parse", "HEAD") == head
    assert not list((logbook_repo / "entries" / "prereg").glob("*.md"))


def test_logbook_settings_with_a_key_twice_are_refused(logbook_repo, cli):
    settings = logbook_repo / "logbook.yaml"
    settings.write_text(settings.read_text() + "entries_dir: elsewhere\n")
    res = cli("ls")
    assert res.exit_code == 2, res.output
    assert "duplicate key 'entries_dir'" in res.stderr and "logbook.yaml" in res.stderr


def test_nested_mappings_may_reuse_a_key_that_a_sibling_mapping_has(logbook_repo, cli):
    from logbook.core.yamlsafe import load_yaml_text

    assert load_yaml_text("a: {x: 1}\nb: {x: 2}\n") == {"a": {"x": 1}, "b": {"x": 2}}
