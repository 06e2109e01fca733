"""The README and docs/ stay true: their example commands run, the CLI reference matches the
code, the README stays short and its links resolve, and the site builds strictly.

Example commands are the lines of ```bash blocks. A block holding a command that needs a GPU
(`bcgprof capture`, `bcgprof record`, `torchrun`, `python -m bcgprof.measure.benchmark`) is skipped
whole, since its other lines read what the capture wrote. Every other `bcgprof` line runs from a
directory where `reports/` is the committed reports, and must exit 0, or the code its comment names
(`# exits 1`). Setup lines (pip, pytest, mkdocs) are not examples and do not run; `printf`
lines run, so an example may write its own input file.
"""

from __future__ import annotations

import importlib.util
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

import bcgprof
from bcgprof.cli import app

from children import Command

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
PAGES = [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))]
GPU_COMMANDS = (
    "bcgprof capture",
    "python -m bcgprof capture",
    "bcgprof record",
    "python -m bcgprof record",
    "torchrun",
    "python -m bcgprof.measure.benchmark",
)
SETUP_COMMANDS = ("pip", "python -m pytest", "mkdocs", "python docs/", ".ci/run")
EXIT_NOTE = re.compile(r"#\s*exits\s+(\d+)")
runner = CliRunner()


def _blocks(path: Path, language: str) -> list[tuple[int, str]]:
    """(first line number, text) of each fenced block of ``language`` in ``path``."""
    blocks: list[tuple[int, str]] = []
    current: list[str] | None = None
    start = 0
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        fence = line.strip()
        if current is None and fence == f"```{language}":
            current, start = [], number + 1
        elif current is not None and fence == "```":
            blocks.append((start, "\n".join(current)))
            current = None
        elif current is not None:
            current.append(line)
    assert current is None, f"{path}: a ```{language} block is not closed"
    return blocks


def _commands(block: str) -> list[str]:
    """The block's command lines, continuation lines joined, each `a && b` split in two."""
    text = re.sub(r"\\\n\s*", " ", block)
    lines = [line.strip() for line in text.splitlines()]
    return [
        part.strip()
        for line in lines
        if line and not line.startswith("#")
        for part in line.split("&&")
    ]


def _examples() -> list:
    cases = []
    for path in PAGES:
        for start, block in _blocks(path, "bash"):
            commands = _commands(block)
            where = f"{path.relative_to(ROOT)}:{start}"
            if any(c.startswith(GPU_COMMANDS) for c in commands):
                cases.append(
                    pytest.param(
                        commands, id=where, marks=pytest.mark.skip(reason="needs a CUDA GPU")
                    )
                )
            elif any(c.startswith(("bcgprof", "python -m bcgprof")) for c in commands):
                cases.append(pytest.param(commands, id=where))
    return cases


EXAMPLES = _examples()


@pytest.fixture
def in_reports_dir(tmp_path, monkeypatch) -> Path:
    """A working directory whose reports/ is the committed reports; examples write beside it."""
    (tmp_path / "reports").symlink_to(ROOT / "reports", target_is_directory=True)
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.mark.parametrize("commands", EXAMPLES)
def test_example_commands_run_as_documented(commands, in_reports_dir, shared_profiles):
    # shared_profiles: a committed traced profile is prepared once for the session, not once per
    # command
    for command in commands:
        if command.startswith(SETUP_COMMANDS):
            continue
        if command.startswith("printf "):
            subprocess.run(["bash", "-c", command], cwd=in_reports_dir, check=True)
            continue
        note = EXIT_NOTE.search(command)
        expected = int(note.group(1)) if note else 0
        words = shlex.split(command, comments=True)
        prefix = 3 if words[:3] == ["python", "-m", "bcgprof"] else 1
        assert words[:prefix] in (["bcgprof"], ["python", "-m", "bcgprof"]), (
            f"not an example command: {command}"
        )
        assert not {"|", ">", "<", ";"} & set(words), (
            f"shell syntax the examples do not use: {command}"
        )
        result = runner.invoke(app, words[prefix:])
        assert result.exit_code == expected, (command, result.exit_code, result.output[-2000:])
        if expected == 0:
            assert result.output.strip(), f"printed nothing: {command}"


def test_examples_cover_every_reading_command():
    ran = [c for case in EXAMPLES if not case.marks for c in case.values[0]]
    # advise needs a profile with allocator traces, which no committed report has: its examples
    # capture first
    for name in ("show", "compare", "gate", "plot", "explain", "predict", "estimate"):
        assert any(c.startswith(f"bcgprof {name} ") or c == f"bcgprof {name}" for c in ran), name
    assert any(EXIT_NOTE.search(c) for c in ran), "no example of a failing exit code"


@pytest.mark.parametrize(
    "path, start, code",
    [
        pytest.param(path, start, code, id=f"{path.relative_to(ROOT)}:{start}")
        for path in PAGES
        for start, code in _blocks(path, "python")
    ],
)
def test_python_examples_run(path, start, code, in_reports_dir, capsys, shared_profiles):
    if "cuda" in code:
        pytest.skip("needs a CUDA GPU")
    if "read_frames(" in code and not hasattr(bcgprof, "read_frames"):
        pytest.skip("bcgprof.read_frames is not there yet")
    exec(compile(code, f"{path}:{start}", "exec"), {"__name__": "__docs__"})
    assert capsys.readouterr().out.strip()


def _generator():
    spec = importlib.util.spec_from_file_location(
        "gen_cli_reference", DOCS / "gen_cli_reference.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_cli_reference_is_current():
    gen = _generator()
    current = (DOCS / "reference" / "cli.md").read_text(encoding="utf-8")
    assert current == gen.render(), gen.STALE


def test_cli_reference_names_every_command_and_option():
    import typer

    text = (DOCS / "reference" / "cli.md").read_text(encoding="utf-8")
    root = typer.main.get_command(app)
    ctx = root.context_class(root, info_name="bcgprof")
    for name in root.list_commands(ctx):  # type: ignore[attr-defined]  # the app is a group
        command = root.get_command(ctx, name)  # type: ignore[attr-defined]
        assert f"\n## bcgprof {name}\n" in text, name
        for param in command.params:
            for opt in param.opts if param.param_type_name == "option" else ():
                assert f"`{opt}`" in text, (name, opt)


def test_readme_is_short_and_its_links_resolve():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 160
    targets = re.findall(r"\]\(([^)\s]+)\)", text)
    local = [
        t.split("#")[0] for t in targets if not re.match(r"[a-z]+:", t) and not t.startswith("#")
    ]
    assert "docs/assets/gpt-oss-20b-h200.png" in local
    for target in local:
        assert (ROOT / target).exists(), f"README links to {target}, which does not exist"


# run ahead of its test (tests/children.py)
CHILDREN = {
    "site": lambda folder: Command(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(folder / "site")],
        env={"NO_MKDOCS_2_WARNING": "1"},
        cwd=ROOT,
        timeout=None,
    )
}


@pytest.mark.prestart("site")
def test_site_builds_strictly(prestarted):
    pytest.importorskip("mkdocs")
    pytest.importorskip("material")
    proc, _ = prestarted("site")
    assert proc.returncode == 0, proc.stderr[-3000:]
