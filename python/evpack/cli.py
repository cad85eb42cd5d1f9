"""Command line: `python -m evpack <command>`. Library code returns values and logs; this module prints.

Exit status (every command):
  0  the command did what was asked; for `evidence` and the stage commands: the pack meets the
     requirement (--require; default `complete` where a CUDA device is present, `partial` where none
     is) and verifies
  1  the pack does not meet the requirement (a failed or errored gate, fewer gates run than
     required), a verify mismatch, or a benchmark regression (`compare`)
  2  usage errors and bad input (unknown option value, a path that is not a pack, ...)
"""
from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import sys
from pathlib import Path

from .jsonio import JsonFileError
from .merge import cli as merge_cli
from .options import REQUIREMENTS, STAGE_COMMANDS, SUITES, parse_stages, requirement_verdict, run_options
from .pack import INCOMPLETE_PREFIX, PackError, ensure_writable, inside_pack, under_packs_folder
from .records.pack import PackRecord

REPO = Path(__file__).resolve().parents[2]
DEFAULT_PACKS = REPO / "artifacts" / "packs"
REFERENCE = REPO / "artifacts" / "reference"
EXIT_DOC = ("exit status: 0 the pack meets the requirement and verifies; 1 it does not (failed/errored gate, "
            "fewer gates run than required, verify mismatch); 2 usage errors and bad input")


def resolve_pack(arg: str) -> Path:
    """A pack path, or an id / 'latest' under artifacts/packs or artifacts/reference."""
    p = Path(arg)
    if not p.exists():
        for root in (DEFAULT_PACKS, REFERENCE):
            if (root / arg).exists():
                p = root / arg
                break
        else:
            raise PackError(f"no such pack: {arg} (give a folder, a pack id under {DEFAULT_PACKS} or "
                            f"{REFERENCE}, or 'latest')")
    if p.name.startswith(INCOMPLETE_PREFIX) or p.resolve().name.startswith(INCOMPLETE_PREFIX):
        raise PackError(f"{p}: an interrupted run's folder, not a finished pack")
    if not p.is_dir():
        raise PackError(f"{p}: not a pack folder")
    if not (p / "index.json").is_file():
        raise PackError(f"{p}: no index.json: not a finished pack")
    return p.resolve()


def guard_output(path: Path, *, force: bool, names: tuple[str, ...]) -> Path:
    """Where a command may write: never into or under a pack, never over existing files without --force."""
    path = path.resolve()
    pack = inside_pack(path)
    if pack is not None:
        raise PackError(f"{path} is inside the pack {pack}: a pack is never modified after it is written")
    packs = under_packs_folder(path)
    if packs is not None:
        raise PackError(f"{path} is under the packs folder {packs}: only an evidence run writes there")
    existing = [n for n in names if (path / n).exists() or (path / n).is_symlink()]
    folders = [n for n in existing if (path / n).is_dir()]
    if folders:
        raise PackError(f"{path / folders[0]} is a folder: it is never replaced by a file")
    if existing and not force:
        raise PackError(f"{path}: {', '.join(existing)} already exist(s); pass --force to replace")
    return path


def guard_output_file(path: Path, *, force: bool, option: str) -> Path:
    """Where a command may write one file (dispatch-table --out, history --plot): guard_output's rules for
    the folder it goes into, and the path must name a file (not empty, not "/", not a folder)."""
    if not path.name or path.is_dir():
        raise PackError(f"{option} {str(path)!r}: a folder or no file name; give the path of the file to write")
    return guard_output(path.parent, force=force, names=(path.name,)) / path.name


def guard_github_outputs(environ=os.environ) -> None:
    """$GITHUB_OUTPUT and $GITHUB_STEP_SUMMARY (label --format github appends to them): never a file in a
    pack, a merged verdict or a packs folder."""
    for var in ("GITHUB_OUTPUT", "GITHUB_STEP_SUMMARY"):
        if environ.get(var):
            path = Path(environ[var]).resolve()
            if inside_pack(path.parent) is not None or under_packs_folder(path) is not None:
                raise PackError(f"${var} {environ[var]}: inside a pack or packs folder; "
                                "a pack is never modified after it is written")


