"""Any metric a run logs can be predicted: the frameworks' names, `eval_*` values and declared metrics.

The last test trains a real tiny GPT-2 under Hugging Face's Trainer with a `compute_metrics` of its own,
under `logbook run --prereg`, and scores `eval_accuracy` against the value the Trainer logged.
"""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import git
from test_integrations import HF_SCRIPT, LIGHTNING_SCRIPT, _env, _run

from logbook.core.project import open_project
from logbook.eventlog.sink import full_metrics_path
from logbook.launch.tbreader import TensorBoardTail
from logbook.promises.metric_names import FRAMEWORK_NAMES, canonical
from logbook.promises.predictions import parse_prediction
from logbook.promises.prereg import load_prereg


def _prereg(cli, *args: str):
    return cli("prereg", "--title", "accuracy rises", "--hypothesis", "the model learns the copy task", *args)


def _written(repo: Path, res) -> dict:
    assert res.exit_code == 0, res.output
    return load_prereg(open_project(repo), res.stdout.split()[1]).front


def test_eval_loss_is_accepted_as_val_loss_and_eval_accuracy_as_a_metric_of_its_own(logbook_repo, cli):
    front = _written(logbook_repo, _prereg(cli, "--predict", "eval_loss@final < 3.5",
                                           "--predict", "eval_accuracy@final > 0"))
    assert [p["text"] for p in front["predictions"]] == ["val_loss@final < 3.5", "eval_accuracy@final > 0"]
    assert "metrics" not in front  # nothing declared: the record has the shape it always had
    assert cli("verify").exit_code == 0


@pytest.mark.parametrize("name, bundled", sorted(FRAMEWORK_NAMES.items()))
def test_every_framework_name_is_the_bundled_metric_it_maps_to(name, bundled):
    assert parse_prediction(f"{name}@final < 3").metric == bundled


def test_tensorboard_tags_take_their_names_from_the_one_mapping(tmp_path):
    tail = TensorBoardTail(tmp_path)
    assert [tail._name(t) for t in ("train/lr", "eval/loss", "eval/accuracy", "custom/tag")] == \
        ["lr", "val_loss", "eval_accuracy", "custom_tag"]
    assert canonical("train/lr") == "lr"


def test_an_undeclared_unknown_name_is_refused_with_the_declared_and_framework_names(logbook_repo, cli):
    res = _prereg(cli, "--metric", "bleu:higher:corpus BLEU on the dev set", "--predict", "blue@final > 10")
    assert res.exit_code == 2
    assert "unknown metric `blue`" in res.stderr
    assert "did you mean `bleu`?" in res.stderr and "declared here: bleu" in res.stderr
    assert "eval_loss" in res.stderr and "any `eval_*` name" in res.stderr
    res = _prereg(cli, "--predict", "accuracy@final > 0.5")
    assert res.exit_code == 2 and "unknown metric `accuracy`" in res.stderr


def test_an_eval_name_one_slip_from_a_known_one_is_its_own_metric_with_a_warning(logbook_repo, cli):
    res = _prereg(cli, "--predict", "eval_los@final < 3.5")
    assert res.exit_code == 0  # any eval_* name is a metric an evaluation may log: not refused, but questioned
    assert "warning: `eval_los` is taken as a metric of its own" in res.stderr
    assert "did you mean `eval_loss`?" in res.stderr


def test_a_declared_metric_is_hashed_into_the_record_and_an_edit_is_caught_by_verify(logbook_repo, cli):
    front = _written(logbook_repo, _prereg(cli, "--metric", "bleu:higher:corpus BLEU on the dev set",
                                           "--metric", "val_acc:fraction:accuracy on the dev set",
                                           "--predict", "bleu@final > 10", "--predict", "val_acc@final > 40%"))
    assert front["metrics"] == [
        {"name": "bleu", "direction": "higher", "description": "corpus BLEU on the dev set"},
        {"name": "val_acc", "unit": "fraction", "description": "accuracy on the dev set"}]
    assert front["predictions"][1]["threshold"] == 0.4  # a fraction's percentage, as for mfu
    assert cli("verify").exit_code == 0
    path, = open_project(logbook_repo).prereg_dir.glob("*.md")
    text = path.read_text()
    assert "- `bleu` (higher is better): corpus BLEU on the dev set" in text  # the body shows it to people
    path.write_text(text.replace("direction: higher", "direction: lower"))
    res = cli("verify")
    assert res.exit_code == 4 and "direction: lower" in res.output


def test_a_declared_unit_bounds_the_range_so_an_unfalsifiable_prediction_is_still_refused(logbook_repo, cli):
    res = _prereg(cli, "--metric", "val_acc:fraction:accuracy on the dev set", "--predict", "val_acc@final <= 1")
    assert res.exit_code == 2 and "cannot fail" in res.stderr
    res = _prereg(cli, "--metric", "val_loss:lower:mine", "--predict", "val_loss@final < 3")
    assert res.exit_code == 2 and "needs no declaration" in res.stderr
    res = _prereg(cli, "--metric", "bleu:higher", "--predict", "bleu@final > 3")
    assert res.exit_code == 2 and "NAME:DIRECTION_OR_UNIT:DESCRIPTION" in res.stderr


