"""Rank marks name the workers that vanished, even when a rejoining node writes its new mark first."""

from logbook.runs.rankmarks import RankMark, lost_ranks, read_marks


def _member(rank: int) -> dict:
    return {"rank": rank, "node": rank, "local_rank": 0, "host": f"node{rank}", "pid": 1000 + rank}


def test_a_vanished_worker_is_named_after_its_rank_starts_the_next_attempt(tmp_path):
    r0, r1 = RankMark(tmp_path, 0), RankMark(tmp_path, 1)
    r0.started(1, _member(0))
    r1.started(1, _member(1))
    r0.ended("SIGTERM")  # rank 0 stopped by itself; rank 1's node vanished (its mark stays open)
    RankMark(tmp_path, 1).started(2, _member(1))  # the node rejoins before rank 0 has read the marks

    lost = lost_ranks(read_marks(tmp_path), 1)
    assert [(m["rank"], m["attempt"]) for m in lost] == [(1, 1)]
    assert lost_ranks(read_marks(tmp_path), 2) == [m for m in read_marks(tmp_path) if m["attempt"] == 2]


def test_a_mark_keeps_only_the_attempt_before_it(tmp_path):
    for attempt in (1, 2, 3):
        RankMark(tmp_path, 0).started(attempt, _member(0))
    assert sorted(m["attempt"] for m in read_marks(tmp_path)) == [2, 3]


def test_a_worker_that_ended_by_itself_keeps_the_mark_it_replaced(tmp_path):
    RankMark(tmp_path, 1).started(1, _member(1))
    mark = RankMark(tmp_path, 1)
    mark.started(2, _member(1))
    mark.ended()
    assert [m["attempt"] for m in lost_ranks(read_marks(tmp_path), 1)] == [1]
    assert lost_ranks(read_marks(tmp_path), 2) == []
