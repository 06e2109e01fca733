"""Tensor-parallel primitives: the ranks' environment, set-up checks, and the process group.

A tensor-parallel capture (`bcgprof capture --tp N`) runs the same mode loop as a single
GPU (:mod:`bcgprof.measure.mode`) on N ranks, one GPU each. What differs lives here:

* the environment every rank runs with: NVLink multicast (NVLS) off for NCCL, torch
  symmetric memory and NVSHMEM (on shared multi-GPU hosts it can take the GPUs out of
  service), and torch.distributed's env:// rendezvous on the loopback interface;
* the checks that refuse a set-up that cannot run, in one line, before any GPU work;
* :class:`RankGroup`: the NCCL group the model's all-reduces use (captured inside the
  graph segments) plus a gloo group on the host through which the ranks exchange
  records, so the exchanges take no GPU memory and sit outside every measured window.

Ranks are started by :mod:`bcgprof.measure.runner` (fresh processes per mode), or by torchrun.
"""

from __future__ import annotations

import datetime as dt
import os
import socket
from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass
from typing import Any, Optional

from bcgprof.errors import CaptureError, NoGPUError

# NVLink SHARP / multicast off for NCCL, torch symmetric memory and NVSHMEM.
MULTICAST_OFF = {
    "NCCL_NVLS_ENABLE": "0",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
    "NVSHMEM_DISABLE_NVLS": "1",
}
# How long a collective may wait for a peer before NCCL's watchdog aborts the rank (a rank
# that died mid-bucket would otherwise leave the others waiting forever).
COLLECTIVE_TIMEOUT = dt.timedelta(minutes=10)


def tp_environment() -> dict[str, str]:
    """Environment variables every tensor-parallel process runs with (multicast off)."""
    return dict(MULTICAST_OFF)


def apply_tp_environment(
    env: Optional[MutableMapping[str, str]] = None,
) -> MutableMapping[str, str]:
    """Set :func:`tp_environment` in ``env`` (default ``os.environ``), before NCCL starts."""
    env = os.environ if env is None else env
    env.update(tp_environment())
    return env


def rank_environment(
    rank: int, world: int, port: int, base: Optional[dict] = None
) -> dict[str, str]:
    """The environment of spawned rank ``rank``: ``base`` (default os.environ), the
    multicast-off variables and torch.distributed's env:// rendezvous."""
    env = dict(os.environ if base is None else base)
    env.update(tp_environment())
    env.update(
        RANK=str(rank),
        LOCAL_RANK=str(rank),
        WORLD_SIZE=str(world),
        LOCAL_WORLD_SIZE=str(world),
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
        PYTHONUNBUFFERED="1",
    )
    env.setdefault("GLOO_SOCKET_IFNAME", "lo")  # the control group: every rank is on this host
    return env


def under_torchrun(env: Optional[Mapping[str, str]] = None) -> bool:
    """True when this process is one rank of a torchrun (or any env:// launcher) job."""
    env = os.environ if env is None else env
    return "RANK" in env and "WORLD_SIZE" in env


def free_port() -> int:
    """A TCP port free on the loopback interface now (for the env:// rendezvous)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def check_tp_setup(spec, tp: int, device_count: int, nccl_available: bool) -> None:
    """Raise one line for a tensor-parallel set-up that cannot run; pure (no GPU touched).

    Checks, in order: tp >= 1; enough GPUs; NCCL in this torch build; the model splits
    over tp ranks (heads, KV heads, MLP and expert intermediate sizes).
    """
    if not isinstance(tp, int) or isinstance(tp, bool) or tp < 1:
        raise CaptureError(f"--tp must be a positive number of GPUs, got {tp!r}")
    if tp == 1:
        return
    if device_count < 1:
        raise NoGPUError(
            f"asked for --tp {tp} but no CUDA device was found; a tensor-parallel capture needs "
            f"{tp} GPUs"
        )
    if tp > device_count:
        raise CaptureError(
            f"asked for --tp {tp} but this machine has {device_count} GPU"
            f"{'' if device_count == 1 else 's'}; pass --tp {device_count} or less"
        )
    if not nccl_available:
        raise CaptureError(
            "NCCL is not available in this torch build (torch.distributed.is_nccl_available() is "
            "False); --tp needs a CUDA build of torch with NCCL"
        )
    from bcgprof.models import check_tensor_parallel

    check_tensor_parallel(spec, tp)


# ---------------------------------------------------------------- the group


@dataclass
class RankGroup:
    """This process's place in a tensor-parallel group (see :class:`bcgprof.measure.mode.Group`)."""

    rank: int
    world: int
    device: Any  # torch.device
    ctrl: Any  # gloo process group for host-side exchanges

    def gather(self, obj: Any) -> list:
        """Every rank's ``obj`` (picklable), by rank, on every rank; over gloo, on the host."""
        import torch.distributed as dist

        gathered: list = [None] * self.world
        dist.all_gather_object(gathered, obj, group=self.ctrl)
        return gathered

    def broadcast(self, obj: Any, src: int = 0) -> Any:
        """Rank ``src``'s ``obj`` on every rank."""
        import torch.distributed as dist

        box = [obj]
        dist.broadcast_object_list(box, src=src, group=self.ctrl)
        return box[0]


def init_rank(rank: int, world: int, local_rank: int, backend: str = "nccl") -> RankGroup:
    """Join the group (env:// rendezvous) on cuda:LOCAL_RANK, plus a gloo group for control.

    ``backend="gloo"`` on a CPU-only machine (tests): the device is then the CPU.
    """
    import torch
    import torch.distributed as dist

    apply_tp_environment()
    if backend == "nccl":
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
        if not dist.is_initialized():
            dist.init_process_group(
                "nccl", rank=rank, world_size=world, device_id=device, timeout=COLLECTIVE_TIMEOUT
            )
    else:
        device = torch.device("cpu")
        if not dist.is_initialized():
            dist.init_process_group(
                backend, rank=rank, world_size=world, timeout=COLLECTIVE_TIMEOUT
            )
    return RankGroup(rank, world, device, dist.new_group(backend="gloo"))


def close(group: Optional[RankGroup] = None) -> None:
    """Leave the process group, if this process joined one."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()
