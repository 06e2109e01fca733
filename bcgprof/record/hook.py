"""Inside a recorded process: torch's CUDA graphs and the adapters' bucket functions, patched.

Loaded by the bootstrap (:mod:`bcgprof.record.site`) when torch's CUDA-graph module or a module an
adapter names has finished importing. ``torch.cuda.CUDAGraph.capture_begin``, ``capture_end`` and
``instantiate`` are patched at class level (torch 2.11 to 2.13 offer no capture hooks; every graph
made from Python, ``torch.cuda.graph``, ``make_graphed_callables``, cudagraph trees and engines' own
segment loops, goes through them). A *bucket* is one call of an adapter's bucket function (the
outermost, when they nest), one descriptor of a factory adapter's loop, or else one graph. Around
it the hook reads the allocator (``torch.cuda.memory_stats``, the graph pools' segments from
``torch.cuda.memory_snapshot``) and the device (NVML, or ``cudaMemGetInfo``), samples NVML on a
thread while the bucket runs, and appends one line (:mod:`bcgprof.record.rows`).

Invariant: the program runs as it would without the hook. No reading synchronises the device, calls
``empty_cache``, resets peak statistics or allocates device memory; every hook error is caught and
printed once, and the program goes on. Cost: two readings per bucket (a snapshot walk of the
allocator's segments, three NVML queries) and, while a bucket runs, one NVML query per sampling
interval on a background thread; nothing at all outside buckets but one system call when a
process first patches torch's graphs (the spool's ``torch-hooked`` mark, which tells an empty
recording whose hooked processes never imported torch from one that captured nothing). With
``--trace``, the group's allocator history too (:mod:`bcgprof.record.history`, which states its
own cost).
"""

from __future__ import annotations

import functools
import inspect
import os
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Optional

from bcgprof.record import adapters as table
from bcgprof.record.rows import BUCKET, PHASE, PROCESS, TORCH_HOOKED, LineWriter, mark

# how graphs are seen: torch.cuda.CUDAGraph's methods patched at class level
HOOK_PATH = "class-patch"
_RECORDER: Optional[Recorder] = None
_WRAPPED = "__bcgprof_recorded__"


def recorder() -> Recorder:
    global _RECORDER
    if _RECORDER is None:
        _RECORDER = Recorder.from_environment()
    return _RECORDER


def loaded(module: Any) -> None:
    """The bootstrap's call after a watched module has loaded."""
    rec = recorder()
    if module.__name__ == "torch.cuda.graphs":
        rec.patch_graphs(module.CUDAGraph)
    for adapter in rec.adapters:
        if adapter.covers(module.__name__):
            for owner, name in _targets(module, adapter.name):
                _wrap(owner, name, adapter, rec)


def _targets(module: Any, name: str) -> list[tuple[Any, str]]:
    """(owner, attribute) pairs that ``name`` names in ``module``: Class.method, or a function and
    every method of that name a class of the module defines itself."""
    if "." in name:
        cls_name, _, method = name.rpartition(".")
        owner = module
        for step in cls_name.split("."):
            owner = getattr(owner, step, None)
        return (
            [(owner, method)]
            if owner is not None and inspect.isfunction(vars(owner).get(method))
            else []
        )
    found = [(module, name)] if inspect.isfunction(vars(module).get(name)) else []
    for value in list(vars(module).values()):
        if (
            inspect.isclass(value)
            and value.__module__ == module.__name__
            and inspect.isfunction(vars(value).get(name))
        ):
            found.append((value, name))
    return found


def _wrap(owner: Any, name: str, adapter: table.Adapter, rec: Recorder) -> None:
    fn = vars(owner).get(name) if inspect.isclass(owner) else getattr(owner, name)
    if fn is None or getattr(fn, _WRAPPED, False):
        return
    signature = inspect.signature(fn)
    cls = owner if inspect.isclass(owner) else None

    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        if adapter.role == table.FACTORY:
            return rec.call_with_factory(fn, adapter, cls, signature, args, kwargs)
        token = rec.enter(adapter, cls, signature, args, kwargs)
        try:
            result = fn(*args, **kwargs)
        except BaseException as e:
            rec.leave(token, e)
            raise
        rec.leave(token, None)
        return result

    setattr(call, _WRAPPED, True)
    setattr(owner, name, call)
    rec.engines.add(adapter.engine)


