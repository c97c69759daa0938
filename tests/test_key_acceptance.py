"""Who may sign for whom: a key someone else adds for an address that has one counts only once its holder accepts.

Real ed25519 keys, a bare origin and fresh clones, as in test_signatures.py.
The forgeries are made as a forger with push rights would make them: a line
appended to the allowed-signers file for a teammate's address (in a plain
commit, or hidden in a squash-merge), a record written under another's name
and signed with one's own key. The honest paths next to them: Bo adds his own
second key in a commit he signs; Ada adds a key for Bo and Bo accepts it.
"""

from __future__ import annotations

import pytest

import base64
import json

from normalise import normalise
from scoring_helpers import story_clock  # noqa: F401
from test_signatures import ALLOWED, allowed_line, keypair, kinds, lab, signed_by, use_key, verify  # noqa: F401

from logbook.core.project import open_project
from logbook.trust.people import People
from logbook.trust.signatures import fingerprint_of_blob


def fingerprint(key) -> str:
    return fingerprint_of_blob(base64.b64decode(key.with_name(key.name + ".pub").read_text().split()[1]))


def append_signer(c, line: str, message: str, *, signed: bool = False) -> None:
    with open(c.path / ALLOWED, "a") as f:
        f.write(line)
    c.git("add", ALLOWED)
    c.git(*(["-c", "commit.gpgsign=true"] if signed else []), "commit", "-q", "-m", message)


def require_signatures(c) -> None:
    cfg = c.path / "logbook.yaml"
    cfg.write_text(cfg.read_text().replace("require: false", "require: true"))
    c.git("commit", "-q", "-am", "require signatures")


def as_bo(c, key) -> None:
    c.git("config", "user.name", "Bo")
    c.git("config", "user.email", "bo@lab.example")
    use_key(c, key)


def sign_as_written(c, rel: str) -> None:
    """Sign a record with the clone's key as a hand-made client would, past `logbook sign`'s refusal."""
    from logbook.trust.signatures import sign_record

    rec = json.loads((c.path / rel).read_text())
    assert sign_record(open_project(c.path), rec["hash"], what=rel) == []


def review_path(report: dict) -> str:
    [path] = [p for p in signed_by(report) if p.startswith("entries/reviews/")]
    return path


def test_a_key_ada_appends_for_bo_signs_for_no_one_and_fails_once_signatures_are_required(lab, tmp_path):
    team, keys, _ = lab
    ada = team["ada"]
    fake = keypair(tmp_path / "keys", "fake-bo")
    append_signer(ada, allowed_line("bo@lab.example", fake), "bo's laptop key", signed=True)  # signed, by Ada
    ada.push()
    forger = team.join("forger")
    as_bo(forger, fake)
    forger.ok("review", "approve", "qknorm:2")  # Ada, as Bo, approves her own run
    forger.commit()
    forger.push()
    fresh = team.join("cy")
    code, report, _ = verify(fresh)
    review = review_path(report)
    assert code == 0 and signed_by(report)[review] == []
    assert ("signer_unaccepted", review) in kinds(report, "warnings")
    [w] = [w for w in report["warnings"] if w["kind"] == "signer_unaccepted"]
    assert f"signed by key {fingerprint(fake)}" in w["message"] and f"signed by key {fingerprint(keys['ada'])}" \
        in w["message"] and "while bo@lab.example already had a key" in w["message"]
    out = fresh.ok("verify").stdout
    assert f"KEY      {fingerprint(fake)} for bo@lab.example" in out
    # Who added it is the commit's own signature, whatever its author field says.
    assert f"by Ada <ada@lab.example>, signed by key {fingerprint(keys['ada'])} (ada@lab.example): allowed signer " \
           f"added: bo@lab.example (ssh-ed25519 {fingerprint(fake)})" in out
    with People(open_project(fresh.path)) as people:  # the review queue tells people apart the same way
        assert not people.of_review(json.loads((fresh.path / review).read_text())).signed
    require_signatures(fresh)
    code, report, _ = verify(fresh)
    assert code == 4 and ("signer_unaccepted", review) in kinds(report)
    assert ("unsigned", review) not in kinds(report)  # named once, for the key that signed it


