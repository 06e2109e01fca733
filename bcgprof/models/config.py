"""Model presets and config.json resolution: the torch-free :mod:`bcgprof.spec` under its
older name, for the capture side's importers. New code imports :mod:`bcgprof.spec`."""

from __future__ import annotations

from bcgprof.spec import ModelSpec, config_hash, list_presets, presets_dir, resolve_model

__all__ = ["ModelSpec", "config_hash", "list_presets", "presets_dir", "resolve_model"]
