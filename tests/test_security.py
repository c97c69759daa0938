"""Security: nothing a note, an event, a config, a checkpoint, an id or a title says can reach outside or run code.

- Rendering reads nothing outside the logbook: image paths, symlinks and
  Typst markup in notes and in event payloads stay text, and the Typst compile
  root holds only the template, the data and copies of allowed images.
- Loading a checkpoint never unpickles code, however well its manifest checks out.
- YAML aliases (billion laughs) and Python tags are refused wherever YAML is read.
- Run ids and preregistration ids cannot leave their folder or read as options,
  and a title cannot smuggle arguments into git.
- A note that looks like a template is printed, never evaluated.
"""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT, git
from pdftext import pdf_text

SECRET = "TOPSECRET-7f3a91"
BOMB = ('a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n'
        'b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]\nc: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]\n'
        'd: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]\ne: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]\n'
        'f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]\ng: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f]\n'
        'h: &h [*g,*g,*g,*g,*g,*g,*g,*g,*g]\ni: &i [*h,*h,*h,*h,*h,*h,*h,*h,*h]\n')


def _png(path: Path) -> None:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(1, 1), dpi=20)
    FigureCanvasAgg(fig)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format="png")


# --- rendering reads nothing outside the logbook ------------------------------------------


@pytest.fixture
def hostile_logbook(logbook_repo, tmp_path, cli):
    """Notes and events that try every way out of the logbook; returns the secret file they aim at."""
    from logbook.core.project import open_project
    from logbook.eventlog.kinds import STRICT_ENV
    from logbook.eventlog.sink import EventSink

    outside = tmp_path / "outside"
    outside.mkdir()
    secret = outside / "secret.txt"
    secret.write_text(SECRET + "\n")
    _png(outside / "secret.png")
    _png(logbook_repo / "x.png")  # in the repository, but not under the logbook's assets
    project = open_project(logbook_repo)
    assets = project.assets_dir / "run"
    assets.mkdir(parents=True)
    os.symlink(outside / "secret.png", assets / "escape.png")
    os.symlink(outside, assets / "dir")
    _png(assets / "ok.png")
    markup = [f'#read("{secret}")', f'#image("{outside / "secret.png"}")', f'#include "{secret}"',
              '#read("/etc/passwd")', '#include "../../../../../etc/passwd"', "$ #read(\"/etc/hostname\") $"]
    note = "\n\n".join([
        "Trying the doors: " + " ".join(f"`{m}`" for m in markup[:2]), *markup,
        "![p](/etc/passwd) ![up](../../x.png) ![up2](../../../x.png) ![abs](" + str(outside / "secret.png") + ")",
        "![link](../../assets/run/escape.png) ![dir](../../assets/run/dir/secret.png) ![ok](../../assets/run/ok.png)",
        f"<img src=\"{outside / 'secret.png'}\"> [l](file://{secret})",
    ])
    assert cli("note", note).exit_code == 0
    sink = EventSink(project.run_dir("hostile"), "hostile", attempt=1)
    sink.emit("run_started", step=0, config_path=f'#read("{secret}")', world_size=1)
    sink.emit("attempt_failed", step=3, exception_type="RuntimeError", exception_message=markup[2],
              traceback=f'#include "{secret}"')
    sink.emit("hparam_change", step=4, key="lr", old=1e-3, new=3e-4, reason=f"![x]({secret}) {markup[1]}",
              who=f'#read("{secret}")', source="live")
    # A log written by a later version may hold a kind this one does not know: it is rendered generically.
    with pytest.MonkeyPatch.context() as mp:
        mp.delenv(STRICT_ENV, raising=False)
        EventSink(project.run_dir("hostile"), "hostile", attempt=1).emit(f"x_{'y' * 3}", step=5, payload=markup[0])
    return project, secret


def test_the_pdf_compile_root_holds_only_the_template_the_data_and_allowed_images(hostile_logbook, tmp_path,
                                                                                   monkeypatch):
    import typst

    from logbook.chronicle.pdf import render_pdf

    project, secret = hostile_logbook
    roots: list[list[str]] = []
    real_compile = typst.compile

    def watching(src, *args, root, **kw):
        base = Path(root)
        roots.append(sorted(str(p.relative_to(base)) for p in base.rglob("*")))
        assert not any(p.is_symlink() for p in base.rglob("*"))
        return real_compile(src, *args, root=root, **kw)

    monkeypatch.setattr(typst, "compile", watching)
    out = tmp_path / "c.pdf"
    res = render_pdf(project, out)
    assert roots == [["chronicle.typ", "data.json", "img", "img/00000.png"]]
    assert res.images == 1
    data_free = out.read_bytes()
    assert SECRET.encode() not in data_free


