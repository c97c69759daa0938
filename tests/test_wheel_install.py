"""A wheel carries what an installed logbook reads at run time, and works from outside the source tree."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest
import yaml
from conftest import ROOT


def _shipped(folder: str, suffixes: tuple[str, ...]) -> set[str]:
    base = ROOT / folder
    return {p.relative_to(base).as_posix() for p in base.rglob("*") if p.is_file() and p.suffix in suffixes}


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    # No build isolation: the build back-end (setuptools) is already here, and
    # an isolated build would fetch it again from the package index.
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                    "-w", str(out), str(ROOT)], check=True, capture_output=True, text=True)
    (whl,) = out.glob("logbook-*.whl")
    return whl


def test_the_wheel_holds_every_template_and_example_config(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    templates = _shipped("templates", (".j2", ".typ"))
    configs = _shipped("configs", (".yaml",))
    assert templates and configs
    assert {f"logbook/templates/{t}" for t in templates} <= names
    assert {f"logbook/configs/{c}" for c in configs} <= names


def test_the_wheel_holds_every_logbook_module(wheel):
    # A subpackage missing from pyproject's `packages` (the framework adapters were nearly one) installs nothing.
    names = set(zipfile.ZipFile(wheel).namelist())
    modules = {p.relative_to(ROOT).as_posix() for p in (ROOT / "logbook").rglob("*.py")}
    assert modules - names == set()
    assert not [n for n in names if n.endswith((".c", ".h"))]  # nothing is built where it trains


def _see_our_packages(py: Path) -> None:
    """Let the new environment import the dependencies this interpreter has (installing them again would need the
    network): a `.pth` line naming our site-packages, placed after the environment's own, so the wheel wins.

    Not `system_site_packages`: from inside a virtual environment that names the base interpreter's site-packages,
    which lack everything the environment installed (typer, rich, torch...)."""
    ours = [p for p in sys.path if p.endswith("site-packages") and Path(p).is_dir()]
    theirs = subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                            check=True, capture_output=True, text=True).stdout.strip()
    (Path(theirs) / "zz_dependencies.pth").write_text("".join(f"{p}\n" for p in ours))


@pytest.mark.slow
def test_an_installed_wheel_preregisters_runs_renders_and_reports_outside_the_source_tree(wheel, tmp_path):
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=False).create(env_dir)
    py = env_dir / "bin" / "python"
    _see_our_packages(py)
    subprocess.run([sys.executable, "-m", "pip", "--python", str(py), "install", "-q", "--no-deps", "--no-index",
                    str(wheel)], check=True, capture_output=True, text=True)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PATH"] = f"{env_dir / 'bin'}{os.pathsep}{env['PATH']}"
    work = tmp_path / "lab"
    work.mkdir()

    def run(*args: str, check: bool = True) -> subprocess.CompletedProcess:
        res = subprocess.run(list(args), cwd=work, env=env, capture_output=True, text=True, timeout=600)
        assert not check or res.returncode == 0, f"{args}: {res.stdout}\n{res.stderr}"
        return res

    where = run(str(py), "-c", "import logbook, json; print(json.dumps(logbook.__file__))").stdout
    assert json.loads(where).startswith(str(env_dir)), "the wheel, not the source tree, must be imported"

    run("git", "init", "-q", "-b", "main")
    run("git", "commit", "-q", "--allow-empty", "-m", "start")
    run("logbook", "init")
    shipped = run(str(py), "-c", "from logbook.core.bundled import bundled_dir; print(bundled_dir('configs'))").stdout.strip()
    cfg = yaml.safe_load((Path(shipped) / "micro-test.yaml").read_text())
    cfg["train"].update(steps=6, eval_every=3)
    cfg["checkpoint"] = {"every": 3, "keep": 2, "background": False}
    (work / "micro.yaml").write_text(yaml.safe_dump(cfg))
    run("git", "add", "micro.yaml")
    run("git", "commit", "-q", "-m", "config")
    made = run("logbook", "prereg", "--title", "Wheel run learns bytes", "--hypothesis", "The loss falls.",
               "--predict", "val_loss@final < 9.0", "--config", "micro.yaml", "--json")
    prereg_id = json.loads(made.stdout)["id"]
    run("logbook", "run", "--prereg", prereg_id, "--run-id", "wheel", "micro.yaml", "--nproc", "1")
    started = [json.loads(line) for line in (work / "entries" / "runs" / "wheel" / "events.jsonl").open()]
    assert [e["data"]["attention_backend"] for e in started if e["kind"] == "run_started"] == ["sdpa"]
    run("logbook", "render", "--format", "pdf")
    run("logbook", "report", "wheel", "--format", "pdf")
    pdfs = [work / "chronicle.pdf", *(work / "entries").rglob("*.pdf")]
    assert len(pdfs) >= 2 and all(p.read_bytes().startswith(b"%PDF-") for p in pdfs)
    days = list((work / "entries").glob("[0-9]*/[0-9]*/[0-9]*.md"))
    assert days and "wheel" in days[0].read_text()
