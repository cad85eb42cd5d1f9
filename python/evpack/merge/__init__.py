"""Merging packs of one commit from several GPUs into one verdict (`python -m evpack merge`).

  verdict.py  merge_packs(): check the members, write merged.json, the reports and index.json
  record.py   merged.json: its kind, what is derived from each member, the label rule
  verify.py   verify_merged(): re-derive a merged verdict from its members' files
  report.py   report.md and comment.md of a merged verdict
  cli.py      the `merge`, `verify-merged` and `label-merged` commands
"""
