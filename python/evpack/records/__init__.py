"""The pack's typed records, one module per record family, and one reader per schema version.

  schema.py      what a pack of each schema version must hold (gates, canaries, root files, prose keys)
  canary.py      a planted fault as a stage saw it, the liveness matrix's rows, canaries/expected.json
  pack.py        pack.json
  runner.py      <stage>/runner.json
  migrations.py  one reader per pack.json schema version, into today's PackRecord

This package imports nothing at its top: `model` imports `records.schema` (pure data), and the record
modules import `model`, so the package's own __init__ must stay empty of imports.
"""
