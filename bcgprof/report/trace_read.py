"""Reading one allocator trace file (:mod:`bcgprof.report.traces`) within its caps, as columns.

Mechanism. The compressed file is read whole (a regular file of at most ``MAX_TRACE_BYTES``,
refused before a byte is read otherwise) and hashed: its SHA-256 names it wherever a result drawn
from it is cached (:mod:`bcgprof.analysis.predict.trace_cache`). It is inflated as a stream
(:func:`inflate_chunks`: gzip members one after another, at most :data:`CHUNK` bytes out per step),
and the stream stops as soon as the text passes ``MAX_TEXT_BYTES`` or holds more than ``MAX_ROWS``
rows, so a gzip bomb or a padded file costs at most the caps, and nothing is parsed before the whole
text is within them. The rows are then parsed a few megabytes at a time, whole columns at once
(numpy): a piece is accepted only if every line is a row as the writer writes it (ten cells, each
plain digits or one of its column's words), the digits become integers column by column, and then
the rules the replay relies on (allocation and segment numbers unique, frees naming earlier
allocations, a graph-pool block in a graph-pool segment, a bucket's rows in one run) are checked on
whole columns (:func:`check_table`). The first line that breaks a
rule is then read alone, to refuse the file in one line naming it.

Invariant: a table returned holds every row of the file in order, each cell as its integer (a word
as its index in :data:`PHASES`, :data:`POOLS` or :data:`ACTIONS`; an empty cell as -1), and every
rule above holds; anything else is a :class:`~bcgprof.report.traces.TraceError` of one line.

Cost: O(compressed + text) time, a constant number of numpy passes over each piece; memory the
compressed file, the text (at most ``MAX_TEXT_BYTES``) and the table (80 bytes a row). Torch-free.
"""

from __future__ import annotations

import hashlib
import io
import json
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Optional

import numpy as np

from bcgprof.report import traces as fmt
from bcgprof.report.traces import (
    COLUMNS,
    MAX_VALUE,
    VERSION,
    Action,
    TraceError,
    TracePhase,
    TracePool,
    TraceRow,
)
from bcgprof.text import printable
from bcgprof.vocab import Mode, RecordGroup

CHUNK = 1 << 20  # text inflated per step
INPUT = 64 << 10  # compressed bytes fed to the inflater per step
PIECE = 4 << 20  # text parsed at once
# the header line (a 4,096-bucket list and the allocator settings take a few KiB)
MAX_HEADER_BYTES = 1 << 20
# digits a cell may have: every value up to MAX_VALUE, and none overflows 64 bits unsigned
DIGITS = 19

PHASES: tuple[str, ...] = tuple(w.value for w in TracePhase)  # a word's code is its index
POOLS: tuple[str, ...] = tuple(w.value for w in TracePool)
ACTIONS: tuple[str, ...] = tuple(w.value for w in Action)
BUCKET, PHASE, POOL, ACTION, ID, SIZE, STREAM, SEGMENT, OFFSET, ADDRESS = range(len(COLUMNS))
NUMBERS = (BUCKET, ID, SIZE, STREAM, SEGMENT, OFFSET, ADDRESS)
REQUIRED = (BUCKET, SIZE, STREAM)  # never empty
A = {a: i for i, a in enumerate(ACTIONS)}  # action -> its code
SEGMENT_CODES = [A[a] for a in fmt.SEGMENT_ACTIONS]
BLOCK_CODES = [A[a] for a in fmt.BLOCK_ACTIONS]
GRAPH = POOLS.index(TracePool.GRAPH)

# what a trace's header may name: a capture's mode, or a recorded group (bcgprof record --trace)
TRACE_MODES: tuple[str, ...] = (*(m.value for m in Mode), *(g.value for g in RecordGroup))

_FIX = "re-capture the report to predict from it (show, gate and explain do not read it)"


WORD_BYTES = 16  # the longest word of any column fits


