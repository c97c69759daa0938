"""libyaml reads what PyYAML reads, to the same values, and hands everything else to PyYAML's own loader.

`load_yaml_text` parses with libyaml when PyYAML has it (about 7x faster: most of
what `verify` spends reading a lab's preregistrations) and with the pure-Python
loader otherwise. A record's hash is computed from what the parse gives, so the
two must agree on every text a record can hold.
"""

from __future__ import annotations

import random
import string

import pytest
import yaml

from logbook.core import yamlsafe
from logbook.core.errors import UsageError

pytestmark = pytest.mark.skipif(yamlsafe._FastLoader is None, reason="PyYAML built without libyaml")


def _python(text: str):
    return yaml.load(text, Loader=yamlsafe._NoAliasLoader)  # noqa: S506


def _value(rng: random.Random, depth: int = 0):
    r = rng.random()
    if depth < 3 and r < 0.2:
        return {"".join(rng.choice(string.ascii_letters + "_- .:") for _ in range(rng.randint(1, 8))): _value(rng, depth + 1)
                for _ in range(rng.randint(0, 4))}
    if depth < 3 and r < 0.35:
        return [_value(rng, depth + 1) for _ in range(rng.randint(0, 4))]
    return rng.choice([
        "".join(rng.choice(string.printable + "éü中🙂\u2028\x85") for _ in range(rng.randint(0, 30))),
        rng.randint(-10**20, 10**20), rng.choice([1e-3, 3.5, -0.0, float("inf"), 1e300, 0.1 + 0.2]),
        rng.choice([True, False, None]),
        rng.choice(["2026-01-01", "2026-01-01T10:00:00Z", "yes", "no", "on", "0x1f", "1_000", "012", ".5", "~", "1e3"])])


def test_every_dumped_value_reads_back_the_same_through_both_loaders():
    rng = random.Random(20261207)
    for _ in range(600):
        value = {f"k{j}": _value(rng) for j in range(5)}
        for style in ({"allow_unicode": True, "sort_keys": False, "width": 10_000}, {"default_flow_style": True},
                      {"default_style": '"'}):
            text = yaml.safe_dump(value, **style)
            assert repr(yamlsafe.load_yaml_text(text)) == repr(_python(text)), text


@pytest.mark.parametrize("text", ["a:\tb\n", "a: \x07\n", "- &x 1\n- *x\n"])
def test_text_libyaml_reads_otherwise_goes_to_the_python_loader(text):
    """A tab after a colon, a control character, an alias: libyaml would read the first, PyYAML refuses all three."""
    with pytest.raises(UsageError):
        yamlsafe.load_yaml_text(text)


def test_a_key_twice_is_refused_on_the_fast_path_too():
    assert not yamlsafe._NOT_FOR_LIBYAML.search("a: 1\na: 2\n")  # this text takes the libyaml path
    with pytest.raises(UsageError, match="duplicate key 'a' on lines 1 and 2"):
        yamlsafe.load_yaml_text("a: 1\na: 2\n")


def test_an_error_is_worded_by_the_python_loader_with_its_line():
    with pytest.raises(UsageError, match=r"not valid YAML \(line 1, column 5\): mapping values are not allowed here"):
        yamlsafe.load_yaml_text("a: b: c\n")
