"""Trace files against their caps: refused while inflating, as soon as a cap is passed (no GPU).

A padded trace (a valid one with extra valid rows) and a gzip bomb (a little compressed data that
inflates to much more) must cost at most the caps: what the reader inflates, and what it reads of
the compressed file, is counted here, not timed. The caps come from the largest trace a real capture
wrote, and every refusal states them.
"""

from __future__ import annotations

import gzip
import io
import json
import zlib

import pytest

from bcgprof.report import trace_read, traces
from bcgprof.report.traces import COLUMNS, TraceError

HEADER = {
    "format": "bcgprof-allocator-trace",
    "version": 1,
    "mode": "per-bucket",
    "pool": [0, 1],
    "settings": {},
    "buckets": [8],
    "incomplete": [],
}
ROWS = [
    "8,capture,graph,segment_alloc,1,2097152,0,,,1099511627776",
    "8,capture,graph,alloc,1,512,0,1,0,",
    "8,capture,graph,free_completed,1,512,0,1,0,",
]
PAD = "8,warmup,other,peak,,0,0,,,"  # a valid row, again and again


def _text(rows: list[str]) -> bytes:
    return (
        "#" + json.dumps(HEADER) + "\n" + ",".join(COLUMNS) + "\n" + "".join(r + "\n" for r in rows)
    ).encode()


class Counting(io.BytesIO):
    """A compressed file that counts the bytes read from it."""

    read_bytes = 0

    def read(self, size: int | None = -1) -> bytes:
        data = super().read(size)
        self.read_bytes += len(data)
        return data


@pytest.fixture
def inflated(monkeypatch):
    """Counts the text the reader inflates (every chunk it is handed)."""
    counted = [0]
    inflate = trace_read.inflate_chunks

    def counting(raw, path):
        for chunk in inflate(raw, path):
            counted[0] += len(chunk)
            yield chunk

    monkeypatch.setattr(trace_read, "inflate_chunks", counting)
    return counted


def test_a_valid_trace_reads_back(tmp_path):
    table = trace_read.parse(tmp_path / "t", io.BytesIO(gzip.compress(_text(ROWS)))).table
    assert table.shape == (3, len(COLUMNS)) and table[1].tolist() == [
        8,
        1,
        0,
        0,
        1,
        512,
        0,
        1,
        0,
        -1,
    ]


def test_a_padded_trace_is_refused_at_the_row_cap_having_inflated_little_more(
    tmp_path, monkeypatch, inflated
):
    monkeypatch.setattr(traces, "MAX_ROWS", 1000)
    monkeypatch.setattr(trace_read, "CHUNK", 4096)
    text = _text(ROWS + [PAD] * 200_000)  # 200 times the cap
    raw = Counting(gzip.compress(text))
    with pytest.raises(
        TraceError, match=r"more than 1000 rows \(a trace may hold .* and 1,000 rows\)"
    ) as refused:
        trace_read.parse(tmp_path / "traces-per-bucket.csv.gz", raw)
    assert "\n" not in str(refused.value) and "traces-per-bucket.csv.gz" in str(refused.value)
    most = (
        len(_text(ROWS + [PAD] * 1000)) + trace_read.CHUNK
    )  # the rows the cap allows, and one chunk more
    assert inflated[0] <= most < len(text) // 50


def test_a_gzip_bomb_is_refused_at_the_text_cap(tmp_path, monkeypatch, inflated):
    monkeypatch.setattr(traces, "MAX_TEXT_BYTES", 1 << 20)
    monkeypatch.setattr(trace_read, "INPUT", 4096)
    deflate = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    zeros = bytes(1 << 20)
    bomb = (
        deflate.compress(_text(ROWS))
        + b"".join(deflate.compress(zeros) for _ in range(128))
        + deflate.flush()
    )
    raw = Counting(bomb)  # 128 MiB of text in about 128 KiB
    with pytest.raises(TraceError, match="more than 1048576 bytes uncompressed"):
        trace_read.parse(tmp_path / "traces-per-bucket.csv.gz", raw)
    assert inflated[0] <= (1 << 20) + trace_read.CHUNK
    assert raw.read_bytes < len(bomb) // 4  # most of the file was never read


def test_the_caps_admit_a_real_capture_with_room_and_are_stated():
    """The largest committed trace (Qwen3-30B-A3B's 74-bucket profile) holds 675,217 rows, 38.4 MB
    of text and 2.39 MB compressed; the caps leave at least 1.4 times that."""
    assert traces.MAX_ROWS >= 1.4 * 675_217
    assert traces.MAX_TEXT_BYTES >= 1.4 * 38_366_074
    assert traces.MAX_TRACE_BYTES >= 1.4 * 2_390_536
    stated = trace_read.caps()  # what every refusal for size says
    assert (
        "4 MiB compressed" in stated and "64 MiB of text" in stated and "1,000,000 rows" in stated
    )


def test_a_header_line_without_end_is_refused_at_its_own_cap(tmp_path, inflated):
    raw = gzip.compress(b"#" + b"[" * (3 << 20))  # a header nested far too deep, and far too long
    with pytest.raises(TraceError, match="header line is longer than"):
        trace_read.parse(tmp_path / "t", io.BytesIO(raw))
    assert inflated[0] <= trace_read.MAX_HEADER_BYTES + 2 * trace_read.CHUNK


def test_a_deeply_nested_header_is_one_line(tmp_path):
    with pytest.raises(TraceError, match="the header is not JSON"):
        trace_read.parse(tmp_path / "t", io.BytesIO(gzip.compress(b"#" + b"[" * 100_000 + b"\n")))


@pytest.mark.parametrize("cut", [0.3, 0.9])
def test_a_file_cut_short_is_refused(tmp_path, cut):
    whole = gzip.compress(_text(ROWS + [PAD] * 100))
    with pytest.raises(TraceError, match="cannot be read as gzip"):
        trace_read.parse(tmp_path / "t", io.BytesIO(whole[: int(len(whole) * cut)]))


@pytest.mark.parametrize(
    "cell, message",
    [
        ("+512", "'\\+512' is not an integer"),
        (" 512", "' 512' is not an integer"),
        ("5_12", "'5_12' is not an integer"),
        ("0" * 25 + "512", "'0+512' has more than 19 digits"),
        ("9" * 19, "9{19} is out of range"),
    ],
)
def test_a_cell_not_written_as_the_writer_writes_is_refused_in_one_line(tmp_path, cell, message):
    rows = [ROWS[0], f"8,capture,graph,alloc,1,{cell},0,1,0,"]
    with pytest.raises(TraceError, match=f"line 4, column size: {message}"):
        trace_read.parse(tmp_path / "t", io.BytesIO(gzip.compress(_text(rows))))


def test_a_graph_pool_allocation_without_its_offset_is_refused(tmp_path):
    rows = [ROWS[0], "8,capture,graph,alloc,1,512,0,1,,"]
    with pytest.raises(TraceError, match="line 4: a graph-pool allocation without its offset"):
        trace_read.parse(tmp_path / "t", io.BytesIO(gzip.compress(_text(rows))))
