"""Text that came from a file, made safe to print on a terminal.

A report, a config.json or a lengths file can hold anything: escape sequences that retitle
the window or clear the screen, a message of many megabytes. Everything bcgprof prints
that it did not write itself goes through :func:`printable` first.
"""

from __future__ import annotations

import re

MAX_FIELD_CHARS = 300  # a field longer than this is shown cut, with an ellipsis

# C0 controls (CR, LF, TAB, ESC, BEL, ...), DEL and C1 controls (CSI, OSC, ...); printable folds
# tabs and newlines to spaces first, and report fields holding any of these are refused
# (report.codec). and lone surrogates: no encoder writes them
CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\ud800-\udfff]")
REPLACEMENT = "\N{REPLACEMENT CHARACTER}"


def printable(text: object, limit: int = MAX_FIELD_CHARS) -> str:
    """``text`` with control characters replaced (tabs and newlines by spaces), cut to ``limit``
    characters."""
    s = str(text)
    if len(s) > 4 * limit:  # never scan megabytes to print a few hundred characters
        s = s[: 4 * limit]
    s = s.replace("\t", " ").replace("\r\n", " ").replace("\n", " ")
    s = CONTROL.sub(REPLACEMENT, s)
    return s if len(s) <= limit else s[: max(limit - 1, 0)] + "\N{HORIZONTAL ELLIPSIS}"


def displayable(text: object) -> str:
    """``text`` with every control character replaced (tabs and newlines by spaces), never cut: what
    a view shows of a path, which can hold anything (``ESC ]0;`` retitles a window, ``ESC [2J``
    clears it)."""
    s = str(text)
    if not CONTROL.search(s):
        return s
    return CONTROL.sub(REPLACEMENT, s.replace("\t", " ").replace("\r\n", " ").replace("\n", " "))
