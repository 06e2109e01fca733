"""Packaging beyond pyproject.toml: the model presets in configs/ ship inside the package.

configs/ is installed as ``bcgprof.presets`` (so ``bcgprof/presets/models/*.json`` in a
wheel), which is where bcgprof.models.config.presets_dir() looks outside a source tree.
"""

from setuptools import find_packages, setup

setup(
    packages=find_packages(include=["bcgprof", "bcgprof.*"]) + ["bcgprof.presets"],
    package_dir={"bcgprof.presets": "configs"},
    package_data={"bcgprof.presets": ["models/*.json"]},
)
