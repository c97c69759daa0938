"""Mutation testing of the modules that prove integrity and state facts: does the suite notice a broken check?

Usage: python3 bench/mutation.py [--set trust|facts|NAME...] [--max-children N] [--keep] [--tests PATTERN...]
       python3 bench/mutation.py --set NAME --resume /tmp/mutation-NAME-xxxx   (finish a stopped run)

mutmut changes one thing at a time in a module (a `<` made `<=`, a condition
negated, a constant changed, a call dropped) and runs the tests that cover it;
a mutant the tests still pass on ("survived") is a check nobody would miss.
Each set names its modules and the test files that pin them. The work happens
in a copy of the checkout (mutmut writes `mutants/` beside the sources), so the
tree is never touched. Prints the score per set as a RESULT line and lists every
survivor (module, function and mutant name) so it can be read with
`mutmut show NAME` in the copy (kept with --keep). A survivor that only spells
a codec name in other case ("utf-8" as "UTF-8") is provably equivalent: it is
listed apart and left out of the score; every other survivor counts.

Not run in CI: one set takes tens of minutes on two cores. `pip install -e '.[bench]'` installs mutmut. A survivor costs
every test that covers its function, so tests marked `slow` (real trainer runs)
are left out; `--tests` runs a set against other test files (e.g. only the fast
ones that pin a module, to find survivors quickly; the score that counts is the
set's own list).
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _result import result  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent

# The tests that pin the facts, scoring and forecast modules: every file that calls them.
FACTS_TESTS = ["tests/test_outcome.py", "tests/test_predictions.py", "tests/test_forecast_scoring.py",
               "tests/test_calibration.py", "tests/test_goodput.py", "tests/test_forecast_calibration.py",
               "tests/test_calibration_plot.py", "tests/test_measured_points.py", "tests/test_forecast_milestones.py",
               "tests/test_milestone_notes.py", "tests/test_live_change_once.py", "tests/test_guard_rule_terms.py",
               "tests/test_views_read_facts.py", "tests/test_forecast_grammar.py", "tests/test_fuzz_predictions.py",
               "tests/test_kind_questions.py", "tests/test_run_facts.py", "tests/test_progress_scores.py",
               "tests/test_forecast_curves.py", "tests/test_forecast_words.py", "tests/test_new_kind_recipe.py",
               "tests/test_metric_measures.py", "tests/test_partial_counts.py", "tests/test_load_facts.py",
               "tests/test_code_diff.py"]
# Left out: tests that render a PDF. mutmut forks each mutant's run from a parent whose PDF engine already started
# threads, and the fork's copy of a held lock hangs it until a wall-clock timeout that mutmut would count as a kill.

VERIFY_TESTS = ["tests/test_verify.py", "tests/test_verify_checks.py", "tests/test_history.py", "tests/test_verify_memo.py",
                "tests/test_trust_pins.py", "tests/test_timestamps.py", "tests/test_signatures.py"]

# Modules under test, and the tests that are meant to notice a change in them.
SETS: dict[str, tuple[list[str], list[str], float]] = {
    "chain": (["logbook/eventlog/chain.py"],
              ["tests/test_chain.py", "tests/test_chain_checks.py", "tests/test_fuzz_eventlog.py"], 0.95),
    "history": (["logbook/records/history.py"],
                ["tests/test_history.py", "tests/test_history_checks.py", "tests/test_history_workflows.py"], 0.95),
    "verify": (["logbook/proof/verify.py", "logbook/records/verify_memo.py"], VERIFY_TESTS, 0.95),
    # The verify set a module at a time (PARTS); with --tests, a subset of its tests gives a lower bound.
    "verify-report": (["logbook/proof/verify.py"], VERIFY_TESTS, 0.95),
    "verify-memo": (["logbook/records/verify_memo.py"], VERIFY_TESTS, 0.95),
    "trust": (["logbook/eventlog/chain.py", "logbook/records/history.py", "logbook/proof/verify.py",
               "logbook/records/verify_memo.py", "logbook/trust/"],
              ["tests/test_chain.py", "tests/test_chain_checks.py", "tests/test_history.py", "tests/test_history_checks.py",
               "tests/test_verify.py", "tests/test_verify_checks.py", "tests/test_history_workflows.py",
               "tests/test_trust_*.py", "tests/test_forgeries.py", "tests/test_timestamps.py", "tests/test_signatures.py"],
              0.95),
    "facts": (["logbook/runs/facts.py", "logbook/scoring/", "logbook/promises/predictions.py"],
              FACTS_TESTS, 0.90),
    # The checks that keep the proof from trusting its prover: the reader's pin and trust on first use, who may
    # sign for whom, and the scorecard recomputed from the log.
    "proof": (["logbook/trust/pins.py", "logbook/trust/tofu.py", "logbook/trust/signers.py",
               "logbook/proof/scorecard.py"],
              ["tests/test_trust_pins.py", "tests/test_key_acceptance.py", "tests/test_signer_rules.py",
               "tests/test_forgeries_with_tsa.py", "tests/test_outcome.py"], 0.95),
    # Its signers part alone: the rules of who may sign, on their own and through real keys and commits.
    "signers": (["logbook/trust/signers.py"], ["tests/test_signer_rules.py", "tests/test_key_acceptance.py"], 0.95),
    # The facts set a part at a time (PARTS), for a machine that cannot run it whole in one sitting.
    "run-facts": (["logbook/runs/facts.py"], FACTS_TESTS, 0.90),
    "scoring": (["logbook/scoring/"], FACTS_TESTS, 0.90),
    "predictions": (["logbook/promises/predictions.py"], FACTS_TESTS, 0.90),
}
PARTS = ("run-facts", "scoring", "predictions", "verify-report", "verify-memo")


def _copy_checkout(dest: Path) -> None:
    files = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                           capture_output=True, check=True).stdout.decode().split("\0")
    for rel in filter(None, files):
        src = ROOT / rel
        if src.is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / rel)


def _configure(dest: Path, modules: list[str], tests: list[str]) -> None:
    """mutmut reads `[tool.mutmut]` from the copy's pyproject.toml."""
    present = sorted({str(p.relative_to(dest)) for pattern in tests for p in dest.glob(pattern)})
    shutil.copy2(ROOT / "bench" / "_mutation_order.py", dest / "conftest.py")  # likeliest killers first (see there)
    py = dest / "pyproject.toml"
    # `-n 0`: mutmut runs the tests itself, one process per mutant; `-p no:cacheprovider` keeps the copy clean.
    conf = {"source_paths": [m for m in modules if (dest / m).exists()],
            "pytest_add_cli_args_test_selection": present,
            "pytest_add_cli_args": ["-n", "0", "-p", "no:cacheprovider", "-q", "-x", "-m", "not slow"],
            "also_copy": ["templates", "configs", "trainer", "tests", "bench", "logbook", "pyproject.toml",
                          "README.md", "docs", "conftest.py"]}
    py.write_text(py.read_text("utf-8") + "\n[tool.mutmut]\n"
                  + "".join(f"{k} = {json.dumps(v)}\n" for k, v in conf.items()), "utf-8")


