"""Seeds drawn from the preregistration's timestamp token, and `verify --replay`: real runs, real git, a forger."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import ROOT, git
from runhelpers import events, micro_config, of_kind

from logbook.core.errors import EXIT_TAMPERED, UsageError
from logbook.core.project import open_project
from logbook.launch.launcher import _refuse_chosen_seed, launch_run
from logbook.eventlog.chain import GENESIS, ChainedLog, canonical, record_hash
from logbook.promises.prereg import load_prereg
from logbook.trust.replay import _not_replayable, check_seeds, seed_from_stamp

TSA_URL = "http://127.0.0.1:8080/"


# --- the stamps ----------------------------------------------------------------------


class Stamper:
    """Stamps a preregistration at the agreed path: with the real local TSA once the timestamping code is here,
    else with bytes no one could have guessed (all that the seed rule reads)."""

    def __init__(self, request: pytest.FixtureRequest) -> None:
        self.real = importlib.util.find_spec("logbook.trust.stamp_store") is not None
        self.tsa = request.getfixturevalue("local_tsa") if self.real else None

    def configure(self, repo: Path) -> None:
        """Before the preregistration: name the authority in logbook.yaml (and commit its CA)."""
        if self.tsa is not None:
            self.tsa.configure(repo)

    def stamp(self, repo: Path, digest: str) -> Path:
        """The preregistration's earliest stamp file, committed."""
        project = open_project(repo)
        if self.tsa is not None:
            from logbook.trust import stamp_store as timestamps

            if not list((project.entries / "stamps" / digest).glob("*.tsr")):
                timestamps.stamp_digest(project, digest, what="preregistration")
            path = timestamps.earliest(project, digest).path
        else:
            key = hashlib.sha256(TSA_URL.encode()).hexdigest()[:12]
            path = project.entries / "stamps" / digest / f"{key}.tsr"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(b"0\x82 token over " + digest.encode() + b" at " + str(time.time_ns()).encode())
        if git(repo, "status", "--porcelain", "--", str(path)):  # the timestamping code may have committed it
            git(repo, "add", str(path))
            git(repo, "commit", "-q", "-m", "stamp")
        return Path(path)


@pytest.fixture
def stamper(request) -> Stamper:
    return Stamper(request)


def _prereg(cli, repo: Path, cfg: Path) -> str:
    made = cli("prereg", "--title", "Micro GPT learns bytes", "--hypothesis", "The loss falls.",
               "--predict", "val_loss@final < 6.0", "--config", str(cfg), "--json")
    assert made.exit_code == 0, made.output
    return json.loads(made.stdout)["id"]


def _commit_all(repo: Path, message: str) -> None:
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", message)


# --- the seed rule -------------------------------------------------------------------


def test_the_seed_rule_is_the_agreed_hash_of_the_token_bytes():
    token = b"\x30\x82\x01\x00 any token"
    expected = int.from_bytes(hashlib.sha256(b"logbook-seed\0" + token).digest()[:8], "big") >> 1
    assert seed_from_stamp(token) == expected
    assert seed_from_stamp(b"") == 0xDB53C0D7D3520312 >> 1  # pinned: a changed rule would re-seed every replay
    assert 0 <= seed_from_stamp(b"\xff" * 64) < 2 ** 63  # within every RNG's range, `seed + 1 + rank` included
    assert seed_from_stamp(token) != seed_from_stamp(token + b"\0")


# --- an honest run, then a forger ----------------------------------------------------


