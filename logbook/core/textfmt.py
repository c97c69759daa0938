"""Numbers, durations and Markdown-safe text, the way a person writes them.

Every function here tolerates values of the wrong type (a producer may write
a string where a number was documented): it then shows the value as given
rather than failing, because a chronicle must render whatever the log holds.
"""

from __future__ import annotations

import math
import re
import signal as _signal
import textwrap
from typing import Any

# CommonMark lets a backslash escape any ASCII punctuation; these are the
# characters that can start emphasis, code, links, HTML, tables or entities.
_MD_SPECIAL = re.compile(r"([\\`*_\[\]<>#|~&!$])")
_TOKEN_UNITS = ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "K"))


def is_number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def fmt_int(x: Any) -> str:
    """41200 -> '41,200'."""
    if is_number(x):
        return f"{int(round(x)):,}"
    return "?" if x is None else str(x)


def plural(n: Any, one: str, many: str | None = None) -> str:
    """A count and its noun, as a person writes them: '1 restart', '2 restarts', '3 processes'.

    `many` is for nouns that take more than an s ('process', 'processes');
    never "restart(s)": a reader should not have to do the grammar.
    """
    many = many or one + "s"
    return f"{fmt_int(n)} {one if n == 1 else many}"


def fmt_num(x: Any) -> str:
    """A measured value with three significant digits: 2.91, 14.2, 0.0003, 12,345."""
    if not is_number(x):
        return "?" if x is None else str(x)
    if isinstance(x, int) or (abs(x) >= 1000 and float(x).is_integer()):
        return f"{int(x):,}"
    if abs(x) >= 1000:
        return f"{x:,.0f}"
    return f"{x:.3g}"


def fmt_setting(v: Any) -> str:
    """A hyperparameter's value as JSON, as the person set it: 0.72, not 0.7200000000000001.

    Never rounded to a few digits (a learning rate of 0.0003 stays 0.0003);
    only the binary noise of arithmetic (0.8 × 0.9) goes: twelve significant
    digits hold every value a person types.
    """
    import json

    if isinstance(v, float):
        v = float(f"{v:.12g}")
    return json.dumps(v, sort_keys=True, ensure_ascii=False)


def fmt_tokens(x: Any) -> str:
    """10_800_000_000 -> '10.8B'; below a thousand the plain count."""
    if not is_number(x):
        return "?" if x is None else str(x)
    for scale, unit in _TOKEN_UNITS:
        if abs(x) >= scale:
            v = x / scale
            return f"{v:.3g}{unit}" if v < 1000 else f"{v:,.0f}{unit}"
    return f"{int(x):,}"


