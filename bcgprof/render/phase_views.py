"""The views of several phases in one pool: `show` of a schema-2 report (one row per mode, the
pair's pool after each phase against each phase captured alone, :mod:`bcgprof.analysis.phases`,
labelled measured), and `predict --after` (the pair predicted from each phase's traces,
:mod:`bcgprof.analysis.predict.pair`, labelled predicted). Nothing here decides anything."""

from __future__ import annotations

from typing import TYPE_CHECKING

from bcgprof.render.model import Column, Line, Sheet, View
from bcgprof.report_format import fmt_bytes

if TYPE_CHECKING:  # show loads neither the replay (predict's) nor more than it needs
    from bcgprof.analysis.phases import PhasePool
    from bcgprof.analysis.predict.pair import PairPrediction

TITLE = "phases in one pool (measured: the pair's process against each phase alone in its own)"


def _bytes(n) -> str:
    return "-" if n is None else fmt_bytes(n)


def _signed(n) -> str:
    return "-" if n is None else fmt_bytes(n, signed=True)


def phase_sheet(pools: list[PhasePool]) -> Sheet:
    """One row per mode: the pool after each phase of the pair, each phase alone, and what the
    pair costs beyond the larger phase alone (and saves against a pool per phase)."""
    phases = pools[0].phases if pools else []
    columns = [
        Column("mode", "mode", numeric=False, key_column=True),
        *(Column(f"after_{p}", f"pair after {p}", _bytes, drop=2) for p in phases[:-1]),
        Column("pair", "pair", _bytes, key_column=True),
        *(Column(f"alone_{p}", f"{p} alone", _bytes, key_column=True) for p in phases),
        Column("beyond", "pair beyond larger", _signed, key_column=True),
        Column("saved", "saved vs a pool per phase", _signed, drop=1),
    ]
    sheet = Sheet("phases", TITLE, columns)
    for pool in pools:
        row = {
            "mode": pool.mode,
            **{f"after_{p}": pool.after.get(p) for p in phases[:-1]},
            "pair": pool.pair_bytes,
            **{f"alone_{p}": pool.alone.get(p) for p in phases},
            "beyond": pool.beyond_larger_bytes,
            "saved": pool.saved_vs_pools_per_phase_bytes,
        }
        sheet.rows.append(row)
        missing = [p for p in phases if pool.alone.get(p) is None]
        if not pool.complete:
            sheet.notes.append(f"{pool.mode}: the pair did not finish; no pair figure")
        elif missing:
            sheet.notes.append(
                f"{pool.mode}: no finished capture of {', '.join(missing)} alone under the "
                "report (phase-<phase>); no comparison"
            )
    return sheet


def phase_lines(pools: list[PhasePool]) -> list[Line]:
    """One line per mode with a comparison: the pair against the larger phase alone."""
    lines = []
    for pool in pools:
        beyond, larger = pool.beyond_larger_bytes, pool.larger_alone_bytes
        if beyond is None or larger is None:
            continue
        which = max(pool.phases, key=lambda p: pool.alone[p] or 0)
        lines.append(
            Line(
                f"{pool.mode}: one pool of {' + '.join(pool.phases)} holds "
                f"{fmt_bytes(pool.pair_bytes)}, {fmt_bytes(beyond, signed=True)} beyond "
                f"{which} alone ({fmt_bytes(larger)}; measured)"
            )
        )
    return lines


def pair_prediction_view(prediction: PairPrediction) -> View:
    """`bcgprof predict --after`: per mode, each phase alone (its profile's replay) and the pair
    predicted, labelled so."""
    first, second = prediction.phases
    columns = [
        Column("mode", "mode", numeric=False, key_column=True),
        Column("first", f"{first} alone", _bytes, key_column=True),
        Column("second", f"{second} alone", _bytes, key_column=True),
        Column("pair", "pair (predicted)", _bytes, key_column=True),
        Column("beyond", "pair beyond larger", _signed, key_column=True),
        Column("saved", "saved vs a pool per phase", _signed, drop=1),
    ]
    sheet = Sheet(
        "pair",
        f"{first} then {second} in one pool (predicted, not measured: {second}'s traces replayed "
        f"into the pool {first}'s left)",
        columns,
    )
    for m in prediction.modes:
        sheet.rows.append(
            {
                "mode": m.mode,
                "first": m.first_alone_bytes,
                "second": m.second_alone_bytes,
                "pair": m.pair_bytes,
                "beyond": m.beyond_larger_bytes,
                "saved": m.saved_vs_pools_per_phase_bytes,
            }
        )
        if not m.exact:
            sheet.notes.append(f"{m.mode}: some frees of blocks allocated before recording")
        if m.other_placement_pair_bytes is not None:
            sheet.notes.append(
                f"{m.mode}: {fmt_bytes(m.other_placement_pair_bytes)} with new segments placed "
                "the other way (where the driver puts them decides)"
            )
    sheet.notes += prediction.notes
    return View(
        head=[Line(f": {prediction.model}", lead=f"{prediction.first} then {prediction.second}")],
        sheets=[sheet],
        foot=[Line(PAIR_CAVEAT)],
        data=prediction.to_json(),
    )


PAIR_CAVEAT = (
    "blocks the first phase frees after its last capture ended are in no trace: the prediction "
    "keeps them allocated, so the second phase has that much less room to reuse than in a process"
)
