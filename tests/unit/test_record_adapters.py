"""bcgprof record's engine adapters as the engines capture now: size alternatives, the tensor a
cudagraph tree does not hold static, groups from a runner's bases, mode and draft worker, vLLM V2's
descriptor loop, a phase inside an estimate, and the rule that stops a server after its capture."""

from __future__ import annotations

import enum
from types import SimpleNamespace

import pytest

from bcgprof.record import adapters as table
from bcgprof.record.hook import _wrap
from bcgprof.record.logs import serving_engine
from bcgprof.record.merge import Merged
from bcgprof.record.rows import LineReader
from bcgprof.record.session import _capture_over, hook_skipping_flags

from helpers import stand_in_recorder

MODE = enum.Enum("CUDAGraphMode", "NONE PIECEWISE FULL")
FORWARD = enum.Enum("ForwardMode", "EXTEND DECODE TARGET_VERIFY")


def adapter(name: str, engine: str = "") -> table.Adapter:
    return next(a for a in table.ADAPTERS if a.name == name and (not engine or a.engine == engine))


def test_a_size_is_the_first_alternative_the_call_has():
    spec = adapter("capture_one_batch_size").size
    assert table.size_of(spec, {"self": None, "bs": 8}) == 8
    assert table.size_of(spec, {"self": None, "num_tokens": 512}) == 512  # piecewise runner
    assert table.size_of(spec, {"self": None, "num_seqs": 4}) == 4  # EAGLE's draft runner
    assert table.size_of(spec, {"self": None, "batch": object()}) is None  # two-batch overlap's
    a = table.parse_bucket_option("pkg.mod:Runner.capture:bs|desc.num_tokens")
    assert table.size_of(a.size, {"desc": SimpleNamespace(num_tokens=64)}) == 64


def test_a_compiled_functions_size_skips_the_inputs_its_tree_holds_static():
    """cudagraph trees lift parameters into the inputs: the size is the first tensor the tree does
    not hold static, not a weight's leading dimension."""
    weight, batch = SimpleNamespace(shape=(4096, 4096)), SimpleNamespace(shape=(48, 4096))
    manager = SimpleNamespace(ids_to_funcs={7: SimpleNamespace(static_input_idxs=[0])})
    spec = adapter("CUDAGraphTreeManager.record_function").size
    arguments = {"self": manager, "new_inputs": [weight, batch], "function_id": 7}
    assert table.size_of(spec, arguments) == 48
    assert table.size_of("new_inputs[0]", arguments) == 4096  # what the first tensor gives
    # a manager that does not say: the first tensor
    assert table.size_of(spec, {"self": None, "new_inputs": [batch], "function_id": 7}) == 48


def test_sglang_groups_follow_the_draft_worker_the_verify_mode_and_the_runners_bases():
    shape = adapter("capture_one_shape")
    prefill = type("PrefillCudaGraphRunner", (), {})
    mixed = type("MixedCudaGraphRunner", (prefill,), {})
    decode = type("DecodeCudaGraphRunner", (), {})

    def group(cls: type, **attributes: object) -> str:
        runner = cls()
        runner.__dict__.update(attributes)
        return table.group_of(shape, cls, {"self": runner})

    assert group(mixed) == "prefill"  # a subclass named for neither: its base says
    assert group(decode, capture_forward_mode=FORWARD.DECODE) == "decode"
    assert group(decode, capture_forward_mode=FORWARD.TARGET_VERIFY) == "verify"
    worker = SimpleNamespace(is_draft_worker=True)
    assert group(prefill, model_runner=worker) == "draft"  # a draft worker's prefill runner
    assert group(type("EAGLEDraftCudaGraphRunner", (decode,), {})) == "draft"


def test_vllm_v2_groups_come_from_the_descriptor_and_a_speculators_manager_is_the_draft():
    loop = adapter("capture", "vllm")
    manager = type("CudaGraphManager", (), {})
    speculator = type("PrefillSpeculatorCudaGraphManager", (manager,), {})
    full = SimpleNamespace(cg_mode=MODE.FULL, num_tokens=8)
    assert table.group_of(loop, manager, {"self": manager(), "desc": full}) == "full"
    piecewise = SimpleNamespace(cg_mode=MODE.PIECEWISE, num_tokens=8)
    assert table.group_of(loop, manager, {"self": manager(), "desc": piecewise}) == "piecewise"
    assert table.group_of(loop, manager, {"self": speculator(), "desc": full}) == "draft"
    assert table.size_of(loop.size, {"desc": full}) == 8


