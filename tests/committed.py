"""The committed reports' traced profiles, each read and prepared once per test session (helpers
only, no tests; tests/conftest.py hands them out as the ``committed_profiles`` and
``shared_profiles`` fixtures).

A prepared profile (:func:`bcgprof.analysis.predict.lists.bucket_profile`) replays its own list once
per mode the first time a mode is predicted, to check its traces against its report's pools, and
keeps every list it replayed after that. Preparing it in each module or command that predicts from
it repeats those replays: the largest profiles take tens of seconds each. Here each profile is
prepared the first time a test asks for it and shared by every later test, so its check runs once
per session. Predictions do not depend on what a profile replayed before (the replays it keeps are
only a cache), so sharing changes no result. Only reports under reports/ are shared: a test's own
copy, which it may damage, is prepared afresh."""

from __future__ import annotations

from pathlib import Path

from bcgprof.analysis.predict import advise
from bcgprof.analysis.predict import lists as predict
from bcgprof.analysis.predict.lists import BucketProfile
from bcgprof.report import Report, read_report

ROOT = Path(__file__).resolve().parents[1]
REPORTS = ROOT / "reports"


def _name(path: Path | str, base: Path = ROOT) -> str:
    """``reports/NAME`` for a committed report (absolute, or relative to ``base``), else ''."""
    resolved = (base / path).resolve()  # an absolute path stays itself; links are followed
    if REPORTS not in resolved.parents or not (resolved / "run.json").is_file():
        return ""
    return resolved.relative_to(ROOT).as_posix()


class CommittedProfiles:
    """``profiles("reports/gpt-oss-20b-h200-traced")`` (or the report's name, or its absolute path)
    -> (its report, its prepared profile), made once."""

    def __init__(self) -> None:
        self.prepared: dict[
            str, BucketProfile
        ] = {}  # reports/NAME -> profile, as calibrate.held_out keys them
        self.reports: dict[str, Report] = {}
        self._bucket_profile = predict.bucket_profile

    def __call__(self, name: str | Path) -> tuple[Report, BucketProfile]:
        key = _name(name) or _name(f"reports/{name}")
        assert key, f"{name} is not a committed report"
        if key not in self.prepared:
            self.reports[key] = read_report(ROOT / key)
            self.prepared[key] = self._bucket_profile(self.reports[key])
        return self.reports[key], self.prepared[key]

    def bucket_profile(self, report: Report) -> BucketProfile:
        """:func:`~bcgprof.analysis.predict.lists.bucket_profile`, shared for committed reports."""
        key = _name(report.path, Path.cwd()) if report.path else ""  # as the command read it
        if not key:
            return self._bucket_profile(report)
        return self(key)[1]

    def patch(self, monkeypatch) -> None:
        """Make the package's own calls (predict, advise, the CLI) use the shared profiles."""
        monkeypatch.setattr(predict, "bucket_profile", self.bucket_profile)
        monkeypatch.setattr(advise, "bucket_profile", self.bucket_profile)
