"""The one doorway to the C++ extension ``voxpipe._core``: every module reaches the core through
here. (The import-linter contracts in pyproject.toml see Python files only; a compiled module
imported directly would count as an import of the package's face.)"""

from .. import _core as core

__all__ = ["core"]