def test_a_descriptor_loop_makes_a_bucket_per_descriptor_and_a_failure_ends_its_bucket(tmp_path):
    rec, capture = stand_in_recorder(tmp_path)
    descs = [SimpleNamespace(cg_mode=MODE.FULL, num_tokens=n) for n in (8, 4, 2)]

    class CudaGraphManager:
        def capture(self, create_forward_fn, progress_bar_desc=""):
            for desc in descs:
                create_forward_fn(desc, warmup=True)(MODE.NONE)  # warm-up: no graph
                create_forward_fn(desc, warmup=False)(MODE.FULL)

    _wrap(CudaGraphManager, "capture", adapter("capture", "vllm"), rec)

    def factory(desc, warmup):
        def forward(mode):
            if mode is not MODE.NONE:
                if desc.num_tokens == 2:
                    raise RuntimeError("out of memory")
                capture()

        return forward

    with pytest.raises(RuntimeError):
        CudaGraphManager().capture(factory)
    rows = [line for line in LineReader(tmp_path).read() if line["kind"] == "bucket"]
    assert [(r["group"], r["size"], r["graphs"], r["status"]) for r in rows] == [
        ("full", 8, 1, "ok"),
        ("full", 4, 1, "ok"),
        ("full", 2, 0, "oom"),
    ]
    # a capture of the same name without the factory argument runs as it is
    calls = []

    class Other:
        def capture(self):
            calls.append(1)

    _wrap(Other, "capture", adapter("capture", "vllm"), rec)
    Other().capture()
    assert calls == [1] and len(LineReader(tmp_path).read()) == 3


def test_a_capture_phase_inside_an_estimate_is_not_a_phase_of_the_program(tmp_path):
    """vLLM V2's estimate runs capture_model: its end must not end the recording."""
    rec, capture = stand_in_recorder(tmp_path)

    class Runner:
        def capture_model(self):
            capture()

    def profile_cudagraph_memory(runner):
        runner.capture_model()

    module = SimpleNamespace(profile_cudagraph_memory=profile_cudagraph_memory)
    _wrap(Runner, "capture_model", adapter("capture_model"), rec)
    _wrap(module, "profile_cudagraph_memory", adapter("profile_cudagraph_memory"), rec)
    module.profile_cudagraph_memory(Runner())
    Runner().capture_model()
    lines = LineReader(tmp_path).read()
    assert [(line["kind"], line.get("event") or line.get("group")) for line in lines] == [
        ("bucket", "estimate"),
        ("phase", "begin"),
        ("bucket", "graphs"),
        ("phase", "end"),
    ]


@pytest.mark.parametrize(
    "line, engine",
    [
        ("[2026-12-07 10:00:00] The server is fired up and ready to roll!", "sglang"),
        (
            "(APIServer pid=1) INFO [api_server.py:1945] Starting vLLM API server 0 on http://h:8",
            "vllm",
        ),
        ("INFO: Started server process [40984]", None),
        ("Capture target decode CUDA graph end. elapsed=0.1 s, mem usage=0.5 GB", None),
    ],
)
def test_the_line_a_server_prints_once_it_serves_names_its_engine(line, engine):
    assert serving_engine(line) == engine


def test_a_server_is_stopped_when_it_serves_or_is_quiet_and_never_inside_a_phase():
    captured = Merged(rows=[object()], phases_ended=1)  # type: ignore[list-item]
    assert _capture_over(captured, serving=True, quiet_s=0.0, idle_s=10.0)
    # a draft model's graphs can follow the target's phase: wait for quiet
    assert not _capture_over(captured, serving=False, quiet_s=5.0, idle_s=10.0)
    assert _capture_over(captured, serving=False, quiet_s=10.0, idle_s=10.0)
    inside = Merged(rows=[object()], phases_open=1)  # type: ignore[list-item]
    assert not _capture_over(inside, serving=True, quiet_s=60.0, idle_s=10.0)
    nothing = Merged()
    # a program still loading its model is quiet too: quiet counts once something was captured
    assert not _capture_over(nothing, serving=False, quiet_s=60.0, idle_s=10.0)
    # but engines capture before they serve: a server that serves with nothing captured is over
    assert _capture_over(nothing, serving=True, quiet_s=0.0, idle_s=10.0)


@pytest.mark.parametrize(
    "command, flags",
    [
        (["python", "-I", "serve.py"], ["-I"]),
        (["python3.12", "-IS", "-m", "vllm.entrypoints.cli.main"], ["-I", "-S"]),
        (["/usr/bin/python3", "-W", "ignore", "-E", "serve.py"], ["-E"]),
        (["python", "-u", "-SmX"], ["-S"]),  # -m ends the interpreter's flags: X is its module
        (["python", "-Wignore::DeprecationWarning", "serve.py"], []),  # a value, not -I or -E
        (["python", "-X", "importtime", "serve.py", "-I"], []),  # -I after the script is its own
        (["python", "-m", "sglang.launch_server", "-S"], []),
        (["python", "-c", "import x", "-E"], []),
        (["torchrun", "-I", "train.py"], []),  # not Python's own flags
    ],
)
def test_interpreter_flags_that_keep_the_hook_out_are_found_where_python_reads_them(command, flags):
    assert hook_skipping_flags(command) == flags