@pytest.mark.slow
def test_a_run_draws_its_seed_from_the_stamp_and_its_first_steps_replay_bit_for_bit(logbook_repo, cli, stamper):
    stamper.configure(logbook_repo)
    # Attempt 1 fails after step 4 (the checkpoint of step 3 is complete); `--resume` finishes the run.
    cfg = micro_config(logbook_repo, steps=6, every=3, faults=[{"kind": "exception", "step": 4, "attempt": 1}])
    _commit_all(logbook_repo, "config")
    pid = _prereg(cli, logbook_repo, cfg)
    stamp = stamper.stamp(logbook_repo, load_prereg(open_project(), pid).sha256)
    seed = seed_from_stamp(stamp.read_bytes())

    said: list[str] = []
    res = launch_run(open_project(), cfg, [], prereg_id=pid, run_id="honest", max_restarts=0, say=said.append)
    assert res.status == "failed", said
    assert any(f"seed {seed}, drawn from the preregistration's timestamp" in s for s in said)
    res = launch_run(open_project(), None, [], resume="honest")
    assert res.status == "finished"
    source = stamp.relative_to(logbook_repo / "entries").as_posix()
    record = json.loads((logbook_repo / "entries" / "runs" / "honest" / "run.json").read_text())
    assert (record["seed"], record["seed_source"]) == (seed, source)
    starts = [e["data"] for e in of_kind(events(logbook_repo, "honest"), "run_started")]
    assert [(d["seed"], d["seed_source"], d["resumed_from_step"]) for d in starts] == [(seed, source, 0),
                                                                                       (seed, source, 3)]
    _commit_all(logbook_repo, "run")
    with open(cfg, "a") as f:
        f.write("# edited after the run: the replay trains what the snapshot holds\n")
    status = git(logbook_repo, "status", "--porcelain")

    t0 = time.monotonic()
    res = cli("verify", "--replay", "3")
    took = time.monotonic() - t0
    assert res.exit_code == 0, res.output
    assert f"REPLAYED  run honest: steps 1-3 equal bit for bit to a replay from seed {seed} (drawn from" in res.stdout
    print(f"verify --replay 3 on the micro config: {took:.2f} s")
    assert git(logbook_repo, "status", "--porcelain") == status  # the replay touched nothing of the user's
    assert git(logbook_repo, "worktree", "list").count("\n") == 1

    res = cli("verify", "--run", "honest")
    assert res.exit_code == 2 and "--run goes with --replay N" in res.output

    # A seed chosen on the command line would undo the draw: refused before anything starts.
    with pytest.raises(UsageError, match="is drawn from its timestamp, so train.seed cannot be set"):
        _refuse_chosen_seed(open_project(), load_prereg(open_project(), pid), ["optim.lr=1e-3", "train.seed=7"])
    _refuse_chosen_seed(open_project(), load_prereg(open_project(), pid), ["optim.lr=1e-3"])


@pytest.mark.slow
def test_a_run_made_first_and_given_a_stamped_preregistration_afterwards_fails_the_replay(logbook_repo, cli, stamper):
    stamper.configure(logbook_repo)
    cfg = micro_config(logbook_repo, steps=6, every=3)
    _commit_all(logbook_repo, "config")
    # The forger trains first, looks at the result ...
    res = launch_run(open_project(), cfg, [], exploratory=True, run_id="early", max_restarts=0)
    assert res.status == "finished"
    record = json.loads((logbook_repo / "entries" / "runs" / "early" / "run.json").read_text())
    assert (record["seed"], record["seed_source"]) == (1337, None)  # no stamp: the config's seed, not anchored
    assert of_kind(events(logbook_repo, "early"), "run_started")[0]["data"]["seed"] == 1337
    # ... then preregisters, has the preregistration stamped honestly, and makes the run answer to it.
    pid = _prereg(cli, logbook_repo, cfg)
    stamp = stamper.stamp(logbook_repo, load_prereg(open_project(), pid).sha256)
    seed, source = seed_from_stamp(stamp.read_bytes()), stamp.relative_to(logbook_repo / "entries").as_posix()
    _forge_run(logbook_repo, cfg, "early", pid, seed, source, new_config_hash=False)
    # A forger who left the config hash alone: the replay's inputs are not the run's, so nothing is proven.
    res = cli("verify", "--replay", "3", "--run", "early", "--json")
    report = json.loads(res.stdout)
    assert res.exit_code == (4 if report["problems"] else 3), res.output  # not replayed: 3, unless time says more
    (verdict,) = report["replay"]
    assert verdict["state"] == "not_replayed" and "config_hash differ from the run's" in verdict["message"]

    _forge_run(logbook_repo, cfg, "early", pid, seed, source, new_config_hash=True)
    _commit_all(logbook_repo, "run early")  # committed after the preregistration, as the forger reordered it
    assert check_seeds(open_project()) == []  # the recorded seed is the one the stamp gives
    res = cli("verify", "--replay", "3")
    assert res.exit_code == EXIT_TAMPERED, res.output
    assert "run early: step 1 logged loss " in res.output
    assert f"the replay from seed {seed} (from {source}) computes " in res.output
    assert "this run was not trained from that seed, so not from its preregistration's timestamp" in res.output


