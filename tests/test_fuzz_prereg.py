"""Fuzzing preregistration files: any edit of a committed preregistration is caught.

A real preregistration is committed once; each example edits its file (a
field set to a random value and the file re-rendered as the tool would, a
line inserted or deleted, a byte flipped, the file cut short) and asks the
two readers: `load_prereg` either refuses it with one typed error or reads
it, and then `verify_project` must name the file. Reading is never a crash,
and no edit, however well-formed, passes `verify`.
"""

from __future__ import annotations

import subprocess
from datetime import datetime, timezone

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from logbook.core.errors import LogbookError
from logbook.promises.prereg import create_prereg, load_prereg
from logbook.promises.prereg_format import render_record, split_record
from logbook.promises.prereg_input import PreregInput
from logbook.proof.verify import verify_project

FUZZ = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                        HealthCheck.function_scoped_fixture])


@pytest.fixture(scope="module")
def prereg(tmp_path_factory):
    from logbook.records.init import init_logbook
    from logbook.core.project import open_project

    repo = tmp_path_factory.mktemp("prereg") / "repo"
    repo.mkdir()
    env_git = ["git", "-c", "user.name=Ada Tester", "-c", "user.email=ada@example.org"]
    subprocess.run(["git", "init", "-q", "-b", "main"], cwd=repo, check=True)
    subprocess.run([*env_git, "commit", "-q", "--allow-empty", "-m", "initial"], cwd=repo, check=True)
    for k, v in (("user.name", "Ada Tester"), ("user.email", "ada@example.org")):
        subprocess.run(["git", "config", k, v], cwd=repo, check=True)
    init_logbook(start=repo)
    subprocess.run(["git", "add", "-A"], cwd=repo, check=True)
    subprocess.run(["git", "commit", "-q", "-m", "logbook init"], cwd=repo, check=True)
    project = open_project(repo)
    written = create_prereg(project, PreregInput(
        title="qk-norm removes spikes", hypothesis="QK-norm keeps the loss free of spikes.",
        predictions=["val_loss@final < 2.31 ± 0.02", "spikes@final == 0"],
        contingency=["spike > 4σ twice within 500 steps -> rollback 100 steps, skip 300 batches, lr × 0.9"],
        assumptions=["the data is shuffled"], budget="8 GPU-hours"), now=datetime(2026, 11, 30, tzinfo=timezone.utc))
    assert verify_project(project).ok
    return project, written.id, written.path, written.path.read_bytes()


_scalar = st.one_of(st.none(), st.booleans(), st.integers(-10**20, 10**20), st.floats(allow_nan=False),
                    st.text(max_size=30), st.lists(st.text(max_size=5), max_size=2),
                    st.dictionaries(st.text(max_size=5), st.integers(), max_size=2))
_FIELDS = ["schema", "id", "title", "created", "author", "hypothesis", "rationale", "assumptions", "predictions",
           "contingency", "config", "budget", "base_commit", "extra"]
_edit = st.one_of(
    st.tuples(st.just("set"), st.sampled_from(_FIELDS), _scalar),
    st.tuples(st.just("set_prediction"), st.sampled_from(["text", "threshold", "op", "metric"]), _scalar),
    st.tuples(st.just("insert_line"), st.integers(0, 200), st.text(max_size=40)),
    st.tuples(st.just("delete_line"), st.integers(0, 200), st.just(None)),
    st.tuples(st.just("flip"), st.integers(0, 10**6), st.integers(1, 255)),
    st.tuples(st.just("cut"), st.integers(0, 10**6), st.just(None)),
)


def _edited(original: bytes, edit: tuple) -> bytes:
    kind, a, b = edit
    text = original.decode("utf-8")
    if kind in ("set", "set_prediction"):
        front, body = split_record(text, "prereg")
        if kind == "set":
            front[a] = b
        else:
            front["predictions"][0][a] = b
        return render_record(front, body).encode("utf-8")
    if kind == "flip":
        i = a % len(original)
        return original[:i] + bytes([original[i] ^ b]) + original[i + 1:]
    if kind == "cut":
        return original[:a % len(original)]
    lines = text.splitlines(keepends=True)
    i = a % len(lines)
    if kind == "insert_line":
        lines.insert(i, b + "\n")
    else:
        del lines[i]
    return "".join(lines).encode("utf-8")


@FUZZ
@given(_edit)
def test_any_edit_of_a_committed_preregistration_is_refused_or_named_by_verify(prereg, edit):
    project, pid, path, original = prereg
    try:
        changed = _edited(original, edit)
    except (yaml.YAMLError, LogbookError, TypeError):
        return  # the edit itself could not be expressed; nothing was written
    if changed == original:
        return
    path.write_bytes(changed)
    try:
        try:
            load_prereg(project, pid)
        except LogbookError as e:
            assert e.message and e.exit_code in (2, 3, 4)
        report = verify_project(project)
        named = [f for f in report.problems if f.path.endswith(path.name)]
        assert named, f"an edit passed verify: {edit!r}"
    finally:
        path.write_bytes(original)
    assert verify_project(project).ok
