"""The capture runner's process protocol and final status, on a machine without a GPU."""

import torch
from rich.console import Console

from bcgprof.report import BucketRecord, RunInfo, ReportWriter, read_report
from bcgprof.runner import CaptureOptions, _finish, _run_mode_subprocess


def test_a_mode_process_that_fails_reports_one_error_event_and_keeps_its_log(tmp_path):
    out = tmp_path / "report"
    ReportWriter(out, RunInfo(model="gpt-oss-20b"))
    events = []
    opts = CaptureOptions(buckets="4,8", modes=["shared"], device="cuda:0")
    code = _run_mode_subprocess(opts, "shared", out, events.append)
    assert code != 0
    errors = [e for e in events if e.get("event") == "error"]
    assert len(errors) == 1 and "\n" not in errors[0]["message"]
    if not torch.cuda.is_available():
        assert (out / "shared.log").read_text().strip()  # the traceback went to the log, not the screen


def test_finish_marks_a_run_with_a_failed_mode_partial(tmp_path):
    out = tmp_path / "report"
    writer = ReportWriter(out, RunInfo(model="m", modes=["per-bucket", "shared"]))
    writer.append(BucketRecord(mode="per-bucket", bucket=8, order=0, status="ok"))
    writer.append(BucketRecord(mode="per-bucket", bucket=4, order=1, status="oom", detail="out of memory"))
    opts = CaptureOptions(modes=["per-bucket", "shared"])
    code = _finish(out, opts, {"per-bucket": 3, "shared": 0}, False, Console(file=open("/dev/null", "w")))
    report = read_report(out)
    assert code == 1 and report.run.status == "partial" and "per-bucket: exit 3" in report.run.message
    assert report.run.ended_at


def test_finish_marks_an_interrupted_run(tmp_path):
    out = tmp_path / "report"
    ReportWriter(out, RunInfo(model="m", modes=["per-bucket"]))
    code = _finish(out, CaptureOptions(modes=["per-bucket"]), {}, True, Console(file=open("/dev/null", "w")))
    assert code == 130 and read_report(out).run.status == "interrupted"
