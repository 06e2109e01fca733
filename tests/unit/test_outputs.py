"""Files the user names (bcgprof.outputs): written whole, with the mode any new file would get."""

from __future__ import annotations

import os
import stat

import pytest

from bcgprof.outputs import replace_file


@pytest.mark.parametrize("umask", [0o022, 0o077, 0o002])
def test_a_new_file_gets_the_mode_the_umask_gives_not_a_private_one(tmp_path, umask):
    old = os.umask(umask)
    try:
        replace_file(tmp_path / "summary.md", b"x")
        assert os.umask(umask) == umask  # the umask read is put back
        (tmp_path / "plain.md").write_bytes(b"x")  # what open() makes under the same umask
    finally:
        os.umask(old)
    mode = stat.S_IMODE((tmp_path / "summary.md").stat().st_mode)
    assert mode == stat.S_IMODE((tmp_path / "plain.md").stat().st_mode) == 0o666 & ~umask


def test_a_replaced_file_keeps_its_own_mode_and_gets_the_new_bytes(tmp_path):
    path = tmp_path / "cost.png"
    path.write_bytes(b"old")
    path.chmod(0o640)
    replace_file(path, b"new")
    assert path.read_bytes() == b"new" and stat.S_IMODE(path.stat().st_mode) == 0o640
    assert [p.name for p in tmp_path.iterdir()] == ["cost.png"]  # no temporary file left beside it
