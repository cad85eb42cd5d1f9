"""The layers of the package, bottom-up: an import runs only down or across a layer, never up.

A room is a top-level module (`evpack/pack.py`: "pack") or a subpackage with everything in it
(`evpack/stages/`: "stages"); `evpack` is the package's own `__init__` (the public torch op front) and
`__main__` its entry point. Every room is in exactly one layer. tests/test_layers.py enforces the table:
every module of the package has a room here, no import (at module level or inside a function) runs from
a room to one in a higher layer, the rooms import each other without a cycle, and there are at most 11
layers. A new module or package gets a row here in the same commit.
"""
from __future__ import annotations

LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    # values, files and names every layer uses: standard library only, nothing that imports torch
    ("base", ("version", "model", "errors", "jsonio", "packfs", "binary", "dictwalk", "markdown", "registry",
              "gitinfo", "gpus", "kernel_table", "layers", "records")),
    # pure parsers of tool output (text in, dataclasses out)
    ("parsers", ("parsers",)),
    # the toolchain, the build and the torch op (the only room of the lower layers that imports torch)
    ("build and op", ("tools", "toolchain", "toolcache", "buildgen", "buildtools", "buildguard", "dispatch", "op",
                      "api",
                      "evpack", "triton_pin", "triton_aot", "triton_cpp", "envlock")),
    # measuring: the timing harness, SDPA baselines, statistics, the A/B (torch at call time)
    ("timing", ("timing",)),
    # the stages: run(ctx) writes raw files, derive(stage_dir, pack_dir) reads them back
    ("stages", ("stages",)),
    # deciding and checking: outcomes, gates, labels, the pack record, provenance, verify
    ("verify", ("derivation", "gates", "labels", "pack", "provenance", "incremental", "coverage", "crosscheck",
                "verify")),
    # views of a pack: report.md, report.html, comment.md, the history of packs
    ("reporting", ("reporting", "history")),
    # running a pack end to end, and merging packs of several GPUs
    ("pipeline", ("options", "runner", "schedule", "evidence", "merge")),
    # the command line and the generated docs
    ("interface", ("cli", "__main__", "docsgen")),
)
