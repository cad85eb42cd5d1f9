"""Command line: `python -m evpack <command>`. Library code returns values; this module prints."""
from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

from .pack import PackError
from .stages.order import GROUPS, STAGE_ORDER

REPO = Path(__file__).resolve().parents[2]
DEFAULT_PACKS = REPO / "artifacts" / "packs"
STAGE_COMMANDS = tuple(STAGE_ORDER) + tuple(GROUPS)


def resolve_pack(arg: str) -> Path:
    """A pack path, or an id / 'latest' under artifacts/packs or artifacts/reference."""
    p = Path(arg)
    if p.exists():
        return p.resolve()
    for root in (DEFAULT_PACKS, REPO / "artifacts" / "reference"):
        if (root / arg).exists():
            return (root / arg).resolve()
    raise PackError(f"no such pack: {arg} (give a folder, or a pack id under {DEFAULT_PACKS})")


def _run_options(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--packs-dir", type=Path, default=DEFAULT_PACKS, help="where packs are written")
    ap.add_argument("--suite", choices=("quick", "full", "adhoc"), default="quick",
                    help="benchmark suite (adhoc: only the --shape strings)")
    ap.add_argument("--shape", action="append", default=[], dest="shapes",
                    help='ad-hoc benchmark shape, e.g. "B=16,H=16,S=512,D=64,dtype=fp16,causal=0"')
    ap.add_argument("--variants", default=None, help="comma list of variants (default: all registered)")
    ap.add_argument("--cost-per-hour", type=float, default=None, help="GPU $/hour for the cost line")
    ap.add_argument("--previous-pack", default=None, help="pack to compare the benchmark against")
    ap.add_argument("--no-verify", action="store_true", help="skip the final verify")
    ap.add_argument("--baseline", default=None, metavar="REF",
                    help="also build REF (commit, branch, tag) and time it against this checkout in the same "
                         "run: bench/ab.json")
    ap.add_argument("--self-check", action="store_true",
                    help="A/B of HEAD against itself (measures the A/B rule's false-positive rate)")


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m evpack", description="evidence-pack: verifiable kernel evidence")
    sub = ap.add_subparsers(dest="cmd", required=True, metavar="COMMAND")
    ev = sub.add_parser("evidence", help="run every stage (or --stages), then report and verify")
    ev.add_argument("--stages", default=None, help=f"comma list of stages/groups: {', '.join(STAGE_COMMANDS)}")
    _run_options(ev)
    for name in STAGE_COMMANDS:
        sp = sub.add_parser(name, help=f"a pack with the {name} stage(s) and what they need")
        _run_options(sp)
    e = sub.add_parser("env", help="write env.json (v1 environment lock)")
    e.add_argument("--out-dir", type=Path, default=Path("."))
    r = sub.add_parser("report", help="re-render a pack's report (to --out, or print report.md)")
    r.add_argument("pack", nargs="?", default="latest", help="pack folder or id (default: latest)")
    r.add_argument("--out", type=Path, default=None)
    v = sub.add_parser("verify", help="re-hash and re-derive a pack; non-zero on any mismatch")
    v.add_argument("pack", nargs="?", default="latest", help="pack folder or id (default: latest)")
    lb = sub.add_parser("label", help="print the pack's labels")
    lb.add_argument("pack", nargs="?", default="latest", help="pack folder or id (default: latest)")
    lb.add_argument("--format", choices=("text", "json", "github", "gh-args"), default="text")
    sub.add_parser("kernels", help="list the registered variants and configs")
    sub.add_parser("compare", help="compare the benchmarks of two packs", add_help=False)
    sub.add_parser("history", help="list packs and the speedup trend", add_help=False)
    rs = sub.add_parser("_run-stage", help=argparse.SUPPRESS)
    rs.add_argument("stage")
    rs.add_argument("--pack", type=Path, required=True)
    rs.add_argument("--options", default="{}")
    return ap


def _options(args) -> dict:
    return {"suite": args.suite, "shapes": args.shapes,
            "variants": args.variants.split(",") if args.variants else None,
            "cost_per_hour": args.cost_per_hour, "previous_pack": args.previous_pack}


def _baseline(args, selected):
    """--baseline / --self-check checked before any stage runs (BaselineError: exit 2); None without them."""
    from .bench.baseline_build import BaselineError, validate
    from .stages.order import with_dependencies

    spec = validate(REPO, args.baseline, args.self_check)
    if spec is not None and "bench" not in with_dependencies(selected or STAGE_ORDER):
        raise BaselineError("--baseline/--self-check need the bench stage (run `bench` or `evidence`)")
    return spec


def cmd_evidence(args, selected) -> int:
    import contextlib

    from .bench.baseline_build import prepared_baseline
    from .evidence import gpu_available, run_evidence
    from .verify import verify_pack

    spec = _baseline(args, selected)
    options = _options(args)
    with contextlib.ExitStack() as stack:
        if spec is not None:  # the worktree exists (or exit 2) before any stage; removed after the run
            options["baseline"] = stack.enter_context(
                prepared_baseline(REPO, spec, build_now=gpu_available()[0]))
        pack = run_evidence(REPO, selected=selected, packs_root=args.packs_dir.resolve(), options=options)
    if args.no_verify:
        return 0
    problems = verify_pack(pack)
    for p in problems:
        print(f"verify: {p}", file=sys.stderr)
    print(f"verify: {'OK' if not problems else f'{len(problems)} mismatch(es)'}")
    return 1 if problems else 0


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stdout)
    if argv and argv[0] in ("compare", "history"):
        mod = __import__(f"evpack.{'bench.compare' if argv[0] == 'compare' else 'history'}", fromlist=["main"])
        return mod.main(argv[1:])
    args = build_parser().parse_args(argv)
    try:
        if args.cmd == "evidence":
            selected = [s.strip() for s in args.stages.split(",")] if args.stages else None
            for s in selected or []:
                if s not in STAGE_COMMANDS:
                    raise PackError(f"unknown stage {s!r} (known: {', '.join(STAGE_COMMANDS)})")
            return cmd_evidence(args, selected)
        if args.cmd in STAGE_COMMANDS:
            return cmd_evidence(args, [args.cmd])
        if args.cmd == "env":
            from .envlock import collect_env
            from .pack import ensure_writable
            from .stages.base import write_json

            ensure_writable(args.out_dir)
            path = args.out_dir / "env.json"
            write_json(path, collect_env(REPO))
            print(f"WROTE env.json: {path}")
            return 0
        if args.cmd == "verify":
            from .verify import verify_pack

            pack = resolve_pack(args.pack)
            problems = verify_pack(pack)
            for p in problems:
                print(f"MISMATCH {p}")
            print(f"{pack.name}: {'verified' if not problems else f'{len(problems)} mismatch(es)'}")
            return 1 if problems else 0
        if args.cmd == "label":
            from .labels import format_labels, load_pack_json

            print(format_labels(load_pack_json(resolve_pack(args.pack)), args.format))
            return 0
        if args.cmd == "report":
            from .report import render_md, write_reports

            pack = resolve_pack(args.pack)
            if args.out is None:
                print(render_md(pack))
                return 0
            out = args.out.resolve()
            if out == pack or pack in out.parents:
                raise PackError("--out must be outside the pack: a pack is never modified")
            from .pack import ensure_writable

            ensure_writable(out)
            md, html = write_reports(pack, out)
            print(f"WROTE {md}\nWROTE {html}")
            return 0
        if args.cmd == "kernels":
            from .registry import VARIANTS

            for v in VARIANTS:
                print(f"{v.name:8s} {v.kind:7s} {', '.join(c.name for c in v.configs)}  - {v.description}")
            return 0
        if args.cmd == "_run-stage":
            from .runner import run_inline

            run_inline(args.stage, args.pack, REPO, json.loads(args.options))
            return 0
    except PackError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 2
