"""A reader's pin of the trust root, outside the repository: `logbook pin`, the pins file, and what verify does with it.

Real git (a bare origin, clones with their own identities), a real RFC 3161
authority (`local_tsa`), real SSH keys. The pins file lives in this test's
own XDG_CONFIG_HOME: one machine, on which clones of one origin share a pin.
The forgeries the pin catches are in tests/test_forgeries_with_tsa.py.
"""

from __future__ import annotations

import hashlib
import json

import pytest
import yaml
from team import make_team
from test_forgeries_with_tsa import RUN, _honest

from logbook.core.project import open_project
from logbook.trust.pins import find_pin, load_pins, pins_path


@pytest.fixture
def pins_home(tmp_path, monkeypatch):
    home = tmp_path / "config"
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home))
    return home


def _sha(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _pin_file(home) -> dict:
    return yaml.safe_load((home / "logbook" / "pins.yaml").read_text("utf-8"))


# --- the honest team ---------------------------------------------------------------------------------


def test_an_honest_team_pinned_by_its_first_verify_is_intact_on_every_clone_and_on_a_fresh_one(tmp_path, local_tsa,
                                                                                              pins_home):
    story = _honest(tmp_path, local_tsa)
    ada, mallory = story.team["ada"], story.team["mallory"]
    origin = str(story.team.origin)
    first = ada.ok("verify")  # no extra command: the first verify on this machine pins what it sees, and says so
    assert (f"note: pinned this repository's trust root on first use: CA sha256 {_sha(local_tsa.ca_pem_path)[:12]}…, "
            "timestamping.require false, allowed signers none (signing off), signing.require false, "
            f"review_self_approval false, review_approvals 1; kept in {pins_home / 'logbook' / 'pins.yaml'} under "
            f"{origin}") in first.stderr
    assert "`logbook pin` records it" not in first.stderr
    pinned = _pin_file(pins_home)["repositories"][origin]
    assert pinned["ca_sha256"] == [_sha(local_tsa.ca_pem_path)] and pinned["require"] is False
    assert (pinned["signing_require"], pinned["review_self_approval"], pinned["review_approvals"]) == (False, False, 1)
    again = ada.ok("verify")
    assert "on first use" not in again.stderr  # said once
    assert "Already pinned:" in ada.ok("pin").stdout
    assert "Already pinned:" in mallory.ok("pin").stdout  # another clone of the same origin: the same pin
    mallory.ok("note", "grad norm creeping up")
    mallory.commit()
    mallory.push()
    assert ada.pull().returncode == 0
    fresh = story.team.join("fresh")
    for clone in (ada, mallory, fresh):
        out = clone.cli("verify")
        assert out.exit_code == 0, (clone.name, out.output)
        assert f"Trust root pinned by the pin for {origin} in " in out.stdout and f"run {RUN}: before" in out.stdout
        assert "unproven_tail" not in out.output and "no third-party time" not in out.stdout
        assert "not pinned" not in out.stderr
    assert fresh.cli("verify", "--require-stamps", "--ca-sha256", _sha(local_tsa.ca_pem_path)).exit_code == 0


def test_an_agreed_change_of_the_trust_root_is_exit_4_until_pin_update_records_it(tmp_path, local_tsa, pins_home):
    story = _honest(tmp_path, local_tsa)
    ada = story.team["ada"]
    local_tsa.configure(ada.path, require=True)  # the lab requires stamps, and ada pins that
    ada.push()
    ada.ok("pin")
    assert _pin_file(pins_home)["repositories"][str(story.team.origin)]["require"] is True
    local_tsa.configure(ada.path, require=False)  # later the lab relaxes it, in an ordinary commit
    ada.push()
    res = ada.cli("verify")
    assert res.exit_code == 4, res.output
    assert ("CHANGED  logbook.yaml says timestamping.require: false, but the pin for "
            f"{story.team.origin} in {pins_home / 'logbook' / 'pins.yaml'} was made with require: true") in res.stdout
    assert "hint:" in res.stderr and "`logbook pin --update`" in res.stderr
    refused = ada.cli("pin")  # a different pin is never replaced silently
    assert refused.exit_code == 3 and "with another trust root: require true -> false" in refused.stderr
    assert "logbook pin --update" in refused.stderr
    updated = ada.ok("pin", "--update")
    assert f"Updated the pin of {story.team.origin}" in updated.stdout and "changed: require true -> false" in updated.stderr
    assert ada.cli("verify").exit_code == 0


def test_a_pinned_allowed_signers_file_changed_in_history_is_exit_4(tmp_path, pins_home):
    from test_signatures import ALLOWED, allowed_line, enable_signing, keypair

    team = make_team(tmp_path, ["ada", "mallory"])
    ada = team["ada"]
    keys = {n: keypair(tmp_path / "keys", n) for n in ("ada", "mallory")}
    enable_signing(ada, [allowed_line("ada@lab.example", keys["ada"])])
    ada.ok("pin")
    signers = _pin_file(pins_home)["repositories"][str(team.origin)]["allowed_signers_sha256"]
    assert signers == _sha(ada.path / ALLOWED)
    assert ada.cli("verify").exit_code == 0
    with open(ada.path / ALLOWED, "a") as f:  # a second signer, committed: who may sign changed
        f.write(allowed_line("ada@lab.example", keys["mallory"]))
    ada.git("commit", "-q", "-am", "another key")
    res = ada.cli("verify")
    assert res.exit_code == 4, res.output
    assert (f"CHANGED  the allowed signers ({ALLOWED}) hash to {_sha(ada.path / ALLOWED)}, but the pin for "
            f"{team.origin}") in res.stdout and f"has {signers}: who may sign was changed" in res.stdout
    ada.ok("pin", "--update")
    assert ada.cli("verify").exit_code == 0


# --- `logbook pin` -------------------------------------------------------------------------------------


def test_pin_without_an_origin_pins_the_repository_by_its_path(logbook_repo, cli, local_tsa, pins_home):
    local_tsa.configure(logbook_repo)
    res = cli("pin", "--json")
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    key = str(logbook_repo.resolve())
    assert out["key"] == key and out["state"] == "pinned" and out["file"] == str(pins_path())
    assert _pin_file(pins_home)["repositories"][key]["ca_sha256"] == [_sha(local_tsa.ca_pem_path)]
    assert not list((pins_home / "logbook").glob("*.tmp*"))  # written through a temporary file, renamed


def test_pin_refuses_when_there_is_nothing_to_pin_or_the_trust_root_is_not_committed(logbook_repo, cli, local_tsa,
                                                                                     pins_home):
    res = cli("pin")
    assert res.exit_code == 3 and "error: nothing to pin" in res.stderr and "hint:" in res.stderr
    local_tsa.configure(logbook_repo, commit=False)
    res = cli("pin")
    assert res.exit_code == 3 and "the trust root has uncommitted changes" in res.stderr and "hint:" in res.stderr
    assert not (pins_home / "logbook" / "pins.yaml").exists()


# --- bad input -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("text, says", [
    ("repositories: [1\n", "not valid YAML"),
    ("repositories:\n  /x:\n    ca_sha256: [abc]\n", "'abc' is not a SHA-256 digest"),
    ("repositories:\n  /x:\n    require: maybe\n", "require must be true or false"),
    ("repositories:\n  /x:\n    cas: []\n", "unknown field `cas`"),
    ("- a list\n", "must be a mapping with `repositories:`"),
])
def test_a_bad_pins_file_is_exit_2_naming_it(logbook_repo, cli, pins_home, text, says):
    path = pins_home / "logbook" / "pins.yaml"
    path.parent.mkdir(parents=True)
    path.write_text(text)
    res = cli("verify")
    assert res.exit_code == 2, res.output
    assert res.stderr.startswith(f"error: {path}") and says in res.stderr
    assert "hint:" in res.stderr and "Traceback" not in res.output


