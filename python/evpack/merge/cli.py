"""The command line of merged verdicts: `merge`, and what `verify` and `label` print for one.

cli.py resolves the paths and calls these; the merge itself lives in verdict.py, its check in
verify.py, its record in record.py.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..options import REQUIREMENTS, meets
from ..records.merged import MergedRecord
from .record import is_merged_verdict

DOC = """\
Merge packs of one commit, each made on its own GPU, into one merged verdict folder --out DIR. Any
number of packs and of GPU types; two packs made on the same GPU type are fine.

  merged.json   kind evpack-merged-verdict, schema 1. Per member: pack id, label and labels, gates,
                GPU name, compute capability and driver (env.json), GPU UUID (the nvidia-smi listing in
                provenance.json: the first CUDA_VISIBLE_DEVICES entry, else index 0; every listed GPU
                is kept), headline numbers (the canonical benchmark speedup), signature state
                (verified / unchecked / unsigned), and the SHA-256 of its index.json, pack.json and
                provenance files. Then the overall label and labels, the GPU types, each gate's worst
                status over the members, and the rule below.
  report.md     one column per GPU: pack, label, signature, GPU, every gate, headline numbers
  comment.md    the short PR comment
  index.json    SHA-256 of merged.json, report.md and comment.md
  members/<pack-id>/
                a byte-for-byte copy of each member (each verifies on its own), so the verdict is
                checked from this folder alone: `python -m evpack verify DIR [--allowed-signers F]`
                re-verifies every member, re-checks every digest and re-derives the label.

Label rule: evidence:complete only when every member is evidence:complete and, when --allowed-signers
is given, every member is signed and its signature verifies against that file; otherwise
evidence:failed when any member is evidence:failed, else evidence:partial. Labels: that label, each
finer label that every member holds, and perf-regression when any member holds it.

Refused (one line on stderr, exit 2, nothing written, no member touched): a path that is not a pack
(or is a merged verdict); a pack given twice; a member that does not verify (with --allowed-signers:
also a signature by a key not in the file; with --require-signature: an unsigned member); members of
different commits (pack.json git.commit) or different source trees (provenance.json source.tree, e.g.
other uncommitted changes); --out inside a member, inside any pack or under a packs folder; an
existing --out without --force (--force replaces only a merged verdict or an empty folder)."""
EXIT_DOC = """\
exit status: 0 the merged verdict was written (and meets --require when given); 1 it was written but
does not meet --require; 2 usage errors and bad input (nothing written)"""

__all__ = ["DOC", "EXIT_DOC", "add_parser", "is_merged_verdict", "label", "merge", "verify"]


def add_parser(sub) -> None:
    m = sub.add_parser("merge", help="merge packs of one commit made on several GPUs into one verdict",
                       description=DOC, epilog=EXIT_DOC, formatter_class=argparse.RawDescriptionHelpFormatter,
                       allow_abbrev=False)
    m.add_argument("packs", nargs="+", metavar="PACK",
                   help="pack folder, pack id (under artifacts/packs or artifacts/reference) or 'latest'")
    m.add_argument("--out", type=Path, required=True, metavar="DIR", help="the merged verdict folder to write")
    m.add_argument("--force", action="store_true", help="replace an existing merged verdict (or empty folder) at DIR")
    m.add_argument("--allowed-signers", type=Path, default=None, metavar="FILE",
                   help="OpenSSH allowed-signers file: check every member's signature (a member signed by a key "
                        "not in FILE is refused); evidence:complete then needs every member signed by a key in FILE")
    m.add_argument("--require-signature", action="store_true",
                   help="refuse an unsigned member, as verify --require-signature does (needs --allowed-signers)")
    m.add_argument("--require", nargs="?", const="complete", choices=REQUIREMENTS, default=None,
                   help="exit 1 unless the merged label meets this: complete (the value when --require is given "
                        "alone) or partial; without --require the exit status is 0 whenever the verdict is written")
    m.add_argument("--stage-package", default=None, help=argparse.SUPPRESS)


def merge(args, packs: list[Path]) -> int:
    from .verdict import merge_packs

    result = merge_packs(packs, args.out, allowed_signers=args.allowed_signers,
                         require_signature=args.require_signature, force=args.force, stages=args.stage_package)
    rec = MergedRecord.from_json(result.record)
    for m in rec.members:
        print(f"member {m.pack_id}: {m.gpu.name or 'no GPU'} ({m.gpu.uuid or 'UUID not recorded'}), "
              f"{m.label}, signature {m.signature.state}")
    print(f"merged verdict {rec.verdict_id}: {rec.label} ({', '.join(rec.labels)})")
    print(f"WROTE {result.out}")
    if args.require is None:
        return 0
    ok = meets(rec.label, args.require)
    print(f"requirement {args.require}: {'met' if ok else 'NOT met'} by {rec.label}")
    return 0 if ok else 1


def verify(args, folder: Path) -> int:
    from .verify import verify_merged

    check = verify_merged(folder, allowed_signers=args.allowed_signers, require_signature=args.require_signature,
                          stages=args.stage_package)
    for p in check.problems:
        print(f"MISMATCH {p}")
    for pack_id, summary in check.members:
        print(f"member {pack_id}: provenance {summary}")
    if check.rule_needs_signatures and not check.signers_checked:
        print("signatures: the rule needs each member's signature verified by an allowed signer; without "
              "--allowed-signers FILE the signers are taken as merged.json states them (each signature is "
              "still checked to be intact)")
    what = f"merged verdict of {len(check.members)} pack(s): {check.label}"
    print(f"{folder.name}: {'verified' if not check.problems else f'{len(check.problems)} mismatch(es)'} ({what})")
    return 1 if check.problems else 0


def label(args, folder: Path) -> int:
    from ..labels import format_labels
    from .record import label_view, load_record
    from .verify import verify_merged

    check = verify_merged(folder, allowed_signers=args.allowed_signers, require_signature=args.require_signature,
                          stages=args.stage_package)
    problems = check.problems
    if problems:
        print(f"error: {folder.name} does not verify ({len(problems)} mismatch(es), first: {problems[0]}); "
              "its labels are not printed", file=sys.stderr)
        return 1
    print(format_labels(label_view(load_record(folder)), args.format))
    return 0
