"""bcgprof: profile the GPU memory of breakable CUDA graph capture across size buckets."""

from bcgprof.version import __version__

__all__ = ["__version__"]


def __getattr__(name):
    # The capture API pulls in torch; keep `import bcgprof` (and the CLI start) light.
    if name in ("capture_buckets", "CaptureResult"):
        from bcgprof.measure import capture

        return getattr(capture, name)
    if name == "read_report":  # a report's tables as typed pandas DataFrames (bcgprof.report.frames)
        from bcgprof.report.frames import read_report_tables

        return read_report_tables
    raise AttributeError(f"module 'bcgprof' has no attribute {name!r}")