def test_a_bad_ca_digest_on_the_command_line_is_exit_2(logbook_repo, cli, pins_home):
    res = cli("verify", "--ca-sha256", "f" * 63)
    assert res.exit_code == 2 and "error: --ca-sha256:" in res.stderr and "sha256sum" in res.stderr


def test_verify_asked_without_a_pin_holds_the_repository_to_the_readers_own_pin(tmp_path, local_tsa, pins_home):
    from logbook.core.project import open_project
    from logbook.proof.verify import verify_project

    story = _honest(tmp_path, local_tsa)
    ada = story.team["ada"]
    ada.ok("pin", "--require-stamps")  # this reader requires stamps; the lab's logbook.yaml does not
    local_tsa.stop()
    ada.ok("prereg", "--title", "a later idea", "--hypothesis", "Later.", "--predict", "loss@final < 2")
    report = verify_project(open_project(ada.path))
    # The pin's own requirement applies, and its difference from logbook.yaml is named.
    assert [p.kind for p in report.problems] == ["pin_differs", "stamp_missing"]
    assert report.problems[0].path == "logbook.yaml"


@pytest.mark.parametrize("pinned, cloned", [
    ("{o}", "file://{o}"), ("{o}", "{o}/"), ("{o}", "{p}/x/../{n}"), ("file://{o}/", "{o}"),
    ("git@Git.Example.org:lab/exp.git", "https://git.example.org/lab/exp"),
    ("ssh://git@git.example.org:22/lab/exp.git", "git@git.example.org:lab/exp"),
    ("https://git.example.org:443/lab/./exp.git/", "https://GIT.example.org/lab/exp.git"),
])
def test_one_repository_spelled_two_ways_is_one_pin(tmp_path, pinned, cloned):
    from logbook.trust.pins import normalize_remote

    o = tmp_path / "lab" / "origin.git"
    o.mkdir(parents=True)
    fill = {"o": o, "p": o.parent, "n": o.name}
    assert normalize_remote(pinned.format(**fill)) == normalize_remote(cloned.format(**fill), tmp_path)