def test_a_key_for_bo_hidden_in_a_squash_merge_is_pending_whoever_the_squash_names(lab, tmp_path):
    team, keys, _ = lab
    ada = team["ada"]
    require_signatures(ada)
    ada.push()
    fake = keypair(tmp_path / "keys", "fake-bo")
    ada.git("checkout", "-q", "-b", "laptop")
    append_signer(ada, allowed_line("bo@lab.example", fake), "bo's laptop key")
    ada.git("config", "user.email", "bo@lab.example")  # the branch's commits even name Bo as their author
    use_key(ada, fake)
    ada.ok("review", "approve", "qknorm:2")
    ada.commit()
    ada.git("checkout", "-q", "main")
    ada.git("merge", "-q", "--squash", "laptop")
    ada.git("commit", "-q", "-m", "laptop work")  # one commit: who added the line is no longer in history
    ada.push()
    fresh = team.join("cy")
    code, report, _ = verify(fresh)
    review = review_path(report)
    assert code == 4 and ("signer_unaccepted", review) in kinds(report)
    [k] = [k for k in report["identity"]["keys"] if k["fingerprint"] == fingerprint(fake)]
    assert k["how"] == "pending" and k["added_by"] is None  # the squash commit is signed by no key
    assert ", in a commit no SSH key signed: allowed signer added: bo@lab.example" in fresh.cli("verify").stdout



def test_bo_adding_his_own_second_key_in_a_commit_he_signs_is_valid_at_once(lab, tmp_path):
    team, keys, _ = lab
    bo = team["bo"]
    require_signatures(bo)
    laptop = keypair(tmp_path / "keys", "bo-laptop")
    append_signer(bo, allowed_line("bo@lab.example", laptop), "my laptop key", signed=True)  # by his old key
    use_key(bo, laptop)
    bo.ok("review", "approve", "qknorm:2")
    bo.commit()
    bo.push()
    code, report, _ = verify(team.join("cy"))
    assert code == 0, report["problems"]
    assert signed_by(report)[review_path(report)] == ["bo@lab.example"]
    [k] = [k for k in report["identity"]["keys"] if k["fingerprint"] == fingerprint(laptop)]
    assert k["how"] == "holder" and k["added_by"] == fingerprint(keys["bo"])
    # Bo retires the old key: the new one stays valid, for its own commit proved its holder added it.
    allowed = bo.path / ALLOWED
    allowed.write_text(allowed.read_text().replace(allowed_line("bo@lab.example", keys["bo"]), ""))
    bo.git("-c", "commit.gpgsign=true", "commit", "-q", "-am", "retire my old key")  # signed by the laptop key
    code, report, _ = verify(bo)
    assert code == 0, [p.get("message") for p in report["problems"]]
    assert signed_by(report)[review_path(report)] == ["bo@lab.example"]


def test_an_unsigned_change_of_who_may_sign_does_not_move_the_readers_pin(lab, tmp_path):
    team, keys, _ = lab
    bo = team["bo"]
    require_signatures(bo)
    assert verify(bo)[0] == 0  # Bo's clone is pinned to the trust root it has now
    laptop = keypair(tmp_path / "keys", "bo-laptop")
    append_signer(bo, allowed_line("bo@lab.example", laptop), "my laptop key")  # no commit signature
    code, report, _ = verify(bo)
    assert code == 4 and [p["kind"] for p in report["problems"]] == ["pin_differs"]


