"""Signed identity: records signed with real SSH keys, checked against the committed allowed-signers file.

Every clone is a real `git clone` with its own identity and its own ed25519 key
(`ssh-keygen -t ed25519 -N ''`), configured the way a team that signs commits
already has it (`gpg.format=ssh`, `user.signingkey`): no logbook command is
added to the honest flow. The forgeries are done as a forger would: records
edited with their hash worked out again, history amended before the push.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from scoring_helpers import make_prereg, story_clock, story_run  # noqa: F401
from team import Clone, make_team

from logbook.core.project import open_project
from logbook.eventlog.chain import record_hash

ALLOWED = "trust/allowed_signers"


def keypair(folder: Path, name: str) -> Path:
    """A fresh ed25519 key without a passphrase; returns the private key's path."""
    folder.mkdir(parents=True, exist_ok=True)
    key = folder / f"{name}_ed25519"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", name, "-f", str(key)], check=True)
    return key


def use_key(c: Clone, key: Path) -> None:
    """Sign as git does for commits: the clone's own config."""
    c.git("config", "gpg.format", "ssh")
    c.git("config", "user.signingkey", str(key))


def allowed_line(principals: str, key: Path) -> str:
    kind, blob = (key.with_suffix(".pub") if key.suffix else Path(f"{key}.pub")).read_text().split()[:2]
    return f"{principals} {kind} {blob}\n"


def enable_signing(c: Clone, lines: list[str], *, require: bool = False) -> None:
    """The allowed signers and the `signing:` block, committed and pushed by `c`."""
    (c.path / "trust").mkdir(exist_ok=True)
    (c.path / ALLOWED).write_text("".join(lines))
    cfg = c.path / "logbook.yaml"
    cfg.write_text(cfg.read_text() + f"signing:\n  allowed_signers: {ALLOWED}\n  require: {str(require).lower()}\n")
    c.git("add", ALLOWED, "logbook.yaml")
    c.git("commit", "-q", "-m", "sign logbook records")
    c.push()


def verify(c: Clone) -> tuple[int, dict, str]:
    res = c.cli("verify", "--json")
    return res.exit_code, json.loads(res.stdout), res.stderr


def signed_by(report: dict) -> dict[str, list[str]]:
    return {r["path"]: r["signed_by"] for r in report["identity"]["records"]}


def kinds(report: dict, where: str = "problems") -> list[tuple[str, str]]:
    return [(f["kind"], f["path"]) for f in report[where]]


@pytest.fixture
def lab(tmp_path, story_clock):
    """ada (launcher) and bo (reviewer), each with a key the committed allowed-signers file lists; ada has
    preregistered and launched run `qknorm`, signed, committed and pushed; bo has pulled."""
    team = make_team(tmp_path, ["ada", "bo"])
    ada, bo = team["ada"], team["bo"]
    keys = {n: keypair(tmp_path / "keys", n) for n in ("ada", "bo")}
    enable_signing(ada, [allowed_line("ada@lab.example", keys["ada"]), allowed_line("bo@lab.example", keys["bo"])])
    use_key(ada, keys["ada"])
    use_key(bo, keys["bo"])
    project = open_project(ada.path)
    pid = make_prereg(project, ["loss@final < 4", "spikes@final == 0"])
    story_run(project, story_clock, "qknorm", pid, author="Ada <ada@lab.example>")
    ada.commit()
    ada.push()
    assert bo.pull("rebase").returncode == 0
    return team, keys, pid


def test_the_honest_flow_is_signed_with_no_extra_command_and_verifies_on_every_clone(lab, tmp_path):
    team, keys, pid = lab
    ada, bo = team["ada"], team["bo"]
    # The run has finished: results exist, so the amendment says so (`--seen run-started` is refused).
    amended = ada.ok("prereg", "amend", pid, "--seen", "results", "--reason", "one restart is expected",
                     "--predict", "restarts@final <= 3", "--json")
    amendment = json.loads(amended.stdout)["path"]
    ada.commit()
    ada.push()
    assert bo.pull("rebase").returncode == 0
    bo.ok("review", "approve", "qknorm:2")
    bo.ok("outcome", "qknorm")
    bo.commit()
    bo.push()
    assert ada.pull("merge").returncode == 0
    fresh = team.join("cy")
    for c in (ada, bo, fresh):
        code, report, _ = verify(c)
        assert code == 0, report["problems"]
        who = signed_by(report)
        assert who[f"entries/prereg/{pid}.md"] == ["ada@lab.example"]
        assert who[Path(amendment).relative_to(ada.path).as_posix()] == ["ada@lab.example"]
        assert who["entries/runs/qknorm/run.json"] == ["ada@lab.example"]
        reviews = [p for p in who if p.startswith("entries/reviews/")]
        scorecards = [p for p in who if "/outcomes/" in p]
        assert len(reviews) == 1 and who[reviews[0]] == ["bo@lab.example"]
        assert len(scorecards) == 1 and who[scorecards[0]] == ["bo@lab.example"]
    sigs = fresh.git("ls-files", "entries/signatures").stdout.split()
    assert len(sigs) == 5 and all(s.endswith(".sig") for s in sigs)  # `logbook commit` committed every signature
    out = fresh.ok("verify").stdout
    scoped = fresh.ok("verify", pid).stdout  # one preregistration: its records and its runs' only
    assert f"SIGNED   entries/prereg/{pid}.md" in scoped and "entries/reviews/" not in scoped
    assert f"SIGNED   entries/prereg/{pid}.md  by ada@lab.example" in out
    assert "SETTING " in out and "signing turned on (allowed_signers trust/allowed_signers)" in out
    queue = bo.ok("review", "--all")
    assert "e-mail only" not in queue.stderr  # every record is signed: people are told apart by key


