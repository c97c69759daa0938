"""`logbook prereg` and `logbook prereg amend`: validated, hashed, committed alone, never half-written."""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

import pytest

from logbook.eventlog.files import is_record_id
from conftest import git

from logbook.core.errors import RefusedError
from logbook.core.project import open_project
from logbook.promises import prereg as prereg_mod
from logbook.promises.prereg import create_prereg, list_preregs, load_prereg
from logbook.promises.prereg_format import record_hash, split_record
from logbook.promises.prereg_input import PreregInput
from logbook.runs.run_record import RunRecord, write_run_record

FLAGS = ["--title", "QK-norm removes spikes", "--hypothesis", "QK-norm keeps attention logits bounded.",
         "--predict", "val_loss@final < 1.45 ± 0.02", "--predict", "spikes@final == 0",
         "--contingency", "loss spike above 3 sigma twice in 500 steps -> roll back 100 steps and lower LR 10%",
         "--budget", "8 GPU-hours", "--rationale", "Bounded logits, bounded updates."]


def _raw(repo: Path, *args: str) -> bytes:
    return subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True).stdout


def _head(repo: Path) -> str:
    return git(repo, "rev-parse", "HEAD").strip()


def _prereg_files(repo: Path) -> list[str]:
    d = repo / "entries" / "prereg"
    return sorted(p.name for p in d.iterdir()) if d.exists() else []


def _config(repo: Path) -> Path:
    (repo / "configs").mkdir(exist_ok=True)
    cfg = repo / "configs" / "tiny.yaml"
    cfg.write_text("model:\n  n_layer: 2\n")
    return cfg


