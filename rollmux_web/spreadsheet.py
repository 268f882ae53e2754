"""CSV exports opened in spreadsheets: keep user text from running as a formula."""

from __future__ import annotations

FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def csv_safe(value: str) -> str:
    """Return text safe for a CSV cell: a leading = + - @ (a formula in Excel, LibreOffice
    and Google Sheets: CSV injection) is escaped with an apostrophe, as OWASP advises."""
    return "'" + value if value[:1] in FORMULA_STARTS else value