def test_a_record_edited_with_its_hash_worked_out_again_keeps_no_signature_that_counts(lab):
    team, _, _ = lab
    bo = team["bo"]
    bo.ok("review", "approve", "qknorm:2", "--comment", "cost matches the drill")
    [path] = list((bo.entries() / "reviews").glob("*.json"))
    rec = json.loads(path.read_text())
    old = rec["hash"]
    rec["text"] = "forged: the restart was never real"
    rec.pop("hash")
    rec["hash"] = record_hash(rec)
    path.write_text(json.dumps(rec, sort_keys=True, separators=(",", ":"), ensure_ascii=False) + "\n")
    bo.commit()  # the forger commits the edit as if it were the first version: history holds no other
    code, report, _ = verify(bo)
    assert code == 4
    assert ("signature_orphan", next(f"entries/signatures/{old}/{p.name}"
                                     for p in (bo.entries() / "signatures" / old).iterdir())) in kinds(report)
    assert signed_by(report)[path.relative_to(bo.path).as_posix()] == []
    # The forger moves the old signature beside the new hash too: it does not check against the record.
    sig = next((bo.entries() / "signatures" / old).iterdir())
    moved = bo.entries() / "signatures" / rec["hash"] / sig.name
    moved.parent.mkdir()
    sig.rename(moved)
    bo.git("add", "-A", "entries")
    bo.git("commit", "-q", "--amend", "--no-edit")
    res = bo.cli("verify")
    assert res.exit_code == 4
    assert "signature_invalid" in [k for k, _ in kinds(verify(bo)[1])]
    assert "does not check" in res.stdout and path.name in res.stdout and "hint:" in res.stderr


def test_a_signature_by_a_key_the_committed_file_does_not_list_counts_for_no_one(lab, tmp_path):
    team, keys, _ = lab
    ada, bo = team["ada"], team["bo"]
    stranger = keypair(tmp_path / "keys", "mallory")
    use_key(bo, stranger)
    bo.ok("review", "approve", "qknorm:2")
    bo.commit()
    # An uncommitted edit of the allowed signers grants nothing.
    (bo.path / ALLOWED).write_text((bo.path / ALLOWED).read_text() + allowed_line("bo@lab.example", stranger))
    code, report, _ = verify(bo)
    assert code == 0
    [review] = [p for p in signed_by(report) if p.startswith("entries/reviews/")]
    assert signed_by(report)[review] == []
    assert ("signature_unknown_key", review) in kinds(report, "warnings")
    assert f"UNSIGNED {review}" in bo.ok("verify").stdout


def test_the_launcher_with_a_second_address_and_the_same_key_is_still_the_launcher(lab, tmp_path):
    team, keys, _ = lab
    ada = team["ada"]
    laptop = team.join("laptop")
    laptop.git("config", "user.name", "Ada L.")
    laptop.git("config", "user.email", "ada.private@home.example")
    use_key(laptop, keys["ada"])
    refused = laptop.cli("review", "approve", "qknorm:2")
    assert refused.exit_code == 3 and "launched run qknorm" in refused.stderr
    # Written around the check (a hand-made client): the approval is recorded, signed, and does not count.
    from logbook.chronicle.review import find_reviewable
    from logbook.eventlog.files import write_record
    from logbook.trust.signatures import sign_record

    project = open_project(laptop.path)
    item = find_reviewable(project, "qknorm:2")
    rec = write_record(project.reviews_dir, {"kind": "review", "entry": item.id, "action": "approve", "text": "",
                                             "reviewer": "Ada L.", "email": "ada.private@home.example",
                                             "run": item.run, "entry_kind": item.kind, "entry_ts": item.ts})
    assert sign_record(project, rec["hash"], what="review") == []
    laptop.commit()
    entry = next(i for i in json.loads(laptop.ok("review", "--all", "--json").stdout) if i["id"] == "qknorm:2")
    assert entry["approvals"] == [] and entry["not_counted"] == ["Ada L."] and entry["state"] == "needs review"
    assert "0/1 (launcher's own not counted)" in laptop.ok("review").stdout
    assert verify(laptop)[0] == 0


