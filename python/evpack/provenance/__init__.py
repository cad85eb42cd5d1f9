"""Who made a pack and from what: the in-toto provenance statement, its signature, and their check.

  statement.py  the statement (pure: values in, dicts out); subject rules per predicate type
  attest.py     collect the run's facts, write provenance.json, sign it
  signing.py    OpenSSH `ssh-keygen -Y` signing and verification, allowed-signers files
  sigform.py    the form of an SSH signature (armor, ed25519 sizes), checked before ssh-keygen sees it
  check.py      check_provenance(): the statement and signature of a pack against its files (verify uses it)
"""
