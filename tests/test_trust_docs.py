"""The README claims what docs/trust.md claims, word for word, and verify says what the page says it says."""

from __future__ import annotations

from conftest import ROOT


def _proof_table(text: str) -> list[str]:
    """The rows of the table whose header is `| proof | what it shows | against whom |`."""
    lines = text.splitlines()
    start = lines.index("| proof | what it shows | against whom |")
    rows = []
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        rows.append(line)
    return rows


def test_the_readme_states_the_same_proofs_as_the_threat_model():
    readme = _proof_table((ROOT / "README.md").read_text("utf-8"))
    trust = _proof_table((ROOT / "docs" / "trust.md").read_text("utf-8"))
    assert len(trust) == 5 and readme == trust


def test_the_readme_never_claims_order_from_history_alone():
    readme = (ROOT / "README.md").read_text("utf-8")
    assert "prove order only to someone who watched" in readme
    intro = readme.split("## ", 1)[0]  # what a reader meets first: "before" only with the third party named
    assert "before the run, to anyone" in intro and "third-party timestamp authority" in intro


def test_without_an_authority_verify_says_there_is_no_third_party_time(logbook_repo, cli):
    res = cli("verify")
    assert res.exit_code == 0, res.output
    assert "no third-party time" in res.stderr
    assert "no third-party time" in (ROOT / "docs" / "trust.md").read_text("utf-8")


def test_verify_names_each_authoritys_ca_by_hash_so_a_reader_can_pin_it(logbook_repo, cli, local_tsa):
    """The trust root is in the repository: a reader compares the CA verify trusted with the one they trust."""
    import hashlib

    local_tsa.configure(logbook_repo)
    res = cli("verify")
    ca = hashlib.sha256(local_tsa.ca_pem_path.read_bytes()).hexdigest()
    assert res.exit_code == 0, res.output
    assert f"trusted as {local_tsa.url} by its CA file, sha256 {ca}" in res.stdout
