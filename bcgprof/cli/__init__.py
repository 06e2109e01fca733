"""The `bcgprof` command line: one thin module per command group; the work is done elsewhere.

* :mod:`bcgprof.cli.root`: the application, exit codes, the one place errors become lines
* :mod:`bcgprof.cli.output`: stdout for results, stderr for progress, notes and errors
* :mod:`bcgprof.cli.common`: help texts and parsing of options more than one command takes
* :mod:`bcgprof.cli.capture`: ``capture`` (a GPU: bcgprof's own replica of a model)
* :mod:`bcgprof.cli.record`: ``record`` (a GPU: another program's captures, from inside it)
* :mod:`bcgprof.cli.reports`: ``show``, ``compare``, ``plot``
* :mod:`bcgprof.cli.gate`: ``gate``
* :mod:`bcgprof.cli.whatif`: ``estimate``, ``explain``, ``predict``, ``advise``
* :mod:`bcgprof.cli.audit`: ``audit``

Importing this package imports no torch and no model code: each command imports what it
needs when it runs.
"""

from __future__ import annotations

import importlib
import sys
from typing import Any

from bcgprof.cli.root import app as _app

# Each command's module, in the help's order. `main` imports only the module of the command
# that runs: the other modules' imports, and typer's parsing of their signatures, are start-up
# time that a read command would pay for nothing. Help, completion and a mistyped command
# load them all (tests/cli/test_cli.py checks this table against the loaded app).
COMMAND_MODULES = {
    "capture": "capture",
    "record": "record",
    "show": "reports",
    "compare": "reports",
    "plot": "reports",
    "gate": "gate",
    "estimate": "whatif",
    "explain": "whatif",
    "predict": "whatif",
    "advise": "whatif",
    "audit": "audit",
}


def _load(modules: list[str]) -> None:
    for module in modules:
        importlib.import_module(f"bcgprof.cli.{module}")  # registers its commands on the app


def load_all_commands() -> Any:
    """The application with every command registered, in the help's order."""
    _load(list(dict.fromkeys(COMMAND_MODULES.values())))
    order = {name: i for i, name in enumerate(COMMAND_MODULES)}
    _app.registered_commands.sort(
        key=lambda c: order.get(str(c.name or getattr(c.callback, "__name__", "")), len(order))
    )
    return _app


def _command_named(argv: list[str]) -> str | None:
    """The command ``argv`` runs: its first word that is not an option (the root's are flags)."""
    return next((a for a in argv if not a.startswith("-")), None)


def main() -> None:
    name = _command_named(sys.argv[1:])
    if name in COMMAND_MODULES and not any(a in ("-h", "--help") for a in sys.argv[1:2]):
        _load([COMMAND_MODULES[name]])
    else:
        load_all_commands()
    _app(prog_name="bcgprof")


def __getattr__(name: str) -> Any:
    if name == "app":  # the whole application, as tests, the docs generator and embedders want it
        return load_all_commands()
    raise AttributeError(f"module 'bcgprof.cli' has no attribute {name!r}")


__all__ = ["COMMAND_MODULES", "app", "load_all_commands", "main"]