def test_a_key_ada_adds_for_bo_is_valid_once_bo_accepts_it_with_the_key_he_has(lab, tmp_path, snapshot):
    team, keys, _ = lab
    ada, bo = team["ada"], team["bo"]
    require_signatures(ada)
    laptop = keypair(tmp_path / "keys", "bo-laptop")
    append_signer(ada, allowed_line("bo@lab.example", laptop), "bo's laptop key, as he asked")
    cy = keypair(tmp_path / "keys", "cy")
    append_signer(ada, allowed_line("cy@lab.example", cy), "cy joins")  # a new address: trust on first use
    ada.push()
    assert bo.pull("rebase").returncode == 0
    use_key(bo, laptop)
    bo.ok("review", "approve", "qknorm:2")
    bo.commit()
    assert verify(bo)[0] == 4
    fp = fingerprint(laptop)
    itself, by_ada = bo.cli("signers", "accept", fp), ada.cli("signers", "accept", fp)
    assert itself.exit_code == 3  # the key cannot accept itself
    assert by_ada.exit_code == 3  # nor can Ada, who holds no key for bo@
    unknown = bo.cli("signers", "accept", "SHA256:no-such-key")
    assert unknown.exit_code == 3  # not found, and nothing written
    names = {"pending": fp, "ada": fingerprint(keys["ada"])}
    refusals = {"the pending key accepts itself": itself.stderr, "ada, holding no key for bo": by_ada.stderr,
                "a key the file does not list": unknown.stderr}
    listed = bo.ok("signers").stdout
    assert f"PENDING  bo@lab.example  {fp}" in listed and f"VALID    cy@lab.example  {fingerprint(cy)}" in listed
    use_key(bo, keys["bo"])
    accepted = json.loads(bo.ok("signers", "accept", fp, "--json").stdout)["accepted"]
    assert [a["principal"] for a in accepted] == ["bo@lab.example"]
    assert verify(bo)[0] == 4  # an acceptance not committed yet grants nothing
    bo.commit()
    again = bo.cli("signers", "accept", fp)
    assert again.exit_code == 3  # already valid: nothing to accept
    refusals["already valid"] = again.stderr
    assert {k: normalise(v, **names) for k, v in refusals.items()} == snapshot  # the words, in full
    bo.push()
    fresh = team.join("dee")
    code, report, _ = verify(fresh)
    assert code == 0, report["problems"]
    assert signed_by(report)[review_path(report)] == ["bo@lab.example"]
    assert signed_by(report)[accepted[0]["path"]] == ["bo@lab.example"]
    assert f"VALID    bo@lab.example  {fp}  added in commit" in fresh.ok("signers").stdout


def test_an_acceptance_signed_by_another_address_key_accepts_nothing(lab, tmp_path):
    """Ada writes the acceptance record herself and signs it with her own key: it is not Bo's word."""
    from logbook.eventlog.files import write_record
    from logbook.trust.signatures import sign_record
    from logbook.trust.signers import acceptances_dir

    team, keys, _ = lab
    ada = team["ada"]
    fake = keypair(tmp_path / "keys", "fake-bo")
    append_signer(ada, allowed_line("bo@lab.example", fake), "bo's laptop key")
    project = open_project(ada.path)
    kind, blob = fake.with_name(fake.name + ".pub").read_text().split()[:2]
    rec = write_record(acceptances_dir(project), {"kind": "key_acceptance", "principal": "bo@lab.example",
                                                  "key": f"{kind} {blob}", "fingerprint": fingerprint(fake),
                                                  "accepted_by": "Bo", "email": "bo@lab.example"})
    assert sign_record(project, rec["hash"], what="acceptance") == []  # Ada's key, Bo's name
    ada.commit()
    code, report, _ = verify(ada)
    [k] = [k for k in report["identity"]["keys"] if k["fingerprint"] == fingerprint(fake)]
    assert k["how"] == "pending"
    path = f"entries/key_acceptances/{rec['id']}.json"
    assert code == 4 and ("signer_not_named", path) in kinds(report)