def test_markup_and_paths_in_notes_and_events_show_as_text_and_nothing_outside_gets_in(hostile_logbook, cli, tmp_path):
    project, secret = hostile_logbook
    out = tmp_path / "c.pdf"
    res = cli("render", "--format", "pdf", "--out", str(out))
    assert res.exit_code == 0, res.output
    text = pdf_text(out)
    bare = "".join(text.split())  # lines wrap anywhere in a long path
    assert SECRET not in bare and "root:x:0:0" not in bare
    for shown in (f'#read("{secret}")', '#read("/etc/passwd")', f'#include"{secret}"',
                  "[imageoutsidethelogbooknotshown:/etc/passwd]", "[imageoutsidethelogbooknotshown:../../x.png]",
                  "[imageoutsidethelogbooknotshown:../../assets/run/escape.png]",
                  "[imageoutsidethelogbooknotshown:../../assets/run/dir/secret.png]"):
        assert shown.replace(" ", "") in bare, shown


def test_the_markdown_chronicle_prints_markup_and_paths_as_written(hostile_logbook, cli):
    project, secret = hostile_logbook
    assert cli("render").exit_code == 0
    text = "".join(p.read_text("utf-8") for p in project.entries.glob("[0-9]*/[0-9]*/*.md"))
    assert SECRET not in text
    assert str(secret) in text  # the path is shown as written, never read


def test_the_report_shows_markup_from_the_preregistration_and_the_events_as_text(hostile_logbook, tmp_path,
                                                                                   monkeypatch):
    import typst

    from logbook.promises.prereg import create_prereg
    from logbook.promises.prereg_input import PreregInput
    from logbook.chronicle.report import write_report
    from logbook.runs.run_record import RunRecord, write_run_record

    project, secret = hostile_logbook
    git(project.root, "add", "-A")
    git(project.root, "commit", "-q", "-m", "hostile notes and events")
    traps = f'#read("{secret}") {{{{ 7 * 7 }}}} ![s]({secret.parent / "secret.png"}) $x$'
    pid = create_prereg(project, PreregInput(title="markup in a hypothesis", hypothesis=f"The loss falls. {traps}",
                                             predictions=["loss@final < 3"], rationale=traps)).id
    write_run_record(project, RunRecord(run_id="hostile", created="2026-11-30T08:00:00Z", config_path="c.yaml",
                                        config_hash="0" * 64, prereg_id=pid, status="finished"))
    roots: list[list[str]] = []
    real_compile = typst.compile

    def watching(src, *args, root, **kw):
        roots.append(sorted(str(p.relative_to(root)) for p in Path(root).rglob("*")))
        return real_compile(src, *args, root=root, **kw)

    monkeypatch.setattr(typst, "compile", watching)
    md = write_report(project, "hostile", fmt="md", out=tmp_path / "r.md").path.read_text("utf-8")
    plain = md.replace("\\", "")  # Markdown escapes of * _ [ ] # $
    assert f"The loss falls. {traps}" in plain and SECRET not in md
    out = tmp_path / "r.pdf"
    write_report(project, "hostile", fmt="pdf", out=out)
    assert len(roots) == 1 and set(roots[0]) <= {"report.typ", "data.json", "img", "img/00000.png"}
    assert SECRET.encode() not in out.read_bytes()
    bare = "".join(pdf_text(out).split())
    assert SECRET not in bare and f'#read("{secret}")'.replace(" ", "") in bare and "{{7*7}}" in bare


# --- checkpoints never unpickle code -------------------------------------------------------