def test_prereg_from_flags_writes_commits_and_prints_the_id(logbook_repo, cli):
    cfg = _config(logbook_repo)
    git(logbook_repo, "add", "configs")
    git(logbook_repo, "commit", "-q", "-m", "config")
    before = _head(logbook_repo)
    res = cli("prereg", *FLAGS, "--config", "configs/tiny.yaml")
    assert res.exit_code == 0, res.output
    m = re.match(r"Preregistered (\d{4}-\d{2}-\d{2}-qk-norm-removes-spikes-[0-9a-f]{6})  "
                 r"\(commit ([0-9a-f]{7}), sha256 ([0-9a-f]{8})…\)\n", res.stdout)
    assert m, res.stdout
    pid, short, sha = m.groups()
    assert "predictions: val_loss@final < 1.45 ± 0.02 · spikes@final == 0" in res.stdout
    assert "contingency 1: loss spike above 3 sigma" in res.stdout
    commit = _head(logbook_repo)
    assert commit.startswith(short) and git(logbook_repo, "rev-parse", "HEAD^").strip() == before
    path = f"entries/prereg/{pid}.md"
    assert git(logbook_repo, "show", "--name-only", "--format=", "HEAD").split() == [path]
    trailers = git(logbook_repo, "log", "-1", "--format=%(trailers:only,unfold)").splitlines()
    assert f"Logbook-Prereg: {pid}" in trailers
    full = next(t.split(": ")[1] for t in trailers if t.startswith("Logbook-Sha256"))
    assert full.startswith(sha)
    front, body = split_record((logbook_repo / path).read_text("utf-8"), path)
    assert record_hash(front, body) == full
    assert front["config"] == {"path": "configs/tiny.yaml", "sha256": hashlib.sha256(cfg.read_bytes()).hexdigest()}
    assert front["author"] == "Ada Tester <ada@example.org>" and front["base_commit"] == before
    assert front["budget"] == {"text": "8 GPU-hours", "amount": 8, "unit": "gpu-hours"}
    assert front["predictions"][0] == {"text": "val_loss@final < 1.45 ± 0.02", "metric": "val_loss",
                                       "at": {"kind": "final", "value": None}, "op": "<",
                                       "threshold": 1.45, "tolerance": 0.02}
    assert front["contingency"][0]["structured"] is True
    assert re.match(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z$", front["created"])
    assert "## Hypothesis\n\nQK-norm keeps attention logits bounded." in body
    assert git(logbook_repo, "status", "--porcelain") == ""


def test_prereg_json_prints_id_commit_and_hash(logbook_repo, cli):
    res = cli("prereg", *FLAGS, "--json")
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert out["commit"] == _head(logbook_repo)
    assert out["id"] in out["path"] and len(out["sha256"]) == 64 and out["warnings"] == []


def test_other_peoples_staged_and_unstaged_changes_survive_byte_for_byte(logbook_repo, cli):
    repo = logbook_repo
    (repo / "README.md").write_text("staged edit\n")
    git(repo, "add", "README.md")
    (repo / "README.md").write_text("staged edit\nplus an unstaged line\n")
    (repo / "train.py").write_text("lr = 3e-4\n")
    git(repo, "add", "train.py")
    (repo / "train.py").write_text("lr = 1e-4  # unstaged\n")
    (repo / "logbook.yaml").write_text((repo / "logbook.yaml").read_text() + "# unstaged comment\n")
    (repo / "scratch.txt").write_bytes(b"untracked \xff bytes\n")
    before = [_raw(repo, "diff", "--cached"), _raw(repo, "diff"), _raw(repo, "ls-files", "-s")]
    res = cli("prereg", *FLAGS)
    assert res.exit_code == 0, res.output
    after = [_raw(repo, "diff", "--cached"), _raw(repo, "diff"), _raw(repo, "ls-files", "-s")]
    assert after[0] == before[0] and after[1] == before[1]
    added = set(after[2].splitlines()) - set(before[2].splitlines())
    assert len(added) == 1 and b"entries/prereg/" in next(iter(added))
    assert (repo / "scratch.txt").read_bytes() == b"untracked \xff bytes\n"
    assert (repo / "train.py").read_text() == "lr = 1e-4  # unstaged\n"


def test_prereg_from_yaml_file(logbook_repo, cli, tmp_path):
    _config(logbook_repo)
    spec = tmp_path / "qknorm.yaml"
    spec.write_text(
        "title: qk-norm removes spikes\n"
        "hypothesis: |\n  QK-norm keeps attention logits bounded,\n  so the loss does not spike.\n"
        "predictions:\n  - val_loss@final < 2.31\n  - restarts@final <= 4\n"
        "contingency:\n  - spike > 4σ twice within 500 steps -> rollback 100 steps, skip 300 batches, lr × 0.9\n"
        f"config: {logbook_repo / 'configs' / 'tiny.yaml'}\n"
        "budget: 2B tokens\nassumptions:\n  - the data order is fixed\n", encoding="utf-8")
    res = cli("prereg", "--from-file", str(spec), "--json")
    assert res.exit_code == 0, res.output
    p = load_prereg(open_project(), json.loads(res.stdout)["id"])
    assert p.hypothesis == "QK-norm keeps attention logits bounded,\nso the loss does not spike."
    assert [x.to_text() for x in p.predictions] == ["val_loss@final < 2.31", "restarts@final <= 4"]
    assert p.contingency[0].actions[1].batches == 300
    assert p.config["path"] == "configs/tiny.yaml"
    assert p.budget == {"text": "2B tokens", "amount": 2_000_000_000, "unit": "tokens"}
    assert p.assumptions == ["the data order is fixed"]


def test_editor_template_is_parsed_like_a_file(logbook_repo, cli, monkeypatch, tmp_path):
    script = tmp_path / "fake-editor.py"
    script.write_text(
        "import sys\n"
        "text = open(sys.argv[1], encoding='utf-8').read()\n"
        "text = text.replace('title:\\n', 'title: edited in the editor\\n', 1)\n"
        "text = text.replace('hypothesis: |\\n', 'hypothesis: |\\n  typed by hand\\n', 1)\n"
        "text = text.replace('predictions:\\n', 'predictions:\\n  - spikes@final == 0\\n', 1)\n"
        "open(sys.argv[1], 'w', encoding='utf-8').write(text)\n")
    monkeypatch.setenv("EDITOR", f"{sys.executable} {script}")
    monkeypatch.setattr("logbook.cli.prereg_cmd.is_interactive", lambda: True)
    res = cli("prereg", "--json")
    assert res.exit_code == 0, res.output
    p = load_prereg(open_project(), json.loads(res.stdout)["id"])
    assert (p.title, p.hypothesis, [x.to_text() for x in p.predictions]) == (
        "edited in the editor", "typed by hand", ["spikes@final == 0"])


def test_editor_left_unchanged_preregisters_nothing(logbook_repo, cli, monkeypatch):
    monkeypatch.setenv("EDITOR", "true")
    monkeypatch.setattr("logbook.cli.prereg_cmd.is_interactive", lambda: True)
    before = _head(logbook_repo)
    res = cli("prereg")
    assert res.exit_code == 2 and "left empty" in res.stderr
    assert _head(logbook_repo) == before and _prereg_files(logbook_repo) == []


def test_non_interactive_without_input_explains_the_flags(logbook_repo, cli):
    res = cli("prereg")
    assert res.exit_code == 2
    assert "nothing to preregister" in res.stderr and "--from-file" in res.stderr and "--predict" in res.stderr
    assert "Traceback" not in res.output


# --- bad input: one clear message, a documented exit code, nothing written -----

def _bad_flags(**change: str | None) -> list[str]:
    base = {"--title": "a fine title", "--hypothesis": "it helps", "--predict": "spikes@final == 0"}
    base.update(change)
    return [x for k, v in base.items() if v is not None for x in (k, v)]


@pytest.mark.parametrize("args, code, message", [
    (_bad_flags(**{"--predict": "val_loss@final << 1.45"}), 2, "prediction 1: invalid prediction 'val_loss@final << 1.45': expected a threshold number after `<` at column 17"),
    (_bad_flags(**{"--predict": "restarts >= 0"}), 2, "cannot fail"),
    (_bad_flags(**{"--predict": "loss > -1"}), 2, "cannot fail"),
    (_bad_flags(**{"--predict": "goodput <= 1"}), 2, "cannot fail"),
    (_bad_flags(**{"--predict": "perplexity@final < 20"}), 2, "unknown metric `perplexity`"),
    (_bad_flags(**{"--predict": None}), 2, "no predictions given"),
    (_bad_flags(**{"--hypothesis": "   "}), 2, "the hypothesis is empty"),
    (_bad_flags(**{"--hypothesis": None}), 2, "the hypothesis is empty"),
    (_bad_flags(**{"--title": None}), 2, "the title is empty"),
    (_bad_flags(**{"--title": "--upload-pack=touch pwned"}), 2, "starts with '-'"),
    (_bad_flags(**{"--title": "$(rm -rf ~)"}), 2, "the title contains $"),
    (_bad_flags(**{"--title": "a `b` c"}), 2, "the title contains `"),
    (_bad_flags(**{"--title": "a; b"}), 2, "the title contains ;"),
    (_bad_flags(**{"--title": "a | b & c"}), 2, "the title contains & |"),
    (_bad_flags(**{"--title": "<script>x"}), 2, "the title contains < >"),
    (_bad_flags(**{"--title": "bell\x07here"}), 2, "control character (U+0007)"),
    (_bad_flags(**{"--title": "two\nlines"}), 2, "single line"),
    (_bad_flags(**{"--title": "rtl\u202eevil"}), 2, "control character (U+202E)"),
    (_bad_flags(**{"--title": "..."}), 2, "at least one letter or digit"),
    (_bad_flags(**{"--config": "configs/missing.yaml"}), 2, "config file not found: configs/missing.yaml"),
    (_bad_flags(**{"--config": "/etc/hostname"}), 2, "outside the repository"),
    (_bad_flags(**{"--contingency": "  "}), 2, "contingency rule 1 is empty"),
    (_bad_flags(**{"--predict": "spikes@final == 0", "--contingency": None, "--from-file": "x.yaml"}), 2,
     "--from-file cannot be combined"),
])
def test_bad_input_gets_one_clear_message_and_writes_nothing(logbook_repo, cli, args, code, message):
    before = (_head(logbook_repo), _raw(logbook_repo, "status", "--porcelain"))
    res = cli("prereg", *args)
    assert res.exit_code == code, res.output
    assert message in res.stderr
    assert res.stderr.startswith("error: ") and "Traceback" not in res.output
    assert (_head(logbook_repo), _raw(logbook_repo, "status", "--porcelain")) == before
    assert _prereg_files(logbook_repo) == []


def test_non_utf8_from_file_is_refused(logbook_repo, cli, tmp_path):
    spec = tmp_path / "latin1.yaml"
    spec.write_bytes("title: caf\xe9\nhypothesis: x\npredictions: [spikes@final == 0]\n".encode("latin-1"))
    res = cli("prereg", "--from-file", str(spec))
    assert res.exit_code == 2 and "is not UTF-8 text" in res.stderr and "offset 10" in res.stderr
    assert _prereg_files(logbook_repo) == []


@pytest.mark.parametrize("content, message", [
    ("title: [unclosed\n", "not valid YAML (line 2"),
    ("- a list\n", "expected a mapping"),
    ("title: t\nhypothesis: h\npredict: [spikes@final == 0]\n", "unknown key `predict`"),
    ("title: t\nhypothesis: h\npredictions: {a: 1}\n", "`predictions` must be a list"),
])
def test_bad_yaml_file_is_a_usage_error(logbook_repo, cli, tmp_path, content, message):
    spec = tmp_path / "p.yaml"
    spec.write_text(content)
    res = cli("prereg", "--from-file", str(spec))
    assert res.exit_code == 2 and message in res.stderr, res.output


def test_outside_git_is_refused(tmp_path, monkeypatch, cli):
    monkeypatch.chdir(tmp_path)
    res = cli("prereg", *FLAGS)
    assert res.exit_code == 3 and "not inside a git repository" in res.stderr


def test_detached_head_is_refused(logbook_repo, cli):
    git(logbook_repo, "checkout", "-q", "--detach")
    res = cli("prereg", *FLAGS)
    assert res.exit_code == 3 and "HEAD is detached" in res.stderr
    assert _prereg_files(logbook_repo) == []


@pytest.mark.parametrize("command, message", [
    (["merge", "other"], "a merge is in progress"),
    (["rebase", "other"], "rebase"),
    (["cherry-pick", "other"], "a cherry-pick is in progress"),
])
def test_operation_in_progress_is_refused(logbook_repo, cli, command, message):
    repo = logbook_repo
    git(repo, "checkout", "-q", "-b", "other")
    (repo / "README.md").write_text("theirs\n")
    git(repo, "commit", "-q", "-am", "theirs")
    git(repo, "checkout", "-q", "main")
    (repo / "README.md").write_text("ours\n")
    git(repo, "commit", "-q", "-am", "ours")
    assert subprocess.run(["git", *command], cwd=repo, capture_output=True).returncode != 0
    res = cli("prereg", *FLAGS)
    assert res.exit_code == 3 and message in res.stderr
    assert _prereg_files(repo) == []


def test_a_repeated_id_is_refused(logbook_repo, monkeypatch, cli):
    now = datetime(2026, 11, 30, 12, 0, tzinfo=timezone.utc)
    inp = PreregInput(title="same", hypothesis="h", predictions=["spikes@final == 0"])
    first = create_prereg(open_project(), inp, now=now, nonce=b"n")
    assert first.id.startswith("2026-11-30-same-")
    with pytest.raises(RefusedError, match="already exists"):
        create_prereg(open_project(), inp, now=now, nonce=b"n")
    monkeypatch.setattr(prereg_mod.os, "urandom", lambda n: b"n")
    monkeypatch.setattr(prereg_mod, "utc_or_now", lambda _now: now)
    before = _head(logbook_repo)
    res = cli("prereg", "--title", "same", "--hypothesis", "h", "--predict", "spikes@final == 0")
    assert res.exit_code == 3 and f"preregistration {first.id} already exists" in res.stderr
    assert _head(logbook_repo) == before


def test_an_id_used_on_another_branch_is_refused(logbook_repo, monkeypatch):
    now = datetime(2026, 11, 30, 12, 0, tzinfo=timezone.utc)
    inp = PreregInput(title="same", hypothesis="h", predictions=["spikes@final == 0"])
    git(logbook_repo, "checkout", "-q", "-b", "colleague")
    create_prereg(open_project(), inp, now=now, nonce=b"n")
    git(logbook_repo, "checkout", "-q", "main")
    with pytest.raises(RefusedError, match="already exists"):
        create_prereg(open_project(), inp, now=now, nonce=b"n")


def test_same_title_on_two_branches_gets_two_ids_that_merge_cleanly(logbook_repo, cli):
    git(logbook_repo, "checkout", "-q", "-b", "alice")
    a = json.loads(cli("prereg", *FLAGS, "--json").stdout)["id"]
    git(logbook_repo, "checkout", "-q", "main")
    git(logbook_repo, "config", "user.name", "Bob")
    b = json.loads(cli("prereg", *FLAGS, "--json").stdout)["id"]
    assert a != b and a[:-6] == b[:-6]
    git(logbook_repo, "merge", "-q", "--no-edit", "alice")
    assert {a, b} == {p.id for p in list_preregs(open_project())}
    assert cli("verify").exit_code == 0


def test_titles_cannot_escape_the_prereg_folder(logbook_repo, cli):
    res = cli("prereg", *_bad_flags(**{"--title": "../../etc/passwd"}), "--json")
    assert res.exit_code == 0, res.output
    path = Path(json.loads(res.stdout)["path"]).resolve()
    assert path.parent == (logbook_repo / "entries" / "prereg").resolve()
    assert path.name.split("-", 3)[3].startswith("etc-passwd-")


def test_unstructured_contingency_is_kept_with_a_warning(logbook_repo, cli):
    res = cli("prereg", *_bad_flags(**{"--contingency": "call the on-call person"}), "--json")
    assert res.exit_code == 0
    assert "warning: contingency rule 1 ('call the on-call person'): no `->`" in res.stderr
    p = load_prereg(open_project(), json.loads(res.stdout)["id"])
    assert p.contingency[0].to_dict()["structured"] is False


# --- amendments --------------------------------------------------------------

def _new(cli) -> str:
    res = cli("prereg", *FLAGS, "--json")
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)["id"]