def test_one_key_under_two_addresses_is_one_reviewer(lab, tmp_path):
    team, keys, _ = lab
    ada, bo = team["ada"], team["bo"]
    cfg = ada.path / "logbook.yaml"
    cfg.write_text(cfg.read_text().replace("review_approvals: 1", "review_approvals: 2"))
    ada.git("commit", "-q", "-am", "two approvals per entry")
    ada.push()
    second = team.join("bo2")
    second.git("config", "user.email", "bo@home.example")  # bo again, another address, the same key
    use_key(second, keys["bo"])
    second.ok("review", "approve", "qknorm:2")
    second.commit()
    second.push()
    bo.commit()
    assert bo.pull("merge").returncode == 0
    again = bo.cli("review", "approve", "qknorm:2")  # a second address does not make a second approval
    assert again.exit_code == 3 and "already approved" in again.stderr
    entry = next(i for i in json.loads(bo.ok("review", "--all", "--json").stdout) if i["id"] == "qknorm:2")
    assert len(entry["approvals"]) == 1 and entry["state"] == "needs review"


def test_flipping_self_approval_is_an_entry_in_the_chronicle_and_a_line_of_verify(lab):
    team, _, _ = lab
    ada = team["ada"]
    cfg = ada.path / "logbook.yaml"
    cfg.write_text(cfg.read_text().replace("review_self_approval: false", "review_self_approval: true"))
    ada.git("commit", "-q", "-am", "tidy settings")  # a harmless-sounding message: the entry says what changed
    commit = ada.git("rev-parse", "HEAD").stdout.strip()
    day = ada.git("show", "-s", "--format=%cd", "--date=format-local:%Y/%m/%d", "HEAD").stdout.strip()
    ada.ok("render")
    text = (ada.entries() / f"{day}.md").read_text()
    assert "- review\\_self\\_approval false → true" in text  # Markdown-escaped, as every entry's text
    assert "Committed by Ada \\<ada@lab.example\\>" in text
    assert f"`{commit}`" in text and f"id: `setting:{commit[:12]}`" in text
    out = ada.ok("verify").stdout
    assert f"commit {commit[:7]} by Ada <ada@lab.example>: review_self_approval false → true" in out
    assert ada.ok("review", "approve", "qknorm:2").exit_code == 0  # committed, it now lets the launcher approve


def test_required_signatures_fail_an_unsigned_record_but_not_one_made_before_they_were_required(tmp_path,
                                                                                                  story_clock):
    team = make_team(tmp_path, ["ada"])
    ada = team["ada"]
    key = keypair(tmp_path / "keys", "ada")
    ada.ok("note", "an early note")  # unsigned kinds stay out of it: notes are not signed records
    project = open_project(ada.path)
    early = make_prereg(project, ["loss@final < 4"], title="made before signing")
    enable_signing(ada, [allowed_line("ada@lab.example", key)], require=True)
    from logbook.promises.prereg import create_prereg
    from logbook.promises.prereg_input import PreregInput

    written = create_prereg(open_project(ada.path), PreregInput(title="made after require, unsigned",
                                                               hypothesis="h", predictions=["loss@final < 3"]))
    late = written.id
    assert any("recorded unsigned: git has no SSH signing key" in w for w in written.warnings)
    code, report, _ = verify(ada)
    assert code == 4
    assert ("unsigned", f"entries/prereg/{late}.md") in kinds(report)
    assert ("unsigned_before_require", f"entries/prereg/{early}.md") in kinds(report, "warnings")
    res = ada.cli("verify")
    assert res.exit_code == 4 and "signing.require" in res.output and f"logbook sign entries/prereg/{late}.md" in res.stderr
    no_key = ada.cli("sign", f"entries/prereg/{late}.md")
    assert no_key.exit_code == 3 and "user.signingkey" in no_key.output
    use_key(ada, key)
    signed = make_prereg(open_project(ada.path), ["loss@final < 2"], title="signed")
    ada.ok("sign", f"entries/prereg/{late}.md")  # the way forward the hint names: the author signs it late
    assert ada.cli("sign", "README.md").exit_code == 3  # no record: nothing to sign
    ada.commit()
    code, report, _ = verify(ada)
    assert code == 0 and [k for k, _ in kinds(report)] == []
    assert signed_by(report)[f"entries/prereg/{signed}.md"] == ["ada@lab.example"]
    assert signed_by(report)[f"entries/prereg/{late}.md"] == ["ada@lab.example"]


