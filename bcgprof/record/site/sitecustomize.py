"""bcgprof record's bootstrap, loaded by Python's ``site`` at the start of every process of a
recorded program (``bcgprof record`` puts this folder first on PYTHONPATH).

It imports only the standard library. It first runs the ``sitecustomize`` this one hides, if any;
then, with ``BCGPROF_RECORD_DIR`` set, it adds an import finder that waits for torch's CUDA-graph
module and for the modules the engine adapters name: when one of them has finished loading it hands
it to :mod:`bcgprof.record.hook`. Until then, each import costs one string comparison per watched
prefix; a process that never imports torch never loads the hook.
"""

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


try:
    _chain()
finally:
    if os.environ.get("BCGPROF_RECORD_DIR"):
        _watch = ["torch.cuda.graphs"] + [
            w for w in os.environ.get("BCGPROF_RECORD_WATCH", "").split(",") if w
        ]
        sys.meta_path.insert(0, _AfterImport(_watch))