def test_amend_adds_a_linked_committed_amendment(logbook_repo, cli):
    pid = _new(cli)
    original = load_prereg(open_project(), pid)
    res = cli("prereg", "amend", pid, "--reason", "budget halved", "--seen", "nothing",
              "--predict", "restarts@final <= 2", "--contingency", "loss is nan -> abort")
    assert res.exit_code == 0, res.output
    key = res.stdout.split(": amendment ")[1].split()[0]
    assert is_record_id(key) and res.stdout.startswith(f"Amended {pid}: amendment {key}  (commit ")
    path = f"entries/prereg/{pid}.amend-{key}.md"
    assert git(logbook_repo, "show", "--name-only", "--format=", "HEAD").split() == [path]
    trailers = git(logbook_repo, "log", "-1", "--format=%(trailers:only,unfold)").splitlines()
    assert f"Logbook-Prereg: {pid}" in trailers and f"Logbook-Amendment: {key}" in trailers
    res2 = cli("prereg", "amend", pid[:-3], "--reason", "looked at results", "--seen", "results", "--json",
               "--predict", "loss@final < 9")
    assert res2.exit_code == 0, res2.output
    assert json.loads(res2.stdout)["kind"] == "deviation" and "deviation" in res2.stderr
    p = load_prereg(open_project(), pid)
    assert p.sha256 == original.sha256 and (logbook_repo / f"entries/prereg/{pid}.md").read_bytes() == \
        original.path.read_bytes()
    a1, a2 = p.amendments
    assert (a1.n, a1.seen, a1.kind, a2.kind) == (1, "nothing", "amendment", "deviation")
    assert a1.front["previous"] == a2.front["original"] == {"file": f"{pid}.md", "sha256": original.sha256}
    assert a1.key == key and a2.front["previous"] == {"file": f"{pid}.amend-{key}.md", "sha256": a1.sha256}
    assert [(x.to_text(), src) for x, src in p.all_predictions()][-2] == ("restarts@final <= 2", "amend-1")
    assert p.all_contingency()[-1].trigger.kind == "nonfinite"
    assert cli("verify").exit_code == 0