def _survivors(dest: Path) -> tuple[int, int, list[str], list[str]]:
    """(killed, survived, survivors' names, equivalent mutants' names): equivalents count neither way."""
    out = subprocess.run(["mutmut", "results", "--all", "true"], cwd=dest, capture_output=True, text=True).stdout
    killed = survived = 0
    names, equivalent = [], []
    for line in out.splitlines():
        name, _, status = line.strip().rpartition(": ")
        if status == "killed" or status == "timeout":
            killed += 1
        elif status in ("survived", "no tests"):  # a mutant no test even runs is one nobody would miss
            if _equivalent(dest, name):
                equivalent.append(name)
            else:
                survived += 1
                names.append(name)
    return killed, survived, names, equivalent


_CODEC = re.compile(r'"utf-8"', re.IGNORECASE)


def _equivalent(dest: Path, name: str) -> bool:
    """A mutant that only spells a codec name in other case ("utf-8" -> "UTF-8"): Python's codec lookup ignores
    case, so no test could ever tell it apart. Nothing else is taken as equivalent."""
    diff = subprocess.run(["mutmut", "show", name], cwd=dest, capture_output=True, text=True).stdout.splitlines()
    minus = [ln[1:] for ln in diff if ln.startswith("-") and not ln.startswith("---")]
    plus = [ln[1:] for ln in diff if ln.startswith("+") and not ln.startswith("+++")]
    return (len(minus) == len(plus) > 0 and all(a != b for a, b in zip(minus, plus))
            and all(_CODEC.sub('"utf-8"', a) == _CODEC.sub('"utf-8"', b) for a, b in zip(minus, plus)))


def run_set(name: str, max_children: int, keep: bool, only_tests: list[str] | None = None,
            mutants: list[str] | None = None, resume: Path | None = None) -> bool:
    modules, tests, goal = SETS[name]
    tests = only_tests or tests
    dest = resume or Path(tempfile.mkdtemp(prefix=f"mutation-{name}-"))
    keep = keep or resume is not None
    try:
        if resume is None:
            _copy_checkout(dest)
            _configure(dest, modules, tests)
        else:  # the test order may have improved since the run began; results are kept either way
            for folder in (dest, dest / "mutants"):
                shutil.copy2(ROOT / "bench" / "_mutation_order.py", folder / "conftest.py")
        subprocess.run(["mutmut", "run", "--max-children", str(max_children), *(mutants or [])], cwd=dest,
                       stdout=subprocess.DEVNULL)
        killed, survived, names, equivalent = _survivors(dest)
        total = killed + survived
        score = killed / total if total else 0.0
        print(f"{name}: {killed} of {total} mutants killed ({score:.1%}); {survived} survived; "
              f"{len(equivalent)} equivalent (a codec name's case) left out")
        for n in names:
            print(f"  survived: {n}")
        for n in equivalent:
            print(f"  equivalent: {n}")
        result(f"mutation score, {name}", round(score, 4), "ratio", f">= {goal}", score >= goal and total > 0)
        if keep:
            print(f"the copy is kept at {dest} (`mutmut show NAME` there)")
        return score >= goal
    finally:
        if not keep:
            shutil.rmtree(dest, ignore_errors=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--set", nargs="*", default=[s for s in SETS if s not in PARTS], choices=list(SETS),
                    help="default: every set but the parts of the facts and verify sets")
    ap.add_argument("--max-children", type=int, default=2)
    ap.add_argument("--keep", action="store_true", help="keep the copy with mutmut's state")
    ap.add_argument("--tests", nargs="*", help="test files (glob patterns) to run instead of the set's own")
    ap.add_argument("--mutants", nargs="*", help="run only these mutants (names or globs, as `mutmut results` names "
                                                 "them): the rest of a run that was stopped; the score counts only these")
    ap.add_argument("--resume", type=Path, help="a copy kept by an earlier run of one set (--keep): run the mutants it "
                                                "has not run yet, then score all (mutmut keeps every result there)")
    args = ap.parse_args()
    if args.resume and len(args.set) != 1:
        ap.error("--resume continues one set's copy: name that set with --set")
    ok = [run_set(s, args.max_children, args.keep, args.tests, args.mutants, args.resume) for s in args.set]
    return 0 if all(ok) else 1


if __name__ == "__main__":
    sys.exit(main())