def test_a_yaml_preregistration_declares_its_metrics_in_a_metrics_block(logbook_repo, cli):
    (logbook_repo / "prereg.yaml").write_text(
        "title: bleu rises\nhypothesis: more data helps\n"
        "metrics:\n  - bleu:higher:corpus BLEU on the dev set\n"
        "  - {name: latency_ms, unit: ms, description: median decode latency}\n"
        "predictions:\n  - bleu@final > 10\n  - latency_ms@final < 40\n")
    front = _written(logbook_repo, cli("prereg", "--from-file", "prereg.yaml"))
    assert [m["name"] for m in front["metrics"]] == ["bleu", "latency_ms"]
    assert front["metrics"][1]["unit"] == "ms"
    (logbook_repo / "bad.yaml").write_text("title: t\nhypothesis: h\nmetrics:\n  - {name: bleu}\n"
                                           "predictions:\n  - bleu@final > 10\n")
    assert cli("prereg", "--from-file", "bad.yaml").exit_code == 2


HF_ACCURACY = '''
def accuracy(pred):  # the share of next tokens the model gets right: a metric the logbook does not know
    logits = pred.predictions[0] if isinstance(pred.predictions, tuple) else pred.predictions
    return {"accuracy": float((logits[:, :-1].argmax(-1) == pred.label_ids[:, 1:]).mean())}


out = sys.argv[1]
'''


def _hf_script_with_accuracy() -> str:
    script = HF_SCRIPT.replace("\nout = sys.argv[1]\n", HF_ACCURACY, 1)
    script = script.replace("callbacks=[Slow(),", "compute_metrics=accuracy, callbacks=[Slow(),", 1)
    assert script.count("compute_metrics=accuracy") == 1 and "def accuracy" in script
    return script


@pytest.mark.slow
def test_eval_accuracy_from_compute_metrics_is_scored_with_the_value_the_trainer_logged(logbook_repo, tmp_path, cli):
    (logbook_repo / "train.py").write_text(_hf_script_with_accuracy())
    git(logbook_repo, "add", "train.py")
    git(logbook_repo, "commit", "-q", "-m", "the training script")
    front = _written(logbook_repo, _prereg(cli, "--metric", "bleu:higher:corpus BLEU, never logged by this run",
                                           "--predict", "eval_accuracy@final > 0", "--predict", "bleu@final > 10",
                                           "--predict", "eval_loss@final < 10"))
    res = subprocess.run([sys.executable, "-m", "logbook", "run", "--prereg", front["id"], "--run-id", "hf-acc", "--",
                          sys.executable, "train.py", str(tmp_path / "out")], cwd=logbook_repo,
                         env=_env(MAX_STEPS="12"), capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    history = json.loads((tmp_path / "out" / "log_history.json").read_text())
    logged, = [h for h in history if "eval_accuracy" in h]
    assert logged["step"] == 12

    card = json.loads(cli("outcome", "hf-acc", "--json").stdout)
    got = {p["text"]: p for p in card["predictions"]}
    acc = got["eval_accuracy@final > 0"]
    assert (acc["status"], acc["at_step"]) == ("confirmed", 12)
    assert acc["value"] == pytest.approx(logged["eval_accuracy"], rel=1e-9)  # HF's own number, not another metric's
    assert got["val_loss@final < 10"]["value"] == pytest.approx(logged["eval_loss"], rel=1e-9)
    bleu = got["bleu@final > 10"]
    assert (bleu["status"], bleu["value"]) == ("inconclusive", None)
    assert bleu["reason"] == "not measured: no bleu was logged at any step"
    assert cli("verify").exit_code == 0


@pytest.mark.slow
def test_lightning_writes_a_logged_metric_it_does_not_map_under_its_own_name(logbook_repo, tmp_path):
    script = LIGHTNING_SCRIPT.replace(
        '        self.log("val_loss", torch.nn.functional.mse_loss(self.net(x), y))\n',
        '        self.log("val_loss", torch.nn.functional.mse_loss(self.net(x), y))\n'
        '        self.log("val/mae", torch.nn.functional.l1_loss(self.net(x), y))  # a metric of its own\n', 1)
    assert "val/mae" in script
    (tmp_path / "train.py").write_text(script)
    _run([sys.executable, str(tmp_path / "train.py"), str(tmp_path / "out")], logbook_repo, RUN_ID="pl-mae",
         MAX_STEPS="12")
    rows = [json.loads(line) for line in
            full_metrics_path(open_project(logbook_repo).state_dir, "pl-mae").read_text().splitlines()]
    evaluated, = [r for r in rows if "val_mae" in r]
    assert evaluated["step"] == 12 and "val_loss" in evaluated
    assert "train_loss" not in evaluated and "loss" not in evaluated  # the training row's, not written twice
    logged, = [r for r in csv.DictReader((tmp_path / "out" / "csv" / "version_0" / "metrics.csv").open())
               if r.get("val/mae")]
    assert evaluated["val_mae"] == pytest.approx(float(logged["val/mae"]), rel=1e-6)  # Lightning's own number


def test_an_amendment_may_predict_a_metric_its_preregistration_declares_and_no_other(logbook_repo, cli):
    pid = _prereg(cli, "--metric", "bleu:higher:corpus BLEU on the dev set", "--predict", "bleu@final > 10")
    assert pid.exit_code == 0, pid.output
    pid = pid.stdout.split()[1]
    res = cli("prereg", "amend", pid, "--seen", "nothing", "--reason", "a second bar", "--predict", "bleu@50% > 5")
    assert res.exit_code == 0, res.output
    res = cli("prereg", "amend", pid, "--seen", "nothing", "--reason", "a typo", "--predict", "rouge@final > 5")
    assert res.exit_code == 2 and "unknown metric `rouge`" in res.stderr
    assert cli("verify").exit_code == 0
