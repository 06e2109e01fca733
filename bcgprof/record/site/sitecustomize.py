"""bcgprof record's bootstrap, loaded by Python's ``site`` at the start of every process of a
recorded program (``bcgprof record`` puts this folder first on PYTHONPATH).

It imports only the standard library. It first runs the ``sitecustomize`` this one hides, if any;
then, with ``BCGPROF_RECORD_DIR`` set, it adds an import finder that waits for torch's CUDA-graph
module and for the modules the engine adapters name: when one of them has finished loading it hands
it to :mod:`bcgprof.record.hook`. Until then, each import costs one string comparison per watched
prefix; a process that never imports torch never loads the hook. The first process to load this
file also leaves an empty file (``site-loaded``) in that folder, so that a recording with no rows
can tell a program that captured nothing from one whose processes never loaded the hook.
"""

import contextlib
import importlib.machinery
import importlib.util
import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))


def _chain() -> None:
    path = [p for p in sys.path if os.path.abspath(p or ".") != _HERE]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", path)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)


class _AfterImport:
    """A meta-path finder that lets the other finders load a watched module, then calls the hook."""

    def __init__(self, watched):
        self.watched = tuple(watched)
        self.busy = set()

    def find_spec(self, fullname, path=None, target=None):
        if fullname in self.busy or not fullname.startswith(self.watched):
            return None
        self.busy.add(fullname)
        try:
            spec = importlib.util.find_spec(fullname)
        finally:
            self.busy.discard(fullname)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        loader = spec.loader
        real = loader.exec_module

        def exec_module(module, _real=real):
            _real(module)
            try:
                from bcgprof.record import hook

                hook.loaded(module)
            except Exception as e:  # the program goes on unrecorded, never broken
                sys.stderr.write(
                    f"bcgprof record: hook failed in {fullname}: {type(e).__name__}: {e}\n"
                )

        loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


# made by the first process that loads this file; its absence at the end tells bcgprof record that
# no process of the program loaded the hook (a launcher that reset PYTHONPATH, python -I)
_LOADED = "site-loaded"


def _mark_loaded(spool: str) -> None:
    # one system call a process: after the first, O_EXCL fails at once
    with contextlib.suppress(OSError):
        os.close(os.open(os.path.join(spool, _LOADED), os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))


try:
    _chain()
finally:
    if os.environ.get("BCGPROF_RECORD_DIR"):
        _mark_loaded(os.environ["BCGPROF_RECORD_DIR"])
        _watch = ["torch.cuda.graphs"] + [
            w for w in os.environ.get("BCGPROF_RECORD_WATCH", "").split(",") if w
        ]
        sys.meta_path.insert(0, _AfterImport(_watch))