def _forge_run(repo: Path, cfg: Path, run_id: str, pid: str, seed: int, source: str, *, new_config_hash: bool) -> None:
    """What a forger with the project's own code does: run.json and run_started name the preregistration and the
    stamp's seed (with the config hash that seed gives, if `new_config_hash`), and the log is chained again from the
    first line."""
    run_dir = repo / "entries" / "runs" / run_id
    rec = json.loads((run_dir / "run.json").read_text())
    rec.update(prereg_id=pid, exploratory=False, seed=seed, seed_source=source, amendments=[])
    (run_dir / "run.json").write_text(json.dumps(rec, indent=2, sort_keys=True) + "\n")
    printed = subprocess.run([sys.executable, "-m", "trainer", "--print-config", str(cfg), f"train.seed={seed}"],
                             cwd=repo, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}, capture_output=True,
                             text=True, check=True)
    forged = {"config_hash": json.loads(printed.stdout)["config_hash"]} if new_config_hash else {}
    lines, prev = [], GENESIS
    for e in events(repo, run_id):
        if e["kind"] == "run_started":
            e["data"].update(prereg_id=pid, exploratory=False, seed=seed, seed_source=source, **forged)
        e["prev"] = prev
        e["hash"] = prev = record_hash(e)
        lines.append(canonical(e) + "\n")
    (run_dir / "events.jsonl").write_text("".join(lines))


# --- the seed against its source, without training -----------------------------------


def _fake_run(repo: Path, run_id: str, pid: str, seed: int, source: str | None, started_seed: int | None = None) -> None:
    """A run record and a run_started written with the project's own code, no training."""
    project = open_project(repo)
    run_dir = project.run_dir(run_id)
    run_dir.mkdir(parents=True)
    rec = {"run_id": run_id, "created": "2026-12-01T00:00:00.000000Z", "config_path": "c.yaml", "config_hash": "0",
           "prereg_id": pid, "seed": seed, "seed_source": source}
    (run_dir / "run.json").write_text(json.dumps(rec))
    ChainedLog(run_dir / "events.jsonl").append({"run": run_id, "attempt": 1, "rank": 0, "step": 0, "kind": "run_started",
                                                  "data": {"seed": seed if started_seed is None else started_seed,
                                                           "seed_source": source}})


def test_verify_names_a_seed_that_its_source_does_not_give(logbook_repo, cli, stamper):
    stamper.configure(logbook_repo)
    cfg = micro_config(logbook_repo)
    _commit_all(logbook_repo, "config")
    pid = _prereg(cli, logbook_repo, cfg)
    stamp = stamper.stamp(logbook_repo, load_prereg(open_project(), pid).sha256)
    seed, source = seed_from_stamp(stamp.read_bytes()), stamp.relative_to(logbook_repo / "entries").as_posix()
    _fake_run(logbook_repo, "good", pid, seed, source)
    _fake_run(logbook_repo, "chosen", pid, seed + 1, source)
    _fake_run(logbook_repo, "twofaced", pid, seed, source, started_seed=12345)
    _commit_all(logbook_repo, "runs")

    kinds = {f.path.split("/")[2]: f.kind for f in check_seeds(open_project())}
    assert kinds == {"chosen": "seed_mismatch", "twofaced": "seed_mismatch"}
    res = cli("verify")
    assert res.exit_code == EXIT_TAMPERED
    assert f"run chosen: run.json records seed {seed + 1}, but its seed source {source} gives {seed}" in res.output
    assert "run twofaced: its run_started #1 trained with seed 12345, its run.json records" in res.output


