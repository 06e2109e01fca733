"""bcgprof: profile the GPU memory of breakable CUDA graph capture across size buckets."""

from bcgprof.version import __version__

__all__ = ["__version__"]


def __getattr__(name):
    # The capture API pulls in torch; keep `import bcgprof` (and the CLI start) light.
    if name in ("capture_buckets", "CaptureResult"):
        from bcgprof.measure import capture

        return getattr(capture, name)
    # a report's tables as typed pandas DataFrames (bcgprof.report.frames)
    if name == "read_frames":
        from bcgprof.report.frames import read_frames

        return read_frames
    if name == "read_report":  # read_frames under its old name, for one release
        return _read_report
    raise AttributeError(f"module 'bcgprof' has no attribute {name!r}")


def _read_report(path):
    """``bcgprof.read_frames`` under its old name, with a warning (``bcgprof.report.read_report`` is
    the reader that returns a Report)."""
    import warnings

    from bcgprof.report.frames import read_frames

    warnings.warn(
        "bcgprof.read_report is deprecated and will be removed in the next release; use "
        "bcgprof.read_frames for DataFrames, or bcgprof.report.read_report for a Report",
        FutureWarning,
        stacklevel=2,
    )
    return read_frames(path)
