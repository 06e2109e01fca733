"""The `bcgprof` command line: one thin module per command group; the work is done elsewhere.

* :mod:`bcgprof.cli.root`: the application, exit codes, the one place errors become lines
* :mod:`bcgprof.cli.output`: stdout for results, stderr for progress, notes and errors
* :mod:`bcgprof.cli.capture`: ``capture`` (the only command that needs a GPU)
* :mod:`bcgprof.cli.reports`: ``show``, ``compare``, ``plot``
* :mod:`bcgprof.cli.gate`: ``gate``
* :mod:`bcgprof.cli.whatif`: ``estimate``, ``explain``, ``predict``, ``advise``

Importing this package imports no torch and no model code: each command imports what it
needs when it runs.
"""

from __future__ import annotations

# Importing a command module registers its commands on the app, in this (the help's) order.
from bcgprof.cli import capture as _capture_commands  # noqa: F401
from bcgprof.cli import reports as _report_commands  # noqa: F401
from bcgprof.cli import gate as _gate_commands  # noqa: F401
from bcgprof.cli import whatif as _whatif_commands  # noqa: F401
from bcgprof.cli.root import app


def main() -> None:
    app(prog_name="bcgprof")


__all__ = ["app", "main"]