def test_a_signature_filed_under_another_keys_name_does_not_check(lab):
    team, _, pid = lab
    ada = team["ada"]
    [sig] = [p for p in (ada.entries() / "signatures").rglob("*.sig")
             if p.parent.name == signed_digest(ada, f"entries/prereg/{pid}.md")]
    sig.rename(sig.with_name("0123456789ab.sig"))  # the file name no longer says which key made it
    ada.git("add", "-A", "entries")
    ada.git("commit", "-q", "--amend", "--no-edit")
    code, report, _ = verify(ada)
    assert code == 4 and ("signature_invalid", f"entries/prereg/{pid}.md") in kinds(report)


def signed_digest(c: Clone, rel: str) -> str:
    return next(r["digest"] for r in verify(c)[1]["identity"]["records"] if r["path"] == rel)


def test_a_signer_removed_in_a_commit_no_longer_counts_and_the_removal_is_listed(lab):
    team, _, pid = lab
    ada = team["ada"]
    assert signed_by(verify(ada)[1])[f"entries/prereg/{pid}.md"] == ["ada@lab.example"]  # checked, and cached
    lines = (ada.path / ALLOWED).read_text().splitlines(keepends=True)
    (ada.path / ALLOWED).write_text("".join(ln for ln in lines if not ln.startswith("ada@")))
    # Signed with her key, which the pin (made by the first verify above) trusts: the pin moves forward.
    ada.git("commit", "-q", "-S", "-am", "ada leaves the lab")
    code, report, _ = verify(ada)
    assert report["pin_settled"]["state"] == "forward", report["pin_settled"]
    assert code == 0 and signed_by(report)[f"entries/prereg/{pid}.md"] == []
    assert ("signature_unknown_key", f"entries/prereg/{pid}.md") in kinds(report, "warnings")
    [w] = [w for w in report["warnings"] if w["kind"] == "signature_unknown_key" and w["path"].endswith(f"{pid}.md")]
    assert w["message"].endswith("as committed does not list: it counts for no one")
    assert w["hint"].startswith("if the key is a teammate's, add it to the allowed-signers file")
    assert any(ch["changes"][0].startswith("allowed signer removed: ada@lab.example (ssh-ed25519 SHA256:")
               for ch in report["identity"]["setting_changes"])


def test_require_with_an_allowed_signers_file_that_is_not_committed_is_exit_4(tmp_path, story_clock):
    team = make_team(tmp_path, ["ada"])
    ada = team["ada"]
    cfg = ada.path / "logbook.yaml"
    cfg.write_text(cfg.read_text() + f"signing:\n  allowed_signers: {ALLOWED}\n  require: true\n")
    ada.git("commit", "-q", "-am", "require signatures")
    (ada.path / "trust").mkdir()
    key = keypair(tmp_path / "keys", "ada")
    (ada.path / ALLOWED).write_text(allowed_line("ada@lab.example", key))  # written, never committed
    code, report, _ = verify(ada)
    assert code == 4 and ("allowed_signers_missing", ALLOWED) in kinds(report)


def test_without_signing_the_queue_says_people_are_told_apart_by_e_mail_only(tmp_path, story_clock):
    team = make_team(tmp_path, ["ada"])
    ada = team["ada"]
    use_key(ada, keypair(tmp_path / "keys", "ada"))  # a key set up for signing commits only
    pid = make_prereg(open_project(ada.path), ["loss@final < 4"])
    story_run(open_project(ada.path), story_clock, "qknorm", pid, author="Ada <ada@lab.example>")
    assert not (ada.entries() / "signatures").exists()  # the logbook does not sign: no files appear
    res = ada.ok("review")
    assert "note: reviewers and launchers are told apart by e-mail only" in res.stderr
    code, report, _ = verify(ada)
    assert code == 0 and report["identity"]["enabled"] is False and report["identity"]["records"] == []


