"""The full wording of every way forward `verify` gives, pinned once per kind of finding.

Other tests assert which command a hint names and its key phrase; the sentences live in
__snapshots__/test_wording_verify_hints.ambr (`pytest --snapshot-update` after a deliberate change).
"""

from __future__ import annotations

import pytest
from normalise import normalise

from logbook.core.errors import RefusedError
from logbook.proof.verify import Finding, VerifyReport, fix_hint

HAD, LOST = "a" * 40, "b" * 40
REL = "entries/notes/n-1.json"

# Each kind of finding with the commits it names (had, lost), as verify assembles them.
KINDS = {
    "edited": (None, None), "deleted": (None, None), "log_lines_missing": (None, None),
    "log_deleted": (None, None), "log_edited": (None, None),
    "symlink": (None, None), "record_symlink": (None, None),
    "record_edited": (HAD, LOST), "log_rewritten": (HAD, LOST),
    "remote_dropped": ("origin/main", "HEAD"), "remote_differs": (HAD, LOST),
    "remote_erased": (HAD, "origin/main"), "remote_erased_elsewhere": (HAD, "origin/main"),
    "uncommitted": (None, None), "prereg_after_run": (None, None), "hash_mismatch": (None, None),
    "chain_broken": (None, None),
    "unproven_tail": (HAD, "HEAD"), "stamp_missing": (HAD, "HEAD"), "stamps_after_run": (HAD, "HEAD"),
    "seed_mismatch": (None, None), "seed_source_missing": (None, None),
    "replay_differs": (None, None), "replay_not_done": (None, None),
    "after_end": (None, None), "outcome_in_log": (None, None),
    "snapshot_missing": (None, None), "snapshot_moved": (None, None),
    "snapshot_prereg_differs": (None, None), "seen_false": (None, None), "prereg_differs_in_log": (None, None),
}


def _f(kind: str, had: str | None = None, lost: str | None = None) -> Finding:
    return Finding(REL, kind, f"{REL} is not as written ({kind})", had=had, lost=lost)


def _text(s: str) -> str:
    return normalise(s, rel=REL)


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_the_way_forward_for_each_kind_of_finding_reads_in_full(kind, snapshot):
    assert _text(fix_hint(_f(kind, *KINDS[kind]))) == snapshot


def test_the_way_forward_from_the_working_tree_and_mid_merge_reads_in_full(snapshot):
    merging = VerifyReport(in_progress="a merge is in progress: `git merge --continue`")
    assert {
        "deleted, outside a merge": _text(VerifyReport().hint_for(_f("deleted"))),
        "record_edited, mid merge": _text(merging.hint_for(_f("record_edited", HAD, LOST))),
        "edited, mid merge": _text(merging.hint_for(_f("edited"))),
    } == snapshot


def test_the_refusal_for_an_ignored_record_reads_in_full(snapshot):
    with pytest.raises(RefusedError) as err:
        VerifyReport(unverifiable=[_f("ignored")]).raise_if_tampered()
    assert {"message": _text(err.value.args[0]), "hint": _text(err.value.hint)} == snapshot