def _pack_arg(p: argparse.ArgumentParser, nargs="?") -> None:
    p.add_argument("pack", nargs=nargs, default="latest" if nargs == "?" else None,
                   help="pack folder, pack id (under artifacts/packs or artifacts/reference) or 'latest' "
                        "(default: latest)" if nargs == "?" else "pack folder, pack id or 'latest'")


def _signer_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--allowed-signers", type=Path, default=None,
                   help="OpenSSH allowed-signers file: check the signature and name the signer")
    p.add_argument("--require-signature", action="store_true",
                   help="reject an unsigned pack (needs --allowed-signers)")


def _carried_from_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--carried-from", type=Path, default=None, metavar="DIR",
                   help="where the packs that this pack's carried cells come from are (a packs folder or the "
                        "source pack itself; default: the pack's own packs folder)")


def _run_options(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--packs-dir", type=Path, default=DEFAULT_PACKS, help="where packs are written")
    ap.add_argument("--suite", choices=SUITES, default="quick",
                    help="benchmark suite (adhoc: only the --shape strings)")
    ap.add_argument("--shape", action="append", default=[], dest="shapes",
                    help='ad-hoc benchmark shape, e.g. "B=16,H=16,S=512,D=64,dtype=fp16,causal=0" (repeatable)')
    ap.add_argument("--variants", default=None, help="comma list of variants (default: all registered)")
    ap.add_argument("--cost-per-hour", default=None, help="GPU USD/hour for the cost line (finite, >= 0)")
    ap.add_argument("--previous-pack", default=None, help="pack to compare the benchmark against")
    ap.add_argument("--require", choices=REQUIREMENTS, default=None,
                    help="what the exit status requires: complete (default where a CUDA device is present) or "
                         "partial (default where none is)")
    ap.add_argument("--no-verify", action="store_true", help="skip the final verify")
    ap.add_argument("--fresh", action="store_true",
                    help="run every cell: carry nothing from the previous complete pack (docs/incremental.md)")
    ap.add_argument("--sign-key", type=Path, default=None,
                    help="OpenSSH private key that signs provenance.json (default: $EVPACK_SIGNING_KEY)")
    ap.add_argument("--baseline", default=None, metavar="REF",
                    help="also build REF (commit, branch, tag) and time it against this checkout in the same "
                         "run: bench/ab.json")
    ap.add_argument("--self-check", action="store_true",
                    help="A/B of HEAD against itself (measures the A/B rule's false-positive rate)")
    ap.add_argument("--gpus", default=None, metavar="all|I,J",
                    help="GPUs for the GPU stages: 'all' or indices as nvidia-smi lists them (after "
                         "CUDA_VISIBLE_DEVICES). Cells run on a pool with one worker per GPU, pinned with "
                         "CUDA_VISIBLE_DEVICES, and the benchmark splits its shapes over them (a shape is "
                         "measured whole on one GPU, with its SDPA baselines and ceilings). Default: every "
                         "visible GPU when there are several; one visible GPU: no pool")
    ap.add_argument("--stage-package", default=None, help=argparse.SUPPRESS)  # stand-in stages (tests)


class Parser(argparse.ArgumentParser):
    """Every parser of the CLI, sub-commands included (add_subparsers makes them of this class): no
    abbreviated options, so `--suit full` is an error and never taken for `--suite full`."""

    def __init__(self, *args, **kwargs) -> None:
        kwargs["allow_abbrev"] = False
        super().__init__(*args, **kwargs)

    def error(self, message: str):
        """A usage error is one line (argparse would print the usage first), exit 2."""
        self.exit(2, f"error: {self.prog}: {_one_line(message)} (see `{self.prog} --help`)\n")


def build_parser() -> argparse.ArgumentParser:
    ap = Parser(prog="python -m evpack", description="evidence-pack: verifiable kernel evidence", epilog=EXIT_DOC,
                allow_abbrev=False)
    sub = ap.add_subparsers(dest="cmd", required=True, metavar="COMMAND")
    ev = sub.add_parser("evidence", help="run every stage (or --stages), then report and verify", epilog=EXIT_DOC,
                        description="Run the stages into a new pack, write its reports, verify it.")
    ev.add_argument("--stages", default=None, help=f"comma list of stages/groups: {', '.join(STAGE_COMMANDS)}")
    _run_options(ev)
    for name in STAGE_COMMANDS:
        sp = sub.add_parser(name, help=f"a pack with the {name} stage(s) and what they need", epilog=EXIT_DOC,
                            description=f"Run the {name} stage(s) and the stages they need into a new pack.")
        _run_options(sp)
    e = sub.add_parser("env", help="write env.json (v1 environment lock)",
                       description="Write env.json into --out-dir (never into a pack).")
    e.add_argument("--out-dir", type=Path, default=Path("."))
    e.add_argument("--force", action="store_true", help="replace an existing env.json")
    r = sub.add_parser("report", help="re-render a pack's reports: report.md, report.html and comment.md into --out "
                                      "(without --out, print report.md)",
                       description="Re-render report.md, report.html and comment.md from a pack's files: the pack is "
                       "verified first and the stage outcomes shown are those verify derives from its raw files.")
    _pack_arg(r)
    r.add_argument("--out", type=Path, default=None, help="folder for the rendered files (outside any pack)")
    r.add_argument("--force", action="store_true", help="replace existing report files in --out")
    r.add_argument("--stage-package", default=None, help=argparse.SUPPRESS)
    v = sub.add_parser("verify", help="re-hash and re-derive a pack (or a merged verdict); non-zero on any mismatch",
                       description="Re-hash every file, re-derive every stage, gate and label, compare decisions. "
                                   "A merged verdict (a folder with merged.json, see `merge`): every member "
                                   "re-verified, every digest re-checked, the overall label re-derived.",
                       epilog="exit status: 0 verified; 1 mismatches; 2 not a pack / bad input")
    _pack_arg(v)
    _signer_args(v)
    v.add_argument("--stage-package", default=None, help=argparse.SUPPRESS)
    _carried_from_arg(v)
    lb = sub.add_parser("label", help="print the pack's labels (after verifying it)",
                        description="Verify a pack (or a merged verdict, see `merge`), then print its labels.",
                        epilog="exit status: 0 printed; 1 the pack does not verify; 2 not a pack / bad input")
    _pack_arg(lb)
    lb.add_argument("--format", choices=("text", "json", "github", "gh-args"), default="text")
    _signer_args(lb)
    lb.add_argument("--stage-package", default=None, help=argparse.SUPPRESS)
    _carried_from_arg(lb)
    sg = sub.add_parser("sign", help="sign a finished, verified pack that its run did not sign",
                        description="Verify a pack, then add provenance.json.sig over its provenance.json "
                                    "(ssh-keygen -Y sign -n evpack). Only that file is added; a pack that "
                                    "does not verify, or already holds a signature, is refused. The CI signs "
                                    "in a job of its own that runs no code of the PR.",
                        epilog="exit status: 0 signed (and, with --allowed-signers, the signer is allowed); "
                               "1 the pack does not verify; 2 not a pack / bad key / already signed")
    _pack_arg(sg, nargs=None)
    sg.add_argument("--key", type=Path, required=True,
                    help="OpenSSH private key that signs: Ed25519 or RSA (verify refuses ECDSA signatures)")
    sg.add_argument("--allowed-signers", type=Path, default=None,
                    help="after signing, require that the signature verifies against this file (else the "
                         "signature is removed again and the exit status is 1)")
    sg.add_argument("--stage-package", default=None, help=argparse.SUPPRESS)
    merge_cli.add_parser(sub)
    sub.add_parser("kernels", help="list the registered variants and configs",
                   description="List the registered kernel variants and their configs.")
    c = sub.add_parser("compare", help="compare the benchmarks of two packs",
                       description="Row by row: is B faster, slower or the same as A (measured spreads + SDPA drift). "
                                   "Both packs are verified first; only whole packs are compared.",
                       epilog="exit status: 0 no regression; 1 a row of ours is SLOWER, or a pack does not verify; "
                              "2 bad input (not a pack, no bench data)")
    _pack_arg(c, nargs=None)
    c.add_argument("pack_b", help="pack folder, pack id or 'latest'")
    c.add_argument("--all", action="store_true", help="also list SAME rows")
    c.add_argument("--format", choices=("text", "json", "md"), default="text")
    c.add_argument("--stage-package", default=None, help=argparse.SUPPRESS)
    h = sub.add_parser("history", help="list packs and the speedup trend",
                       description="The packs under artifacts/ with commit, GPU, label and canonical speedup.")
    h.add_argument("--artifacts", type=Path, default=REPO / "artifacts",
                   help="folder holding packs/ and reference/ (default: the repository's artifacts/)")
    h.add_argument("--format", choices=("text", "json"), default="text")
    h.add_argument("--plot", type=Path, default=None, metavar="PATH",
                   help="write the trend as a PNG (outside any pack or packs folder)")
    h.add_argument("--force", action="store_true", help="replace an existing --plot file")
    h.add_argument("--no-verify", action="store_true",
                   help="list what each pack.json claims without verifying the packs (faster)")
    h.add_argument("--stage-package", default=None, help=argparse.SUPPRESS)
    dt = sub.add_parser("dispatch-table", help="regenerate the default-kernel table from a reference pack",
                        description="The table evpack.flash_attention(variant=None) picks from: per device and shape "
                                    "class, the fastest variant/config that passed, from a complete pack's benchmark.")
    _pack_arg(dt, nargs=None)
    dt.add_argument("--out", type=Path, default=None,
                    help="where to write the table (default: python/evpack/dispatch_table.json); never inside a "
                         "pack or packs folder")
    dt.add_argument("--force", action="store_true", help="replace an existing --out file")
    dt.add_argument("--check", action="store_true", help="only compare with the committed table (exit 1 if stale)")
    rs = sub.add_parser("_run-stage")  # internal: the isolated process of one GPU stage (not listed)
    rs.add_argument("stage")
    rs.add_argument("--pack", type=Path, required=True)
    rs.add_argument("--options", default="{}")
    rs.add_argument("--stage-package", default=None)
    rs.add_argument("--slots", type=Path, default=None)  # the scheduler's shared GPU slot pool
    rs.add_argument("--start-after", type=Path, default=None)  # a warm start: prepare, then wait for this file
    bs = sub.add_parser("_bench-shard")  # internal: one GPU's process of a sharded benchmark (not listed)
    bs.add_argument("--pack", type=Path, required=True)
    bs.add_argument("--dir", type=Path, required=True)
    bs.add_argument("--options", default="{}")
    return ap


def _baseline(args, selected):
    """--baseline / --self-check checked before any stage runs (BaselineError: exit 2); None without them."""
    from .stages.order import STAGE_ORDER, with_dependencies
    from .timing.baseline_build import BaselineError, validate

    spec = validate(REPO, args.baseline, args.self_check)
    if spec is not None and "bench" not in with_dependencies(selected or STAGE_ORDER):
        raise BaselineError("--baseline/--self-check need the bench stage (run `bench` or `evidence`)")
    return spec


def check_build_environment(environ) -> None:
    """The build's environment variables (setup.py reads them) and the checkout (no build output tracked by
    git: buildguard.py), checked before any stage runs: a bad one is one line and exit 2 with nothing
    written, not a failed pack."""
    from . import registry
    from .buildgen import parse_archs
    from .buildguard import refusal
    from .buildtools import BuildToolError, choose_compiler_cache

    refused = refusal(REPO)
    if refused:
        raise PackError(refused)
    if environ.get("EVPACK_CUDA_ARCHS", "").strip():
        try:
            parse_archs(environ["EVPACK_CUDA_ARCHS"])
        except ValueError as exc:
            raise PackError(str(exc)) from None
    wanted = [n.strip() for n in environ.get("EVPACK_VARIANTS", "").split(",") if n.strip()]
    known = [v.name for v in (*registry.VARIANTS, *registry.CANARIES)]
    unknown = [n for n in wanted if n not in known]
    if unknown:
        raise PackError(f"EVPACK_VARIANTS: unknown {', '.join(unknown)} (known: {', '.join(known)})")
    try:
        choose_compiler_cache(environ)
    except BuildToolError as exc:
        raise PackError(str(exc)) from None


def cmd_evidence(args, selected) -> int:
    import contextlib
    import time

    t_start = time.monotonic()
    if selected is None or "build" in selected:  # None: every stage
        check_build_environment(os.environ)

    from .evidence import gpu_available, run_evidence
    from .provenance.attest import SigningFailed
    from .timing.baseline_build import prepared_baseline
    from .verify import verify_all

    options = run_options(REPO, suite=args.suite, shapes=args.shapes, variants=args.variants,
                          cost_per_hour=args.cost_per_hour, gpus=args.gpus,
                          previous_pack=str(resolve_pack(args.previous_pack)) if args.previous_pack else None)
    spec = _baseline(args, selected)
    key = args.sign_key or (Path(os.environ["EVPACK_SIGNING_KEY"]) if os.environ.get("EVPACK_SIGNING_KEY")
                            else None)
    try:
        with contextlib.ExitStack() as stack:
            if spec is not None:  # the worktree exists (or exit 2) before any stage; removed after the run
                options["baseline"] = stack.enter_context(
                    prepared_baseline(REPO, spec, build_now=gpu_available()[0], background=True))
            result = run_evidence(REPO, selected=selected, packs_root=args.packs_dir.resolve(), options=options,
                                  requirement=args.require, stages=args.stage_package, sign_key=key,
                                  fresh=args.fresh)
    except SigningFailed as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    requirement = args.require or ("complete" if result.has_gpu else "partial")
    gates = PackRecord.from_json(json.loads((result.pack / "pack.json").read_text())).gate_statuses()
    ok, verdict = requirement_verdict(requirement, result.label, gates, selected)
    problems = []
    if not args.no_verify:
        problems, prov = verify_all(result.pack, stages=args.stage_package)
        for p in problems:
            print(f"verify: {p}", file=sys.stderr)
        print(f"verify: provenance {prov.summary}")
        print(f"verify: {'OK' if not problems else f'{len(problems)} mismatch(es)'}")
    print(f"wall: {time.monotonic() - t_start:.0f} s to the {'verified ' if not args.no_verify else ''}pack "
          f"(pack.json timings.wall_s: {result.wall_s:.0f} s to pack.json)")
    print(verdict)
    return 0 if ok and not problems else 1


def _check_carried_from(args) -> None:
    """--carried-from names a folder (a packs folder or the source pack): anything else is bad input."""
    where = getattr(args, "carried_from", None)
    if where is not None and not where.is_dir():
        raise PackError(f"--carried-from {where}: no such folder (give the packs folder or the source pack)")


def cmd_verify(args) -> int:
    from .verify import verify_all

    _check_carried_from(args)
    pack = resolve_pack(args.pack)
    if merge_cli.is_merged_verdict(pack):
        return merge_cli.verify(args, pack)
    problems, prov = verify_all(pack, allowed_signers=args.allowed_signers, require_signature=args.require_signature,
                                stages=args.stage_package, carried_from=args.carried_from)
    for p in problems:
        print(f"MISMATCH {p}")
    print(f"provenance: {prov.summary}")
    print(f"{pack.name}: {'verified' if not problems else f'{len(problems)} mismatch(es)'}")
    return 1 if problems else 0


def cmd_label(args) -> int:
    from .labels import carried_note, format_labels
    from .pack import load_pack_record
    from .verify import verify_all

    if args.format == "github":
        guard_github_outputs()
    _check_carried_from(args)
    pack = resolve_pack(args.pack)
    if merge_cli.is_merged_verdict(pack):
        return merge_cli.label(args, pack)
    problems, prov = verify_all(pack, allowed_signers=args.allowed_signers,
                                require_signature=args.require_signature, stages=args.stage_package,
                                carried_from=args.carried_from)
    if problems:
        print(f"error: {pack.name} does not verify ({len(problems)} mismatch(es), first: {problems[0]}); "
              "its labels are not printed", file=sys.stderr)
        return 1
    record = load_pack_record(pack)
    out = format_labels(record, args.format, signer=prov.principal)
    print(f"provenance: {prov.summary}", file=sys.stderr)  # who signed; stdout stays the labels alone
    if carried_note(record):
        print(f"incremental: {carried_note(record)}", file=sys.stderr)
    print(out)
    return 0


def cmd_sign(args) -> int:
    from .provenance.attest import check_signable, sign_finished
    from .provenance.check import signer_options
    from .provenance.signing import load_signing_key
    from .verify import verify_all

    pack = resolve_pack(args.pack)
    if merge_cli.is_merged_verdict(pack):
        raise PackError(f"{pack} is a merged verdict: sign its member packs")
    verdict = next((p for p in pack.parents if merge_cli.is_merged_verdict(p)), None)
    if verdict is not None:
        raise PackError(f"{pack} is a member copy inside the merged verdict {verdict}, which is never modified: "
                        "sign the original pack, then merge again")
    host = inside_pack(pack.parent)
    if host is not None:
        raise PackError(f"{pack} lies inside the pack {host}: a pack is never modified after it is written")
    check_signable(pack)
    signer = load_signing_key(args.key)  # before the pack is verified: a bad key is exit 2
    signer_options(args.allowed_signers, False)  # a bad allowed-signers file too: nothing is written
    problems, _ = verify_all(pack, stages=args.stage_package)
    if problems:
        print(f"error: {pack.name} does not verify ({len(problems)} mismatch(es), first: {problems[0]}); "
              "it is not signed", file=sys.stderr)
        return 1
    sign_finished(pack, signer)
    after, prov = verify_all(pack, allowed_signers=args.allowed_signers,
                             require_signature=args.allowed_signers is not None, stages=args.stage_package)
    if after:
        from .provenance.statement import SIGNATURE_FILE

        (pack / SIGNATURE_FILE).unlink()
        print(f"error: {pack.name}: the new signature does not verify ({after[0]}); it was removed again",
              file=sys.stderr)
        return 1
    print(f"{pack.name}: {prov.summary}")
    return 0


def cmd_report(args) -> int:
    from .reporting.common import load_view
    from .reporting.report_md import render_md
    from .reporting.write import write_reports_into
    from .verify import verify_all

    pack = resolve_pack(args.pack)
    if merge_cli.is_merged_verdict(pack):
        raise PackError(f"{pack} is a merged verdict: its report.md and comment.md are in it (`report` renders a pack)")
    from .reporting import missing_renderer

    why = missing_renderer()
    if why is not None:
        raise PackError(why)
    derived: dict = {}
    problems, _ = verify_all(pack, stages=args.stage_package, derived_out=derived)
    if problems:  # a report is a view of verified data only
        print(f"error: {pack.name} does not verify ({len(problems)} mismatch(es), first: {problems[0]}); "
              "no report is rendered from it", file=sys.stderr)
        return 1
    if args.out is None:
        print(render_md(pack, load_view(pack, derived)))
        return 0
    out = guard_output(args.out, force=args.force, names=("report.md", "report.html", "comment.md"))
    ensure_writable(out)
    for path in write_reports_into(pack, out, outcomes=derived).all():
        print(f"WROTE {path}")
    return 0


def cmd_env(args) -> int:
    from .envlock import collect_env
    from .jsonio import write_json

    out = guard_output(args.out_dir, force=args.force, names=("env.json",))
    ensure_writable(out)
    path = out / "env.json"
    try:
        write_json(path, collect_env(REPO))
    except OSError as exc:
        raise PackError(f"cannot write {path}: {exc.strerror or exc}") from None
    print(f"WROTE env.json: {path}")
    return 0


def cmd_compare(args) -> int:
    from .timing.compare import CompareInputError, compare_rows, exit_code, load, regressions, render
    from .verify import verify_all

    packs = [_whole_pack(arg, "compare") for arg in (args.pack, args.pack_b)]
    for pack in packs:  # a verdict on data that does not verify is no verdict
        problems, _ = verify_all(pack, stages=args.stage_package)
        if problems:
            print(f"error: {pack.name} does not verify ({len(problems)} mismatch(es), first: "
                  f"{_one_line(problems[0])}); no comparison is made", file=sys.stderr)
            return 1
    try:
        a, b = load(packs[0]), load(packs[1])
    except CompareInputError as exc:
        raise PackError(str(exc)) from None
    diff = compare_rows(a["rows"], b["rows"])
    if args.format == "json":
        print(json.dumps(diff.to_json(), indent=2, allow_nan=False, default=str))
    else:
        print(render(diff, only_changed=not args.all, markdown=args.format == "md"))
    regs = regressions(diff)
    if regs:
        print(f"REGRESSION: {len(regs)} row(s) of our variants slower beyond noise", file=sys.stderr)
    return exit_code(diff)


def _whole_pack(arg: str, command: str) -> Path:
    """A pack argument of a command that reads only whole packs: a bench folder or a summary.json given
    on its own is refused (nothing outside a pack's index can be verified), as is a merged verdict."""
    p = Path(arg)
    if p.is_file() or (p.is_dir() and not (p / "index.json").is_file()
                       and any((p / f"summary.json{s}").is_file() for s in ("", ".xz", ".gz"))):
        raise PackError(f"{command}: {arg} is not a pack: {command} needs whole packs (a pack folder, a pack id "
                        "or 'latest'), which it verifies first")
    pack = resolve_pack(arg)
    if merge_cli.is_merged_verdict(pack):
        raise PackError(f"{command}: {pack} is a merged verdict, not a pack")
    return pack


def cmd_history(args) -> int:
    from .history import collect, format_table, plot, to_json

    if not args.artifacts.is_dir():
        raise PackError(f"history: no artifacts folder at {args.artifacts}")
    plot_path = None
    if args.plot is not None:  # checked before anything is printed
        plot_path = guard_output_file(args.plot, force=args.force, option="--plot")
    from .verify import verify_all

    def problems_of(pack: Path) -> list[str]:  # one pack that cannot be read is a row, never the end of the list
        try:
            return verify_all(pack, stages=args.stage_package)[0]
        except (PackError, ValueError) as exc:
            return [str(exc)]
        except OSError as exc:
            return [_os_error(exc)]

    rows = collect(args.artifacts, verify=None if args.no_verify else problems_of)
    if args.format == "json":
        print(to_json(rows))
    elif rows:
        print(format_table(rows))
    else:
        print(f"history: no packs under {args.artifacts / 'packs'} or {args.artifacts / 'reference'}")
    for r in rows:
        if r.error:
            print(f"history: {_one_line(r.pack_id)}: {_one_line(r.error)}", file=sys.stderr)
    if plot_path is not None:
        ensure_writable(plot_path.parent)
        n = plot(rows, plot_path)
        print(f"history: wrote {args.plot} ({n} point{'s' if n != 1 else ''})", file=sys.stderr)
    return 0


def cmd_dispatch_table(args) -> int:
    from .dispatch import TABLE_PATH, DispatchTableError, generate_table, table_text, write_table
    from .verify import verify_all

    out = None
    if args.check:
        if args.out is not None and not args.out.is_file():
            raise PackError(f"--out {args.out}: no such table file (--check compares with an existing table)")
    elif args.out is not None:
        out = guard_output_file(args.out, force=args.force, option="--out")
    pack = _whole_pack(args.pack, "dispatch-table")
    problems, _ = verify_all(pack)
    if problems:
        raise PackError(f"{pack.name} does not verify ({problems[0]}): no table is made from it")
    try:
        table = generate_table(pack)
    except DispatchTableError as exc:
        raise PackError(str(exc)) from None
    if args.check:
        current = (args.out or TABLE_PATH).read_text(encoding="utf-8") if (args.out or TABLE_PATH).is_file() else ""
        stale = current != table_text(table)
        print(f"{args.out or TABLE_PATH}: {'stale' if stale else 'up to date'} against {pack.name}")
        return 1 if stale else 0
    if out is not None:
        ensure_writable(out.parent)
    print(f"WROTE {write_table(table, out)}")
    return 0


def dispatch(args) -> int:
    if args.cmd == "evidence":
        return cmd_evidence(args, parse_stages(args.stages))
    if args.cmd in STAGE_COMMANDS:
        return cmd_evidence(args, [args.cmd])
    if args.cmd == "kernels":
        from .registry import VARIANTS

        for v in VARIANTS:
            print(f"{v.name:8s} {v.kind:7s} {', '.join(c.name for c in v.configs)}  - {v.description}")
        return 0
    if args.cmd == "_bench-shard":
        from .stages.bench import run_shard

        run_shard(args.pack, args.dir, REPO, json.loads(args.options))
        return 0
    if args.cmd == "_run-stage":
        from .runner import await_turn, run_inline

        if args.start_after and not await_turn(args.stage, args.start_after, json.loads(args.options),
                                               stages=args.stage_package):
            return 3
        run_inline(args.stage, args.pack, REPO, json.loads(args.options), stages=args.stage_package,
                   slots=args.slots)
        return 0
    if args.cmd == "merge":
        return merge_cli.merge(args, [resolve_pack(p) for p in args.packs])
    return {"verify": cmd_verify, "label": cmd_label, "sign": cmd_sign, "report": cmd_report, "env": cmd_env,
            "compare": cmd_compare, "history": cmd_history, "dispatch-table": cmd_dispatch_table}[args.cmd](args)


class _StdoutHandler(logging.StreamHandler):
    """Log records of the library to the sys.stdout of the moment (the CLI's one output stream)."""

    @property
    def stream(self):
        return sys.stdout

    @stream.setter
    def stream(self, _value) -> None:
        pass


def _configure_logging() -> None:
    lib = logging.getLogger("evpack")
    if not any(isinstance(h, _StdoutHandler) for h in lib.handlers):
        handler = _StdoutHandler()
        handler.setFormatter(logging.Formatter("%(message)s"))
        lib.addHandler(handler)
    lib.setLevel(logging.INFO)


def _one_line(text: str) -> str:
    """A message as one printable line: control characters (a newline in a file name) escaped,
    undecodable bytes of a path shown as escapes."""
    try:  # bytes of a path that were not UTF-8 (surrogate escapes) shown as \xNN
        text = str(text).encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    except UnicodeEncodeError:
        text = str(text).encode("utf-8", "backslashreplace").decode("utf-8")
    return "".join(ch if ch.isprintable() or ch == " " else repr(ch)[1:-1] for ch in text)


def _os_error(exc: OSError) -> str:
    """`PATH: what` for an OSError (a missing folder, a name too long, no permission, ...)."""
    what = exc.strerror or str(exc) or type(exc).__name__
    if exc.filename is None:
        return what
    names = f"{exc.filename}" + (f" -> {exc.filename2}" if exc.filename2 is not None else "")
    return f"{names}: {what}"


def _error(text: str, code: int) -> int:
    print(f"error: {_one_line(text)}", file=sys.stderr)
    return code


def main(argv: list[str] | None = None) -> int:
    """Run one command. Every failure is one line on stderr: exit 2 for usage errors and bad input (not
    a pack, an option, a path or an environment value that cannot be used), exit 1 for a pack whose
    files are corrupt. An exception no check foresaw is reported as an internal error (exit 2): set
    EVPACK_TRACEBACK=1 to see where it came from."""
    argv = list(sys.argv[1:] if argv is None else argv)
    _configure_logging()
    for stream in (sys.stdout, sys.stderr):  # a file name that is not UTF-8 is printed as escapes
        with contextlib.suppress(AttributeError, ValueError):
            stream.reconfigure(errors="backslashreplace")
    args = None
    try:
        args = build_parser().parse_args(argv)
        return dispatch(args)
    except PackError as exc:
        return _error(str(exc), 2)
    except BrokenPipeError:  # `... | head`: the reader left; exit quietly
        try:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        except OSError:
            pass
        return 141
    except JsonFileError as exc:  # a pack file no check read first: the pack is corrupt
        return _error(f"{exc} (the pack is corrupt)", 1)
    except OSError as exc:  # a path or environment value that cannot be used (GITHUB_OUTPUT, a long name, ...)
        return _error(_os_error(exc), 2)
    except ModuleNotFoundError as exc:
        return _error(f"this command needs the Python module {exc.name!r}, which is not installed "
                      "(install evpack with the extra its nox session names)", 2)
    except KeyboardInterrupt:
        return _error("interrupted", 130)
    except Exception as exc:  # noqa: BLE001 (the last resort: one line, never a traceback)
        if os.environ.get("EVPACK_TRACEBACK") or (args is not None and args.cmd.startswith("_")):
            raise  # internal commands (a stage's own process) keep the traceback in their log
        return _error(f"internal error ({type(exc).__name__}: {exc}); please report", 2)