def _word_keys(words: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """A column's words as the two little-endian 64-bit numbers of their bytes padded with zeros
    (one row a word), and their lengths."""
    spelt = [w.encode() for w in words]
    assert all(len(w) <= WORD_BYTES for w in spelt), words
    keys = np.frombuffer(b"".join(w.ljust(WORD_BYTES, b"\0") for w in spelt), dtype="<u8")
    return keys.reshape(len(spelt), WORD_BYTES // 8), np.asarray([len(w) for w in spelt])


WORDS = {PHASE: _word_keys(PHASES), POOL: _word_keys(POOLS), ACTION: _word_keys(ACTIONS)}
# an eight-digit group of ASCII digits (the first digit in the lowest byte) as its value, by
# shifts and multiplications of whole 64-bit words
_ZEROS = np.uint64(0x3030303030303030)
_ABOVE_NINE = np.uint64(0x4646464646464646)  # a byte above "9" plus this reaches its top bit
_TOP_BITS = np.uint64(0x8080808080808080)
_SWAR = (
    (np.uint64(10), np.uint64(8), np.uint64(0x00FF00FF00FF00FF)),
    (np.uint64(100), np.uint64(16), np.uint64(0x0000FFFF0000FFFF)),
    (np.uint64(10000), np.uint64(32), np.uint64(0x00000000FFFFFFFF)),
)
_GROUP = np.uint64(10**8)
_KEEP = np.asarray([(1 << 8 * n) - 1 for n in range(9)], dtype=np.uint64)  # the n low bytes
_PAD = 24  # "0"s on each side of a piece: the longest cell read back from its end, a word ahead


def bad(path: Path, what: str) -> TraceError:
    """The one-line refusal of a trace file: what is wrong with it, and what to do."""
    return TraceError(f"{path}: {what}; {_FIX}")


@dataclass(frozen=True)
class TraceColumns:
    """One trace file, read and checked: its header's fields, and its rows as a table (module
    docstring)."""

    path: Path
    digest: str  # SHA-256 of the file's bytes
    head: dict
    table: np.ndarray  # rows x COLUMNS, int64


# ---------------------------------------------------------------- the stream


def read_columns(path: Path) -> TraceColumns:
    """Read and check one trace file within its caps (module docstring)."""
    raw = read_bytes(path)
    return parse(Path(path), io.BytesIO(raw), hashlib.sha256(raw).hexdigest())


def read_bytes(path: Path) -> bytes:
    """The compressed file, if it is a regular file within ``MAX_TRACE_BYTES`` (refused before a
    byte is read otherwise)."""
    from bcgprof.inputs import Refused, open_capped_bytes

    path = Path(path)
    cap = fmt.MAX_TRACE_BYTES
    try:
        with open_capped_bytes(path, cap) as f:  # a regular file only: a FIFO would block a read
            raw = f.read(cap + 1)
    except Refused as r:
        what = {
            "missing": "is missing",
            "unreadable": f"cannot be read ({r.detail})",
            "not regular": f"is {r.detail}, not a regular file",
            "too large": f"{r.size} bytes, more than the {cap} a trace may have ({caps()})",
        }[r.reason]
        raise bad(path, what) from None
    except OSError as e:
        raise bad(path, f"cannot be read ({e.strerror or e})") from None
    if len(raw) > cap:  # grew since it was opened
        raise bad(path, f"more than the {cap} bytes a trace may have ({caps()})")
    return raw


def caps() -> str:
    """The caps, as every refusal for size states them."""
    return (
        f"a trace may hold {fmt.MAX_TRACE_BYTES >> 20} MiB compressed, "
        f"{fmt.MAX_TEXT_BYTES >> 20} MiB of text "
        f"and {fmt.MAX_ROWS:,} rows"
    )


def inflate_chunks(raw: IO[bytes], path: Path) -> Iterator[bytes]:
    """The file's text, at most :data:`CHUNK` bytes at a time; refused as soon as it passes
    ``MAX_TEXT_BYTES`` or holds more than ``MAX_ROWS`` rows (so at most that much is ever inflated).
    Gzip members are read one after another, as every gzip reader does."""
    most, rows = fmt.MAX_TEXT_BYTES, fmt.MAX_ROWS
    size = lines = 0
    inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
    pending, started = b"", False
    try:
        while True:
            if not pending:
                pending = raw.read(INPUT)
                if not pending:
                    break
                started = True
            text = inflater.decompress(pending, CHUNK)
            pending = inflater.unconsumed_tail
            if inflater.eof:  # the member ended: what follows starts the next one
                pending = inflater.unused_data + pending
                inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
                started = bool(pending)
            if text:
                size += len(text)
                lines += text.count(b"\n")
                if size > most:
                    raise bad(path, f"more than {most} bytes uncompressed ({caps()})")
                if lines > rows + 2:  # the header and the column line, then one line a row
                    raise bad(path, f"more than {rows} rows ({caps()})")
                yield text
    except zlib.error as e:
        raise bad(path, f"cannot be read as gzip ({printable(str(e), 80)})") from None
    except OSError as e:
        raise bad(path, f"cannot be read as gzip ({type(e).__name__})") from None
    if started:
        raise bad(path, "cannot be read as gzip (EOFError)")  # a member cut short


def parse(path: Path, raw: IO[bytes], digest: str = "") -> TraceColumns:
    """Inflate ``raw`` (a gzip stream) and parse its text, piece by piece (module docstring)."""
    chunks = inflate_chunks(raw, path)
    buffer = bytearray()
    lines: list[bytes] = []
    for chunk in chunks:  # the header line and the column line
        buffer += chunk
        while len(lines) < 2 and b"\n" in buffer:
            end = buffer.index(b"\n")
            lines.append(bytes(buffer[:end]))
            del buffer[: end + 1]
        if len(lines) == 2:
            break
        if len(buffer) > MAX_HEADER_BYTES and not lines:
            raise bad(path, f"the header line is longer than {MAX_HEADER_BYTES} bytes")
    if len(lines) < 2 and buffer:
        lines.append(bytes(buffer))
        buffer = bytearray()
    head = _header(path, lines[0] if lines else b"")
    if len(lines) < 2 or lines[1] != ",".join(COLUMNS).encode():
        raise bad(path, f"line 2 is not the column header {','.join(COLUMNS)}")
    known = np.unique(np.asarray(head["buckets"], dtype=np.int64))
    # the whole text first (within the caps), so that a file over them costs no parsing
    buffer += b"".join(chunks)
    if buffer and not buffer.endswith(b"\n"):
        buffer += b"\n"
    rows = buffer.count(b"\n")  # one a line, each ending with its newline
    if rows > fmt.MAX_ROWS:
        raise bad(path, f"more than {fmt.MAX_ROWS} rows ({caps()})")
    # the text once, with "0"s on both sides: a cell's bytes before or after it can be read (and
    # masked) anywhere, so that each piece is read in place
    size = len(buffer)
    padded = np.empty(size + 2 * _PAD, dtype=np.uint8)
    padded[:_PAD] = padded[_PAD + size :] = ord("0")
    padded[_PAD : _PAD + size] = np.frombuffer(buffer, dtype=np.uint8)
    del buffer
    # every eight bytes from each offset, as one little-endian number
    eights = np.ndarray((len(padded) - 7,), dtype="<u8", buffer=padded, strides=(1,))
    text = padded[_PAD : _PAD + size]
    # column by column (each column's cells side by side): what reads the table reads columns
    table = np.empty((rows, len(COLUMNS)), dtype=np.int64, order="F")
    count = at = 0
    while at < size:
        # whole lines, one at least
        cut = _line_end(text, min(at + PIECE, size), at) or _line_end(text, size, at)
        count += _piece(path, text, eights, at, cut, count, table, known)
        at = cut
    check_table(path, table)
    device = head.get("device", 0)
    if isinstance(device, bool) or not isinstance(device, int) or not 0 <= device <= MAX_VALUE:
        raise bad(
            path, f"its header's device must be a device index, got {printable(repr(device), 40)}"
        )
    return TraceColumns(path=path, digest=digest, head=head, table=table)


def _header(path: Path, first: bytes) -> dict:
    try:
        line = first.decode("utf-8")
    except UnicodeDecodeError:
        raise bad(path, "not UTF-8 text") from None
    if not line.startswith("#"):
        raise bad(path, "the first line is not the trace header")
    try:
        head = json.loads(line[1:])
    except (json.JSONDecodeError, RecursionError):
        raise bad(path, "the header is not JSON") from None
    if not isinstance(head, dict) or head.get("format") != fmt.FORMAT:
        raise bad(path, f"not a {fmt.FORMAT} file")
    if head.get("version") != VERSION:
        raise bad(
            path,
            f"trace format version {head.get('version')!r}; this bcgprof reads version {VERSION}",
        )
    if head.get("mode") not in TRACE_MODES:
        raise bad(path, f"unknown mode {head.get('mode')!r} in the header")
    for name in ("buckets", "incomplete"):
        value = head.get(name)
        if not isinstance(value, list) or not all(
            isinstance(b, int) and not isinstance(b, bool) and 0 < b <= MAX_VALUE for b in value
        ):
            raise bad(path, f"header field {name} is not a list of positive bucket sizes")
    pool = head.get("pool")
    if not (isinstance(pool, list) and len(pool) == 2 and all(isinstance(p, int) for p in pool)):
        raise bad(path, "header field pool is not two integers")
    if not isinstance(head.get("settings"), dict):
        raise bad(path, "header field settings is not an object")
    return head


# ---------------------------------------------------------------- one piece of rows


def _line_end(text: np.ndarray, stop: int, start: int) -> int:
    """Just after the last newline of ``text[start:stop]`` (0 when it holds none)."""
    found = np.flatnonzero(text[start:stop] == ord("\n"))
    return start + int(found[-1]) + 1 if len(found) else 0


def _piece(
    path: Path,
    text: np.ndarray,
    eights: np.ndarray,
    begin: int,
    end: int,
    row: int,
    out: np.ndarray,
    known: np.ndarray,
) -> int:
    """The rows of ``text[begin:end]`` (whole lines, the first the table's ``row``) into ``out``
    from that row on; how many. ``eights``: the text (with :data:`_PAD` "0"s on both sides) read
    from every offset. A
    line is accepted as the writer writes it: ten cells, each numeric one at most :data:`DIGITS`
    ASCII digits (some never empty), each word one of its column's words; any other is refused by
    :func:`_refuse_line`. A word cell is compared whole with each of its column's words (its bytes
    as two 64-bit numbers), a numeric cell's bytes are checked to be digits eight at a time
    (:func:`_integers`): with its ten separators, every byte of a row is checked."""
    first = row + 3  # its line in the file (after the header and the column line)
    u = text[begin:end]
    delims = np.flatnonzero((u == ord(",")) | (u == ord("\n")))
    # every line ends with one (the caller makes sure)
    newline = np.flatnonzero(u[delims] == ord("\n"))
    cells = len(COLUMNS)
    shape = newline != np.arange(cells - 1, cells * len(newline), cells)
    if shape.any():  # a line without ten cells
        line = int(np.argmax(shape))
        start = int(delims[newline[line - 1]]) + 1 if line else 0
        _refuse_line(path, u.tobytes(), start, first, known)
    ends = delims.reshape(-1, cells)
    starts = np.empty_like(ends)
    flat = starts.reshape(-1)
    flat[0], flat[1:] = 0, delims[:-1] + 1
    lengths = ends - starts
    wrong = np.zeros(len(ends), dtype=bool)
    table = out[row : row + len(ends)]
    offset = begin + _PAD  # of the piece in the padded text
    for c, (keys, sizes) in WORDS.items():
        length = lengths[:, c]
        at = starts[:, c] + offset
        head8 = _word(eights, at) & _KEEP[np.clip(length, 0, 8)]
        tail8 = _word(eights, at + 8) & _KEEP[np.clip(length - 8, 0, 8)]
        code = np.full(len(ends), -1, dtype=np.int64)
        for i, (first8, next8) in enumerate(keys):
            code[(head8 == first8) & (tail8 == next8) & (length == sizes[i])] = i
        wrong |= code < 0
        table[:, c] = code
    high = np.zeros(len(ends), dtype=bool)  # a value above MAX_VALUE
    for c in NUMBERS:
        length = lengths[:, c]
        wrong |= length > DIGITS
        if c in REQUIRED:
            wrong |= length == 0
        value = _integers(eights, ends[:, c] + offset, np.minimum(length, DIGITS), wrong)
        high |= value > np.uint64(MAX_VALUE)
        # values above 2**63 are refused below, whatever they become here
        column = value.astype(np.int64)
        column[length == 0] = -1
        table[:, c] = column
    wrong |= high | (table[:, BUCKET] < 1) | ~np.isin(table[:, BUCKET], known)
    if wrong.any():
        line = int(np.argmax(wrong))
        _refuse_line(path, u.tobytes(), int(starts[line, 0]), first, known)
    return len(table)


def _word(eights: np.ndarray, at: np.ndarray) -> np.ndarray:
    """The eight bytes from each offset ``at`` of the padded text (``eights``: the text's bytes
    read from every offset as a little-endian number), as numbers."""
    return eights[at]


def _integers(
    eights: np.ndarray, ends: np.ndarray, lengths: np.ndarray, wrong: np.ndarray
) -> np.ndarray:
    """Each cell's digits (the ``lengths`` bytes before ``ends``, offsets in the padded text) as an
    integer: read right-aligned in groups of eight bytes, the bytes before the cell made "0"s, each
    group turned into its value by whole-word arithmetic. A cell with a byte that is not an ASCII
    digit is marked in ``wrong`` (its value is then some number): a byte is a digit exactly when
    neither it, nor it plus 0x46, nor it less 0x30 has its top bit set (a byte below "0" borrows
    from the next, which only ever marks a cell already marked; one from 0xba up carries out of
    its byte, which is marked by its own top bit)."""
    groups = -(-int(lengths.max(initial=0)) // 8)
    value = np.zeros(len(ends), dtype=np.uint64)
    for k in range(groups, 0, -1):  # the group ending 8 (k - 1) bytes before the cell's end
        word = _word(eights, ends - 8 * k)
        before = _KEEP[8 - np.clip(lengths - 8 * (k - 1), 0, 8)]  # its bytes before the cell
        word = (word & ~before) | (_ZEROS & before)
        wrong |= ((word | (word + _ABOVE_NINE) | (word - _ZEROS)) & _TOP_BITS) != 0
        word = word - _ZEROS
        for times, shift, mask in _SWAR:
            word = (word * times + (word >> shift)) & mask
        value = value * _GROUP + word
    return value


def _refuse_line(path: Path, text: bytes, start: int, first: int, known: np.ndarray) -> None:
    """Refuse the line of ``text`` starting at ``start``, which the fast reading did not accept."""
    number = first + text.count(b"\n", 0, start)
    end = text.find(b"\n", start)
    line = text[start : end if end >= 0 else len(text)]
    try:
        cells = line.decode("utf-8").split(",")
    except UnicodeDecodeError:
        raise bad(path, "not UTF-8 text") from None
    if len(cells) != len(COLUMNS):
        raise bad(path, f"line {number}: {len(cells)} values for {len(COLUMNS)} columns")
    if cells[1] not in PHASES or cells[2] not in POOLS or cells[3] not in ACTIONS:
        raise bad(
            path,
            f"line {number}: unknown phase, pool or action ({cells[1][:20]!r}, {cells[2][:20]!r}, "
            f"{cells[3][:20]!r})",
        )
    bucket = _int(path, number, "bucket", cells[0], lo=1)
    if bucket not in set(known.tolist()):
        raise bad(path, f"line {number}: bucket {bucket} is not in the header's buckets")
    for c in range(ID, len(COLUMNS)):
        _int(path, number, COLUMNS[c], cells[c], optional=c not in REQUIRED)
    # not reached: a cell above is refused
    raise bad(path, f"line {number} is not a row of the trace")


def _int(
    path: Path, line: int, name: str, raw: str, optional: bool = False, lo: int = 0
) -> Optional[int]:
    if raw == "" and optional:
        return None
    try:
        value = int(raw)
    except ValueError:
        raise bad(path, f"line {line}, column {name}: {raw[:30]!r} is not an integer") from None
    if not lo <= value <= MAX_VALUE:
        raise bad(path, f"line {line}, column {name}: {value} is out of range")
    # a sign, spaces or underscores: not what the writer writes
    if not (raw.isascii() and raw.isdigit()):
        raise bad(path, f"line {line}, column {name}: {raw[:30]!r} is not an integer")
    if len(raw) > DIGITS:
        raise bad(path, f"line {line}, column {name}: {raw[:30]!r} has more than {DIGITS} digits")
    return value


# ---------------------------------------------------------------- the rules across rows


def check_table(path: Path, table: np.ndarray) -> None:
    """What the replay relies on, on whole columns: allocation and segment numbers are unique, frees
    name earlier allocations, block rows of the graph pool name an earlier segment of the graph pool
    (and a graph-pool allocation its offset there), a bucket's rows are one run. The first row
    breaking a rule is named (and of its rules, the first in that order)."""
    if not len(table):
        return
    found: list[tuple[int, int, str]] = []  # (row, rank within the row, what)
    bucket, pool, action, ident = table[:, BUCKET], table[:, POOL], table[:, ACTION], table[:, ID]
    runs = np.flatnonzero(np.r_[True, bucket[1:] != bucket[:-1]])
    again = _repeats(bucket[runs])
    if len(again):
        row = int(runs[again[0]])
        found.append((row, 0, f"bucket {bucket[row]}'s rows are not contiguous"))
    allocs = np.flatnonzero(action == A[Action.ALLOC])
    numbers = ident[allocs]
    fresh = np.r_[allocs[numbers < 0], allocs[_repeats(numbers)]]
    if len(fresh):
        found.append((int(fresh.min()), 1, "an alloc without a new allocation number"))
    frees = np.flatnonzero(
        np.isin(action, [A[Action.FREE_REQUESTED], A[Action.FREE_COMPLETED]]) & (ident >= 0)
    )
    unknown = frees[~_seen_before(numbers, allocs, ident[frees], frees)]
    if len(unknown):
        row = int(unknown[0])
        found.append((row, 1, f"frees allocation {ident[row]}, which no earlier row allocated"))
    segments = np.flatnonzero(np.isin(action, SEGMENT_CODES))
    incomplete = segments[
        (ident[segments] < 0) | (table[segments, ADDRESS] < 0) | (table[segments, SIZE] <= 0)
    ]
    if len(incomplete):
        found.append((int(incomplete[0]), 1, "a segment row needs its number, address and size"))
    opened = segments[table[segments, ACTION] != A[Action.SEGMENT_FREE]]
    twice = opened[_repeats(ident[opened])]
    if len(twice):
        row = int(twice[0])
        found.append((row, 2, f"segment {ident[row]} appears twice"))
    first_open = opened[
        np.sort(np.unique(ident[opened], return_index=True)[1])
    ]  # each number's first row
    graph_open = first_open[pool[first_open] == GRAPH]
    blocks = np.flatnonzero((pool == GRAPH) & np.isin(action, BLOCK_CODES))
    outside = blocks[~_seen_before(ident[graph_open], graph_open, table[blocks, SEGMENT], blocks)]
    if len(outside):
        row = int(outside[0])
        segment = table[row, SEGMENT]
        found.append(
            (
                row,
                3,
                f"a graph-pool block in segment {segment if segment >= 0 else None}, "
                "not a graph-pool segment",
            )
        )
    unplaced = allocs[(pool[allocs] == GRAPH) & (table[allocs, OFFSET] < 0)]
    if len(unplaced):
        found.append(
            (int(unplaced[0]), 4, "a graph-pool allocation without its offset in its segment")
        )
    if found:
        row, _, what = min(found)
        raise bad(path, f"line {row + 3}: {what}")


def _repeats(values: np.ndarray) -> np.ndarray:
    """Positions (ascending) of the values that an earlier position already holds."""
    order = np.argsort(values, kind="stable")
    same = values[order][1:] == values[order][:-1]
    return np.sort(order[1:][same])


def _seen_before(
    numbers: np.ndarray, rows: np.ndarray, wanted: np.ndarray, at: np.ndarray
) -> np.ndarray:
    """For each ``wanted`` number (asked at row ``at``): whether ``numbers`` (held at ``rows``)
    holds it at an earlier row."""
    if not len(numbers):
        return np.zeros(len(wanted), dtype=bool)
    unique, first = np.unique(numbers, return_index=True)
    where = np.minimum(np.searchsorted(unique, wanted), len(unique) - 1)
    return (unique[where] == wanted) & (rows[first[where]] < at)


# ---------------------------------------------------------------- rows and tables


def table_of(rows: Sequence[TraceRow]) -> np.ndarray:
    """A trace's rows (as :class:`~bcgprof.report.traces.TraceRow`) as a table."""
    phase, pool, action = (
        {w: i for i, w in enumerate(words)} for words in (PHASES, POOLS, ACTIONS)
    )
    table = np.array(
        [
            (
                r.bucket,
                phase[r.phase],
                pool[r.pool],
                action[r.action],
                -1 if r.id is None else r.id,
                r.size,
                r.stream,
                -1 if r.segment is None else r.segment,
                -1 if r.offset is None else r.offset,
                -1 if r.address is None else r.address,
            )
            for r in rows
        ],
        dtype=np.int64,
    )
    return table.reshape(-1, len(COLUMNS))


def rows_of(table: np.ndarray) -> list[TraceRow]:
    """The table's rows as :class:`~bcgprof.report.traces.TraceRow` (an empty cell as None)."""
    return [
        TraceRow(
            b,
            PHASES[p],
            POOLS[q],
            ACTIONS[a],
            None if i < 0 else i,
            s,
            st,
            None if g < 0 else g,
            None if o < 0 else o,
            None if d < 0 else d,
        )
        for b, p, q, a, i, s, st, g, o, d in table.tolist()
    ]