class _Bucket:
    """One bucket in progress."""

    def __init__(
        self,
        group: str,
        size: Optional[int],
        before: Optional[dict[str, Any]],
        sampler: Any,
        per_graph: bool,
        hook_s: float,
        by: str,
    ):
        self.group = group
        self.by = by  # the bucket function's Adapter.label; "" for a graph alone
        self.size = size
        self.before = before
        self.sampler = sampler
        self.per_graph = per_graph  # no bucket function around it: the graph is the bucket
        self.hook_s = hook_s  # the readings' time in the program so far
        self.started = time.perf_counter()
        self.first_capture: Optional[float] = None
        self.graphs = 0
        self.nodes: Optional[int] = 0
        self.streams: set[int] = set()


class _FactoryLoop:
    """A factory adapter's loop in progress: the bucket of its current descriptor."""

    def __init__(self, adapter: table.Adapter, cls: Optional[type], instance: Any):
        self.adapter = adapter
        self.cls = cls
        self.instance = instance
        self.descriptor: Any = None
        self.bucket: Optional[_Bucket] = None


def _same(a: Any, b: Any) -> bool:
    """Whether two descriptors name one bucket (equal, or the same object where == fails)."""
    if a is b:
        return True
    try:
        return bool(a == b)
    except Exception:
        return False


