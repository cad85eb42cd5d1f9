"""Pure parsers of raw tool output: text in, frozen dataclasses out. No subprocess, no files, no GPU.

  ptxas.py      `ptxas -v` resource lines (registers, shared memory, stack, spills) and its warnings
  sass.py       `cuobjdump --dump-sass`: functions per arch, opcode histograms
  sanitizer.py  compute-sanitizer reports and summaries
  ncu.py        Nsight Compute CSV metrics
  occupancy.py  occupancy from resources (checked against cuda_occupancy.h)
  symbols.py    mangled kernel names -> variant, config, dtype, head dim

Only the stage runners (evpack.stages) call tools; they hand the text to these modules.
"""
