"""`Ancestry` answers as `git merge-base --is-ancestor` does, over branches, merges and a shallow clone."""

from __future__ import annotations

import subprocess
from itertools import product

from conftest import git

from logbook.records.ancestry import Ancestry


def _commit(repo, name: str) -> str:
    (repo / name).write_text(name)
    git(repo, "add", name)
    git(repo, "commit", "-q", "-m", name)
    return git(repo, "rev-parse", "HEAD").strip()


def _git_says(repo, a: str, b: str) -> bool:
    return subprocess.run(["git", "merge-base", "--is-ancestor", a, b], check=False, cwd=repo).returncode == 0


def _branchy_history(repo) -> list[str]:
    """main and a side branch, merged both ways, plus a branch never merged into HEAD."""
    made = [git(repo, "rev-parse", "HEAD").strip(), _commit(repo, "a")]
    git(repo, "checkout", "-q", "-b", "side")
    made += [_commit(repo, "s1"), _commit(repo, "s2")]
    git(repo, "checkout", "-q", "main")
    made.append(_commit(repo, "b"))
    git(repo, "merge", "-q", "--no-ff", "-m", "merge side", "side")
    made.append(git(repo, "rev-parse", "HEAD").strip())
    git(repo, "checkout", "-q", "side")
    made.append(_commit(repo, "s3"))
    git(repo, "checkout", "-q", "-b", "never-merged")
    made.append(_commit(repo, "n1"))
    git(repo, "checkout", "-q", "main")
    git(repo, "merge", "-q", "--no-ff", "-m", "merge side again", "side")
    made += [git(repo, "rev-parse", "HEAD").strip(), _commit(repo, "c")]
    return made


def test_every_pair_is_answered_as_git_answers_it(repo):
    made = _branchy_history(repo)
    head = made[-1]
    graph = Ancestry(repo, head, made)
    answers = {(a, b): graph.is_ancestor(a, b) for a, b in product(made, made)}
    expected = {(a, b): _git_says(repo, a, b) and _git_says(repo, b, head) for a, b in product(made, made)}
    assert answers == expected
    assert sum(answers.values()) > len(made)  # more than the pairs of a commit with itself
    assert not any(graph.is_ancestor(made[7], b) for b in made if b != made[7])  # never-merged: outside HEAD


def test_a_commit_not_among_the_targets_is_no_ancestor_of_anything(repo):
    made = _branchy_history(repo)
    graph = Ancestry(repo, made[-1], made[:2])
    assert graph.is_ancestor(made[1], made[-1])
    assert not graph.is_ancestor(made[3], made[-1])  # s2 is an ancestor, but was not asked about
    assert not graph.is_ancestor("0" * 40, made[-1])


def test_a_shallow_clone_knows_nothing_below_its_boundary(repo, tmp_path):
    made = _branchy_history(repo)
    shallow = tmp_path / "shallow"
    git(tmp_path, "clone", "-q", "--depth", "2", f"file://{repo}", str(shallow))
    graph = Ancestry(shallow, made[-1], made)
    assert graph.is_ancestor(made[-2], made[-1])
    assert not graph.is_ancestor(made[0], made[-1])  # below the boundary: not in this clone's history
