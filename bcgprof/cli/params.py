"""How a command reads and shows its options: :class:`Command`, Typer's command with its options'
help grouped by panel, and :func:`renamed`, one that still reads options and choices by their old
names.

Panels: an option declared with ``rich_help_panel="..."`` is listed under that heading, after the
command's other options, in the plain help the application prints (``rich_markup_mode=None``,
where Typer itself lists every option under one heading). The panels keep their declaration
order; the options inside a panel keep theirs.

Old names: before the arguments are parsed, an old option name (``--per-bucket``, also as
``--per-bucket=...``) and an old choice given to an option (``--weights shared``,
``--weights=shared``) become the current ones, each with one ``warning:`` line on stderr; ``--``
ends the rewriting. Neither old name appears in the help. Cost: one pass over the arguments;
none outside a command that declares old names.

A module that registers no command, so any command's module can import it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import typer.core

from bcgprof.cli.output import note

OPTIONS = "Options"  # the heading of the options that name no panel: the ones a user needs first
TUNING = "Tuning options"  # how a capture measures, rather than what it measures


class Command(typer.core.TyperCommand):
    """A Typer command whose help lists each panel's options under its own heading, and which reads
    the old names in :attr:`old_options` and :attr:`old_choices` as the current ones (see
    :func:`renamed`)."""

    old_options: Mapping[str, str] = {}  # old option name -> its name now
    old_choices: Mapping[
        str, Mapping[str, str]
    ] = {}  # option name now -> {old choice -> its word now}

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        return super().parse_args(ctx, respell(args, self.old_options, self.old_choices))

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
                panels.setdefault(getattr(param, "rich_help_panel", None) or OPTIONS, []).append(
                    record
                )
        if arguments:
            with formatter.section("Arguments"):
                formatter.write_dl(arguments)
        for title, records in panels.items():
            if records:
                with formatter.section(title):
                    formatter.write_dl(records)


def renamed(
    options: Mapping[str, str] = {}, choices: Mapping[str, Mapping[str, str]] = {}
) -> type[Command]:
    """A :class:`Command` class that reads ``options`` (old name -> name now) and ``choices``
    (option -> {old word -> word now}) by their old names, with a warning, for the one release they
    are kept."""
    return type(
        "RenamedCommand", (Command,), {"old_options": dict(options), "old_choices": dict(choices)}
    )


def deprecated(old: str, new: str) -> None:
    """The one line an old spelling gets on stderr."""
    note(f"warning: {old} is deprecated and will be removed in the next release; use {new}")


def respell(
    args: list[str], options: Mapping[str, str], choices: Mapping[str, Mapping[str, str]]
) -> list[str]:
    """``args`` with old option names and old choices in their current spelling (see the module
    docstring)."""
    out: list[str] = []
    i = 0
    while i < len(args):
        arg = args[i]
        i += 1
        if arg == "--":
            out.extend(args[i - 1 :])
            break
        name, eq, value = arg.partition("=") if arg.startswith("--") else (arg, "", "")
        if name in options:
            deprecated(name, options[name])
            name = options[name]
        words = choices.get(name)
        if words is not None and eq and value in words:
            deprecated(f"{name} {value}", f"{name} {words[value]}")
            value = words[value]
        elif words is not None and not eq and i < len(args) and args[i] in words:
            deprecated(f"{name} {args[i]}", f"{name} {words[args[i]]}")
            out += [name, words[args[i]]]
            i += 1
            continue
        out.append(name + eq + value)
    return out