def test_amend_refuses_seen_nothing_once_a_run_has_started(logbook_repo, cli):
    pid = _new(cli)
    write_run_record(open_project(), RunRecord(run_id="r1", created="2026-11-30T00:00:00Z", config_path="c.yaml",
                                               config_hash="0" * 64, prereg_id=pid))
    more = ("--predict", "restarts@final <= 2")
    res = cli("prereg", "amend", pid, "--reason", "x", "--seen", "nothing", *more)
    assert res.exit_code == 3 and "run r1 already answers to" in res.stderr and "--seen run-started" in res.stderr
    res = cli("prereg", "amend", pid, "--reason", "x", "--seen", "run-started", "--json", *more)
    assert res.exit_code == 0 and load_prereg(open_project(), pid).amendments[0].runs_started == ["r1"]


@pytest.mark.parametrize("args, code, message", [
    (["--reason", "x", "--seen", "maybe"], 2, "--seen must be one of nothing, run-started, results"),
    (["--reason", " ", "--seen", "nothing"], 2, "the reason is empty"),
    (["--reason", "x", "--seen", "nothing", "--predict", "loss > -1"], 2, "cannot fail"),
    (["--reason", "x", "--seen", "nothing"], 2, "the amendment changes nothing"),
])
def test_amend_bad_input(logbook_repo, cli, args, code, message):
    pid = _new(cli)
    before = _head(logbook_repo)
    res = cli("prereg", "amend", pid, *args)
    assert res.exit_code == code and message in res.stderr, res.output
    assert _head(logbook_repo) == before