def test_verify_names_a_seed_source_that_is_missing_foreign_or_not_the_earliest(logbook_repo, cli, stamper):
    stamper.configure(logbook_repo)
    cfg = micro_config(logbook_repo)
    _commit_all(logbook_repo, "config")
    pid = _prereg(cli, logbook_repo, cfg)
    other = _prereg(cli, logbook_repo, micro_config(logbook_repo, "other.yaml"))
    stamp = stamper.stamp(logbook_repo, load_prereg(open_project(), pid).sha256)
    foreign = stamper.stamp(logbook_repo, load_prereg(open_project(), other).sha256)
    later = stamp.with_name("ffffffffffff.tsr")  # a second token of the same preregistration, fetched later
    later.write_bytes(stamp.read_bytes() + b" later")

    def run(run_id: str, path: Path | str) -> None:
        rel = path if isinstance(path, str) else path.relative_to(logbook_repo / "entries").as_posix()
        data = path.read_bytes() if isinstance(path, Path) and path.exists() else b""
        _fake_run(logbook_repo, run_id, pid, seed_from_stamp(data), rel)

    run("anchored", stamp)
    run("gone", "stamps/" + "0" * 64 + "/aaaaaaaaaaaa.tsr")
    run("outside", "../logbook.yaml")
    run("borrowed", foreign)
    run("shopped", later)
    kinds = {f.path.split("/")[2]: f.kind for f in check_seeds(open_project())}
    assert kinds == {"gone": "seed_source_missing", "outside": "seed_source_missing",
                     "borrowed": "seed_source_foreign", "shopped": "seed_not_earliest"}
    assert {f.path.split("/")[2] for f in check_seeds(open_project(), other)} == set()  # the scope of `verify ID`


@pytest.mark.parametrize("started, why", [
    ({"device": "cuda:0", "world_size": 1}, "it trained on cuda:0; only the CPU path is deterministic"),
    ({"device": "cpu", "world_size": 2}, "it trained on 2 workers; the replay trains on one"),
    ({"device": "cpu", "world_size": 1, "resumed_from_step": 40}, "its first attempt resumed from a checkpoint"),
])
def test_a_run_that_a_cpu_replay_cannot_match_is_said_not_replayed_rather_than_judged(started, why):
    logged = [{1: 5.5}, {}]
    assert _not_replayable({}, [started], 7, logged, 3).startswith(why)
    assert _not_replayable({}, [{"device": "cpu", "world_size": 1}], 7, logged, 3) is None
    assert _not_replayable({}, [{"device": "cpu"}], None, logged, 3).startswith("it records no seed")
    assert _not_replayable({}, [{"device": "cpu"}], 7, [{}, {}], 3) == "it logged no training loss for steps 1-3"


def test_a_preregistered_run_with_no_stamp_is_said_to_be_not_anchored_where_stamps_are_expected(logbook_repo, cli,
                                                                                                 stamper):
    if stamper.tsa is None:
        pytest.skip("needs the timestamping settings: no authority can be configured without them")
    stamper.tsa.stop()  # the stamp stays pending
    stamper.configure(logbook_repo)
    pid = _prereg(cli, logbook_repo, micro_config(logbook_repo))
    _fake_run(logbook_repo, "unanchored", pid, 1337, None)
    (finding,) = check_seeds(open_project())
    assert finding.kind == "seed_not_anchored" and "its randomness is not anchored" in finding.message


def _retrained(losses, **started):
    from logbook.trust.retrain import Retrained

    base = {"config_hash": "c0", "data_fingerprints": {"stdlib": "f0"}, "n_params": 10, "threads": 1}
    return Retrained(losses, {**base, **started.pop("started", {})}, started.get("config_altered", False), 1.0)


@pytest.mark.parametrize("result, state, words", [
    (_retrained({1: 5.5, 2: 5.4, 3: 5.3}), "equal", "run r: steps 1-3 equal bit for bit to a replay from seed 7"),
    (_retrained({1: 5.5, 2: 5.4000000000000001 + 1e-15, 3: 5.3}), "differs",
     "run r: step 2 logged loss 5.4, the replay from seed 7 (from stamps/d/k.tsr) computes 5.400000000000001: "
     "this run was not trained from that seed, so not from its preregistration's timestamp"),
    (_retrained({1: 5.5}, started={"config_hash": "c1"}), "not_replayed", "the replay's config_hash differ"),
    (_retrained({1: 5.5}, started={"config_hash": "c1"}, config_altered=True), "equal", "run r: step 1 equal"),
    (_retrained({1: 5.5, 3: 5.3}), "equal", "run r: steps 1, 3 equal"),
    (_retrained({1: 5.5}, started={"data_fingerprints": {"stdlib": "f1"}}), "not_replayed",
     "the replay's data_fingerprints differ"),
    (_retrained({4: 5.1}), "not_replayed", "the replay stopped before any step the run logged"),
])
def test_the_replay_judges_losses_bit_for_bit_only_when_its_inputs_are_the_runs(result, state, words):
    from logbook.trust.replay import ReplayVerdict, _judge

    first = {"config_hash": "c0", "data_fingerprints": {"stdlib": "f0"}, "n_params": 10, "threads": 1}
    logged = [{1: 5.5, 3: 5.3}, {1: 5.5, 2: 5.4, 3: 5.3}]  # the committed stream thinned, the full one whole
    verdict = _judge(ReplayVerdict("r", "not_replayed", "", seed=7, seed_source="stamps/d/k.tsr"), first, result,
                     logged)
    assert verdict.state == state and words in verdict.message, verdict.message


