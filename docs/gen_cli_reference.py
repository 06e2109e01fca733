"""Write docs/reference/cli.md from the Typer app, so the CLI reference cannot drift from the code.

    python docs/gen_cli_reference.py            # rewrite docs/reference/cli.md
    python docs/gen_cli_reference.py --check    # exit 1 when the file is stale

The page is built from the command objects alone (usage, help, every parameter's names, type,
choices, range, default and help), never from a help screen, so it does not depend on the
terminal's width. It works with both Typer flavours: those built on click, and those that
vendor it (``typer._click``); no click module is imported here, every class is reached through
the command objects.
"""

from __future__ import annotations

import enum
import inspect
import pathlib
import re
import sys
import typing
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TARGET = ROOT / "docs" / "reference" / "cli.md"
PROG = "bcgprof"
STALE = "docs/reference/cli.md is stale; run python docs/gen_cli_reference.py"

HEADER = """# CLI reference

Every command and option of `bcgprof`, generated from the code by
`python docs/gen_cli_reference.py` (do not edit this page by hand). `bcgprof --help` and
`bcgprof COMMAND --help` print the same help in the terminal.
"""

# Type names as every flavour's parameter types name them (click's, and typer's vendored copy,
# which says "str" and "int range"), and as Python annotations give them.
_CLICK_TYPES = {"integer": "integer", "integer range": "integer", "int": "integer", "int range": "integer",
                "float": "number", "float range": "number", "text": "text", "str": "text", "path": "path",
                "boolean": "flag", "bool": "flag", "choice": "choice", "file": "file"}
_ANNOTATIONS = {int: "integer", float: "number", str: "text", bool: "flag",
                Path: "path", pathlib.PurePath: "path"}


def _value(v: object) -> object:
    """An enum member as its value (older Typer keeps defaults and choices as members)."""
    return v.value if isinstance(v, enum.Enum) else v


def _escape(text: str) -> str:
    """Markdown-safe text: code spans kept; outside them, characters Markdown would read escaped."""
    parts = text.split("`")
    for i in range(0, len(parts), 2):  # even parts lie outside code spans
        p = parts[i].replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
        parts[i] = re.sub(r"([*_|\[\]])", r"\\\1", p)
    return "`".join(parts)


def _cell(text: str) -> str:
    """Text for a table cell: one line, and a bar inside a code span escaped too."""
    return " ".join(_escape(text).split()).replace("`|`", "`\\|`")


def _paragraphs(help_text: str | None) -> list[str]:
    if not help_text:
        return []
    text = inspect.cleandoc(help_text).replace("\b", "")
    return [" ".join(block.split()) for block in re.split(r"\n\s*\n", text) if block.strip()]


def _annotation_type(annotation: object) -> str:
    args = typing.get_args(annotation)
    if args and typing.get_origin(annotation) in (list, tuple, typing.Union):
        inner = [a for a in args if a is not type(None) and a is not Ellipsis]
        if inner:
            return _annotation_type(inner[0])
    if isinstance(annotation, type):
        if issubclass(annotation, enum.Enum):
            return "choice"
        for cls, name in _ANNOTATIONS.items():
            if issubclass(annotation, cls):
                return name
    return "text"


def _choices(param) -> list[str]:
    descriptor = getattr(param, "type_descriptor", None)
    if descriptor is not None:
        choices = descriptor.choices if descriptor.is_choice else None
    else:
        choices = getattr(getattr(param, "type", None), "choices", None)
    return [str(_value(c)) for c in choices or ()]


def _bounds(param) -> tuple[object, object]:
    holder = param if getattr(param, "type_descriptor", None) is not None else getattr(param, "type", None)
    return getattr(holder, "min", None), getattr(holder, "max", None)


def _type(param) -> str:
    """The parameter's type in words: 'one of `a`, `b`', 'integer >= 0', 'path, repeatable', 'flag'."""
    if getattr(param, "is_flag", False):
        return "flag"
    descriptor = getattr(param, "type_descriptor", None)
    if descriptor is not None:
        name = _annotation_type(descriptor.annotation)
        many = bool(descriptor.is_list) or bool(getattr(param, "multiple", False))
    else:
        name = _CLICK_TYPES.get(param.type.name, param.type.name)
        many = bool(getattr(param, "multiple", False))
    choices = _choices(param)
    if choices:
        text = "one of " + ", ".join(f"`{c}`" for c in choices)
    else:
        text = name
        low, high = _bounds(param)
        if low is not None and high is not None:
            text += f", {low} to {high}"
        elif low is not None:
            text += f" >= {low}"
        elif high is not None:
            text += f" <= {high}"
    if many:
        text += ", repeatable" if param.param_type_name == "option" else ", one or more"
    return text


