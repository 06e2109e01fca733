"""A small model with graph breaks, for engine tests that must not depend on a model family."""

import torch
from torch import nn

from bcgprof.bcg.breaks import graph_break, side_stream


def _mix(x: torch.Tensor, out: torch.Tensor) -> None:
    # Eager-only stand-in for attention: a causal running mean over tokens.
    csum = x.float().cumsum(0)
    n = torch.arange(1, x.shape[0] + 1, device=x.device, dtype=torch.float32).unsqueeze(1)
    out.copy_((csum / n).to(out.dtype))


class ToyBreakModel(nn.Module):
    """embedding -> [linear, break, linear (+ side-stream branch)] x layers -> norm."""

    def __init__(self, vocab=97, hidden=64, layers=3, side_streams=False):
        super().__init__()
        self.embed = nn.Embedding(vocab, hidden)
        self.pre = nn.ModuleList(nn.Linear(hidden, hidden) for _ in range(layers))
        self.post = nn.ModuleList(nn.Linear(hidden, hidden) for _ in range(layers))
        self.norm = nn.LayerNorm(hidden)
        self.side = torch.cuda.Stream() if side_streams else None

    @property
    def breaks(self) -> int:
        return len(self.pre)

    def forward(self, ids, positions):
        h = self.embed(ids) + positions.unsqueeze(1).to(self.embed.weight.dtype) * 1e-3  # [T, H]
        for pre, post in zip(self.pre, self.post):
            x = pre(h)
            branch = None
            if self.side is not None:
                # forked before the break, read after it: the segment end must join it
                with side_stream(self.side):
                    branch = torch.tanh(x)
            mixed = torch.empty_like(x)
            graph_break(_mix, x, mixed)
            h = h + post(mixed)
            if branch is not None:
                h = h + branch
        return self.norm(h)