def test_replay_with_no_run_to_replay_says_so_and_an_unknown_run_is_refused(logbook_repo, cli):
    _prereg(cli, logbook_repo, micro_config(logbook_repo))
    res = cli("verify", "--replay", "3")
    assert res.exit_code == 0 and "note: no run answers to a preregistration: nothing to replay" in res.stderr
    res = cli("verify", "--replay", "3", "--run", "nosuch")
    assert res.exit_code == 3 and "unknown run 'nosuch'" in res.output and "Traceback" not in res.output


# --- what the replay takes from the run, without training ----------------------------


def test_the_replay_takes_the_config_with_the_recorded_hash_and_never_the_runs_checkpoint_folder(logbook_repo,
                                                                                                  tmp_path):
    from logbook.trust.retrain import ReplayImpossible, _checkpoint_override, _config_file

    project = open_project()
    cfg = micro_config(logbook_repo)
    digest = hashlib.sha256(cfg.read_bytes()).hexdigest()
    work = tmp_path / "tree"
    (work / "configs").mkdir(parents=True)
    (work / "configs" / "micro.yaml").write_text("train: {steps: 99}\n")  # the snapshot holds other bytes
    raw = {"config_path": "configs/micro.yaml", "config_hash": digest}
    taken = _config_file(project, work, tmp_path, raw)
    assert taken == work / "configs" / "micro.yaml" and taken.read_bytes() == cfg.read_bytes()
    with pytest.raises(ReplayImpossible, match="neither in its snapshot nor here"):
        _config_file(project, work, tmp_path, {**raw, "config_hash": "0" * 64})

    assert _checkpoint_override(cfg, [], work) == []  # a relative folder lands in the scratch copy
    assert _checkpoint_override(cfg, ["checkpoint.dir=/scratch/ckpt"], work) == [
        f"checkpoint.dir={work / '.logbook' / 'replay-checkpoints'}"]


def test_a_run_whose_snapshot_is_gone_is_not_replayed_and_a_live_change_ends_the_comparison(logbook_repo, tmp_path):
    from logbook.trust.replay import _logged_losses
    from logbook.trust.retrain import ReplayImpossible, _snapshot_commit

    project = open_project()
    head = git(logbook_repo, "rev-parse", "HEAD").strip()
    assert _snapshot_commit(project, "r", {"snapshot": {"commit": head}}) == head
    with pytest.raises(ReplayImpossible, match="its code snapshot 0123456789ab is not in this clone"):
        _snapshot_commit(project, "r", {"snapshot": {"commit": "0123456789ab" * 3}})

    from logbook.trust.retrain import _export

    _export(logbook_repo, head, tmp_path / "copy")
    assert (tmp_path / "copy" / "logbook.yaml").read_bytes() == (logbook_repo / "logbook.yaml").read_bytes()
    (logbook_repo / "escape").symlink_to("/etc/hostname")  # a snapshot's link may not reach out of the scratch copy
    _commit_all(logbook_repo, "a link out")
    _export(logbook_repo, git(logbook_repo, "rev-parse", "HEAD").strip(), tmp_path / "copy2")
    assert (tmp_path / "copy2" / "logbook.yaml").is_file() and not (tmp_path / "copy2" / "escape").is_symlink()

    run_dir = project.run_dir("r")
    run_dir.mkdir(parents=True)
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps({"step": s, "loss": 5.0 - s / 10}) + "\n" for s in (1, 2, 3)))
    log = ChainedLog(run_dir / "events.jsonl")
    log.append({"run": "r", "attempt": 1, "rank": 0, "step": 0, "kind": "run_started", "data": {}})
    assert _logged_losses(project, "r", 3)[0] == {1: 4.9, 2: 4.8, 3: 4.7}
    log.append({"run": "r", "attempt": 1, "rank": 0, "step": 3, "kind": "hparam_change", "data": {}})
    assert _logged_losses(project, "r", 3)[0] == {1: 4.9, 2: 4.8}  # a person's change cannot be replayed
