"""Views as CSV: raw values, one block per sheet (each headed ``# name`` when there are several)."""

from __future__ import annotations

import csv
import io

from bcgprof.render.model import Sheet, View


def sheets_csv(sheets: list[Sheet]) -> str:
    blocks = []
    for sheet in sheets:
        buf = io.StringIO()
        if len(sheets) > 1:
            buf.write(f"# {sheet.name}\n")
        writer = csv.writer(buf, lineterminator="\n")
        writer.writerow([c.key for c in sheet.columns])
        for row in sheet.rows:
            writer.writerow(
                ["" if row.get(c.key) is None else row.get(c.key) for c in sheet.columns]
            )
        blocks.append(buf.getvalue())
    return "\n".join(blocks)


def render_csv(view: View) -> str:
    text = view.csv_output()
    return text if text is not None else sheets_csv(view.sheets)