@pytest.mark.parametrize("pinned, other", [
    ("https://git.example.org/lab/exp.git", "https://git.example.org/lab/exp2.git"),
    ("https://git.example.org/lab/exp.git", "https://git.example.org:8443/lab/exp.git"),
    ("https://git.example.org/lab/exp.git", "https://evil.example.org/lab/exp.git"),
    ("git@git.example.org:lab/exp.git", "git@git.example.org:other/exp.git"),
])
def test_another_repository_is_never_taken_for_the_pinned_one(pinned, other):
    from logbook.trust.pins import normalize_remote

    assert normalize_remote(pinned) != normalize_remote(other)


def test_a_clone_reached_by_another_address_is_pinned_by_its_root_commits(tmp_path, local_tsa, pins_home):
    team = make_team(tmp_path, ["ada"])
    ada = team["ada"]
    local_tsa.configure(ada.path)
    ada.push()
    ada.ok("pin")
    mirror = tmp_path / "mirror.git"
    import shutil
    shutil.copytree(team.origin, mirror)  # the same repository, moved: another address, the same root commits
    bo = team.join("bo")
    bo.git("remote", "set-url", "origin", str(mirror))
    assert f"the pin for {team.origin}" in bo.ok("verify").stdout


def test_a_reader_with_no_matching_pin_is_told_the_nearest_and_why_it_did_not_match(tmp_path, local_tsa, pins_home):
    team = make_team(tmp_path, ["ada"])
    ada = team["ada"]
    local_tsa.configure(ada.path)
    ada.push()
    path = pins_path()
    path.parent.mkdir(parents=True)
    path.write_text("version: 1\nrepositories:\n  https://git.example.org/lab/origin.git:\n    ca_sha256: []\n"
                    "    require: false\n")
    res = ada.ok("verify", "--no-pin")  # a reader who looks without pinning what she sees
    assert not find_pin(open_project(ada.path), load_pins())
    assert ("this repository's trust root is not pinned on this machine: `logbook pin` records it, so that a "
            "history rewritten to drop or swap the authority is exit 4 here; the nearest pin is "
            "https://git.example.org/lab/origin.git (git.example.org/lab/origin), which is not this repository "
            f"(file:{team.origin.with_suffix('')}) and shares none of its root commits") in " ".join(res.stderr.split())


# --- trust on first use: the pin moves forward only when the keys it trusts say so ---------------------------


def _signed_lab(tmp_path, *, strict: bool = False):
    """ada and mallory with their own keys; the committed allowed-signers file lists ada's alone. `strict`: the
    lab's rules ask the most (signing.require true, review_approvals 2) when readers first verify."""
    from test_signatures import allowed_line, enable_signing, keypair, use_key

    team = make_team(tmp_path, ["ada", "mallory"])
    ada, mallory = team["ada"], team["mallory"]
    keys = {n: keypair(tmp_path / "keys", n) for n in ("ada", "mallory")}
    if strict:
        _edit(ada, "review_approvals: 1", "review_approvals: 2")
    enable_signing(ada, [allowed_line("ada@lab.example", keys["ada"])], require=strict)
    use_key(ada, keys["ada"])
    use_key(mallory, keys["mallory"])
    assert mallory.pull().returncode == 0
    return team, keys


