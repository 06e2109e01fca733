"""Errors that the CLI turns into one line and an exit code, never a traceback."""


class BcgprofError(Exception):
    """A problem the user can fix; the message says what is wrong and what to do."""

    exit_code = 2


class ModelConfigError(BcgprofError):
    pass


class BucketSpecError(BcgprofError):
    pass


class ReportError(BcgprofError):
    pass


class NoGPUError(BcgprofError):
    pass


class CaptureError(BcgprofError):
    exit_code = 1
