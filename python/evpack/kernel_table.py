"""`python -m evpack.kernel_table`: the kernels each built extension registered, as one JSON line.

The build stage runs this in a fresh process (the extensions it just built, nothing launched: it
works with a CPU build of torch too)."""
from __future__ import annotations

import importlib
import json

FIELDS = ("variant", "config", "dtype", "head_dim", "dynamic_smem_bytes", "threads")
MODULES = ("evpack._C", "evpack._canaries")


def kernel_rows(modules=MODULES) -> list[dict]:
    rows = []
    for name in modules:
        try:
            mod = importlib.import_module(name)
        except ImportError:
            continue
        rows += [dict(zip(FIELDS, k, strict=True), module=name) for k in mod.kernels()]
    return rows


if __name__ == "__main__":
    import sys

    print(json.dumps(kernel_rows(tuple(sys.argv[1:]) or MODULES)))
