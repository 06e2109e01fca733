"""How a mode process starts (at fixed addresses: mode.fix_address_layout) and ends
(mode.exit_now)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

PROBE = """
import ctypes
from bcgprof.measure.mode import address_layout, fix_address_layout
fixed = fix_address_layout()
block = ctypes.create_string_buffer(1 << 26)  # large enough for malloc to map it on its own
print(fixed, open('/proc/self/personality').read().strip(), ctypes.addressof(block),
      address_layout())
"""


def _probe(env: dict | None = None) -> tuple[str, str, int, str]:
    out = subprocess.run(
        [sys.executable, "-c", PROBE],
        capture_output=True,
        text=True,
        check=True,
        env=dict(os.environ, **(env or {})),
    )
    fixed, personality, address, layout = out.stdout.split()
    return fixed, personality, int(address), layout


def _flag_allowed() -> bool:
    """Whether this machine lets a process set the flag (a container's seccomp profile may refuse
    it)."""
    import ctypes

    try:
        probe = subprocess.run(["setarch", os.uname().machine, "-R", "true"], capture_output=True)
    except OSError:
        libc = ctypes.CDLL(None)
        return libc.personality(0xFFFFFFFF) != -1
    return probe.returncode == 0


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the flag is Linux's")
def test_a_mode_process_gets_the_same_addresses_every_run():
    if not _flag_allowed():
        pytest.skip("this machine refuses ADDR_NO_RANDOMIZE")
    first, second = _probe(), _probe()
    assert first[0] == second[0] == "True"
    # the flag is set in the process that goes on to run the mode
    assert int(first[1], 16) & 0x0040000
    assert first[2] == second[2]  # the same address for the same request, run after run
    # what run.json records, read from the process's own flag
    assert first[3] == second[3] == "fixed"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the flag is Linux's")
def test_a_process_already_relaunched_does_not_try_again():
    """If the flag did not hold after the re-exec, the process says so and runs on (no exec
    loop)."""
    fixed, personality, _, layout = _probe({"BCGPROF_ADDRESS_LAYOUT_SET": "1"})
    assert fixed == "False" and not int(personality, 16) & 0x0040000
    assert layout == "random"  # run.json says what the process got, not what was asked for


def test_a_mode_process_ends_without_teardown_and_loses_no_output():
    """exit_now skips the interpreter's teardown (os._exit), so it must flush what is still
    buffered: into a pipe, stdout is block-buffered, and the parent reads the mode's last events
    from it."""
    code = (
        "import sys; from bcgprof.measure.mode import exit_now; "
        "sys.stdout.write('{\"event\": \"done\"}\\n'); sys.stderr.write('last words'); "
        "import atexit; atexit.register(print, 'teardown ran'); exit_now(3)"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 3
    # no exit handler ran
    assert proc.stdout == '{"event": "done"}\n' and proc.stderr == "last words"
