"""Terminal tables that fit the console and never cut a value.

`fit_table` prints a title, then rows of already formatted cells: columns whose value is the same on
every shown row are stated once above the table (`for every row: gpu = h100-sxm, ...`);
every column is as wide as its longest value (a value is never wrapped nor elided with
rich's `…`); headers wrap at `_` and spaces to fit, first not at all, then to at least 16, 14, ...
8 characters, then to their longest word; and when even that is wider than the console, each
row is printed stacked, one `header value` list per row, which the console wraps between
fields.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

#: The widths headers are wrapped to, widest first, before they wrap to their longest word
#: and then the table is stacked instead.
HEADER_FLOORS: tuple[int, ...] = (16, 14, 12, 10, 8)
_WORD = re.compile(r"[^_ ]+[_ ]?|[_ ]")


def wrap_header(header: str, width: int) -> str:
    """`header` broken into lines of at most `width` characters after `_` or spaces (a word
    longer than `width` keeps its own line); explicit newlines are kept."""
    lines: list[str] = []
    for part in header.split("\n"):
        line = ""
        for word in _WORD.findall(part):
            if line and len(line.rstrip()) + len(word.rstrip()) > width:
                lines.append(line.rstrip())
                line = ""
            line += word
        lines.append(line.rstrip())
    return "\n".join(lines)


def _header_width(header: str) -> int:
    return max(len(line) for line in header.split("\n"))


def _longest_word(header: str) -> int:
    return max((len(w.rstrip()) for w in _WORD.findall(header.replace("\n", " "))), default=1)


def split_constant(heads: Sequence[str], rows: Sequence[Sequence[str]],
                   keep: Sequence[str] = ()) -> tuple[list[str], list[list[str]], list[tuple[str, str]]]:
    """Drop the columns whose cell is the same on every row (when there are two rows or
    more; `keep` names headers never dropped): (headers, rows, [(header, value)] dropped)."""
    if len(rows) < 2:
        return list(heads), [list(r) for r in rows], []
    same = [j for j, h in enumerate(heads) if h not in keep and len({r[j] for r in rows}) == 1]
    kept = [j for j in range(len(heads)) if j not in same]
    return ([heads[j] for j in kept], [[r[j] for j in kept] for r in rows],
            [(heads[j].replace("\n", " "), rows[0][j]) for j in same])


def table_width(widths: Sequence[int]) -> int:
    """Characters a rich table with the default box and padding takes: 3 per column + 1."""
    return sum(widths) + 3 * len(widths) + 1


def fit_table(console: Console, title: str, heads: Sequence[str], rows: Sequence[Sequence[str]],
              *, keep: Sequence[str] = (), left: Sequence[str] = (), legend: str = "") -> None:
    """Print `title`, `legend` (a line, if any), then `rows` (cells as plain text) under
    `heads` so that no value is cut: see the module's docstring. `keep`: headers never moved
    above the table; `left`: headers whose column is left-aligned (the rest are right-aligned,
    numbers)."""
    heads, rows, constant = split_constant(heads, rows, keep)
    console.print(title, markup=False)
    if legend:
        console.print(legend, markup=False)
    if constant:
        console.print("for every row: " + ", ".join(f"{h} = {v}" for h, v in constant), markup=False,
                      soft_wrap=False)
    if not heads:
        return
    values = [max((len(r[j]) for r in rows), default=0) for j in range(len(heads))]
    for floor in (None, *HEADER_FLOORS, 0):
        if floor is None:
            wrapped = list(heads)
        else:
            wrapped = [wrap_header(h, max(v, floor, _longest_word(h))) for h, v in zip(heads, values)]
        widths = [max(v, _header_width(h)) for v, h in zip(values, wrapped)]
        if table_width(widths) <= console.width:
            t = Table()  # the title above, not in the table: a narrow table would fold it
            for h, w in zip(wrapped, widths):
                t.add_column(escape(h), justify="left" if h in left or h.replace("\n", " ") in left else "right",
                             width=w, no_wrap=True, overflow="fold")
            for r in rows:
                t.add_row(*(escape(c) for c in r))
            console.print(t)
            return
    # stacked: one row per paragraph, `header value` fields the console wraps between
    for n, r in enumerate(rows, 1):
        text = Text(f"{n}. ")
        for j, (h, c) in enumerate(zip(heads, r)):
            text.append(("; " if j else "") + h.replace("\n", " ") + " ")
            text.append(c, style="bold")
        console.print(text)