def _edit(clone, old: str, new: str, *, commit: tuple[str, ...] | None = None) -> None:
    """Replace `old` by `new` in logbook.yaml; with `commit`, commit it with those git options."""
    cfg = clone.path / "logbook.yaml"
    assert old in cfg.read_text()
    cfg.write_text(cfg.read_text().replace(old, new))
    if commit is not None:
        clone.git("commit", "-q", *commit, "-m", f"logbook.yaml: {new}", "logbook.yaml")


def test_the_first_init_of_a_clone_pins_the_trust_root_and_says_so(tmp_path, local_tsa, pins_home):
    team = make_team(tmp_path, ["ada"])
    local_tsa.configure(team["ada"].path)
    team["ada"].push()
    bo = team.join("bo", setup=False)
    res = bo.ok("init")
    assert f"pinned this repository's trust root on first use: CA sha256 {_sha(local_tsa.ca_pem_path)[:12]}…" in res.stderr
    assert _pin_file(pins_home)["repositories"][str(team.origin)]["ca_sha256"] == [_sha(local_tsa.ca_pem_path)]
    assert "on first use" not in bo.ok("verify").stderr  # said once


def test_a_repository_with_no_authority_and_no_signing_is_not_pinned(logbook_repo, cli, pins_home):
    res = cli("verify")
    assert res.exit_code == 0 and "pinned" not in res.output
    assert not (pins_home / "logbook" / "pins.yaml").exists()


def test_verify_no_pin_applies_no_new_pin_and_writes_none(tmp_path, local_tsa, pins_home):
    team = make_team(tmp_path, ["ada"])
    local_tsa.configure(team["ada"].path)
    res = team["ada"].ok("verify", "--no-pin")
    assert "pinned" not in res.stderr.replace("not pinned on this machine", "")
    assert not (pins_home / "logbook" / "pins.yaml").exists()


def test_a_trust_root_with_uncommitted_changes_is_not_pinned_on_first_use_and_verify_says_why(tmp_path, local_tsa,
                                                                                             pins_home):
    team = make_team(tmp_path, ["ada"])
    local_tsa.configure(team["ada"].path, commit=False)
    res = team["ada"].ok("verify")
    assert "note: not pinned: the trust root has uncommitted changes" in res.stderr
    assert not (pins_home / "logbook" / "pins.yaml").exists()


@pytest.mark.parametrize("old, new, says", [
    ("require: true", "require: false",
     "logbook.yaml says signing.require: false, but the pin for {o} in {f} was made with signing.require: true"),
    ("review_self_approval: false", "review_self_approval: true",
     "logbook.yaml says review_self_approval: true, but the pin for {o} in {f} was made with false"),
    ("review_approvals: 2", "review_approvals: 1",
     "logbook.yaml says review_approvals: 1, but the pin for {o} in {f} was made with 2"),
])
def test_a_weaker_rule_committed_without_a_trusted_signature_is_exit_4_until_pin_update_names_it(
        tmp_path, pins_home, old, new, says):
    team, _ = _signed_lab(tmp_path, strict=True)
    ada = team["ada"]
    ada.ok("verify")  # pinned on first use
    _edit(ada, old, new, commit=())  # an ordinary, unsigned commit
    res = ada.cli("verify")
    assert res.exit_code == 4, res.output
    assert f"CHANGED  {says.format(o=team.origin, f=pins_home / 'logbook' / 'pins.yaml')}" in res.stdout
    assert "`logbook pin --update`" in res.stderr
    updated = ada.ok("pin", "--update")
    field = old.split(":")[0].replace("require", "signing.require")
    assert f"changed: {field} " in updated.stderr
    commit = ada.git("rev-parse", "--short=7", "HEAD").stdout.strip()
    assert (f"made in: {field} " in updated.stderr and f"(commit {commit} by Ada <ada@lab.example>, not signed by a "
            "key trusted before it)" in updated.stderr), updated.stderr
    assert ada.cli("verify").exit_code == 0