def test_a_scorecard_whose_computed_by_names_bo_but_ada_signed_is_exit_4_naming_both(lab):
    team, keys, _ = lab
    ada = team["ada"]
    ada.git("config", "user.name", "Bo")
    ada.git("config", "user.email", "bo@lab.example")
    ada.git("config", "--unset", "user.signingkey")  # written unsigned in Bo's name ...
    ada.ok("outcome", "qknorm")
    [card] = list((ada.entries() / "runs" / "qknorm" / "outcomes").glob("*.json"))
    use_key(ada, keys["ada"])
    rel = card.relative_to(ada.path).as_posix()
    refused = ada.cli("sign", rel)  # `logbook sign` will not sign it in Bo's name ...
    assert refused.exit_code == 3 and "names Bo <bo@lab.example> as its computed_by" in refused.stderr
    sign_as_written(ada, rel)  # ... so the forger signs around the check, with Ada's own key
    ada.commit()
    ada.push()
    code, report, _ = verify(team.join("cy"))
    assert code == 4 and ("signer_not_named", rel) in kinds(report)
    [p] = [p for p in report["problems"] if p["kind"] == "signer_not_named"]
    assert "names Bo <bo@lab.example> as its computed_by" in p["message"]
    assert "signed by ada@lab.example" in p["message"] and fingerprint(keys["bo"]) in p["message"]


def test_an_approval_in_bo_s_name_signed_with_ada_s_key_is_exit_4(lab):
    team, keys, _ = lab
    ada = team["ada"]
    ada.git("config", "user.name", "Bo")
    ada.git("config", "user.email", "bo@lab.example")
    ada.git("config", "--unset", "user.signingkey")
    ada.ok("review", "approve", "qknorm:2")  # by e-mail, Bo is not the launcher
    use_key(ada, keys["ada"])
    [review] = [p.relative_to(ada.path).as_posix() for p in (ada.entries() / "reviews").glob("*.json")]
    sign_as_written(ada, review)
    ada.commit()
    code, report, _ = verify(ada)
    assert code == 4 and ("signer_not_named", review) in kinds(report)
    queue = ada.cli("review", "--all")  # the queue will not count an approval that fails its check
    assert queue.exit_code == 4 and "names Bo <bo@lab.example> as its reviewer" in queue.stderr


def test_a_key_retired_from_an_address_accepts_nothing_for_it(lab, tmp_path):
    """Bo's stolen key was moved off bo@ (kept under another address): its thief cannot admit a key for bo@."""
    from logbook.eventlog.files import write_record
    from logbook.trust.signatures import sign_record
    from logbook.trust.signers import acceptances_dir

    team, keys, _ = lab
    ada = team["ada"]
    allowed = ada.path / ALLOWED
    allowed.write_text(allowed.read_text().replace(allowed_line("bo@lab.example", keys["bo"]),
                                                   allowed_line("bo.retired@lab.example", keys["bo"])))
    thief = keypair(tmp_path / "keys", "thief")
    append_signer(ada, allowed_line("bo@lab.example", thief), "bo's key was stolen: a new one")
    project = open_project(ada.path)
    kind, blob = thief.with_name(thief.name + ".pub").read_text().split()[:2]
    rec = write_record(acceptances_dir(project), {"kind": "key_acceptance", "principal": "bo@lab.example",
                                                  "key": f"{kind} {blob}", "fingerprint": fingerprint(thief),
                                                  "accepted_by": "Bo", "email": "bo@lab.example"})
    use_key(ada, keys["bo"])  # the stolen key signs the acceptance
    assert sign_record(project, rec["hash"], what="acceptance") == []
    ada.commit()
    _, report, _ = verify(ada)
    [k] = [k for k in report["identity"]["keys"] if k["fingerprint"] == fingerprint(thief)]
    assert k["how"] == "pending"


def test_bo_may_co_sign_ada_s_run_record_once_ada_signed_it(lab):
    team, _, _ = lab
    bo = team["bo"]
    bo.ok("sign", "entries/runs/qknorm/run.json")  # a second signature beside its launcher's
    bo.commit()
    code, report, _ = verify(bo)
    assert code == 0 and sorted(signed_by(report)["entries/runs/qknorm/run.json"]) == ["ada@lab.example", "bo@lab.example"]