def test_amend_unknown_or_malformed_id(logbook_repo, cli):
    res = cli("prereg", "amend", "2026-01-01-nothing-here-abcd", "--reason", "x", "--seen", "nothing")
    assert res.exit_code == 3 and "unknown preregistration" in res.stderr
    res = cli("prereg", "amend", "../../etc/passwd", "--reason", "x", "--seen", "nothing")
    assert res.exit_code == 2 and "invalid preregistration id" in res.stderr


def test_amend_refuses_to_build_on_an_edited_record(logbook_repo, cli):
    pid = _new(cli)
    path = logbook_repo / f"entries/prereg/{pid}.md"
    path.write_text(path.read_text().replace("bounded.", "bounded!"))
    res = cli("prereg", "amend", pid, "--reason", "x", "--seen", "nothing", "--predict", "restarts@final <= 2")
    assert res.exit_code == 4 and "does not verify" in res.stderr
    assert not list((logbook_repo / "entries" / "prereg").glob(f"{pid}.amend-*.md"))


def test_prereg_from_a_subdirectory_resolves_the_config_from_there(logbook_repo, cli, monkeypatch):
    _config(logbook_repo)
    monkeypatch.chdir(logbook_repo / "configs")
    res = cli("prereg", *FLAGS, "--config", "tiny.yaml", "--json")
    assert res.exit_code == 0, res.output
    p = load_prereg(open_project(), json.loads(res.stdout)["id"])
    assert p.config["path"] == "configs/tiny.yaml"
    assert p.path.parent == logbook_repo / "entries" / "prereg"
    monkeypatch.chdir(logbook_repo / "entries")
    res = cli("prereg", *FLAGS, "--config", "configs/tiny.yaml", "--json")
    assert res.exit_code == 0, res.output
    assert load_prereg(open_project(), json.loads(res.stdout)["id"]).config["path"] == "configs/tiny.yaml"


def test_prereg_without_logbook_init_is_refused(repo, cli):
    res = cli("prereg", *FLAGS)
    assert res.exit_code == 3 and "no logbook.yaml" in res.stderr and "logbook init" in res.stderr