class Recorder:
    """A process's recording state: its adapters, the graph pools its captures used, the open
    buckets."""

    def __init__(self, spool: str, adapters: list[table.Adapter], sample_ms: float):
        self.lines = LineWriter(Path(spool))
        self.adapters = adapters
        self.sample_ms = sample_ms
        self.pools: set[tuple[int, ...]] = set()
        self.engines: set[str] = set()
        self.graph_count = 0
        self._memory: Any = None
        self._local = threading.local()
        self._warned: set[str] = set()
        self._described = False
        self._nvml_started = False
        # --trace: the allocator's history of each group's pool (bcgprof.record.history)
        self.tracer: Any = None
        # what a bucket's readings come from: the device (NVML and the allocator), or a stand-in in
        # CPU tests
        self.read: Callable[[], Optional[dict[str, Any]]] = self._device_reading

    @classmethod
    def from_environment(cls) -> Recorder:
        env = os.environ
        adapters = [] if env.get("BCGPROF_RECORD_ADAPTERS") == "off" else list(table.ADAPTERS)
        adapters += [
            table.parse_bucket_option(s)
            for s in env.get("BCGPROF_RECORD_BUCKETS", "").split("\n")
            if s
        ]
        rec = cls(
            env["BCGPROF_RECORD_DIR"], adapters, float(env.get("BCGPROF_RECORD_SAMPLE_MS", "5"))
        )
        if env.get("BCGPROF_RECORD_TRACE") == "on":
            from bcgprof.record.history import GroupTracer

            spool = Path(env["BCGPROF_RECORD_DIR"])
            rec.tracer = GroupTracer(spool.parent, spool, rec.lines.write, rank=_rank)
        return rec

    # ------------------------------------------------------------ the state of this thread

    def _stack(self) -> list[Any]:
        stack = getattr(self._local, "stack", None)
        if stack is None:
            stack = self._local.stack = []
        return stack

    def _open_bucket(self) -> Optional[_Bucket]:
        return next((s for s in self._stack() if isinstance(s, _Bucket)), None)

    def _scope_group(self) -> Optional[str]:
        return next((s for s in reversed(self._stack()) if isinstance(s, str)), None)

    def _warn(self, where: str, e: BaseException) -> None:
        if where not in self._warned:
            self._warned.add(where)
            sys.stderr.write(
                f"bcgprof record: {where} failed, the program goes on: {type(e).__name__}: {e}\n"
            )

    # ------------------------------------------------------------ adapters' calls

    def enter(
        self,
        adapter: table.Adapter,
        cls: Optional[type],
        signature: inspect.Signature,
        args: tuple,
        kwargs: dict,
    ) -> Any:
        self._start_nvml()
        try:
            if adapter.role == table.PHASE:
                # a capture phase inside a scope (vLLM V2's estimate runs capture_model) is the
                # scope's, not the program's: its end is not the end of the capture phase
                if self._scope_group() is not None:
                    return None
                self.lines.write(PHASE, event="begin", name=adapter.name, engine=adapter.engine)
                return ("phase", adapter)
            try:
                arguments = signature.bind_partial(*args, **kwargs).arguments
            except TypeError:
                arguments = {}
            group = table.group_of(adapter, cls, arguments)
            if adapter.role == table.SCOPE:
                self._stack().append(group)
                return ("scope", group)
            # nested bucket functions: the outermost makes the row
            if self._open_bucket() is not None:
                return None
            group = self._scope_group() or group
            return self._begin(group, table.size_of(adapter.size, arguments), by=adapter.label)
        except Exception as e:
            self._warn(f"entering {adapter.name}", e)
            return None

    def leave(self, token: Any, error: Optional[BaseException]) -> None:
        try:
            if token is None:
                return
            if isinstance(token, tuple) and token[0] == "phase":
                self._trace("stop")
                self.lines.write(PHASE, event="end", name=token[1].name, engine=token[1].engine)
            elif isinstance(token, tuple) and token[0] == "scope":
                stack = self._stack()
                if token[1] in stack:
                    stack.reverse()
                    stack.remove(token[1])
                    stack.reverse()
            else:
                self._end(token, error)
        except Exception as e:
            self._warn("leaving a bucket", e)

    def call_with_factory(
        self,
        fn: Callable[..., Any],
        adapter: table.Adapter,
        cls: Optional[type],
        signature: inspect.Signature,
        args: tuple,
        kwargs: dict,
    ) -> Any:
        """Run a factory adapter's loop with its factory argument wrapped: each call of the factory
        with a descriptor unlike the last begins a bucket (ending the last one), and the loop's
        return ends the open one. A loop without the factory argument, or inside a bucket, runs
        as it is."""
        self._start_nvml()  # as enter does: the loop shows this process captures
        try:
            bound = signature.bind_partial(*args, **kwargs)
            factory = bound.arguments.get(adapter.factory)
        except TypeError:
            factory = None
        if not callable(factory) or self._open_bucket() is not None:
            return fn(*args, **kwargs)
        state = _FactoryLoop(adapter, cls, bound.arguments.get("self"))

        def each(*fargs: Any, **fkwargs: Any) -> Any:
            self._factory_called(state, fargs, fkwargs)
            return factory(*fargs, **fkwargs)

        functools.update_wrapper(each, factory)
        bound.arguments[adapter.factory] = each
        try:
            result = fn(*bound.args, **bound.kwargs)
        except BaseException as e:
            self._factory_ends(state, e)
            raise
        self._factory_ends(state, None)
        return result

    def _factory_called(self, state: _FactoryLoop, args: tuple, kwargs: dict) -> None:
        try:
            descriptor = args[0] if args else next(iter(kwargs.values()), None)
            if state.bucket is not None and _same(descriptor, state.descriptor):
                return
            self._factory_ends(state, None)
            arguments = {"desc": descriptor, "self": state.instance}
            group = self._scope_group() or table.group_of(state.adapter, state.cls, arguments)
            state.descriptor = descriptor
            state.bucket = self._begin(
                group, table.size_of(state.adapter.size, arguments), by=state.adapter.label
            )
        except Exception as e:
            self._warn(f"entering {state.adapter.name}'s bucket", e)

    def _factory_ends(self, state: _FactoryLoop, error: Optional[BaseException]) -> None:
        bucket, state.bucket = state.bucket, None
        if bucket is not None:
            try:
                self._end(bucket, error)
            except Exception as e:
                self._warn("leaving a bucket", e)

    # ------------------------------------------------------------ graphs

    def patch_graphs(self, cls: type) -> None:
        if getattr(cls, _WRAPPED, False):
            return
        begin, end, instantiate = cls.capture_begin, cls.capture_end, cls.instantiate  # type: ignore[attr-defined]
        rec = self

        def capture_begin(graph: Any, *args: Any, **kwargs: Any) -> Any:
            rec.graph_begins()
            return begin(graph, *args, **kwargs)

        def capture_end(graph: Any) -> Any:
            result = end(graph)
            rec.graph_ends(graph)
            return result

        def inst(graph: Any) -> Any:
            return instantiate(graph)

        for name, fn, real in (
            ("capture_begin", capture_begin, begin),
            ("capture_end", capture_end, end),
            ("instantiate", inst, instantiate),
        ):
            functools.update_wrapper(fn, real)
            setattr(cls, name, fn)
        setattr(cls, _WRAPPED, True)
        mark(self.lines.spool, TORCH_HOOKED)

    def graph_begins(self) -> None:
        started = time.perf_counter()
        self._start_nvml()
        try:
            bucket = self._open_bucket()
            if bucket is None:  # no bucket function around it: the graph is its own bucket
                bucket = self._begin(
                    self._scope_group() or table.RecordGroup.GRAPHS, None, per_graph=True
                )
                started = time.perf_counter()  # _begin counted its own time
            if bucket.first_capture is None:
                self._trace("capture_begins")
                bucket.first_capture = time.perf_counter()
            import torch

            if torch.cuda.is_initialized():
                bucket.streams.add(int(torch.cuda.current_stream().cuda_stream))
            bucket.hook_s += time.perf_counter() - started
        except Exception as e:
            self._warn("capture_begin", e)

    def graph_ends(self, graph: Any) -> None:
        started = time.perf_counter()
        try:
            self.graph_count += 1
            pool = tuple(int(x) for x in graph.pool())
            self.pools.add(pool)
            bucket = self._open_bucket()
            if bucket is None:
                return
            self._trace("graph_ends", pool)
            bucket.graphs += 1
            if bucket.nodes is not None:
                from bcgprof.bcg.graph import graph_node_count

                nodes = graph_node_count(graph)
                bucket.nodes = None if nodes is None else bucket.nodes + nodes
            # everything the hook did after the graph's capture ended, its readings excepted
            bucket.hook_s += time.perf_counter() - started
            if bucket.per_graph:
                self._end(bucket, None)
        except Exception as e:
            self._warn("capture_end", e)

    # ------------------------------------------------------------ readings and lines

    def _start_nvml(self) -> None:
        """NVML's start (tens of ms) on a thread of its own, as soon as the process shows it
        captures (an engine's capture phase begins, a bucket function or a graph's capture): it
        overlaps the program's own set-up where a phase function comes first, and a process that
        never captures never pays it."""
        if not self._nvml_started:
            self._nvml_started = True
            threading.Thread(target=_start_nvml, name="bcgprof-record-nvml", daemon=True).start()

    def _memory_reader(self) -> Any:
        if self._memory is None:
            import torch

            from bcgprof.measure.device import DeviceMemory

            self._memory = DeviceMemory(torch.device("cuda", torch.cuda.current_device()))
        return self._memory

    def _process_line(self) -> None:
        import torch

        self._described = True
        memory = self._memory
        device = (
            {}
            if memory is None
            else {
                "gpu": memory.gpu_name(),
                "driver": memory.driver(),
                "memory_source": memory.source,
            }
        )
        versions = {}
        for engine in ("sglang", "vllm"):
            module = sys.modules.get(engine)
            if module is not None:
                versions[engine] = str(getattr(module, "__version__", ""))
        self.lines.write(
            PROCESS,
            rank=_rank(),
            argv=[str(a)[:512] for a in sys.argv[:64]],  # a line stays under rows.MAX_LINE
            torch=torch.__version__,
            cuda=str(torch.version.cuda or ""),
            hook_path=HOOK_PATH,
            engines=versions,
            **device,
        )

    def _device_reading(self) -> Optional[dict[str, Any]]:
        import torch

        if not torch.cuda.is_initialized():
            return None
        memory = self._memory_reader()
        device = memory.device
        stats = torch.cuda.memory_stats(device)
        pools: dict[str, list[int]] = {}
        for seg in torch.cuda.memory_snapshot():
            pool = tuple(seg.get("segment_pool_id", (0, 0)))
            if pool == (0, 0) or seg.get("device", device.index) != device.index:
                continue
            entry = pools.setdefault(f"{pool[0]},{pool[1]}", [0, 0])
            entry[0] += int(seg["total_size"])
            entry[1] += sum(
                int(b["size"]) for b in seg.get("blocks", ()) if b["state"] != "inactive"
            )
        return {
            "allocated": int(stats.get("allocated_bytes.all.current", 0)),
            "reserved": int(stats.get("reserved_bytes.all.current", 0)),
            "used": memory.used(),
            "process": memory.process_used(),
            "free": memory.free(),
            "pools": pools,
            "time": time.time(),
        }

    def _trace(self, step: str, *args: Any) -> float:
        """One step of ``--trace``'s tracer (:mod:`bcgprof.record.history`), if on; the seconds it
        took. A step that fails gives its group no trace, and the program goes on."""
        tracer = self.tracer
        if tracer is None:
            return 0.0
        started = time.perf_counter()
        try:
            getattr(tracer, step)(*args)
        except Exception as e:
            self._warn(f"the allocator trace ({step})", e)
            active = tracer.active
            group = active.group if active is not None else None
            if group is None and step == "bucket_begins":
                group = args[0]
            if group is not None and group not in tracer.done:
                try:
                    tracer.refuse(group, f"recording it failed: {type(e).__name__}: {e}"[:200])
                except Exception:
                    tracer.active = None
        return time.perf_counter() - started

    def _begin(
        self, group: str, size: Optional[int], per_graph: bool = False, by: str = ""
    ) -> _Bucket:
        started = time.perf_counter()
        before = self.read()
        # who this process is, once, with its first reading
        if before is not None and not self._described:
            self._process_line()
        if before is not None:
            self._trace("bucket_begins", group, size, per_graph)
        sampler = None
        if before is not None and self._memory is not None and self.sample_ms > 0:
            from bcgprof.measure.device import PeakSampler

            sampler = PeakSampler(self._memory, self.sample_ms)
            sampler.start_window(before["used"])
        hook_s = time.perf_counter() - started
        bucket = _Bucket(group, size, before, sampler, per_graph, hook_s, by)
        self._stack().append(bucket)
        return bucket

    def _end(self, bucket: _Bucket, error: Optional[BaseException]) -> None:
        stack = self._stack()
        if bucket in stack:
            stack.remove(bucket)
        ended = time.perf_counter()
        if bucket.before is not None:
            self._trace("bucket_ends", bucket.group, self.pools)
        after = self.read()
        peak = None
        if bucket.sampler is not None:
            peak = bucket.sampler.window_peak(after["used"] if after else 0)
            bucket.sampler.close()
        hook_ms = (bucket.hook_s + time.perf_counter() - ended) * 1e3
        if bucket.before is None and after is None:
            return  # CUDA never started: nothing was captured
        status, detail = "ok", ""
        if error is not None:
            oom = "OutOfMemoryError" in type(error).__name__ or "out of memory" in str(error)
            status = "oom" if oom else "error"
            detail = f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"[
                :300
            ]
        first = bucket.first_capture if bucket.first_capture is not None else ended
        self.lines.write(
            BUCKET,
            group=bucket.group,
            size=bucket.size,
            alone=bucket.per_graph,
            by=bucket.by,
            rank=_rank(),
            status=status,
            detail=detail,
            graphs=bucket.graphs,
            nodes=bucket.nodes if bucket.graphs else None,
            streams=len(bucket.streams),
            before=bucket.before,
            after=after,
            graph_pools=sorted(",".join(map(str, p)) for p in self.pools),
            device_peak=peak,
            warmup_ms=(first - bucket.started) * 1e3,
            capture_ms=(ended - first) * 1e3,
            ordinal=self.graph_count,
            hook_ms=hook_ms,
        )


def _start_nvml() -> None:
    """``nvmlInit``: it creates no CUDA context and takes no device memory. Where NVML is missing,
    the readings fall back as they would."""
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:
        pass


def _rank() -> Optional[int]:
    """The process's rank in torch.distributed when it has one, else the RANK its launcher set."""
    dist = sys.modules.get("torch.distributed")
    try:
        if dist is not None and dist.is_available() and dist.is_initialized():
            return int(dist.get_rank())
    except Exception:
        pass
    value = os.environ.get("RANK", "")
    return int(value) if value.isascii() and value.isdigit() else None