def _default(param) -> str:
    if param.required:
        return "required"
    show = getattr(param, "show_default", True)
    if show is False:
        return ""
    if isinstance(show, str):
        return show
    default = param.default
    if callable(default) or default is None or default is False or default == () or default == []:
        return ""
    if default is True and getattr(param, "is_flag", False):
        return "on"
    if isinstance(default, (list, tuple)):
        return ", ".join(f"`{_value(d)}`" for d in default)
    return f"`{_value(default)}`"


def _usage(path: str, command, params: list) -> str:
    pieces = [path]
    if any(p.param_type_name == "option" for p in params):
        pieces.append(getattr(command, "options_metavar", None) or "[OPTIONS]")
    for p in params:
        if p.param_type_name != "argument":
            continue
        name = (p.name or "arg").upper()
        if p.nargs == -1:
            name += "..."
        pieces.append(name if p.required else f"[{name}]")
    if hasattr(command, "list_commands"):
        pieces.append("COMMAND [ARGS]...")
    return " ".join(pieces)


def _section(path: str, command, ctx, level: int) -> list[str]:
    params = [p for p in command.get_params(ctx) if not getattr(p, "hidden", False)]
    lines = ["#" * level + f" {path}", "", "```", _usage(path, command, params), "```", ""]
    for paragraph in _paragraphs(command.help):
        lines += [_escape(paragraph), ""]
    arguments = [p for p in params if p.param_type_name == "argument"]
    options = [p for p in params if p.param_type_name == "option"]
    if arguments:
        lines += ["| argument | type | description |", "| --- | --- | --- |"]
        for p in arguments:
            lines.append(f"| `{(p.name or 'arg').upper()}` | {_cell(_type(p))} | {_cell(getattr(p, 'help', None) or '')} |")
        lines.append("")
    panels: dict[str, list] = {}  # the options of no panel first, then each panel's (as `--help` lists them)
    for p in options:
        panels.setdefault(getattr(p, "rich_help_panel", None) or "", []).append(p)
    for panel, members in sorted(panels.items(), key=lambda item: item[0] != ""):
        if panel:
            lines += [f"{_escape(panel)}:", ""]
        lines += ["| option | type | default | description |", "| --- | --- | --- | --- |"]
        for p in members:
            # long names first: the flavours list the help option's names in different orders
            names = ", ".join(f"`{n}`" for n in sorted([*p.opts, *p.secondary_opts], key=lambda n: not n.startswith("--")))
            lines.append(f"| {names} | {_cell(_type(p))} | {_cell(_default(p))} | {_cell(p.help or '')} |")
        lines.append("")
    if hasattr(command, "list_commands"):
        subcommands = [(name, command.get_command(ctx, name)) for name in command.list_commands(ctx)]
        subcommands = [(n, c) for n, c in subcommands if c is not None and not getattr(c, "hidden", False)]
        if subcommands:
            lines += ["| command | what it does |", "| --- | --- |"]
            for name, sub in subcommands:
                anchor = f"{path} {name}".replace(" ", "-")
                summary = (_paragraphs(sub.short_help or sub.help) or [""])[0]
                lines.append(f"| [`{name}`](#{anchor}) | {_cell(summary)} |")
            lines.append("")
        for name, sub in subcommands:
            sub_ctx = sub.context_class(sub, info_name=name, parent=ctx, **(sub.context_settings or {}))
            # the app's own commands sit beside it in the page's outline; deeper groups nest
            lines += _section(f"{path} {name}", sub, sub_ctx, level if path == PROG else min(level + 1, 6))
    return lines


def render() -> str:
    """The reference page for the app as it is now; the same text on every run and terminal."""
    import typer

    from bcgprof.cli import app

    command = typer.main.get_command(app)
    ctx = command.context_class(command, info_name=PROG, **(command.context_settings or {}))
    body = _section(PROG, command, ctx, 2)
    return HEADER + "\n" + "\n".join(body).rstrip("\n") + "\n"


def main(argv: list[str]) -> int:
    text = render()
    if "--check" in argv:
        current = TARGET.read_text(encoding="utf-8") if TARGET.exists() else ""
        if current != text:
            print(STALE, file=sys.stderr)
            return 1
        return 0
    TARGET.parent.mkdir(parents=True, exist_ok=True)
    TARGET.write_text(text, encoding="utf-8")
    print(f"wrote {TARGET.relative_to(ROOT)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    raise SystemExit(main(sys.argv[1:]))
