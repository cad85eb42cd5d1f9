"""The package version: a leaf module (no imports), so that the pack writer, the environment lock and
setup.py can name the version without importing the package's torch op (evpack.api)."""
from __future__ import annotations

__version__ = "0.1.0"
