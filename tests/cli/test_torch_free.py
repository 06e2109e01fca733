"""Every read command, run in a fresh interpreter on committed reports, loads neither torch
nor bcgprof's model, capture or GPU code (the forbidden list of .importlinter's read-side
contract): reading a report starts in a fraction of the time a capture does.

The static contract (tests/unit/test_import_contracts.py) sees import statements; this sees
what an actual run loads, packages' ``__init__`` and imports made on the way included.
"""

from __future__ import annotations

import configparser
import json
import sys
from pathlib import Path

import pytest

from children import Command

ROOT = Path(__file__).resolve().parents[2]
R = ROOT / "reports"


def _forbidden() -> list[str]:
    parser = configparser.ConfigParser()
    parser.read(ROOT / ".importlinter")
    return parser["importlinter:contract:read-side"]["forbidden_modules"].split()


# The command line as bcgprof's console script runs it; what it loaded goes to stderr's last line.
_RUN = r"""
import json, sys
from bcgprof.cli import main
sys.argv = ["bcgprof", *sys.argv[1:]]
try:
    main()
    code = 0
except SystemExit as e:
    code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
sys.stdout.flush()
print("\nLOADED " + json.dumps(sorted(sys.modules)), file=sys.stderr)
sys.exit(code)
"""

# (name, arguments, exit codes it may end with)
COMMANDS = [
    ("show", ["show", str(R / "gpt-oss-20b-h200")], {0}),
    ("show-json", ["show", str(R / "llama-3.1-8b-h200"), "-f", "json"], {0}),
    ("compare", ["compare", str(R / "gpt-oss-20b-h200-unfused"), str(R / "gpt-oss-20b-h200")], {0}),
    (
        "gate",
        [
            "gate",
            "--baseline",
            str(R / "gpt-oss-20b-h200-unfused"),
            "--current",
            str(R / "gpt-oss-20b-h200-unfused-rerun"),
            "--each-bucket",
        ],
        {0},
    ),
    ("plot", ["plot", str(R / "gpt-oss-20b-h200"), "-o", "{tmp}/plot.png"], {0}),
    ("estimate", ["estimate"], {0}),
    (
        "estimate-qwen",
        ["estimate", "--model", "Qwen3-30B-A3B", "--phase", "decode", "-f", "json"],
        {0},
    ),
    ("explain", ["explain", str(R / "gpt-oss-20b-h200")], {0}),
    ("predict", ["predict", "--from", str(R / "gpt-oss-20b-h200-layers")], {0}),
    # a report without what advise needs is refused (exit 2) after the command's imports ran
    ("advise", ["advise", "--from", str(R / "gpt-oss-20b-h200"), "--budget", "3GiB"], {0, 2}),
    ("audit", ["audit", str(R / "gpt-oss-20b-h200"), "-f", "json"], {0}),
    ("help", ["--help"], {0}),
    ("version", ["--version"], {0}),
]


def _command(args: list[str], prefix: str = ""):
    """A child of CHILDREN: the command in a fresh interpreter, in its folder (``{tmp}``)."""
    return lambda folder: Command(
        [sys.executable, "-c", prefix + _RUN, *[a.replace("{tmp}", str(folder)) for a in args]],
        cwd=folder,
    )


# Each command in a fresh interpreter, run ahead of its test (tests/children.py).
CHILDREN = {name: _command(args) for name, args, _ in COMMANDS}
# the same harness around a capture-side import
CHILDREN["loads-torch"] = _command(["--version"], prefix="import bcgprof.models\n")


@pytest.mark.parametrize(
    "name, args, codes",
    [pytest.param(n, a, c, marks=pytest.mark.prestart(n), id=n) for n, a, c in COMMANDS],
)
def test_a_read_command_loads_no_torch_and_no_model_code(prestarted, name, args, codes):
    if args[0] == "plot":
        pytest.importorskip("matplotlib")
    done, _ = prestarted(name)
    head, _, tail = done.stderr.rpartition("\nLOADED ")
    assert tail, f"the command did not finish: {done.stderr[-2000:]}"
    assert done.returncode in codes, f"exit {done.returncode}: {head[-2000:]}"
    assert "Traceback" not in head
    loaded = json.loads(tail)
    bad = [m for m in loaded if any(m == f or m.startswith(f + ".") for f in _forbidden())]
    assert bad == [], f"bcgprof {' '.join(args)} loaded {bad[:20]}"
    assert "bcgprof.cli" in loaded  # it ran the CLI, not something else


@pytest.mark.prestart("loads-torch")
def test_the_check_sees_torch_when_a_command_loads_it(prestarted):
    # the same harness around a capture-side import: what the test above would report
    done, _ = prestarted("loads-torch")
    loaded = json.loads(done.stderr.rpartition("\nLOADED ")[2])
    assert done.returncode == 0 and "torch" in loaded and "bcgprof.models" in loaded
