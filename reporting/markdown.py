"""The report's one markdown table writer (every section's tables)."""
from __future__ import annotations


def md_table(headers, rows):
    """A markdown table's lines: the header, the separator, one line per row (cells already formatted)."""
    out = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    return out + ["| " + " | ".join(r) + " |" for r in rows]
