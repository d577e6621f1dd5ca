"""A chart's data as a table: the same rows feed the figure, the HTML table, the JSON twin and
the CSV download, so they cannot disagree.

Pure module.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import date, datetime
from decimal import Decimal
from typing import Any

__all__ = ["Chart", "Column", "Table"]

# A spreadsheet runs a cell that starts with one of these as a formula; tool names and ids come
# from agents, so such text cells get a leading apostrophe in CSV (OWASP's advice).
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


@dataclass(frozen=True, slots=True)
class Column:
    key: str
    label: str
    # How the page shows it: text, int, float, usd, percent or date. JSON and CSV keep values
    # exact (money as decimal strings, days as ISO dates).
    kind: str = "int"


@dataclass(frozen=True, slots=True)
class Table:
    columns: tuple[Column, ...]
    rows: tuple[tuple[Any, ...], ...]

    def __post_init__(self) -> None:
        width = len(self.columns)
        for row in self.rows:
            if len(row) != width:
                raise ValueError(f"row {row!r} has {len(row)} values for {width} columns")

    def column(self, key: str) -> list[Any]:
        index = [c.key for c in self.columns].index(key)
        return [row[index] for row in self.rows]

    def records(self) -> list[dict[str, Any]]:
        """Rows as JSON-ready objects keyed by column."""
        keys = [c.key for c in self.columns]
        return [{k: _json_value(v) for k, v in zip(keys, row, strict=True)} for row in self.rows]

    def to_csv(self) -> str:
        """A header of column keys, then one line per row (RFC 4180, CRLF line ends)."""
        out = io.StringIO()
        writer = csv.writer(out)
        writer.writerow([c.key for c in self.columns])
        for row in self.rows:
            writer.writerow([_csv_value(v) for v in row])
        return out.getvalue()

    def to_dict(self) -> dict[str, Any]:
        return {
            "columns": [{"key": c.key, "label": c.label, "kind": c.kind} for c in self.columns],
            "rows": self.records(),
        }


@dataclass(frozen=True, slots=True)
class Chart:
    """One chart: its name in URLs, what it shows, its data and its Plotly figure."""

    name: str
    title: str
    description: str
    table: Table
    figure_json: str = field(repr=False)  # Plotly figure as JSON text, for data-figure
    notes: tuple[str, ...] = ()

    @property
    def empty(self) -> bool:
        return not self.table.rows

    def to_dict(self) -> dict[str, Any]:
        """The JSON twin's view: data and notes (the figure is built from the same rows)."""
        return {
            "name": self.name,
            "title": self.title,
            "description": self.description,
            "notes": list(self.notes),
            **self.table.to_dict(),
        }


def _json_value(value: Any) -> Any:
    if isinstance(value, Decimal):
        return str(value)  # money never becomes a float
    if isinstance(value, datetime | date):
        return value.isoformat()
    return value


def _csv_value(value: Any) -> Any:
    if value is None:
        return ""
    if isinstance(value, str) and value.startswith(_FORMULA_START):
        return "'" + value
    return _json_value(value)


def rows_of(*columns: Sequence[Any]) -> tuple[tuple[Any, ...], ...]:
    """Column lists zipped into rows (all the same length)."""
    return tuple(zip(*columns, strict=True))
