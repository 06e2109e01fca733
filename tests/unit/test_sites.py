"""Pool-peak attribution from a recorded allocator history, on synthetic snapshots (no GPU)."""

from __future__ import annotations

import torch
from torch import nn

from bcgprof.measure import sites
from bcgprof.measure.sites import MODULE_FRAME, NO_SITE, pool_peak

POOL = (0, 1)
OTHER = (0, 0)


def _source(tmp_path):
    """A fake model file whose lines the site names are read from."""
    model_dir = tmp_path / "bcgprof" / "models"
    model_dir.mkdir(parents=True)
    path = model_dir / "moe.py"
    path.write_text(
        "def fused(x):\n    cache13 = x.new_empty(10)\n    out = work(x)\n    return out\n"
    )
    return str(path)


def _frames(path, line, module):
    return [
        {"filename": path, "line": line, "name": "fused"},
        {"filename": "/lib/torch/nn/modules/module.py", "line": 1, "name": "_call_impl"},
        {"filename": "/x/sites.py", "line": 1, "name": MODULE_FRAME + module},
        {"filename": "/x/sites.py", "line": 1, "name": MODULE_FRAME + "model"},
    ]


def _snapshot(path):
    seg_a, seg_b = 1 << 20, 8 << 20
    events = [
        # before the pool existed, the same addresses were used by an eager allocation: ignored
        {"action": "alloc", "addr": seg_a, "size": 4096, "frames": []},
        {"action": "free_requested", "addr": seg_a, "size": 4096},
        {"action": "segment_alloc", "addr": seg_a, "size": 2 << 20},
        {
            "action": "alloc",
            "addr": seg_a,
            "size": 1000,
            "frames": _frames(path, 2, "layers.0.mlp.experts"),
        },
        {
            "action": "alloc",
            "addr": seg_a + 1024,
            "size": 500,
            "frames": _frames(path, 3, "layers.0.mlp.experts"),
        },
        {"action": "free_requested", "addr": seg_a + 1024, "size": 500},
        {"action": "free_completed", "addr": seg_a + 1024, "size": 500},
        {"action": "segment_alloc", "addr": seg_b, "size": 2 << 20},
        {
            "action": "alloc",
            "addr": seg_b,
            "size": 3000,
            "frames": _frames(path, 2, "layers.1.mlp.experts"),
        },
        {
            "action": "alloc",
            "addr": seg_b + 4096,
            "size": 200,
            "frames": [{"filename": "/lib/torch/x.py", "line": 1, "name": "f"}],
        },
        # the peak is here: 1000 + 3000 + 200 = 4200
        {"action": "free_requested", "addr": seg_b, "size": 3000},
        {
            "action": "alloc",
            "addr": seg_b,
            "size": 100,
            "frames": _frames(path, 3, "layers.1.mlp.experts"),
        },
        # an allocation in another pool's segment does not count
        {"action": "alloc", "addr": 64 << 20, "size": 999999, "frames": []},
    ]
    segments = [
        {
            "address": seg_a,
            "total_size": 2 << 20,
            "segment_pool_id": POOL,
            "device": 0,
            "blocks": [],
        },
        {
            "address": seg_b,
            "total_size": 2 << 20,
            "segment_pool_id": POOL,
            "device": 0,
            "blocks": [],
        },
        {
            "address": 64 << 20,
            "total_size": 2 << 20,
            "segment_pool_id": OTHER,
            "device": 0,
            "blocks": [],
        },
    ]
    return {"segments": segments, "device_traces": [events]}


def test_the_peak_its_sites_and_the_slack_add_up_to_the_pool(tmp_path):
    path = _source(tmp_path)
    peak = pool_peak(_snapshot(path), POOL)
    assert peak.pool_bytes == 4 << 20
    assert peak.peak_live_bytes == 4200
    assert peak.slack_bytes == (4 << 20) - 4200
    assert peak.peak_live_bytes + peak.slack_bytes == peak.pool_bytes
    got = {s.site: (s.bytes, s.blocks) for s in peak.sites}
    # layer numbers fold into N, the role is the function and the variable its line assigns
    assert got == {"layers.N.mlp.experts: fused (cache13)": (4000, 2), NO_SITE: (200, 1)}
    assert sum(s.bytes for s in peak.sites) == peak.peak_live_bytes
    assert [s.bytes for s in peak.sites] == sorted((s.bytes for s in peak.sites), reverse=True)


def test_a_pool_that_existed_before_the_recording_counts_from_the_start(tmp_path):
    path = _source(tmp_path)
    snap = _snapshot(path)
    snap["device_traces"][0] = [
        e for e in snap["device_traces"][0][3:] if e["action"] != "segment_alloc"
    ]
    peak = pool_peak(snap, POOL)
    assert peak.peak_live_bytes == 4200


def test_an_empty_history_has_no_live_bytes():
    snap = {
        "segments": [{"address": 0, "total_size": 2 << 20, "segment_pool_id": POOL, "blocks": []}],
        "device_traces": [],
    }
    peak = pool_peak(snap, POOL)
    assert (peak.pool_bytes, peak.peak_live_bytes, peak.slack_bytes, peak.sites) == (
        2 << 20,
        0,
        2 << 20,
        [],
    )


def test_module_frames_name_every_forward_by_its_path_and_are_undone():
    import traceback

    seen = []

    class Inner(nn.Module):
        def forward(self, x):
            seen.append([f.name for f in traceback.extract_stack()])
            return x + 1

    class Outer(nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = nn.ModuleList([Inner(), Inner()])

        def forward(self, x):
            for layer in self.layers:
                x = layer(x)
            return x

    model = Outer()
    with sites.module_frames(model):
        assert model(torch.zeros(1)).item() == 2
    assert MODULE_FRAME + "layers.1" in seen[1] and MODULE_FRAME + "model" in seen[1]
    assert MODULE_FRAME + "layers.0" in seen[0] and MODULE_FRAME + "layers.1" not in seen[0]
    assert not any("forward" in vars(m) for m in model.modules())  # the patch is gone
    seen.clear()
    model(torch.zeros(1))
    assert not any(name.startswith(MODULE_FRAME) for name in seen[0])


def test_frames_listed_outermost_first_name_the_same_site(tmp_path):
    path = _source(tmp_path)
    snap = _snapshot(path)
    for e in snap["device_traces"][0]:
        if e.get("frames"):
            e["frames"] = e["frames"][::-1]
    got = {s.site for s in pool_peak(snap, POOL).sites}
    assert got == {"layers.N.mlp.experts: fused (cache13)", NO_SITE}


def test_a_private_helper_frame_gives_way_to_its_caller(tmp_path):
    path = _source(tmp_path)
    snap = _snapshot(path)
    helper = {"filename": path.replace("moe.py", "alloc.py"), "line": 1, "name": "_empty"}
    for e in snap["device_traces"][0]:
        if e.get("frames"):
            e["frames"] = [helper] + e["frames"]
    got = {s.site for s in pool_peak(snap, POOL).sites}
    assert got == {"layers.N.mlp.experts: fused (cache13)", NO_SITE}
