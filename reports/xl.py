"""Low-level workbook writing: safe cells, formulas, names, tables, widths, page setup.

Everything user-provided reaches a cell through :meth:`Sheet.put`, which writes any
``str`` as text (never a formula, never a link); only a :class:`Formula` built by this
package becomes a formula. Column widths are tracked while writing, so numbers never
show as ``#####``.
"""

from __future__ import annotations

import math
import re
import textwrap
from dataclasses import dataclass, field
from typing import Any

from openpyxl.cell.cell import Cell
from openpyxl.styles import Alignment, Border, Font, PatternFill, Side
from openpyxl.utils import absolute_coordinate, get_column_letter, quote_sheetname
from openpyxl.workbook.defined_name import DefinedName
from openpyxl.worksheet.table import Table, TableStyleInfo
from openpyxl.worksheet.worksheet import Worksheet

from catalog.names import slug
from reports import styles

# Characters XML 1.0 cannot hold (openpyxl raises IllegalCharacterError on them).
_ILLEGAL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")
# A leading character that makes Excel/LibreOffice (or a CSV export of the sheet) read text
# as a formula or a DDE link when the cell is edited.
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r", "\n")
MAX_CELL_CHARS = 32_767
_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_.]{0,254}$")
_CELL_LIKE = re.compile(r"^([A-Za-z]{1,3}[0-9]+|[RrCc][0-9]*|[Rr][0-9]*[Cc][0-9]*)$")


@dataclass(frozen=True)
class Formula:
    """A formula this package wrote (``"=..."``); the only way a cell becomes a formula.

    ``expect`` is the value the formula should compute (for sizing the column).
    """

    text: str
    expect: Any = None

    def __post_init__(self) -> None:
        if not self.text.startswith("="):
            raise ValueError(f"formula must start with '=': {self.text!r}")


def safe_text(value: str) -> str:
    """Text a cell can hold: XML-illegal control characters removed, length capped."""
    text = _ILLEGAL.sub("", value)
    return text if len(text) <= MAX_CELL_CHARS else text[: MAX_CELL_CHARS - 1] + "…"


def is_valid_name(name: str) -> bool:
    """A defined name Excel and LibreOffice both accept (not a cell reference, no spaces)."""
    return bool(_NAME_RE.match(name)) and not _CELL_LIKE.match(name) and name.upper() not in {"TRUE", "FALSE"}


# Longest name fragment a device or platform key becomes (Excel names are at most 255 characters).
MAX_NAME_FRAGMENT = 60


def name_fragment(text: str) -> str:
    """``h100-sxm`` → ``h100_sxm``: a fragment usable inside a defined name (``catalog.names.slug``, cut)."""
    return slug(text)[:MAX_NAME_FRAGMENT]


def ref(ws: Worksheet, row: int, col: int, absolute: bool = True) -> str:
    """``'Sheet name'!$B$5`` for a cell on another sheet."""
    coord = f"{get_column_letter(col)}{row}"
    return f"{quote_sheetname(ws.title)}!{absolute_coordinate(coord) if absolute else coord}"


def define_name(wb, name: str, ws: Worksheet, row: int, col: int) -> str:
    """Add a workbook-level defined name for one cell; return the name."""
    if not is_valid_name(name):
        raise ValueError(f"invalid defined name {name!r}")
    if name in wb.defined_names:
        raise ValueError(f"defined name {name!r} already exists")
    wb.defined_names[name] = DefinedName(name, attr_text=ref(ws, row, col))
    return name


def _display_width(value: Any, number_format: str | None) -> int:
    """Approximate characters a value needs in a column with this number format."""
    if value is None:
        return 0
    if isinstance(value, bool):
        return 5
    if isinstance(value, int | float):
        fmt = number_format or "General"
        if "%" in fmt:
            decimals = len(fmt.split(".")[1].split("%")[0]) if "." in fmt else 0
            text = f"{value * 100:,.{decimals}f}%"
        elif "0" in fmt:
            head = fmt.split(";")[0]
            decimals = sum(1 for ch in head.split(".")[1] if ch == "0") if "." in head else 0
            text = f"{value:,.{decimals}f}"
            if "$" in head:
                text = "$" + text
        else:
            text = f"{value:.6g}"
        return len(text) + 1
    text = str(value)
    return max((len(line) for line in text.splitlines()), default=0)