def fmt_duration(x: Any) -> str:
    """Seconds as a person says them: 47 ms, 0.4 s, 38 s, 6 min 40 s, 2 min 05 s, 31 h 04 min, 3 d 03 h."""
    if not is_number(x):
        return "?" if x is None else str(x)
    if x < 0:
        return "-" + fmt_duration(-x)
    if x < 0.1:
        ms = x * 1000
        return "<1 ms" if ms < 1 else f"{ms:.1f} ms" if ms < 9.95 else f"{ms:.0f} ms"
    if x < 10:
        return f"{x:.1f} s" if not float(x).is_integer() else f"{int(x)} s"
    s = int(round(x))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min" if s % 60 == 0 else f"{s // 60} min {s % 60:02d} s"
    if s < 2 * 86400:
        m = (s % 3600) // 60
        return f"{s // 3600} h" if m == 0 else f"{s // 3600} h {m:02d} min"
    h = (s % 86400) // 3600
    return f"{s // 86400} d" if h == 0 else f"{s // 86400} d {h:02d} h"


def fmt_pct(x: Any) -> str:
    """A fraction (0.941) or a percentage (94.1) as '94.1%'."""
    if not is_number(x):
        return "?" if x is None else str(x)
    v = x * 100 if abs(x) <= 1 else x
    return f"{v:.1f}%" if not float(v).is_integer() else f"{int(v)}%"


def fmt_fraction(x: Any) -> str:
    """A milestone fraction as a percentage without needless decimals: 0.25 -> '25%'."""
    if not is_number(x):
        return "?" if x is None else str(x)
    v = round(x * 100, 2)
    return f"{int(v)}%" if float(v).is_integer() else f"{v:g}%"


def signal_name(sig: Any) -> str:
    """9 / -9 / 'SIGKILL' -> 'signal 9 (SIGKILL)'."""
    if isinstance(sig, str) and sig.lstrip("-").isdigit():
        sig = int(sig)
    if is_number(sig):
        n = abs(int(sig))
        try:
            return f"signal {n} ({_signal.Signals(n).name})"
        except ValueError:
            return f"signal {n}"
    if isinstance(sig, str) and sig:
        return sig if sig.upper().startswith("SIG") else f"signal {sig}"
    return "a signal"


def signal_number(sig: Any) -> int | None:
    if isinstance(sig, str):
        if sig.lstrip("-").isdigit():
            return abs(int(sig))
        try:
            return int(_signal.Signals[sig.upper() if sig.upper().startswith("SIG") else "SIG" + sig.upper()])
        except KeyError:
            return None
    if is_number(sig):
        return abs(int(sig))
    return None


def md_escape(text: Any) -> str:
    """Plain text made inert inside Markdown: specials escaped, line breaks become spaces."""
    s = "" if text is None else str(text)
    s = " ".join(s.split("\n")) if "\n" in s else s
    return _MD_SPECIAL.sub(r"\\\1", s)


def code_span(text: Any) -> str:
    """Inline code that survives any backticks inside it."""
    s = " ".join(("" if text is None else str(text)).splitlines())
    run = max((len(m) for m in re.findall(r"`+", s)), default=0)
    fence = "`" * (run + 1)
    pad = " " if s.startswith("`") or s.endswith("`") or not s.strip() else ""
    return f"{fence}{pad}{s}{pad}{fence}"


def code_block(text: Any, lang: str = "", indent: int = 0) -> str:
    """A fenced block longer than any backtick run inside, so content cannot close it.

    A list of lines (a traceback) is joined; `indent` nests the block in a list item.
    """
    if isinstance(text, (list, tuple)):
        text = "\n".join(str(x).rstrip("\n") for x in text)
    s = "" if text is None else str(text)
    run = max((len(m) for m in re.findall(r"`{3,}", s)), default=2)
    fence = "`" * max(3, run + 1)
    lang = lang if re.fullmatch(r"[A-Za-z0-9_+-]*", lang) else ""
    lines = [f"{fence}{lang}", *s.rstrip("\n").split("\n"), fence]
    pad = " " * indent
    return "\n".join(pad + line if line else line for line in lines)


def table_cell(text: str) -> str:
    """Escape the pipes that GFM tables split cells on, even inside code spans."""
    return re.sub(r"(?<!\\)\|", r"\\|", text)


def quote_text(text: Any) -> str:
    """A reason or message in quotes, escaped: “grad norm creeping up”."""
    return "“" + md_escape(text) + "”"


def wrap_said(line: str, width: int | None) -> str:
    """A message line wrapped at spaces, its continuation under its own indent plus two (never mid-word)."""
    text = line.lstrip(" ")
    head = line[:len(line) - len(text)]
    return wrap_line(head, text, width, indent=" " * (len(head) + 2))


_VALUE_AND_UNIT = re.compile(r"(?<=\d) (?=(?:ms|s|min|h|µs|steps?|tok/s|[KMG]B)\b)")
"""The space between a number and its unit ("71 ms"): never a place to break a line."""
_KEPT_TOGETHER = "\u00a0"  # textwrap breaks only at ASCII whitespace


def wrap_line(head: str, text: str, width: int | None, indent: str | None = None) -> str:
    """`head` then `text`, wrapped at spaces when a terminal is narrower than the line; the lines after the
    first start with `indent` (default: spaces under `text`'s column). No line passes `width` unless one
    word is wider than the terminal: a word is never cut."""
    line = f"{head}{text}"
    indent = " " * len(head) if indent is None else indent
    if width is None or len(line) <= width:
        return line
    if width - max(len(head), len(indent)) < 20:  # a head as wide as the terminal (a long id): text goes under it
        return head.rstrip() + "\n" + wrap_line(indent if len(indent) < width - 20 else "    ", text, width)
    body = textwrap.wrap(_VALUE_AND_UNIT.sub(_KEPT_TOGETHER, text), width, initial_indent=head,
                         subsequent_indent=indent, break_long_words=False, break_on_hyphens=False)
    # A word wider than the column (an e-mail address, a path) moves left until it fits, whole; one wider
    # than the terminal itself stays under its indent (and a quote's bar), where the eye looks for it.
    body = [b if len(b) <= width or not b.startswith(indent) or k == 0 or len(b.lstrip(" ")) > width
            else " " * (width - len(b.lstrip(" "))) + b.lstrip(" ") for k, b in enumerate(body)]
    return "\n".join(body).replace(_KEPT_TOGETHER, " ")
