"""Third-party time with a real RFC 3161 authority (openssl ts -reply on 127.0.0.1): stamping, offline checks,
pending stamps, `require`, and "before" proven by the stamps."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import yaml

from conftest import git
from tsa_fixture import CA_REL, closed_port_url, make_ca, silent_tsa

from logbook.core.errors import UsageError
from logbook.core.project import open_project
from logbook.eventlog.sink import EventSink
from logbook.runs.run_record import RunRecord, write_run_record
from logbook.trust import stamp_store as timestamps
from logbook.trust.stamp_fetch import bytes_digest, stamp_run_start


def _prereg(cli, title: str = "qk norm removes spikes") -> tuple[str, str]:
    res = cli("prereg", "--title", title, "--hypothesis", "bounded logits", "--predict", "val_loss@final < 3",
              "--json")
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    return out["id"], out["sha256"]


def _verify(cli) -> tuple[int, dict]:
    res = cli("verify", "--json")
    return res.exit_code, json.loads(res.stdout)


def _kinds(report: dict) -> list[str]:
    return [p["kind"] for p in report["problems"]]


def _stamp_files(repo: Path) -> list[Path]:
    return sorted((repo / "entries" / "stamps").glob("*/*.tsr"))


def _run(repo: Path, run_id: str, prereg_id: str | None, events: int = 3, *, launcher_stamps: bool = False) -> Path:
    """A run as the launcher records it (run.json, its stamp when asked, then the trainer's events), untrained."""
    proj = open_project()
    from logbook.eventlog.chain import utc_now

    # Launched now, after the preregistration: verify compares the records' own times too.
    write_run_record(proj, RunRecord(run_id=run_id, created=utc_now(), config_path="c.yaml",
                                     config_hash="0" * 64, prereg_id=prereg_id, exploratory=prereg_id is None,
                                     amendments=[]))
    if launcher_stamps:
        assert stamp_run_start(proj, run_id).written  # what the launcher does before torchrun starts
    sink = EventSink(proj.run_dir(run_id), run_id, attempt=1)
    for step in range(events):
        sink.emit("milestone", step=step * 10, fraction=step / events)
    return proj.run_dir(run_id)


# --- settings --------------------------------------------------------------------------------


@pytest.mark.parametrize("block, words", [
    ({"authorities": []}, "non-empty list"),
    ({"authorities": [{"url": "ftp://tsa.example/", "ca": "trust/ca.pem"}]}, "http(s) URL"),
    ({"authorities": [{"url": "https://tsa.example/", "ca": "../ca.pem"}]}, "path inside the repository"),
    ({"authorities": [{"url": "https://tsa.example/"}]}, "exactly `url` and `ca`"),
    ({"authorities": [{"url": "https://tsa.example/", "ca": "a.pem"}], "require": "yes"}, "true or false"),
    ({"authorities": [{"url": "https://tsa.example/", "ca": "a.pem"}], "timeout_s": 0}, "timeout_s"),
    ({"authorities": [{"url": "https://tsa.example/", "ca": "a.pem"}], "requires": True}, "did you mean `require`"),
])
def test_bad_timestamping_settings_are_refused_at_load(logbook_repo, cli, block, words):
    cfg = yaml.safe_load((logbook_repo / "logbook.yaml").read_text())
    (logbook_repo / "logbook.yaml").write_text(yaml.safe_dump({**cfg, "timestamping": block}))
    res = cli("verify")
    assert res.exit_code == 2
    assert "timestamping" in res.output and words in res.output


def test_settings_default_timeout_is_five_seconds(logbook_repo, local_tsa):
    local_tsa.configure(logbook_repo)
    cfg = yaml.safe_load((logbook_repo / "logbook.yaml").read_text())
    del cfg["timestamping"]["timeout_s"]
    (logbook_repo / "logbook.yaml").write_text(yaml.safe_dump(cfg))
    assert open_project().config.timestamping.timeout_s == 5.0


# --- stamping and checking -----------------------------------------------------------------------


def test_prereg_is_stamped_committed_and_verified_offline(logbook_repo, cli, local_tsa):
    local_tsa.configure(logbook_repo)
    pid, digest = _prereg(cli)
    [stamp] = _stamp_files(logbook_repo)
    assert stamp.parent.name == digest  # filed under the record's own Logbook-Sha256
    assert git(logbook_repo, "status", "--porcelain", "--", "entries/stamps") == ""  # committed with it
    assert f"Stamp preregistration {pid}" in git(logbook_repo, "log", "-1", "--format=%s")
    local_tsa.stop()  # checking needs no network
    code, report = _verify(cli)
    assert code == 0, report["problems"]
    facts = report["timestamps"]
    assert facts["state"] == "on" and facts["stamps"] == 1 and facts["pending"] == []
    assert facts["preregs"][pid]["stamped"] and facts["preregs"][pid]["authority"] == local_tsa.url
    assert f"{pid}: stamped " in cli("verify").stdout


def test_amendment_is_stamped(logbook_repo, cli, local_tsa):
    local_tsa.configure(logbook_repo)
    pid, _ = _prereg(cli)
    res = cli("prereg", "amend", pid, "--seen", "nothing", "--reason", "tighter", "--predict", "spikes@final == 0",
              "--json")
    assert res.exit_code == 0, res.output
    digest = json.loads(res.stdout)["sha256"]
    assert timestamps.earliest(open_project(), digest) is not None


def test_no_authority_is_its_own_state_not_a_failure(logbook_repo, cli):
    pid, _ = _prereg(cli)
    code, report = _verify(cli)
    assert code == 0 and report["timestamps"]["state"] == "off"
    assert "no third-party time" in cli("verify").stderr
    assert not _stamp_files(logbook_repo)


def test_tampered_token_is_exit_4_naming_the_file_and_the_proof(logbook_repo, cli, local_tsa):
    local_tsa.configure(logbook_repo)
    run = _run(logbook_repo, "r1", None)
    assert cli("stamp").exit_code == 0  # not committed yet: only the token's own check can tell
    stamp = next(p for p in _stamp_files(logbook_repo) if p.parent.name == bytes_digest(run / "run.json"))
    data = bytearray(stamp.read_bytes())
    data[-8] ^= 0x01  # inside the signature, the last field of the token
    stamp.write_bytes(bytes(data))
    code, report = _verify(cli)
    assert code == 4 and _kinds(report) == ["stamp_invalid"]
    bad = report["problems"][0]
    assert bad["path"] == stamp.relative_to(logbook_repo).as_posix()
    assert "the signature check failed" in bad["message"]
    res = cli("verify")
    assert "run `logbook stamp` for a fresh one" in res.stderr  # the hint says what to do


def test_edited_committed_token_is_exit_4(logbook_repo, cli, local_tsa):
    local_tsa.configure(logbook_repo)
    _prereg(cli)
    [stamp] = _stamp_files(logbook_repo)
    data = bytearray(stamp.read_bytes())
    data[-8] ^= 0x01
    stamp.write_bytes(bytes(data))
    code, report = _verify(cli)
    assert code == 4 and "stamp_invalid" in _kinds(report)


def test_token_from_an_untrusted_ca_fails_the_chain_check(logbook_repo, cli, local_tsa, tmp_path):
    local_tsa.configure(logbook_repo)
    _prereg(cli)
    other = make_ca(tmp_path / "other", "Somebody Else's CA")
    local_tsa.configure(logbook_repo, ca_pem=other)  # the repository now trusts another CA
    code, report = _verify(cli)
    assert code == 4
    [bad] = [p for p in report["problems"] if p["kind"] == "stamp_invalid"]
    assert "the chain check failed" in bad["message"]


def test_token_filed_under_another_records_hash_fails_the_imprint_check(logbook_repo, cli, local_tsa):
    local_tsa.configure(logbook_repo, url=closed_port_url(), timeout_s=1)
    _, second = _prereg(cli, "second idea")  # pending: its authority is unreachable
    local_tsa.configure(logbook_repo)
    _, first = _prereg(cli, "first idea")
    [stamp] = _stamp_files(logbook_repo)
    forged = stamp.parent.parent / second / stamp.name
    forged.parent.mkdir()
    forged.write_bytes(stamp.read_bytes())
    code, report = _verify(cli)
    assert code == 4
    [bad] = [p for p in report["problems"] if p["kind"] == "stamp_invalid"]
    assert bad["path"].endswith(f"{second}/{stamp.name}") and "the imprint check failed" in bad["message"]


# --- pending stamps ----------------------------------------------------------------------------


def test_unreachable_authority_leaves_the_stamp_pending_and_stamp_fetches_it(logbook_repo, cli, local_tsa):
    local_tsa.configure(logbook_repo)
    local_tsa.stop()  # a closed port
    pid, digest = _prereg(cli)
    assert not _stamp_files(logbook_repo)
    code, report = _verify(cli)
    assert code == 0 and report["timestamps"]["pending"] == [f"entries/prereg/{pid}.md"]
    assert cli("stamp").exit_code == 3  # still unreachable: pending, said so
    local_tsa.start()
    res = cli("stamp")
    assert res.exit_code == 0, res.output
    assert f"stamped  preregistration {pid}" in res.stdout
    assert timestamps.earliest(open_project(), digest) is not None
    assert cli("commit").exit_code == 0
    assert git(logbook_repo, "ls-files", "entries/stamps").strip().endswith(".tsr")


def test_commit_fetches_pending_stamps_and_commits_them(logbook_repo, cli, local_tsa):
    local_tsa.configure(logbook_repo)
    _run(logbook_repo, "r1", None)  # a run recorded while nothing stamped it
    res = cli("commit")
    assert res.exit_code == 0, res.output
    committed = git(logbook_repo, "ls-files", "entries/stamps").split()
    digest = bytes_digest(logbook_repo / "entries/runs/r1/run.json")
    assert any(p.startswith(f"entries/stamps/{digest}/") for p in committed)
    assert len(committed) == 2  # the run record and its log's head


def test_a_silent_authority_costs_one_timeout_and_no_more(logbook_repo, cli, local_tsa):
    with silent_tsa() as url:
        local_tsa.configure(logbook_repo, url=url, timeout_s=1)
        began = time.monotonic()
        pid, _ = _prereg(cli)
        took = time.monotonic() - began
    assert took < 3.5, took  # the preregistration itself takes well under a second
    assert (logbook_repo / "entries" / "prereg" / f"{pid}.md").exists() and not _stamp_files(logbook_repo)


def test_require_makes_a_missing_stamp_exit_4_until_fetched(logbook_repo, cli, local_tsa):
    local_tsa.configure(logbook_repo, require=True)
    local_tsa.stop()
    pid, _ = _prereg(cli)
    code, report = _verify(cli)
    assert code == 4 and _kinds(report) == ["stamp_missing"]
    assert report["problems"][0]["path"] == f"entries/prereg/{pid}.md"
    local_tsa.start()
    assert cli("stamp").exit_code == 0
    assert _verify(cli)[0] == 0


def test_a_reader_who_requires_stamps_gets_exit_4_for_a_missing_one_the_lab_does_not_require(
        logbook_repo, cli, local_tsa):
    local_tsa.configure(logbook_repo, require=False)
    local_tsa.stop()
    pid, _ = _prereg(cli)
    assert _verify(cli)[0] == 0  # the lab's own setting: pending is not a failure
    res = cli("verify", "--require-stamps", "--json")
    report = json.loads(res.stdout)
    assert res.exit_code == 4 and _kinds(report) == ["stamp_missing"]
    assert report["problems"][0]["path"] == f"entries/prereg/{pid}.md"


# --- order -------------------------------------------------------------------------------------


def test_run_stamped_after_its_preregistration_is_before(logbook_repo, cli, local_tsa):
    local_tsa.configure(logbook_repo)
    pid, _ = _prereg(cli)
    _run(logbook_repo, "r1", pid, launcher_stamps=True)
    assert cli("commit").exit_code == 0
    code, report = _verify(cli)
    assert code == 0, report["problems"]
    assert report["timestamps"]["runs"]["r1"]["order"] == "before"
    assert "run r1: before" in cli("verify").stdout


def test_preregistration_stamped_after_its_run_started_is_exit_4(logbook_repo, cli, local_tsa):
    local_tsa.configure(logbook_repo)
    local_tsa.stop()
    pid, _ = _prereg(cli)  # written, its stamp pending
    run = _run(logbook_repo, "r1", pid)
    local_tsa.start()
    project = open_project()
    digest = bytes_digest(run / "run.json")
    assert timestamps.stamp_digest(project, digest, what="run r1's record").written  # the run's stamp first
    time.sleep(1.1)  # the authority's clock reads whole seconds
    assert cli("stamp").exit_code == 0  # then the preregistration's: a forged order
    assert cli("commit").exit_code == 0
    code, report = _verify(cli)
    assert code == 4
    [bad] = [p for p in report["problems"] if p["kind"] == "stamped_after_run"]
    assert bad["path"] == "entries/runs/r1/run.json" and "is not earlier than the run record's" in bad["message"]
    assert report["timestamps"]["runs"]["r1"]["order"] == "NOT before"


def test_run_whose_stamps_all_came_after_it_ended_proves_no_order(logbook_repo, cli, local_tsa):
    local_tsa.configure(logbook_repo)
    pid, _ = _prereg(cli)  # stamped at once
    local_tsa.stop()
    _run(logbook_repo, "r1", pid)  # the whole run goes by unstamped
    time.sleep(1.1)
    local_tsa.start()
    assert cli("stamp").exit_code == 0  # run record and log head, stamped after the last event
    assert cli("commit").exit_code == 0
    code, report = _verify(cli)
    assert code == 0  # a warning without `require`
    assert report["timestamps"]["runs"]["r1"]["order"].startswith("no third-party proof of order")
    assert any(w["kind"] == "stamps_after_run" for w in report["warnings"])
    local_tsa.configure(logbook_repo, require=True)
    code, report = _verify(cli)
    assert code == 4 and "stamps_after_run" in _kinds(report)


def test_stamped_log_head_that_is_gone_is_exit_4(logbook_repo, cli, local_tsa):
    local_tsa.configure(logbook_repo)
    run = _run(logbook_repo, "r1", None)
    assert cli("stamp").exit_code == 0  # the head (line 3) is stamped, the log not yet committed
    log = run / "events.jsonl"
    log.write_text("".join(log.read_text().splitlines(keepends=True)[:2]))  # a clean prefix: the chain holds
    code, report = _verify(cli)
    assert code == 4 and _kinds(report) == ["stamp_orphan"]
    assert "no record and no event-log line has any more" in report["problems"][0]["message"]


def test_stamp_api_for_other_checks(logbook_repo, cli, local_tsa):
    """`stamp_digest`, `verified_stamps` and `earliest` as the seed and replay code reads them."""
    local_tsa.configure(logbook_repo)
    project = open_project()
    digest = "ab" * 32
    first = timestamps.stamp_digest(project, digest, what="a test digest")
    again = timestamps.stamp_digest(project, digest, what="a test digest")
    assert first.written and again.present == first.written and not again.written  # written once
    [stamp] = timestamps.verified_stamps(project, digest)
    assert stamp.authority == local_tsa.url and stamp.time.tzinfo is not None and stamp.path == first.written[0]
    assert timestamps.earliest(project, digest) == stamp
    assert timestamps.earliest(project, "cd" * 32) is None
    with pytest.raises(UsageError):
        timestamps.stamp_digest(project, "not-a-digest", what="x")


def test_the_launchers_watcher_stamps_the_head_at_each_checkpoint(logbook_repo, local_tsa):
    from logbook.launch.watch import Watcher
    from logbook.trust.stamp_fetch import HeadStamper

    local_tsa.configure(logbook_repo)
    project = open_project()
    run = _run(logbook_repo, "r1", None, events=0)
    sink = EventSink(run, "r1", attempt=1)
    heads = HeadStamper(project, "r1")
    watcher = Watcher(project, "r1", proc=None, say=lambda _: None, heads=heads)
    sink.emit("milestone", step=1, fraction=0.1)
    watcher.tick()  # no checkpoint: nothing to stamp
    sink.emit("checkpoint_saved", step=2, path="ckpt/2", bytes=1, blocking_s=0.0, total_s=0.0)
    at_checkpoint = json.loads((run / "events.jsonl").read_text().splitlines()[-1])["hash"]
    watcher.tick()
    sink.emit("milestone", step=3, fraction=0.3)
    heads.close()  # the launcher's end: the final head too
    lines = [json.loads(x)["hash"] for x in (run / "events.jsonl").read_text().splitlines()]
    assert timestamps.earliest(project, at_checkpoint) is not None
    assert timestamps.earliest(project, lines[-1]) is not None and timestamps.earliest(project, lines[0]) is None


# --- a real run ----------------------------------------------------------------------------------


@pytest.mark.slow
def test_a_real_run_is_stamped_at_start_at_checkpoints_and_at_its_outcome(logbook_repo, cli, local_tsa):
    """The honest flow needs no extra command: prereg, run, outcome, commit; verify proves "before"."""
    import subprocess
    import sys

    from conftest import ROOT
    from runhelpers import micro_config, of_kind, events

    cfg = micro_config(logbook_repo, steps=6, every=2)
    local_tsa.configure(logbook_repo)
    git(logbook_repo, "add", "configs")
    git(logbook_repo, "commit", "-q", "-m", "micro config")
    pid, _ = _prereg(cli)
    env = {**__import__("os").environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-m", "logbook", "run", "--prereg", pid, "--run-id", "tiny", str(cfg)],
                          cwd=logbook_repo, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "stamped run tiny's record" in proc.stderr + proc.stdout
    project = open_project()
    run_json = logbook_repo / "entries/runs/tiny/run.json"
    started = timestamps.earliest(project, bytes_digest(run_json))
    first_event = min(e["ts"] for e in events(logbook_repo, "tiny"))
    assert started is not None and started.time.isoformat() <= first_event.replace("Z", "+00:00")  # before step 1
    assert of_kind(events(logbook_repo, "tiny"), "checkpoint_saved")
    final = events(logbook_repo, "tiny")[-1]
    assert final["kind"] == "run_finished" and timestamps.earliest(project, final["hash"]) is not None  # the end
    res = cli("outcome", "tiny", "--json")
    assert res.exit_code == 0, res.output
    card = next((logbook_repo / "entries/runs/tiny/outcomes").glob("*.json"))
    assert timestamps.earliest(project, json.loads(card.read_text())["hash"]) is not None
    assert cli("commit").exit_code == 0
    assert git(logbook_repo, "status", "--porcelain", "--", "entries/stamps") == ""
    code, report = _verify(cli)
    assert code == 0, report["problems"]
    assert report["timestamps"]["runs"]["tiny"]["order"] == "before" and report["timestamps"]["pending"] == []


def test_a_run_stamp_is_strictly_later_than_its_preregistrations(logbook_repo, local_tsa):
    """The authority's clock reads seconds: a run stamped in its preregistration's second would order nothing."""
    local_tsa.configure(logbook_repo)
    project = open_project()
    first = timestamps.stamp_digest(project, "01" * 32, what="a preregistration")
    mark = timestamps.earliest(project, "01" * 32).time
    timestamps.stamp_digest(project, "02" * 32, what="a run record", after=mark)
    assert first.written and timestamps.earliest(project, "02" * 32).time > mark


def test_pending_stamps_cost_one_timeout_in_all(logbook_repo, cli, local_tsa):
    local_tsa.configure(logbook_repo)
    local_tsa.stop()
    for title in ("one", "two", "three"):
        _prereg(cli, title)
    with silent_tsa() as url:
        local_tsa.configure(logbook_repo, url=url, timeout_s=1)
        began = time.monotonic()
        assert cli("stamp").exit_code == 3
        assert time.monotonic() - began < 2.5  # not three timeouts


def test_an_amendment_in_force_stamped_after_the_run_started_is_exit_4(logbook_repo, cli, local_tsa):
    local_tsa.configure(logbook_repo)
    pid, _ = _prereg(cli)
    local_tsa.stop()
    res = cli("prereg", "amend", pid, "--seen", "nothing", "--reason", "r", "--predict", "spikes@final == 0", "--json")
    key = json.loads(res.stdout)["amendment"]
    proj = open_project()
    write_run_record(proj, RunRecord(run_id="r1", created="2026-12-01T00:00:00Z", config_path="c.yaml",
                                     config_hash="0" * 64, prereg_id=pid, amendments=[key]))
    local_tsa.start()
    assert stamp_run_start(proj, "r1").written  # after the preregistration's stamp, as the launcher does
    time.sleep(1.1)
    assert cli("stamp").exit_code == 0  # the amendment's stamp comes after the run's
    code, report = _verify(cli)
    assert code == 4
    [bad] = [p for p in report["problems"] if p["kind"] == "stamped_after_run"]
    assert f"amendment {key} of {pid}" in bad["message"]


def test_stamps_of_an_authority_no_longer_configured_are_a_warning(logbook_repo, cli, local_tsa):
    local_tsa.configure(logbook_repo)
    _prereg(cli)
    local_tsa.configure(logbook_repo, url="http://127.0.0.1:9/")  # another authority now
    code, report = _verify(cli)
    assert code == 0 and [w["kind"] for w in report["warnings"]] == ["stamp_unchecked"]


def test_a_stamp_checked_once_is_not_checked_again_unless_its_bytes_change(logbook_repo, cli, local_tsa):
    local_tsa.configure(logbook_repo)
    run = _run(logbook_repo, "r1", None)
    assert cli("stamp").exit_code == 0
    assert _verify(cli)[0] == 0
    from logbook.core import statecache

    cache = statecache.load(open_project(logbook_repo), "verified-stamps.json")
    assert len(cache) == 2  # the run record's and the head's
    stamp = next(p for p in _stamp_files(logbook_repo) if p.parent.name == bytes_digest(run / "run.json"))
    data = bytearray(stamp.read_bytes())
    data[-8] ^= 0x01
    stamp.write_bytes(bytes(data))
    assert "stamp_invalid" in _kinds(_verify(cli)[1])  # a changed token is not found in the cache
    assert "stamp_invalid" in _kinds(json.loads(cli("verify", "--full", "--json").stdout))


def test_a_warm_verify_reads_no_certificate_and_a_changed_or_missing_ca_is_not_found_in_the_cache(
        logbook_repo, cli, local_tsa, tmp_path):
    """The cache is consulted before the CA is parsed (a warm verify of thousands of stamps parses none), yet
    its key still holds the CA's bytes: another CA at the same path, or none, is checked, not trusted."""
    from logbook.trust.stamp_proof import check_time

    local_tsa.configure(logbook_repo)
    _run(logbook_repo, "r1", None)
    assert cli("stamp").exit_code == 0
    assert _verify(cli)[0] == 0
    timestamps._anchors.cache_clear()
    report = check_time(open_project(logbook_repo))
    assert report.facts["stamps"] == 2 and not report.findings
    assert timestamps._anchors.cache_info().misses == 0  # every stamp answered from the cache
    ca = logbook_repo / CA_REL
    ca.write_bytes(make_ca(tmp_path / "other", "Another Root CA").read_bytes())
    # The first verify pinned the CA's hash on first use: the pin names the swap too, beside each stamp.
    code, report = _verify(cli)
    assert code == 4 and _kinds(report) == ["pin_differs", "stamp_invalid", "stamp_invalid"]
    ca.unlink()
    code, report = _verify(cli)
    stamps = [p for p in report["problems"] if p["kind"] != "pin_differs"]
    assert code == 4 and all(CA_REL in p["message"] for p in stamps) and len(stamps) == 2


def test_a_team_shares_stamps_through_git_and_a_fresh_clone_verifies_them(tmp_path, local_tsa):
    from team import make_team

    team = make_team(tmp_path, ["alice", "bob"])
    alice, bob = team["alice"], team["bob"]
    local_tsa.configure(alice.path)
    alice.push()
    bob.pull()
    pid = json.loads(alice.ok("prereg", "--title", "wider mlp", "--hypothesis", "h", "--predict",
                              "val_loss@final < 3", "--json").stdout)["id"]
    alice.push()  # the stamp was committed with the preregistration: no extra command
    assert bob.pull().returncode == 0
    bob.ok("prereg", "amend", pid, "--seen", "nothing", "--reason", "r", "--predict", "spikes@final == 0")
    bob.commit()
    bob.push()
    alice.pull()
    local_tsa.stop()  # every clone checks offline
    fresh = team.join("carol")
    for c in (alice, bob, fresh):
        report = json.loads(c.ok("verify", "--json").stdout)
        assert report["ok"] and report["timestamps"]["stamps"] == 2 and report["timestamps"]["pending"] == []
        assert report["timestamps"]["preregs"][pid]["stamped"]


def test_a_missing_ca_file_leaves_stamps_pending_and_verify_says_which_file(logbook_repo, cli, local_tsa):
    local_tsa.configure(logbook_repo)
    _prereg(cli, "first")
    git(logbook_repo, "rm", "-q", CA_REL)
    git(logbook_repo, "commit", "-q", "-m", "CA removed")
    res = cli("prereg", "--title", "second", "--hypothesis", "h", "--predict", "val_loss@final < 3")
    assert res.exit_code == 0 and "stamp pending" in res.stderr and CA_REL in res.stderr
    code, report = _verify(cli)
    assert code == 4 and _kinds(report) == ["stamp_invalid"] and CA_REL in report["problems"][0]["message"]


def test_a_launch_waits_one_timeout_at_most_for_all_its_stamps(logbook_repo, cli, local_tsa):
    """The preregistration's missing stamp and the run record's share one timeout before the first step."""
    from logbook.trust.stamp_fetch import launch_deadline, stamp_prereg_before_run

    local_tsa.configure(logbook_repo)
    local_tsa.stop()
    pid, _ = _prereg(cli)  # pending
    with silent_tsa() as url:
        local_tsa.configure(logbook_repo, url=url, timeout_s=1)
        project = open_project()
        began = time.monotonic()
        deadline = launch_deadline(project)
        before = stamp_prereg_before_run(project, pid, [], deadline)
        _run(logbook_repo, "r1", pid, events=0)
        start = stamp_run_start(project, "r1", deadline)
        took = time.monotonic() - began
    assert before[0].pending and start.pending and not start.written
    assert took < 1.6, took


def test_only_files_named_like_stamps_are_read_as_stamps(logbook_repo, cli, local_tsa):
    local_tsa.configure(logbook_repo)
    _prereg(cli)
    [stamp] = _stamp_files(logbook_repo)
    (stamp.parent / "README.txt").write_text("not a stamp")  # a stray file is the record kinds' business
    report = _verify(cli)[1]
    assert report["timestamps"]["stamps"] == 1
    assert not [f for f in report["problems"] + report["warnings"] if f["kind"].startswith("stamp")]


def test_a_pending_stamp_is_fetched_by_its_authors_clone_only(tmp_path, local_tsa):
    """Two clones fetching one stamp would add one path with different bytes: a conflict at the next pull."""
    from team import make_team

    team = make_team(tmp_path, ["alice", "bob"])
    alice, bob = team["alice"], team["bob"]
    local_tsa.configure(alice.path)
    local_tsa.stop()
    pid = json.loads(alice.ok("prereg", "--title", "t", "--hypothesis", "h", "--predict", "val_loss@final < 3",
                              "--json").stdout)["id"]
    alice.push()
    assert bob.pull().returncode == 0
    local_tsa.start()
    bob.ok("stamp")  # nothing of Bob's is missing a stamp
    assert not list((bob.entries() / "stamps").glob("*/*.tsr"))
    alice.ok("stamp")
    alice.commit()
    alice.push()
    assert bob.pull().returncode == 0 and bob.conflicts() == []
    assert json.loads(bob.ok("verify", "--json").stdout)["timestamps"]["preregs"][pid]["stamped"]


def test_a_launch_leaves_a_teammates_pending_stamp_to_them_and_says_so(logbook_repo, cli, local_tsa):
    from logbook.trust.stamp_fetch import stamp_prereg_before_run

    local_tsa.configure(logbook_repo)
    local_tsa.stop()
    pid, _ = _prereg(cli)
    git(logbook_repo, "config", "user.email", "bob@example.org")  # Bob launches Alice's preregistration
    local_tsa.start()
    [outcome] = stamp_prereg_before_run(open_project(), pid, [])
    assert not outcome.written and "clone, which fetches its stamp" in outcome.pending[0]
    assert not _stamp_files(logbook_repo)


def test_an_authority_that_embeds_its_chain_is_asked_without_certreq_once_its_certificate_is_trusted(
        logbook_repo, cli, chained_tsa, tsa_pki, tmp_path):
    chained_tsa.configure(logbook_repo)  # the CA alone: the chained token cannot be parsed
    res = cli("prereg", "--title", "first", "--hypothesis", "h", "--predict", "val_loss@final < 3")
    assert res.exit_code == 0 and "add the authority's own certificate to its ca file" in res.stderr
    assert not _stamp_files(logbook_repo)
    both = tmp_path / "ca-and-tsa.pem"
    both.write_bytes(tsa_pki.ca_pem_path.read_bytes() + (tsa_pki.folder / "tsa.pem").read_bytes())
    chained_tsa.configure(logbook_repo, ca_pem=both)
    assert cli("stamp").exit_code == 0
    assert len(_stamp_files(logbook_repo)) == 1
    assert _verify(cli)[0] == 0


def test_a_stamp_cache_not_sealed_here_never_vouches_and_full_reads_every_stamp_again(logbook_repo, cli, local_tsa):
    """A cache that vouches for a bad token is read only when this user's logbook sealed it in this clone (a
    planted or copied one is ignored), and `--full` reads every token again whatever the cache says."""
    from logbook.core import statecache
    from logbook.trust.stamp_store import StampCache, _cache_key, authority_for

    local_tsa.configure(logbook_repo)
    run = _run(logbook_repo, "r1", None)
    assert cli("stamp").exit_code == 0
    assert _verify(cli)[0] == 0
    stamp = next(p for p in _stamp_files(logbook_repo) if p.parent.name == bytes_digest(run / "run.json"))
    data = bytearray(stamp.read_bytes())
    data[-8] ^= 0x01
    stamp.write_bytes(bytes(data))
    project = open_project(logbook_repo)
    cache = statecache.load(project, StampCache.FILE)
    cache[_cache_key(project, authority_for(project, stamp), stamp.parent.name, bytes(data))] = \
        "2026-01-01T00:00:00+00:00"
    (logbook_repo / ".logbook" / StampCache.FILE).write_text(json.dumps(cache))  # planted: no seal
    assert "stamp_invalid" in _kinds(_verify(cli)[1])
    statecache.save(project, StampCache.FILE, cache)  # as this user's own logbook would have written it
    (logbook_repo / ".logbook" / "verified-report.json").unlink()  # the last report is kept while the tree is the same
    assert "stamp_invalid" not in _kinds(_verify(cli)[1])  # the user's own cache vouched for it
    assert "stamp_invalid" in _kinds(json.loads(cli("verify", "--full", "--json").stdout))
