"""What a person states before a run, and the checks it must pass before it is recorded.

Text is bounded UTF-8 without control characters; a title must also be safe as
part of an id, a file name and a commit subject. Nothing here touches git or
writes a file.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from logbook.core.errors import UsageError, did_you_mean
from logbook.core.project import Project
from logbook.promises.contingency import ContingencyRule, parse_rule
from logbook.promises.measurable import cadence_of_file, check_measurable
from logbook.promises.metric_names import Metric, check_declarations, declaration_from_mapping, near_miss, to_record
from logbook.promises.predictions import Forecast, flatten, merge_stated_twice, parse_prediction

ID_RE = re.compile(r"^\d{4}-\d{2}-\d{2}-[a-z0-9]+(?:-[a-z0-9]+)*$")
_FORBIDDEN_TITLE = set("`$<>|;&\\")
_BIDI = set("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")
_MAX_TITLE = 120
_MAX_TEXT = 20_000


# --- input validation --------------------------------------------------------

def check_text(value: str, what: str, *, required: bool = False) -> str:
    """Free text: valid UTF-8, no control characters but newline and tab, bounded length."""
    if not isinstance(value, str):
        raise UsageError(f"{what} must be text, got {type(value).__name__}")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise UsageError(f"{what} is not valid UTF-8 text") from None
    value = value.strip()
    if required and not value:
        hint = ("write the rule as `trigger -> action`, or leave the flag out: a preregistration may plan no contingency"
                if what.startswith("contingency rule") else
                f"say it in a sentence: a preregistration without {what} proves nothing")
        raise UsageError(f"{what} is empty", hint=hint)
    bad = next((c for c in value if (unicodedata.category(c) == "Cc" and c not in "\n\t") or c in _BIDI), None)
    if bad is not None:
        raise UsageError(f"{what} contains a control character (U+{ord(bad):04X})", hint="remove it and retry")
    if len(value) > _MAX_TEXT:
        raise UsageError(f"{what} is longer than {_MAX_TEXT} characters")
    return value


def check_title(title: str) -> str:
    """A title becomes part of an id, a file name and a commit subject: keep it plain."""
    if title is None or not str(title).strip():
        raise UsageError("the title is empty", hint="give a short title: --title 'qk-norm removes spikes'")
    title = str(title)
    if title.lstrip().startswith("-"):
        raise UsageError(f"the title {title!r} starts with '-' and would read as an option",
                         hint="start the title with a word")
    title = check_text(title, "the title")
    if "\n" in title or "\t" in title:
        raise UsageError("the title must be a single line")
    bad = sorted({c for c in title if c in _FORBIDDEN_TITLE})
    if bad:
        raise UsageError(f"the title contains {' '.join(bad)}",
                         hint="titles may not contain ` $ < > | ; & \\ (shell and markup characters); use words")
    if len(title) > _MAX_TITLE:
        raise UsageError(f"the title is longer than {_MAX_TITLE} characters", hint="put the detail in --hypothesis")
    if not slugify(title):
        raise UsageError("the title needs at least one letter or digit (it names the file)")
    return title


def slugify(title: str, limit: int = 48) -> str:
    """The id's readable part: the title in ASCII, any script transliterated ("Нормализация" -> "normalizatsiia").

    The title itself keeps its own script wherever it is shown; only the id,
    which names files and branches and is typed at a shell, is ASCII.
    """
    from anyascii import anyascii  # a maintained table for every script, emoji included

    ascii_ = anyascii(unicodedata.normalize("NFC", title)).lower()
    slug = re.sub(r"[^a-z0-9]+", "-", ascii_).strip("-")
    if len(slug) > limit:
        slug = slug[:limit].rsplit("-", 1)[0] if "-" in slug[:limit] else slug[:limit]
    return slug.strip("-")


def check_id(prereg_id: str) -> str:
    """Refuse ids that could escape the prereg folder or read as options."""
    if not isinstance(prereg_id, str) or len(prereg_id) > 100 or not ID_RE.match(prereg_id):
        raise UsageError(f"invalid preregistration id {prereg_id!r}",
                         hint="ids look like 2026-11-30-qknorm-removes-spikes-3f9a (see `logbook ls`)")
    return prereg_id


_BUDGET_UNITS = [
    ("gpu-hours", r"gpu[- ]?(?:hours?|hrs?|h)"),
    ("device-hours", r"(?:device|accelerator|node)[- ]?(?:hours?|hrs?|h)"),
    ("hours", r"(?:hours?|hrs?|h)"),
    ("tokens", r"(?:tokens?|tok)"),
    ("steps", r"(?:steps?)"),
]
_SCALE = {"k": 1e3, "m": 1e6, "b": 1e9, "g": 1e9, "t": 1e12}


def parse_budget(text: str) -> dict[str, Any]:
    """`8 GPU-hours` -> {"text", "amount": 8, "unit": "gpu-hours"}; amount/unit None if not understood."""
    text = check_text(text, "the budget")
    m = re.match(r"^(\d+(?:[.,]\d+)?)\s*([kmbgtKMBGT](?![A-Za-z]))?\s*(.*)$", text)
    if m:
        amount = float(m.group(1).replace(",", "")) * _SCALE.get((m.group(2) or "").lower(), 1.0)
        unit_text = m.group(3).strip().lower().replace("_", "-")
        for unit, rx in _BUDGET_UNITS:
            if re.fullmatch(rx, unit_text):
                value: int | float = int(amount) if amount.is_integer() else amount
                return {"text": text, "amount": value, "unit": unit}
    return {"text": text, "amount": None, "unit": None}


# --- the input model ---------------------------------------------------------

@dataclass
class PreregInput:
    """What a person states before a run (from flags, a YAML file or the editor)."""

    title: str
    hypothesis: str
    predictions: list[str]
    contingency: list[str] = field(default_factory=list)
    config: str | None = None
    """Training config path: absolute, or relative to the current directory or the repository root."""
    budget: str | None = None
    rationale: str = ""
    assumptions: list[str] = field(default_factory=list)
    metrics: list[Any] = field(default_factory=list)
    """Metrics declared beyond the bundled set: `NAME:DIRECTION_OR_UNIT:DESCRIPTION` lines, or (from YAML)
    mappings with name, direction or unit, and description (`metric_names`)."""


INPUT_KEYS = ("title", "hypothesis", "metrics", "predictions", "contingency", "config", "budget", "rationale",
              "assumptions")


def input_from_mapping(data: Any, source: str) -> PreregInput:
    """Build input from a parsed YAML mapping; unknown keys name the closest known one."""
    if not isinstance(data, dict):
        raise UsageError(f"{source}: expected a mapping with {', '.join(INPUT_KEYS)}")
    for key in data:
        if key not in INPUT_KEYS:
            raise UsageError(f"{source}: unknown key `{key}`",
                             hint=did_you_mean(key, INPUT_KEYS, f"known keys: {', '.join(INPUT_KEYS)}"))

    def text(key: str) -> str:
        v = data.get(key)
        if v is None:
            return ""
        if isinstance(v, (dict, list)):
            raise UsageError(f"{source}: `{key}` must be text")
        return str(v)

    def items(key: str) -> list[str]:
        v = data.get(key)
        if v is None:
            return []
        if isinstance(v, (str, int, float)):
            return [str(v)]
        if key == "predictions" and isinstance(v, list):
            # A trajectory may be given as a small table or a CSV file instead of one long line.
            v = [trajectory_line(x, source) if isinstance(x, dict) else x for x in v]
        if not isinstance(v, list) or any(isinstance(x, (dict, list)) or x is None for x in v):
            raise UsageError(f"{source}: `{key}` must be a list of lines")
        return [str(x) for x in v]

    metrics = data.get("metrics") or []
    if not isinstance(metrics, list):
        raise UsageError(f"{source}: `metrics` must be a list of `NAME:DIRECTION_OR_UNIT:DESCRIPTION` lines "
                         "or of mappings with name, direction or unit, and description")
    return PreregInput(title=text("title"), hypothesis=text("hypothesis"), predictions=items("predictions"),
                       contingency=items("contingency"), config=text("config") or None,
                       budget=text("budget") or None, rationale=text("rationale"), assumptions=items("assumptions"),
                       metrics=metrics)


_TRAJECTORY_KEYS = ("trajectory", "level", "points", "file")


def trajectory_line(d: dict[str, Any], source: str) -> str:
    """A trajectory written as a table in a YAML file, as the one line the grammar reads.

        - trajectory: val_loss            # the metric
          level: 80%                      # the level of every interval
          points:                         # point, forecast, lower, upper
            - [25%, 3.1, 2.9, 3.3]
            - [final, 2.25, 2.2, 2.3]
          # or instead of points: file: forecasts/val_loss.csv (columns point,value,lo,hi; relative to the YAML file)
    """
    unknown = [k for k in d if k not in _TRAJECTORY_KEYS]
    if unknown:
        raise UsageError(f"{source}: unknown key `{unknown[0]}` in a trajectory",
                         hint=f"a trajectory has {', '.join(_TRAJECTORY_KEYS)}")
    metric, level = d.get("trajectory"), d.get("level")
    if not isinstance(metric, str) or not metric.strip():
        raise UsageError(f"{source}: a trajectory needs `trajectory: <metric>`")
    if level is None:
        raise UsageError(f"{source}: trajectory {metric}: give the level of its intervals (`level: 80%`)")
    if ("points" in d) == ("file" in d):
        raise UsageError(f"{source}: trajectory {metric}: give either `points` or `file`")
    rows = _points_from_file(d["file"], source) if "file" in d else d["points"]
    if not isinstance(rows, list) or not rows:
        raise UsageError(f"{source}: trajectory {metric}: `points` must be a list of [point, value, lo, hi] rows")
    cells = []
    for i, row in enumerate(rows, 1):
        if not isinstance(row, (list, tuple)) or len(row) != 4 or any(isinstance(c, (dict, list)) for c in row):
            raise UsageError(f"{source}: trajectory {metric}, point {i}: expected [point, value, lo, hi], got {row!r}",
                             hint="missing interval bounds? every point needs its forecast and both bounds")
        at, value, lo, hi = (str(c).strip() for c in row)
        cells.append(f"{at}: {value} [{lo}, {hi}]")
    level_text = str(level).strip()
    if not level_text.endswith("%"):
        raise UsageError(f"{source}: trajectory {metric}: the level is a percentage such as `80%`, got {level!r}")
    return f"{metric.strip()} ≈ {{{', '.join(cells)}}} {level_text}"


def _points_from_file(name: Any, source: str) -> list[list[str]]:
    """Rows of a CSV file `point,value,lo,hi` (a header line is optional), next to the YAML file."""
    import csv
    import io

    if not isinstance(name, str) or not name.strip():
        raise UsageError(f"{source}: a trajectory's `file` must be a path")
    path = Path(name) if Path(name).is_absolute() else Path(source).parent / name
    try:
        text = path.read_text("utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise UsageError(f"{source}: cannot read the trajectory file {name}: {e}") from None
    rows = [[c.strip() for c in r] for r in csv.reader(io.StringIO(text)) if any(c.strip() for c in r)]
    if rows and rows[0] and rows[0][0].lower() == "point":
        rows = rows[1:]
    return rows


# --- checking all of it ------------------------------------------------------

def check_metrics(entries: list[Any]) -> list[Metric]:
    """Parse each declared metric (a line or a mapping), numbered from 1 in messages."""
    out = []
    for i, entry in enumerate(entries, start=1):
        try:
            out.append(declaration_from_mapping(entry, f"metric {i}"))
        except UsageError as e:
            raise UsageError(f"metric {i}: {e.message}", hint=e.hint) from None
    return check_declarations(out)


def check_predictions(texts: list[str], declared: dict[str, Metric] | None = None) -> list[Forecast]:
    """Parse each prediction, numbered from 1 in messages; the same prediction twice is refused.

    `declared`: the metrics the preregistration declares, which its predictions may name too.
    """
    out = []
    for i, raw in enumerate(texts, start=1):
        check_text(raw, f"prediction {i}", required=True)
        try:
            out.append(parse_prediction(raw, declared))
        except UsageError as e:
            raise UsageError(f"prediction {i}: {e.message}", hint=e.hint) from None
    texts_seen = [p.to_text() for p in out]
    dup = next((t for t in texts_seen if texts_seen.count(t) > 1), None)
    if dup:
        raise UsageError(f"prediction `{dup}` is given twice")
    return out


def check_contingency(texts: list[str]) -> tuple[list[ContingencyRule], list[str]]:
    """Parse each contingency rule; a rule kept as free text comes back with a warning."""
    rules, warnings = [], []
    for i, raw in enumerate(texts, start=1):
        check_text(raw, f"contingency rule {i}", required=True)
        rule = parse_rule(raw)
        rules.append(rule)
        if not rule.structured:
            warnings.append(f"contingency rule {i} ({rule.text!r}): {rule.warning}")
    return rules, warnings


def _config_entry(project: Project, config: str | None) -> dict[str, Any] | None:
    if not config:
        return None
    given = Path(config)
    # Relative paths are read from the current directory, else from the repository root.
    candidates = [given] if given.is_absolute() else [Path.cwd() / given, project.root / given]
    path = next((c for c in candidates if c.exists()), candidates[0]).resolve()
    if not path.exists():
        raise UsageError(f"config file not found: {config}", hint="give the path of the training config this run will use")
    if not path.is_file():
        raise UsageError(f"config path is not a file: {config}")
    try:
        rel = path.relative_to(project.root).as_posix()
    except ValueError:
        raise UsageError(f"config {config} is outside the repository {project.root}",
                         hint="keep the config in the repository so the run can be reproduced from its commit") from None
    return {"path": rel, "sha256": hashlib.sha256(path.read_bytes()).hexdigest()}


def _check_measurable(project: Project, config_path: str, predictions: list[Forecast]) -> None:
    """Refuse predictions the configured run can never measure at their point (see `measurable`)."""
    cad = cadence_of_file(project.root / config_path)
    problems = check_measurable(flatten(predictions), cad) if cad is not None else []
    if problems:
        raise UsageError(f"{len(problems)} prediction(s) name a point the run in {config_path} never measures: "
                         + "; ".join(problems),
                         hint="a value is never taken from another step unless the prediction says how "
                              "(`@~STEP±WINDOW`: the nearest value within WINDOW steps)")


def validate_input(project: Project, inp: PreregInput) -> tuple[dict[str, Any], list[str]]:
    """Check everything a person typed; return the content fields of the front matter and warnings."""
    title = check_title(inp.title)
    hypothesis = check_text(inp.hypothesis, "the hypothesis", required=True)
    if not inp.predictions:
        raise UsageError("no predictions given",
                         hint="add at least one machine-checkable prediction: --predict 'val_loss@final < 1.45'")
    declared = check_metrics(list(inp.metrics))
    by_name = {m.name: m for m in declared}
    predictions, merged = merge_stated_twice(check_predictions(list(inp.predictions), by_name))
    rules, warnings = check_contingency(list(inp.contingency))
    warnings += merged
    warnings += [w for w in dict.fromkeys(near_miss(p.metric, by_name) for p in flatten(predictions)) if w]
    config = _config_entry(project, inp.config)
    if config:
        _check_measurable(project, config["path"], predictions)
    budget = parse_budget(inp.budget) if inp.budget and inp.budget.strip() else None
    if budget and budget["amount"] is None:
        warnings.append(f"budget {budget['text']!r} not understood as an amount of gpu-hours, "
                        "device-hours, hours, tokens or steps: kept as text")
    fields = {
        "title": title,
        "hypothesis": hypothesis,
        "rationale": check_text(inp.rationale or "", "the rationale"),
        "assumptions": [check_text(a, f"assumption {i}", required=True) for i, a in enumerate(inp.assumptions, 1)],
        "metrics": [to_record(m) for m in declared],
        "predictions": [p.to_dict() for p in predictions],
        "contingency": [r.to_dict() for r in rules],
        "config": config,
        "budget": budget,
    }
    return fields, warnings
