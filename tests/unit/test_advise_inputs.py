"""advise's inputs and the one definition of padding (bcgprof.analysis.predict.padding)."""

from __future__ import annotations

import os
import re

import numpy as np
import pytest

import bcgprof.analysis.predict.padding as padding_module
from bcgprof.analysis.predict.padding import padding_pct, read_lengths
from bcgprof.errors import BcgprofError


def test_padding_is_padded_over_requested_tokens_by_hand():
    # lengths 3, 5, 10 on the list 4,8: 3 -> 4 (1), 5 -> 8 (3), 10 -> a chunk of 8 and 2 -> 4 (2): 6
    # of 18
    lengths = [3, 5, 10]
    weights, requested, _ = padding_module.length_weights([4, 8], lengths)
    assert requested == 18
    assert padding_pct([4, 8], weights, requested) == pytest.approx(100 * 6 / 18)
    # every count in its own bucket pads nothing
    assert padding_pct(list(range(1, 9)), weights, requested) == 0


def test_uniform_padding_by_hand():
    # counts 1..4 uniformly, list 2,4: 1 -> 2 (1), 3 -> 4 (1): 2 padded of 1+2+3+4 = 10 requested
    weights, requested, source = padding_module.length_weights([2, 4], None)
    assert requested == 10 and "uniform" in source
    assert padding_pct([2, 4], weights, requested) == pytest.approx(20.0)
    assert np.array_equal(weights, [0, 1, 1, 1, 1])


def test_lengths_file(tmp_path):
    f = tmp_path / "l.csv"
    f.write_text("\ufefftokens,other\n12,x\n\n7\n")
    assert read_lengths(f) == [12, 7]


@pytest.mark.parametrize(
    "text, says",
    [
        # a number on the first row is a bad count, not a header
        ("5.5\n7\n", "'5.5' is not a token count"),
        ("nan\n7\n", "'nan' is not a token count"),
        ("1e3\n7\n", "'1e3' is not a token count"),
        ("99999999999999999999999\n", "a token count is from 1 to"),
        ("tokens\n5\n+-5\n", "'+-5' is not a token count"),
        ("tokens\n5\n--7\n", "'--7' is not a token count"),
        ("tokens\n\u00b2\n", "'\u00b2' is not a token count"),
    ],
)
def test_a_bad_count_is_named_in_one_line_even_on_the_first_row(tmp_path, text, says):
    f = tmp_path / "l.csv"
    f.write_text(text)
    with pytest.raises(BcgprofError, match=re.escape(says)):
        read_lengths(f)


@pytest.mark.parametrize(
    "path, says",
    [
        ("/dev/zero", "not a regular file"),
        ("/dev/urandom", "not a regular file"),
        ("/", "is a directory"),
        ("/no/such/file", "does not exist"),
    ],
)
def test_lengths_that_are_not_files_are_refused_at_once(path, says):
    if not os.path.exists(path) and "does not" not in says:
        pytest.skip(f"{path} is not on this machine")
    with pytest.raises(BcgprofError, match=says):
        read_lengths(path)


def test_a_fifo_is_refused_without_blocking(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(BcgprofError, match="not a regular file"):
        read_lengths(fifo)


def test_an_oversized_lengths_file_names_the_cap(tmp_path, monkeypatch):
    monkeypatch.setattr(padding_module, "MAX_LENGTHS_FILE_BYTES", 1000)
    big = tmp_path / "big.csv"
    big.write_text("5\n" * 1000)
    with pytest.raises(BcgprofError, match="over the cap of 1000 bytes"):
        read_lengths(big)


def test_a_bad_row_is_found_without_reading_on(tmp_path):
    bad = tmp_path / "bad.csv"
    with open(bad, "w") as f:
        f.write("tokens\n5\n\x1b]0;x\x07\n")
        f.write("6\n" * 100_000)
    with pytest.raises(BcgprofError, match=r"bad.csv:3: .* is not a token count") as info:
        read_lengths(bad)
    assert "\x1b" not in str(info.value)


def test_binary_lengths_are_one_line(tmp_path):
    binary = tmp_path / "b.csv"
    binary.write_bytes(b"\xff\xfe\x00\x01" * 100)
    with pytest.raises(BcgprofError, match="UTF-8 CSV"):
        read_lengths(binary)
