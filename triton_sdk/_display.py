"""How specs, results, statistics, metrics and errors show in Jupyter and IPython.

Each of those classes builds a :class:`Table` of itself; :class:`Displayable` turns it
into ``_repr_html_`` (a notebook's output cell) and ``_repr_pretty_`` (IPython's text).
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from typing import Any, Final

import attrs
import numpy as np

__all__ = ["Displayable", "Table", "preview"]


@attrs.frozen
class Table:
    """A title, a header and rows of text."""

    title: str
    header: tuple[str, ...]
    rows: Sequence[tuple[str, ...]]

    def html(self) -> str:
        head = "".join(
            f"<th style='text-align:left'>{html.escape(cell)}</th>" for cell in self.header
        )
        body = "".join(
            "<tr>"
            + "".join(
                f"<td style='text-align:left'><code>{html.escape(c)}</code></td>" for c in row
            )
            + "</tr>"
            for row in self.rows
        )
        return (
            f"<div><strong>{html.escape(self.title)}</strong>"
            f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>"
        )

    def text(self) -> str:
        rows = [self.header, *self.rows]
        widths = [max(len(row[column]) for row in rows) for column in range(len(self.header))]
        lines = [self.title]
        for row in rows:
            cells = [cell.ljust(width) for cell, width in zip(row, widths, strict=True)]
            lines.append("  " + "  ".join(cells).rstrip())
        return "\n".join(lines)


class Displayable:
    """``_repr_html_`` and ``_repr_pretty_`` from the class's ``_table()``."""

    __slots__ = ()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        # IPython takes the first class along the MRO that defines _repr_pretty_ or
        # __repr__: a subclass's own __repr__ would hide the inherited _repr_pretty_.
        if "_repr_pretty_" not in cls.__dict__:
            cls._repr_pretty_ = Displayable._repr_pretty_  # type: ignore[method-assign]

    def _table(self) -> Table:
        raise NotImplementedError

    def _repr_html_(self) -> str:
        return self._table().html()

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(repr(self) if cycle else self._table().text())


_LONGEST_ELEMENT: Final = 40


def _short(value: object) -> str:
    """An element of a preview, cut to a few dozen characters (a BYTES output may hold a
    whole document)."""
    text = repr(value)
    return text if len(text) <= _LONGEST_ELEMENT else f"{text[: _LONGEST_ELEMENT - 1]}…"


_PREVIEW_EDGE = 2
_PREVIEW_MOST = 16
"""Values shown at most: numpy shortens only axes longer than twice the edge items, so
many short axes would show every value."""


def preview(array: np.ndarray[Any, Any]) -> str:
    """A short one-line view of an array's values."""
    shown = 1
    for length in array.shape:
        shown *= min(length, 2 * _PREVIEW_EDGE)
    if shown > _PREVIEW_MOST:  # the first values, in order
        # (one index per axis, element by element: .flat stops at 32 axes, reshape copies
        # what is not contiguous, and fancy indexing takes at most 63 axes)
        count = min(2 * _PREVIEW_EDGE, array.size)
        where = (np.unravel_index(index, array.shape) for index in range(count))
        first = np.array([array[at] for at in where], dtype=array.dtype)
        return f"{_array_text(first)[:-1]} ...]"
    return _array_text(array)


def _array_text(array: np.ndarray[Any, Any]) -> str:
    text = np.array2string(
        array,
        threshold=6,
        edgeitems=_PREVIEW_EDGE,
        max_line_width=10_000,
        formatter={"object": _short, "numpystr": _short},
    )
    return " ".join(text.split())
