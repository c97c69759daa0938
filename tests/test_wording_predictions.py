"""The full wording of every refusal of a prediction, pinned once: message and hint, as a preregistration's author reads them.

Other tests check the column, the key phrase and the exit code; the sentences
live in __snapshots__/test_wording_predictions.ambr (`pytest --snapshot-update`
after a deliberate change).
"""

from __future__ import annotations

import pytest

from logbook.core.errors import UsageError
from logbook.promises.predictions import parse_prediction

REFUSED = [
    # syntax, with its column
    "val_loss@final << 1.45", "val_loss@final <", "val_loss@fin < 1", "val_loss@final 1.45", "val_loss@final = 1.45",
    "val_loss@final < 1.45 ± -0.1", "val_loss@final < 1.45 then", "loss@150% < 2", "loss@step:50% < 2",
    "val_loss@final < 40%", "@final < 1", "", "x" * 600,
    # cannot fail, or can never hold
    "restarts >= 0", "loss > -1", "goodput <= 1", "mfu@final < 2", "restarts@final > -0.5",
    "val_loss@final < 1 ± 1e400", "goodput == 0.5 ± 0.5", "spikes != 0.5", "loss != 1.3",
    "loss < 0", "goodput > 1", "spikes == 0.5", "val_ppl@final <= 0.5", "loss == 1.2",
    # a name the registry does not know
    "valloss@final < 1.4", "tokens_per_sec@final > 10",
]


def _refusal(text: str) -> dict[str, str | None]:
    with pytest.raises(UsageError) as e:
        parse_prediction(text)
    return {"message": e.value.message, "hint": e.value.hint}


def test_every_refusal_of_a_prediction_reads_in_full(snapshot):
    assert {text if len(text) < 80 else f"{text[:20]}… ({len(text)} characters)": _refusal(text)
            for text in REFUSED} == snapshot