class _Payload:
    """Pickles to a call of os.system that would leave a marker file."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def _forge_checkpoint(directory: Path, step: int, marker: Path, how: str) -> Path:
    """A checkpoint folder whose manifest is honest about a file that carries code."""
    import torch

    path = directory / f"step_{step:06d}"
    path.mkdir(parents=True)
    evil = {"w": _Payload(marker)}
    for part in ("model", "optim", "state"):
        f = path / f"{part}.pt"
        if part == "model" and how == "torch.save":
            torch.save(evil, f)
        elif part == "model":
            f.write_bytes(pickle.dumps(evil))
        else:
            torch.save({"x": torch.zeros(1)}, f)
    files = {f.name: {"sha256": hashlib.sha256(f.read_bytes()).hexdigest(), "bytes": f.stat().st_size}
             for f in sorted(path.glob("*.pt"))}
    (path / "manifest.json").write_text(json.dumps({"format": 1, "step": step, "files": files}))
    (path / "COMPLETE").write_text(f"{step}\n")
    return path


@pytest.mark.parametrize("how", ["torch.save", "plain pickle"])
def test_a_checkpoint_carrying_code_is_rejected_and_never_run(tmp_path, how):
    import torch

    from trainer.checkpoints.checkpoint import Checkpointer

    marker = tmp_path / "pwned"
    events: list[tuple[str, dict]] = []
    ck = Checkpointer(tmp_path / "ckpt", background=False, emit=lambda kind, **kw: events.append((kind, kw)))
    ck.save(2, {"model": {"w": torch.ones(3)}, "optim": {}, "state": {"step": 2}})
    _forge_checkpoint(tmp_path / "ckpt", 4, marker, how)
    step, _, parts = ck.load_latest()
    assert not marker.exists()
    assert step == 2 and torch.equal(parts["model"]["w"], torch.ones(3))
    rejected = [kw for kind, kw in events if kind == "checkpoint_rejected"]
    assert len(rejected) == 1 and rejected[0]["ckpt_step"] == 4 and "does not load" in rejected[0]["reason"]


@pytest.mark.slow
def test_the_trainer_rejects_a_checkpoint_carrying_code_and_trains_from_scratch(logbook_repo, tmp_path):
    from runhelpers import events, micro_config

    marker = tmp_path / "pwned"
    cfg = micro_config(logbook_repo, steps=4, every=2)
    _forge_checkpoint(logbook_repo / ".logbook" / "checkpoints" / "evil", 2, marker, "torch.save")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    res = subprocess.run([sys.executable, "-m", "trainer", "--project", str(logbook_repo), "--run", "evil", str(cfg)],
                         cwd=logbook_repo, env=env, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    assert not marker.exists()
    evs = events(logbook_repo, "evil")
    rejected = [e for e in evs if e["kind"] == "checkpoint_rejected"]
    assert len(rejected) == 1 and "does not load" in rejected[0]["data"]["reason"]
    started = next(e for e in evs if e["kind"] == "run_started")
    assert started["data"]["resumed_from_step"] == 0


# --- YAML aliases, bombs and tags ------------------------------------------------------------


@pytest.mark.parametrize("text", [BOMB, "a: !!python/object/apply:os.system ['touch pwned']\n",
                                  "a: !!python/name:os.system\n"])
def test_yaml_bombs_and_tags_are_refused_everywhere_yaml_is_read(logbook_repo, cli, tmp_path, text):
    from logbook.core.settings import load_config
    from logbook.core.errors import UsageError
    from trainer.config import load_train_config

    path = tmp_path / "hostile.yaml"
    path.write_text(text)
    with pytest.raises(UsageError):
        load_train_config(path)
    with pytest.raises(UsageError):
        load_config(path)
    head = git(logbook_repo, "rev-parse", "HEAD")
    res = cli("prereg", "--from-file", str(path))
    assert res.exit_code == 2 and "Traceback" not in res.output
    assert git(logbook_repo, "rev-parse", "HEAD") == head
    (logbook_repo / "logbook.yaml").write_text(text)
    res = cli("verify")
    assert res.exit_code == 2 and "logbook.yaml" in res.output
    res = subprocess.run([sys.executable, "-m", "trainer", "--print-config", str(path)], capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(ROOT)}, cwd=tmp_path, timeout=60)
    assert res.returncode == 2 and res.stderr.startswith("error:")
    assert not (logbook_repo / "pwned").exists() and not (tmp_path / "pwned").exists()


def test_a_yaml_alias_in_a_prereg_file_is_refused_even_without_a_bomb(logbook_repo, cli, tmp_path):
    path = tmp_path / "p.yaml"
    path.write_text("title: &t qk-norm\nhypothesis: *t\npredictions: ['loss@final < 3']\n")
    res = cli("prereg", "--from-file", str(path))
    assert res.exit_code == 2 and "aliases are not allowed" in res.output


# --- ids, slugs and titles ---------------------------------------------------------------------

ESCAPES = ["../../../decoy", "../decoy", "/tmp/decoy", "..", "a/../../b", "a\x00b", "-x", "--upload-pack=touch pwned",
           "ok/../../../decoy"]


@pytest.fixture(scope="module")
def decoy_repo(tmp_path_factory):
    """A logbook (made once for the module), with a run and a preregistration outside it where an escaping id would find them."""
    from logbook.records.init import init_logbook

    base = tmp_path_factory.mktemp("escape")
    repo = base / "repo"
    repo.mkdir()
    for args in (["init", "-q", "-b", "main"], ["config", "user.name", "Ada Tester"],
                 ["config", "user.email", "ada@example.org"], ["commit", "-q", "--allow-empty", "-m", "initial"]):
        subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True)
    init_logbook(start=repo)
    decoy = base / "decoy"
    decoy.mkdir()
    (decoy / "run.json").write_text(json.dumps({"run_id": "decoy", "created": "", "config_path": "c.yaml",
                                                "config_hash": "0", "status": "running"}))
    (decoy / "events.jsonl").write_text("")
    (decoy / "x.md").write_text("---\nid: x\n---\n")
    return repo, decoy


@pytest.fixture
def decoys(decoy_repo, monkeypatch):
    repo, decoy = decoy_repo
    monkeypatch.chdir(repo)
    return repo, decoy


@pytest.mark.parametrize("bad", ESCAPES)
@pytest.mark.parametrize("command", [
    ["set", "{id}", "lr=0.1", "--reason", "r"], ["outcome", "{id}"], ["report", "{id}"], ["render", "--run", "{id}"],
    ["note", "hello", "--run", "{id}"], ["note", "hello", "--about", "{id}:0"], ["ckpt-interval", "--run", "{id}"],
    ["run", "--exploratory", "--run-id", "{id}", "configs/x.yaml"], ["run", "--resume", "{id}"],
    ["verify", "{id}"], ["show", "{id}"], ["prereg", "amend", "{id}", "--reason", "r", "--seen", "nothing"],
    ["review", "approve", "{id}:0"],
])
def test_ids_that_would_leave_their_folder_or_read_as_options_are_refused(decoys, cli, command, bad):
    res = cli(*[a.replace("{id}", bad) for a in command])
    assert res.exit_code in (2, 3), res.output
    assert "Traceback" not in res.output and "internal error" not in res.output
    assert "decoy" not in res.stdout
    assert not list(decoys[1].parent.rglob("pwned"))


@pytest.mark.parametrize("bad", ["../../../decoy", "/tmp/decoy", "--upload-pack=x", ".."])
def test_the_trainer_refuses_an_escaping_run_id_before_writing_anything(decoys, bad):
    repo, decoy = decoys
    before = sorted(p.name for p in decoy.iterdir())
    res = subprocess.run([sys.executable, "-m", "trainer", "--project", str(repo), f"--run={bad}",
                          str(ROOT / "configs" / "micro-test.yaml")], capture_output=True, text=True, timeout=60,
                         env={**os.environ, "PYTHONPATH": str(ROOT)}, cwd=repo)
    assert res.returncode == 2 and "invalid run id" in res.stderr
    assert sorted(p.name for p in decoy.iterdir()) == before
    assert not (repo / ".logbook" / "heartbeat").exists() and not (repo / "entries" / "runs").exists()


def test_a_title_cannot_escape_the_prereg_folder_or_smuggle_git_options(logbook_repo, cli):
    args = ["--hypothesis", "h", "--predict", "loss@final < 3"]
    res = cli("prereg", "--title", "--exec=touch pwned", *args)
    assert res.exit_code == 2 and "option" in res.output
    for title in ("../../../etc/passwd x", "x --upload-pack=touch pwned --exec=touch pwned", "a/../../b"):
        res = cli("prereg", "--title", title, *args, "--json")
        assert res.exit_code == 0, res.output
        path = Path(json.loads(res.stdout)["path"]).resolve()
        assert path.parent == (logbook_repo / "entries" / "prereg").resolve()
        assert title in git(logbook_repo, "log", "-1", "--format=%B")
    assert not list(logbook_repo.rglob("pwned")) and not (Path.cwd() / "pwned").exists()
    assert git(logbook_repo, "status", "--porcelain") == ""


# --- templates never evaluate what people wrote ---------------------------------------------

TEMPLATE_TRAPS = ["{{ 7 * 7 }}", "{{ ''.__class__.__mro__[1].__subclasses__() }}",
                  "{% for x in range(3) %}LOOP{% endfor %}", "{{ config }}", "{# hidden #}", "{% raw %}R{% endraw %}",
                  "${7*7}", "<%= 7*7 %>"]


def test_a_note_or_an_event_that_looks_like_a_template_is_printed_not_evaluated(logbook_repo, cli):
    from logbook.core.project import open_project
    from logbook.eventlog.sink import EventSink

    project = open_project(logbook_repo)
    note = "\n\n".join(f"trap {i}: {t}" for i, t in enumerate(TEMPLATE_TRAPS))
    assert cli("note", note).exit_code == 0
    sink = EventSink(project.run_dir("traps"), "traps", attempt=1)
    for i, t in enumerate(TEMPLATE_TRAPS):
        sink.emit("attempt_failed", step=i, exception_type="RuntimeError", exception_message=f"event trap {i}: {t}")
    assert cli("render").exit_code == 0
    text = "".join(p.read_text("utf-8") for p in project.entries.glob("[0-9]*/[0-9]*/*.md"))
    for i, t in enumerate(TEMPLATE_TRAPS):
        assert f"trap {i}: {t}" in text.replace("\\", "")
        assert f"event trap {i}:" in text
    flat = text.replace("\\", "")
    assert "trap 0: 49" not in flat and "LOOPLOOP" not in flat and "<class" not in flat
    assert "{# hidden #}" in flat