@dataclass
class Sheet:
    """A worksheet and the widths its columns need."""

    ws: Worksheet
    widths: dict[int, float] = field(default_factory=dict)
    max_width: dict[int, float] = field(default_factory=dict)
    wrapped: list[tuple[int, int, str]] = field(default_factory=list)
    header_rows: dict[int, int] = field(default_factory=dict)

    @property
    def wb(self):
        return self.ws.parent

    def put(self, row: int, col: int, value: Any, fmt: str | None = None, *, font: Font | None = None,
            fill: PatternFill | None = None, wrap: bool = False, align: str | None = None,
            size: bool = True) -> Cell:
        """Write one cell. ``str`` is always text; :class:`Formula` is a formula; numbers stay numbers."""
        cell = self.ws.cell(row=row, column=col)
        shown: Any = value
        if isinstance(value, Formula):
            cell.value = value.text
            shown = value.expect
        elif isinstance(value, str):
            text = safe_text(value)
            cell.value = text
            cell.data_type = "s"  # never "f": a leading '=' stays text
            if text.startswith(_FORMULA_START):
                cell.quotePrefix = True
            shown = text
        elif isinstance(value, bool) or value is None or isinstance(value, int | float):
            cell.value = value
        else:
            raise TypeError(f"cannot write {type(value).__name__} to a cell")
        if fmt:
            cell.number_format = fmt
        if font is not None:
            cell.font = font
        if fill is not None:
            cell.fill = fill
        if isinstance(value, str) and align is None:
            align = "left"  # text with a small indent, so it never touches a number to its left
        cell.alignment = Alignment(wrap_text=wrap, horizontal=align, vertical="top",
                                   indent=1 if align == "left" else 0)
        if wrap and isinstance(shown, str):
            self.wrapped.append((row, col, shown))
        if size and not wrap:
            need = _display_width(shown, fmt)
            if font is not None and font.sz and font.sz > 11:
                need = need * font.sz / 11
            if font is not None and font.b:
                need *= 1.1
            self.widths[col] = max(self.widths.get(col, 0), need)
        return cell

    def header(self, row: int, col: int, labels: list[str]) -> None:
        """A table header row: bold, wrapped, shaded."""
        lines = 1
        for i, label in enumerate(labels):
            cell = self.put(row, col + i, label, font=styles.HEADER_FONT, fill=styles.HEADER_FILL, size=False)
            cell.alignment = Alignment(wrap_text=True, vertical="center", horizontal="center")
            cell.border = Border(bottom=Side(style="thin"))
            words = max((len(w) for w in label.split()), default=0)
            # at most two lines of header text: wide enough for half the label and its longest word
            need = max(words + 2, math.ceil(len(label) / 2) + 3) if len(label) > 12 else len(label) + 2
            self.widths[col + i] = max(self.widths.get(col + i, 0), need)
            if len(label) > 12:
                lines = 2
        self.header_rows[row] = lines

    def table(self, name: str, first_row: int, first_col: int, last_row: int, last_col: int,
              style: str = "TableStyleLight9") -> Table | None:
        """A filterable table over a header row and at least one data row (None when empty)."""
        if last_row <= first_row:
            return None
        headers = [self.ws.cell(row=first_row, column=c).value for c in range(first_col, last_col + 1)]
        if any(not isinstance(h, str) or not h for h in headers) or len(set(headers)) != len(headers):
            raise ValueError(f"table {name}: header cells must be unique non-empty strings: {headers}")
        span = f"{get_column_letter(first_col)}{first_row}:{get_column_letter(last_col)}{last_row}"
        table = Table(displayName=name, ref=span)
        table.tableStyleInfo = TableStyleInfo(name=style, showRowStripes=True, showColumnStripes=False,
                                              showFirstColumn=False, showLastColumn=False)
        self.ws.add_table(table)
        return table

    def width(self, col: int, chars: float, cap: bool = True) -> None:
        """Fix a column's width (``cap``: exactly, for wrapped or long text) or raise it to at least ``chars``."""
        if cap:
            self.widths[col] = chars
            self.max_width[col] = chars
        else:
            self.widths[col] = max(self.widths.get(col, 0), chars)

    def finish(self, title_rows: str | None = None, landscape: bool = True) -> None:
        """Column widths, and a printable page: landscape, fit to width, repeated titles."""
        final: dict[int, float] = {}
        for col, need in self.widths.items():
            final[col] = min(max(need + 1.5, 6), self.max_width.get(col, 60))
            self.ws.column_dimensions[get_column_letter(col)].width = round(final[col], 1)
        # Applications do not grow rows for wrapped text on open: set the heights.
        heights: dict[int, float] = {row: 15.0 * n + 3 for row, n in self.header_rows.items()}
        for row, col, text in self.wrapped:
            # a width unit is one digit '0'; capitals and the cell's indent make text wider, and lines break
            # between words: count the lines a word wrap at that many characters gives
            chars = max(int(final.get(col, 8.43) - 2), 1)
            n = sum(len(textwrap.wrap(part, chars)) or 1 for part in text.split("\n"))
            heights[row] = max(heights.get(row, 15.0), 14.0 * n + 2)
        for row, height in heights.items():
            self.ws.row_dimensions[row].height = height
        ps = self.ws.page_setup
        ps.orientation = "landscape" if landscape else "portrait"
        ps.paperSize = self.ws.PAPERSIZE_A4
        ps.fitToWidth = 1
        ps.fitToHeight = 0
        self.ws.sheet_properties.pageSetUpPr.fitToPage = True
        self.ws.print_options.gridLines = False
        self.ws.page_margins.left = self.ws.page_margins.right = 0.4
        self.ws.page_margins.top = 0.6
        self.ws.page_margins.bottom = 0.8
        self.ws.page_margins.header = self.ws.page_margins.footer = 0.3
        if title_rows:
            self.ws.print_title_rows = title_rows
        self.ws.oddFooter.left.text = "&A"
        self.ws.oddFooter.right.text = "Page &P of &N"
