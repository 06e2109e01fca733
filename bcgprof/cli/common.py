"""What more than one command takes: help texts of shared options, and the bucket-list option.

A module that registers no command, so that a command's module can import it without
loading (and registering) another command's module.
"""

from __future__ import annotations

from typing import Optional

from bcgprof.errors import BcgprofError

REPORT_HELP = "Report directory (holding buckets.csv, summary.csv and run.json)."
FORMAT_HELP = (
    "table: tables in MiB/GiB, drawn in boxes on a terminal and as aligned plain text (no box "
    "characters "
    "or colour, COLUMNS wide, 220 by default) into a pipe or file (TTY_COMPATIBLE=1 or "
    "FORCE_COLOR=1 "
    "asks for the boxes); markdown: the same as GitHub tables; json (strict JSON, bytes as "
    "integers: the "
    "documented contract) and csv: raw values (csv: one block per table, each headed '# name')."
)
WIDE_HELP = (
    "Tables: every column (wider than 100 columns). By default tables show the key columns and "
    "as many others as the terminal fits, never cutting a number."
)
BUCKETS_HELP = (
    "Bucket spec: comma list (4,8,16), inclusive range START:STOP:STEP (512:4096:512), or a preset "
    "(sglang-prefill: token counts, capped by --max-tokens, 74 buckets at 16384; sglang-decode: "
    "batch "
    "sizes, capped by --max-bs). Entries may be mixed; at most 4096 buckets of at most 1048576 "
    "each. "
    "Default: the phase's preset."
)


def bucket_list(buckets: Optional[str], phase: str, max_tokens: int, max_bs: int) -> list[int]:
    """The buckets to use; --buckets '' is an error, not the default preset."""
    from bcgprof.buckets import check_caps, default_bucket_spec, parse_buckets

    check_caps(max_tokens, max_bs)
    if buckets is not None and not buckets.strip():
        raise BcgprofError(
            "--buckets is empty; give sizes like 4,8,16, a range 512:4096:512 or a preset "
            "(sglang-prefill, sglang-decode), or leave --buckets out for the phase's preset"
        )
    return parse_buckets(
        buckets if buckets is not None else default_bucket_spec(phase),
        max_tokens=max_tokens,
        max_bs=max_bs,
    )
