"""The full wording of every refusal of `logbook prereg`, pinned once: the lines its author reads on stderr.

tests/test_prereg.py checks each refusal's exit code, a key phrase and that
nothing was written; the sentences live in
__snapshots__/test_wording_prereg.ambr (`pytest --snapshot-update` after a
deliberate change).
"""

from __future__ import annotations

from normalise import normalise

BASE = {"--title": "a fine title", "--hypothesis": "it helps", "--predict": "spikes@final == 0"}
CHANGES = {
    "a prediction with a syntax error": {"--predict": "val_loss@final << 1.45"},
    "a prediction that cannot fail": {"--predict": "restarts >= 0"},
    "an unknown metric": {"--predict": "perplexity@final < 20"},
    "no prediction": {"--predict": None},
    "an empty hypothesis": {"--hypothesis": "   "},
    "no title": {"--title": None},
    "a title read as an option": {"--title": "--upload-pack=touch pwned"},
    "a title with shell characters": {"--title": "a | b & c"},
    "a title with a control character": {"--title": "bell\x07here"},
    "a title of two lines": {"--title": "two\nlines"},
    "a title of punctuation only": {"--title": "..."},
    "a missing config": {"--config": "configs/missing.yaml"},
    "a config outside the repository": {"--config": "/etc/hostname"},
    "an empty contingency rule": {"--contingency": "  "},
    "flags beside a file": {"--from-file": "x.yaml"},
}


def _args(change: dict[str, str | None]) -> list[str]:
    merged = {**BASE, **change}
    return [x for k, v in merged.items() if v is not None for x in (k, v)]


def test_every_refusal_of_prereg_reads_in_full(logbook_repo, cli, snapshot):
    said = {}
    for name, change in CHANGES.items():
        res = cli("prereg", *_args(change))
        said[name] = {"exit": res.exit_code, "stderr": normalise(res.stderr)}
    assert said == snapshot
