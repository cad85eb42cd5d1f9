"""The errors of bad input (a leaf: the layers below the pack writer raise them too)."""
from __future__ import annotations


class PackError(Exception):
    """Bad input for a pack operation: one line, non-zero exit."""


class ModelError(ValueError):
    """A record that does not have the shape the model requires."""
