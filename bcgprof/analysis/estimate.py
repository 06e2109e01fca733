"""Analytic output-buffer arithmetic: what the captured outputs alone must retain. Not a
measurement.

Each bucket's forward returns a ``[rows, hidden_size]`` tensor, ``rows`` being the
bucket (tokens for prefill, sequences of one token each for decode). Without
shared output buffers every bucket keeps its own output in the graph pool, so the
outputs retain the sum over buckets; with one shared buffer of the largest bucket's
size, they retain that buffer alone. Intermediates, graph executables and allocator
rounding are not part of this figure: `bcgprof capture` measures those. The difference of
the two totals is not the saving to expect from sharing: the graph pool reuses freed
memory across buckets, so the device memory that sharing saves is usually much less.
"""

from __future__ import annotations

from dataclasses import dataclass

from bcgprof import dtypes
from bcgprof.spec import ModelSpec

LABEL = "analytic, not measured"


@dataclass
class BucketEstimate:
    bucket: int
    rows: int
    output_bytes: int  # rows x hidden_size x dtype bytes


@dataclass
class Estimate:
    model: str
    hidden_size: int
    dtype: str
    dtype_bytes: int
    phase: str
    buckets: list[BucketEstimate]
    per_bucket_total_bytes: int  # every bucket keeps its own output
    shared_total_bytes: int  # one buffer of the largest bucket's size
    label: str = LABEL

    @property
    def saved_bytes(self) -> int:
        """Output bytes per-bucket mode retains beyond shared mode. Not the saving a capture
        measures: the graph pool reuses memory across buckets, so sharing saves less device memory
        than this."""
        return self.per_bucket_total_bytes - self.shared_total_bytes

    @property
    def saved_pct(self) -> float:
        return (
            100.0 * self.saved_bytes / self.per_bucket_total_bytes
            if self.per_bucket_total_bytes
            else 0.0
        )

    def to_json(self) -> dict:
        return {
            "kind": "estimate",
            "label": self.label,
            "model": self.model,
            "hidden_size": self.hidden_size,
            "dtype": self.dtype,
            "dtype_bytes": self.dtype_bytes,
            "phase": self.phase,
            "buckets": [
                {"bucket": b.bucket, "rows": b.rows, "output_bytes": b.output_bytes}
                for b in self.buckets
            ],
            "per_bucket_total_bytes": self.per_bucket_total_bytes,
            "shared_total_bytes": self.shared_total_bytes,
            "output_difference_bytes": self.saved_bytes,  # outputs only: not the measured saving
        }


def estimate_output_buffers(
    spec: ModelSpec, buckets: list[int], *, phase: str = "prefill", dtype: str | None = None
) -> Estimate:
    """Per-bucket output bytes and the retained totals in per-bucket and shared mode."""
    dtype = dtypes.canonical(dtype or spec.dtype)
    width = dtypes.dtype_bytes(dtype)
    # One output row per token: a prefill bucket is a token count, a decode bucket a batch of
    # one-token sequences.
    rows = [BucketEstimate(b, b, b * spec.hidden_size * width) for b in sorted(buckets)]
    return Estimate(
        model=spec.name,
        hidden_size=spec.hidden_size,
        dtype=dtype,
        dtype_bytes=width,
        phase=phase,
        buckets=rows,
        per_bucket_total_bytes=sum(r.output_bytes for r in rows),
        shared_total_bytes=max((r.output_bytes for r in rows), default=0),
    )
