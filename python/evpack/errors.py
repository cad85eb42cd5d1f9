"""The error of bad input for a pack operation (a leaf: the layers below the pack writer raise it too)."""
from __future__ import annotations


class PackError(Exception):
    """Bad input for a pack operation: one line, non-zero exit."""
