"""How a command shows its options: :class:`Command`, Typer's command with its options' help
grouped by panel.

Mechanism: an option declared with ``rich_help_panel="..."`` is listed under that heading, after
the command's other options, in the plain help the application prints (``rich_markup_mode=None``,
where Typer itself lists every option under one heading). The panels keep their declaration
order; the options inside a panel keep theirs. Cost: none outside ``--help``.

A module that registers no command, so any command's module can import it.
"""

from __future__ import annotations

from typing import Any

import typer.core

OPTIONS = "Options"  # the heading of the options that name no panel: the ones a user needs first
TUNING = "Tuning options"  # how a capture measures, rather than what it measures


class Command(typer.core.TyperCommand):
    """A Typer command whose help lists each panel's options under its own heading."""

    def format_options(self, ctx: Any, formatter: Any) -> None:
        arguments: list = []
        panels: dict[str, list] = {OPTIONS: []}
        for param in self.get_params(ctx):
            record = param.get_help_record(ctx)
            if record is None:
                continue
            if param.param_type_name == "argument":
                arguments.append(record)
            else:
                panels.setdefault(getattr(param, "rich_help_panel", None) or OPTIONS, []).append(record)
        if arguments:
            with formatter.section("Arguments"):
                formatter.write_dl(arguments)
        for title, records in panels.items():
            if records:
                with formatter.section(title):
                    formatter.write_dl(records)