def test_signing_settings_are_checked_when_logbook_yaml_is_read(logbook_repo, cli):
    cfg = logbook_repo / "logbook.yaml"
    base = cfg.read_text()
    for block, words in (("signing: yes\n", "signing must be a mapping"),
                         ("signing:\n  allowed_signers: ../outside\n", "relative to the repository root"),
                         ("signing:\n  allowed_signers: a\n  require: maybe\n", "signing.require must be true or false"),
                         ("signing:\n  allowed_signer: a\n", "did you mean `signing.allowed_signers`")):
        cfg.write_text(base + block)
        res = cli("verify")
        assert res.exit_code == 2 and words in res.stderr, res.stderr


def test_logbook_run_signs_its_run_record_with_the_launchers_key(logbook_repo, cli, tmp_path):
    """The one real run here: two steps of a one-layer model, to see the launcher sign run.json."""
    from runhelpers import micro_config
    from conftest import git

    key = keypair(tmp_path / "keys", "ada")
    (logbook_repo / "trust").mkdir()
    (logbook_repo / ALLOWED).write_text(allowed_line("ada@example.org", key))
    with open(logbook_repo / "logbook.yaml", "a") as f:
        f.write(f"signing:\n  allowed_signers: {ALLOWED}\n  require: true\n")
    cfg = micro_config(logbook_repo, steps=2, every=2)
    git(logbook_repo, "add", "-A")
    git(logbook_repo, "commit", "-q", "-m", "signing on")
    git(logbook_repo, "config", "gpg.format", "ssh")
    git(logbook_repo, "config", "user.signingkey", str(key))
    res = cli("run", "--exploratory", "--run-id", "signed", "--max-restarts", "0", str(cfg))
    assert res.exit_code == 0, res.output
    assert cli("commit").exit_code == 0
    report = json.loads(cli("verify", "--json").stdout)
    assert report["ok"], report["problems"]
    assert signed_by(report)["entries/runs/signed/run.json"] == ["ada@example.org"]


def test_the_author_of_an_acknowledgement_cannot_approve_it_under_a_second_address(lab):
    """An acknowledgement turns exit 4 into `acknowledged`: its author's approval counts for nothing, by key."""
    from forger import append_forged

    team, keys, _ = lab
    ada = team["ada"]
    log = "entries/runs/qknorm/events.jsonl"
    append_forged(ada.path / log, "run_finished", {"final_loss": 3.0})  # a line appended by hand
    ada.git("commit", "-qam", "oops")
    assert ada.cli("verify").exit_code == 4
    res = ada.cli("acknowledge", log, "--reason", "a line appended by hand while testing a parser")
    assert res.exit_code == 0, res.output
    ack_id = res.stdout.strip()
    ada.commit()
    ada.push()
    laptop = team.join("laptop")  # Ada again, under her private address, with the same key
    laptop.git("config", "user.name", "Ada L.")
    laptop.git("config", "user.email", "ada.private@home.example")
    use_key(laptop, keys["ada"])
    refused = laptop.cli("review", "approve", ack_id)
    assert refused.exit_code == 3 and "cannot approve it" in refused.stderr
    # Written around the check: the approval is signed by Ada's key and does not count.
    from logbook.eventlog.files import write_record
    from logbook.trust.signatures import sign_record

    project = open_project(laptop.path)
    rec = write_record(project.reviews_dir, {"kind": "review", "entry": ack_id, "action": "approve", "text": "",
                                             "reviewer": "Ada L.", "email": "ada.private@home.example",
                                             "run": "qknorm", "entry_kind": "acknowledgement"})
    assert sign_record(project, rec["hash"], what="review") == []
    laptop.commit()
    still = laptop.cli("verify")
    assert still.exit_code == 4 and f"awaiting review: `logbook review approve {ack_id}`" in still.output
    bo = team["bo"]
    assert bo.pull("rebase").returncode == 0
    laptop.push()
    assert bo.pull("rebase").returncode == 0
    bo.ok("review", "approve", ack_id)
    bo.commit()
    done = bo.cli("verify")
    assert done.exit_code == 0 and "approved by Bo" in done.output, done.output


def test_a_verify_answered_from_its_memo_names_the_same_signers_file_records_and_setting_changes(lab):
    team, _, pid = lab
    bo = team["bo"]
    code, first, _ = verify(bo)
    again_code, again, _ = verify(bo)
    assert (code, again_code) == (0, 0) and again["commits_checked"] == 0  # the second came from the memo
    ident = first["identity"]
    assert ident["allowed_signers"] == ALLOWED and ident["records"] and ident["setting_changes"]
    assert again["identity"] == ident
    assert first["pin_settled"]["state"] == "first" and again["pin_settled"]["state"] == "same"
    assert again["logs"] == first["logs"] != [] and {**again, "commits_checked": first["commits_checked"],
                                                     "pin_settled": first["pin_settled"]} == first