def test_a_change_signed_by_a_key_the_pin_trusts_moves_the_pin_forward_and_verify_says_so(tmp_path, pins_home):
    team, _ = _signed_lab(tmp_path, strict=True)
    ada = team["ada"]
    ada.ok("verify")
    _edit(ada, "review_approvals: 2", "review_approvals: 1", commit=("-S",))  # signed with ada's key
    commit = ada.git("rev-parse", "--short=7", "HEAD").stdout.strip()
    res = ada.cli("verify")
    assert res.exit_code == 0, res.output
    assert (f"note: moved this repository's pin forward ({pins_home / 'logbook' / 'pins.yaml'}): review_approvals "
            f"2 -> 1: committed with keys the pin trusts: review_approvals 2 -> 1 (commit {commit} by Ada "
            "<ada@lab.example>, signed by ada@lab.example)") in res.stderr
    assert _pin_file(pins_home)["repositories"][str(team.origin)]["review_approvals"] == 1


def test_a_change_signed_by_a_key_it_adds_itself_does_not_move_the_pin(tmp_path, pins_home):
    """As TUF asks of a new root: the keys of the trust root before the change must sign it, not the keys it adds."""
    from test_signatures import ALLOWED, allowed_line

    team, keys = _signed_lab(tmp_path, strict=True)
    ada, mallory = team["ada"], team["mallory"]
    ada.ok("verify")
    with open(mallory.path / ALLOWED, "a") as f:
        f.write(allowed_line("mallory@lab.example", keys["mallory"]))
    _edit(mallory, "review_approvals: 2", "review_approvals: 1")
    mallory.git("commit", "-q", "-S", "-am", "mallory signs for herself")  # her key, valid under the new file
    mallory.push()
    assert ada.pull().returncode == 0
    res = ada.cli("verify")
    assert res.exit_code == 4, res.output
    assert "who may sign was changed" in res.stdout and "review_approvals: 1, but the pin" in res.stdout


def test_a_change_that_only_asks_more_moves_the_pin_forward_by_itself(tmp_path, local_tsa, pins_home):
    team = make_team(tmp_path, ["ada"])
    ada = team["ada"]
    local_tsa.configure(ada.path)
    ada.ok("verify")
    local_tsa.configure(ada.path, require=True)  # unsigned, but a forger gains nothing from it
    _edit(ada, "review_approvals: 1", "review_approvals: 3", commit=())
    res = ada.cli("verify")
    assert res.exit_code == 0, res.output
    assert ("moved this repository's pin forward" in res.stderr and "require false -> true; review_approvals 1 -> 3: "
            "each change asks more of the repository, so the pin follows it") in res.stderr
    pinned = _pin_file(pins_home)["repositories"][str(team.origin)]
    assert (pinned["require"], pinned["review_approvals"]) == (True, 3)


def test_a_trust_anchor_the_pin_did_not_have_is_exit_4_until_pin_update(tmp_path, local_tsa, pins_home):
    """An authority added where the pin had signing only would let whoever pushed it date records for this reader:
    it is not a stricter rule, whatever it looks like."""
    team, _ = _signed_lab(tmp_path)
    ada = team["ada"]
    ada.ok("verify")  # pinned: signing, no authority
    local_tsa.configure(ada.path)  # an ordinary, unsigned commit
    res = ada.cli("verify")
    assert res.exit_code == 4 and "moved this repository's pin forward" not in res.stderr, res.output
    assert "pin --update" in res.stderr
    assert f"changed: CA sha256 none -> {_sha(local_tsa.ca_pem_path)[:12]}" in ada.ok("pin", "--update").stderr
    assert ada.cli("verify").exit_code == 0


def test_signing_turned_on_after_a_pin_of_an_authority_alone_is_exit_4_until_pin_update(tmp_path, local_tsa,
                                                                                          pins_home):
    from test_signatures import allowed_line, enable_signing, keypair

    team = make_team(tmp_path, ["ada"])
    ada = team["ada"]
    local_tsa.configure(ada.path)
    ada.ok("verify")  # pinned: an authority, no signing
    enable_signing(ada, [allowed_line("ada@lab.example", keypair(tmp_path / "keys", "ada"))])
    res = ada.cli("verify")
    assert res.exit_code == 4, res.output
    assert "CHANGED  signing is on (trust/allowed_signers), but the pin for" in res.stdout
    assert "was made with signing off" in res.stdout
    ada.ok("pin", "--update")
    assert ada.cli("verify").exit_code == 0
