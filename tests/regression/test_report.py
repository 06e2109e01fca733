"""The report format's consistency checks on copies of a committed report (reports/gpt-oss-20b-h200)
edited by hand: sites that do not sum to their pool, derived figures that do not follow from their
readings. The format on hand-made reports: tests/unit/test_report.py."""

import pytest

from bcgprof.errors import ReportError
from bcgprof.report import read_report


def _edited(tmp_path, name, edit):
    """A copy of a committed report with ``edit`` (csv text -> csv text) applied to one of its
    files."""
    import shutil

    copy = tmp_path / "edited"
    shutil.copytree("reports/gpt-oss-20b-h200", copy)
    (copy / name).write_text(edit((copy / name).read_text()))
    return copy


def test_sites_that_do_not_sum_to_their_pool_are_refused(tmp_path):
    """Every site row twice: explain would show the floor's pool twice as large."""
    copy = _edited(tmp_path, "sites.csv", lambda t: t + "".join(t.splitlines(keepends=True)[1:]))
    with pytest.raises(ReportError, match="sum to .* but its pool in buckets.csv is"):
        read_report(copy)


@pytest.mark.parametrize(
    "column, says",
    [
        (
            "outside_pool_delta_bytes",
            "outside_pool_delta_bytes is not torch_reserved_delta_bytes less",
        ),
        ("non_torch_delta_bytes", "non_torch_delta_bytes is not device_used_delta_bytes less"),
        ("pool_live_delta_bytes", "do not sum to device_used_delta_bytes"),
    ],
)
def test_figures_that_do_not_follow_from_one_another_are_refused(tmp_path, column, says):
    """A capture writes each row's derived figures from the same readings; a row edited by hand
    (with the summary edited to match) would otherwise be gated and explained as measured."""
    import csv
    import io

    from bcgprof.report.codec import records_to_csv
    from bcgprof.report.schema import SummaryRecord
    from bcgprof.report.summaries import summarize

    def edit(text):
        rows = list(csv.DictReader(io.StringIO(text)))
        rows[5][column] = str(int(rows[5][column]) + (1 << 30))
        out = io.StringIO()
        writer = csv.DictWriter(out, fieldnames=list(rows[0]), lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
        return out.getvalue()

    copy = _edited(tmp_path, "buckets.csv", edit)
    from bcgprof.report.schema import BucketRecord
    from bcgprof.report.table import read_table

    records = read_table(copy / "buckets.csv", BucketRecord, 1 << 26).records
    (copy / "summary.csv").write_text(records_to_csv(summarize(records), SummaryRecord))
    with pytest.raises(ReportError, match=says):
        read_report(copy)
