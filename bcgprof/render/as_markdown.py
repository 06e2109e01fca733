"""Views as GitHub markdown: every column (markdown is not limited to a terminal's width)."""

from __future__ import annotations

from bcgprof.render.model import PLAIN, Line, Sheet, View


def _escape(text: str) -> str:
    return text.replace("|", r"\|")


def line_markdown(line: Line) -> str:
    """A lead is bold before the text; a styled line without one is bold as a whole."""
    if line.lead:
        text = f"**{line.lead}**{line.text}"
    elif line.style != PLAIN:
        text = f"**{line.text}**"
    else:
        text = line.text
    return ("- " if line.bullet else "") + text


def sheet_markdown(sheet: Sheet, *, heading: str = "###") -> str:
    lines = [f"{heading} {sheet.title}", ""] if sheet.title else []
    columns = sheet.columns
    lines.append("| " + " | ".join(c.header for c in columns) + " |")
    lines.append("| " + " | ".join("---:" if c.numeric else "---" for c in columns) + " |")
    for row in sheet.rows:
        lines.append("| " + " | ".join(_escape(sheet.cell(row, c)) for c in columns) + " |")
    if not sheet.rows:
        lines.append("| " + " | ".join("" for _ in columns) + " |")
    for note in sheet.notes:
        lines.extend(["", f"- {note}"])
    return "\n".join(lines) + "\n"


def _block(lines: list[Line]) -> str:
    """Consecutive bullets form one list; other lines are paragraphs."""
    out: list[str] = []
    previous_bullet = False
    for line in lines:
        text = line_markdown(line)
        if out and not (line.bullet and previous_bullet):
            out.append("")
        out.append(text)
        previous_bullet = line.bullet
    return "\n".join(out) + "\n" if out else ""


def render_markdown(view: View) -> str:
    parts = []
    if view.title:
        parts.append(f"## {view.title}\n")
    if view.headline is not None:
        parts.append(_block([view.headline]))
    if view.head:
        parts.append(_block(view.head))
    parts.extend(sheet_markdown(s) for s in view.sheets)
    if view.foot:
        parts.append(_block(view.foot))
    return "\n".join(parts)
