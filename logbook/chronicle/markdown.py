"""The jinja2 side of the chronicle: template lookup, filters, and safe-by-default output.

Templates live in `templates/chronicle/` (bundled with the package); a
`templates/` folder at the root of the user's repository overrides any of them
file by file, so a team can restyle its chronicle without touching code.

Every `{{ value }}` is Markdown-escaped on output unless it is a `Raw` string
(text the renderer itself produced as Markdown, or a note, which is Markdown by
design). A payload string such as an exception message therefore cannot start
a link, emphasis, a table or raw HTML, whatever the template does with it.
"""

from __future__ import annotations

import os
import re
from collections import OrderedDict
from pathlib import Path
from typing import Any

from logbook.core.bundled import bundled_dir
from logbook.core.errors import NotFoundError
from logbook.core.project import Project
from logbook.core.textfmt import (
    code_block, code_span, fmt_duration, fmt_fraction, fmt_int, fmt_num, fmt_pct, fmt_setting,
    fmt_tokens, is_number, md_escape, quote_text, signal_name, signal_number, table_cell,
)
from logbook.eventlog.kinds import kind_of, label as kind_label
from logbook.eventlog.kinds import restart_cause, signal_evidence

BUNDLED_TEMPLATES = bundled_dir("templates")
_KIND_RE = re.compile(r"^[A-Za-z0-9_]{1,64}$")
_ENTRY_CACHE_SIZE = 20_000


class Raw(str):
    """Markdown that is emitted as is (already escaped, or human-written by design)."""


class View(dict):
    """A dict whose keys read as attributes in templates; a missing key reads as None.

    Jinja looks `d.key` up as an attribute first; on a plain dict that raises
    and is caught for every lookup, which dominated render time.
    """

    __slots__ = ()

    def __getattr__(self, key: str) -> Any:
        return self.get(key)


def view(value: Any) -> Any:
    """Wrap dicts (recursively, through lists) as `View`s for the templates."""
    if type(value) is dict:
        return View({k: view(v) for k, v in value.items()})
    if type(value) is list:
        return [view(v) for v in value]
    return value


def template_dirs(project: Project | None) -> list[Path]:
    """Project-local `templates/` first (when it is not the bundled folder itself), then the bundled one."""
    dirs = []
    if project is not None:
        local = project.root / "templates"
        if local.is_dir() and local.resolve() != BUNDLED_TEMPLATES:
            dirs.append(local)
    dirs.append(BUNDLED_TEMPLATES)
    return dirs


def find_template_file(project: Project | None, name: str) -> Path:
    """The file that would serve template `name` (a project-local override wins)."""
    for d in template_dirs(project):
        p = d / name
        if p.is_file():
            return p

    raise NotFoundError(f"template {name} not found", hint=f"it is bundled in {BUNDLED_TEMPLATES}; reinstall logbook")


def _finalize(value: Any) -> str:
    t = type(value)
    if t is Raw:
        return value
    if t is int or t is float:
        return str(value)  # nothing in a number to escape: skip the regex
    if value is None or isinstance(value, _undefined()):
        return ""
    return md_escape(value)


_UNDEFINED: Any = None


def _undefined():
    global _UNDEFINED
    if _UNDEFINED is None:
        from jinja2 import Undefined

        _UNDEFINED = Undefined
    return _UNDEFINED


_ENVIRONMENTS: dict[tuple, Any] = {}


def _environment(project: Project | None):
    """A jinja2 environment per template set, reused while no template file changes.

    The launcher re-renders a day after every batch of events; compiling the
    templates each time would cost more than rendering the day.
    """
    dirs = template_dirs(project)
    stamp = tuple((str(p), p.stat().st_mtime_ns) for d in dirs for p in sorted(d.rglob("*.j2")))
    env = _ENVIRONMENTS.get(stamp)
    if env is None:
        _ENVIRONMENTS.clear()
        env = _ENVIRONMENTS[stamp] = _new_environment(dirs)
        env.logbook_stamp = stamp
        env.logbook_entries = OrderedDict()  # rendered entries, valid for exactly these templates
    return env


def _new_environment(dirs: list[Path]):
    import jinja2

    from logbook.chronicle.sandbox import TemplateEnvironment

    env = TemplateEnvironment(  # sandboxed: a repository's own templates/ is data, never code
        loader=jinja2.ChoiceLoader([jinja2.FileSystemLoader(str(d)) for d in dirs]),
        autoescape=False,
        finalize=_finalize,
        undefined=jinja2.ChainableUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        auto_reload=False,  # one render reads each template once, not once per entry
        cache_size=-1,
    )
    env.filters.update(
        comma=fmt_int, tokens=fmt_tokens, dur=fmt_duration, num=fmt_num, pct=fmt_pct, fraction=fmt_fraction,
        signal=signal_name, signum=signal_number, esc=lambda v: Raw(md_escape(v)),
        code=lambda v: Raw(code_span(v)),
        codeblock=lambda v, lang="", indent=0: Raw(code_block(v, lang, indent)),
        quote=lambda v: Raw(quote_text(v)), raw=Raw, plural=_plural, inline_value=_inline_value,
        listing=_listing, url=_url,
        cell=lambda v: Raw(table_cell(fmt_num(v) if is_number(v) else md_escape(v) if isinstance(v, str) else _inline_value(v))),
        cellcode=lambda v: Raw(table_cell(code_span(v))),
        kind_label=kind_label,
        restart_cause=lambda d: Raw(restart_cause(d, name=md_escape, code=code_span)), signal_evidence=signal_evidence,
    )
    env.tests["number"] = is_number

    def plan(p: Any, change: bool = False) -> Raw:
        """Whether an action followed the preregistered plan, in the words of `chronicle/plan.md.j2`."""
        if not isinstance(p, dict):
            return Raw("")
        return Raw(env.get_template("chronicle/plan.md.j2").render(p=p, change=change).strip())

    env.globals["plan"] = plan
    return env


