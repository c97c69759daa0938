"""Which commits of a chosen few come before which, in HEAD's history, from one `git rev-list`.

`verify` asks, for every run that answers to a preregistration, whether a
commit that added the preregistration is an ancestor of one that added the
run. One `git merge-base --is-ancestor` process a question was 8 of a lab
year's 13 seconds. Instead the commit graph is read once (`git rev-list
--topo-order --parents HEAD`, parents after their children) and each commit
gets, as one integer, the set of the chosen commits at or below it: a
commit's set is its own bit and its parents' sets together. Asking is then
a bit test. This is the reachability git's commit-graph answers, cut down to
the commits the question names.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from logbook.records import gitbind


class Ancestry:
    """Reachability among `targets` within the history of `head`."""

    def __init__(self, root: Path, head: str, targets: Iterable[str]) -> None:
        self._bit = {c: 1 << i for i, c in enumerate(sorted(set(targets)))}
        self._below: dict[str, int] = {}
        if not self._bit:
            return
        lines = gitbind.git(root, "rev-list", "--topo-order", "--parents", head, "--").splitlines()
        for line in reversed(lines):  # parents before children
            commit, *parents = line.split()
            mask = self._bit.get(commit, 0)
            for p in parents:  # a parent beyond a shallow boundary is absent: nothing below it is known
                mask |= self._below.get(p, 0)
            self._below[commit] = mask

    def is_ancestor(self, a: str, b: str) -> bool:
        """True when `a` (one of the targets) is `b` or an ancestor of `b`; False when either is not in the history."""
        return bool(self._below.get(b, 0) & self._bit.get(a, 0))
