"""Number formats, fonts and fills shared by every sheet.

Finance conventions: inputs in blue on a pale yellow fill, formulas in black; currency
without cents except per-token prices; negative money in parentheses.
"""

from __future__ import annotations

from openpyxl.styles import Font, PatternFill

USD = '"$"#,##0;("$"#,##0);"$"0'
USD_CENTS = '"$"#,##0.00;("$"#,##0.00);"$"0.00'
USD_RATE = '"$"#,##0.000'  # cloud $/GPU-hour, $/kWh
PCT = "0.0%"
PCT2 = "0.00%"
THOUSANDS = "#,##0"
DEC1 = "#,##0.0"
DEC2 = "#,##0.00"
RATIO = "0.00"
INT = "0"
MS = "#,##0"

FONT = "Calibri"  # the workbook default; LibreOffice substitutes metric-compatible Carlito

TITLE_FONT = Font(name=FONT, bold=True, size=14)
SUBTITLE_FONT = Font(name=FONT, italic=True, color="555555")
SECTION_FONT = Font(name=FONT, bold=True, size=12)
HEADER_FONT = Font(name=FONT, bold=True, color="FFFFFF")
BOLD = Font(name=FONT, bold=True)
INPUT_FONT = Font(name=FONT, color="0000CC")
NOTE_FONT = Font(name=FONT, color="555555")

HEADER_FILL = PatternFill("solid", start_color="305496", end_color="305496")
INPUT_FILL = PatternFill("solid", start_color="FFF2CC", end_color="FFF2CC")
TOTAL_FILL = PatternFill("solid", start_color="D9E1F2", end_color="D9E1F2")
GOOD_FILL = PatternFill("solid", start_color="C6EFCE", end_color="C6EFCE")
BAD_FILL = PatternFill("solid", start_color="FFC7CE", end_color="FFC7CE")
GOOD_FONT = Font(name=FONT, color="006100")
BAD_FONT = Font(name=FONT, color="9C0006")