_SAFE_URL = re.compile(r"^https?://[^\s<>()\\`]+$")


def _url(v: Any) -> Raw:
    """An http(s) URL as an autolink; anything else is shown as escaped text."""
    s = "" if v is None else str(v)
    return Raw(f"<{s}>") if _SAFE_URL.match(s) else Raw(md_escape(s))


def _listing(items: Any, limit: int = 10) -> Raw:
    """A list of values on one line: "47,315, 47,316 and 3 more"."""
    if isinstance(items, str) or not isinstance(items, (list, tuple)):
        return _inline_value(items)
    shown = [Raw(fmt_int(x)) if is_number(x) and float(x).is_integer() else _inline_value(x) for x in items[:limit]]
    more = f" and {len(items) - limit} more" if len(items) > limit else ""
    return Raw(", ".join(shown) + more)


def _plural(n: Any, one: str, many: str | None = None) -> str:
    many = many or one + "s"
    return f"{fmt_int(n)} {one if n == 1 else many}"


def _inline_value(v: Any) -> Raw:
    """A payload value of any shape on one line: numbers formatted, text escaped, structures as code."""
    import json

    if is_number(v):
        return Raw(fmt_setting(v))  # as the person set it, never rounded to a few digits
    if isinstance(v, str):
        return Raw(md_escape(v))
    if isinstance(v, bool) or v is None:
        return Raw(str(v).lower() if v is not None else "null")
    return Raw(code_span(json.dumps(v, sort_keys=True, ensure_ascii=False)))


class MarkdownRenderer:
    """Renders entry headings, entry bodies and day pages from view dicts.

    `combined` switches links from the dated layout (`../../2026/12/02.md#note-3`,
    `../../assets/run/p.png`) to a single file (`#note-3`, assets relative to `out_dir`).
    """

    def __init__(self, project: Project, *, combined: bool = False, out_dir: Path | None = None) -> None:
        self.project = project
        self.combined = combined
        self.out_dir = out_dir
        self.env = _environment(project)
        self._heading = self.env.get_template("chronicle/heading.md.j2")
        self._entry = self.env.get_template("chronicle/entry.md.j2")
        self._routine = self.env.get_template("chronicle/routine.md.j2")
        self._problem = self.env.get_template("chronicle/problem.md.j2")
        self._day = self.env.get_template("chronicle/day.md.j2")
        self._kinds: dict[str, str] = {}

    def link(self, day: str, anchor: str) -> str:
        if self.combined:
            return f"#{anchor}"
        return f"../../{day[:4]}/{day[5:7]}/{day[8:10]}.md#{anchor}"

    def asset_link(self, rel: str) -> str:
        """Link to a file under the entries folder, given its path relative to that folder."""
        if not self.combined:
            return "../../" + rel
        target = self.project.entries / rel
        base = self.out_dir or self.project.root
        return Path(os.path.relpath(target, base)).as_posix()

    def kind_template(self, kind: str) -> str:
        """`chronicle/kinds/<kind>.md.j2`, or the generic one for a kind no template knows."""
        name = self._kinds.get(kind)
        if name is None:
            name = "chronicle/kinds/_generic.md.j2"
            if _KIND_RE.match(kind):
                candidate = f"chronicle/kinds/{kind}.md.j2"
                try:
                    self.env.get_template(candidate)
                    name = candidate
                except Exception:  # jinja2.TemplateNotFound: fall back to generic
                    pass
            self._kinds[kind] = name
        return name

    def cached(self, key: tuple | None, e: dict[str, Any]) -> tuple[Raw, Raw]:
        """(heading, body) of an entry, from the in-process cache when the same record was rendered before.

        The launcher re-renders the current day after every batch of events;
        with the cache only the new events go through the templates again.
        """
        cache = self.env.logbook_entries
        if key is not None:
            key = (str(self.project.root), self.combined, str(self.out_dir), *key)
            hit = cache.get(key)
            if hit is not None:
                return hit
        out = (self.heading(e), self.entry(e))
        if key is not None:
            cache[key] = out
            if len(cache) > _ENTRY_CACHE_SIZE:
                cache.popitem(last=False)
        return out

    def heading(self, e: dict[str, Any]) -> Raw:
        return Raw(self._heading.render(e=e).strip())

    def entry(self, e: dict[str, Any]) -> Raw:
        """The entry's Markdown; a payload its kind's template cannot handle is shown generically."""
        name = self.kind_template(kind_of(e))
        try:
            text = self._entry.render(e=e, body_template=name)
        except Exception as exc:  # a malformed payload must not hide the event
            if name == "chronicle/kinds/_generic.md.j2":
                raise
            why = f"{type(exc).__name__}: {exc}"
            text = self._entry.render(e=View({**e, "template_error": why}), body_template="chronicle/kinds/_generic.md.j2")
        return Raw(text.strip("\n"))

    def routine(self, r: dict[str, Any]) -> Raw:
        return Raw(self._routine.render(r=r).strip())

    def problem(self, p: dict[str, Any]) -> Raw:
        return Raw(self._problem.render(p=View(p)).strip())

    def day(self, page: dict[str, Any]) -> str:
        text = self._day.render(day=View(page))
        return text.rstrip("\n") + "\n"
