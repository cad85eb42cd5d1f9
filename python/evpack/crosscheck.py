"""pack.json's facts against the other records of the pack that hold the same fact.

A stage's outcome is re-derived from its raw files; some facts of pack.json are not a stage's outcome but are
written a second time, by another writer, elsewhere in the pack. Each pair must agree, and a stage's folder
must be one pack.json lists:
  - every top-level folder is a stage pack.json lists, and every stage it lists is one evpack derives: a
    stage dropped from pack.json (its gate then `skipped`), a folder renamed, or a listed entry nothing
    derives would carry claims nobody reads;
  - the run options the benchmark recorded (bench/run.json `options`) are the options pack.json gives:
    `variants` decides which variants the GPU stages must cover (coverage.py), `suite` which shapes ran;
  - the GPU the benchmark ran on (bench/run.json `device.name`) is the one pack.json's summary and env.json
    name, and env.json's commit and dirty flag are pack.json's `git`;
  - the pack id is one a run makes from the commit (pack.new_pack_id: `<UTC time>-<commit[:12] or
    nogit>[-dirty][-N]`), and names pack.json's commit and dirty flag;
  - the schema version, which picks the rules verify applies (the canaries required, the digest), is not
    older than what the pack holds: no pack.json field a later schema introduced, no stage cell of a canary
    only a later schema planted.
What holds none of the pair (a pack whose benchmark did not run, an env.json without a field) is not asked.
Every pack ever committed to the project agrees on all of these. Standard library only.
"""
from __future__ import annotations

import re
from pathlib import Path

from .jsonio import read_json, read_member_json
from .records.bench import BenchRun
from .records.env import EnvJson
from .records.pack import ABSENT, PackJson, present
from .records.schema import SCHEMAS
from .records.stage_options import RunOptions
from .stages.order import STAGE_ORDER

PACK_ID = re.compile(r"\d{8}T\d{6}Z-(?P<sha>[0-9a-f]{12}|nogit)(?P<dirty>-dirty)?(?:-\d{1,3})?")


def unlisted_stage_folders(files: frozenset[str], stages: object) -> list[str]:
    """Every top-level folder of a pack is a stage's, and pack.json lists each stage by a name evpack derives:
    a folder of another name (a stage's files renamed, `Sanitize/`) or an entry no derivation reads (a second
    `bench ` row, a stage that never ran) would carry claims nobody checks."""
    listed = set(stages) if isinstance(stages, dict) else set()
    folders = {f.split("/", 1)[0] for f in files if "/" in f}
    problems = [f"folder {d}/ is not a stage pack.json lists (its files would go unread)"
                for d in sorted(folders - (listed & set(STAGE_ORDER)))]
    return problems + [f"pack.json lists stage {s!r}, which is no stage evpack derives" for s in sorted(
        listed - set(STAGE_ORDER), key=repr)]


def _record(pack_dir: Path, folder: str, name: str) -> dict | None:
    try:
        data = read_member_json(pack_dir / folder, name) if folder else read_json(pack_dir / name)
    except (OSError, ValueError, RecursionError):
        return None  # absent or unreadable: the stage's derivation (or the index) names it
    return data if isinstance(data, dict) else None


def _differs(what: str, said: object, other: str, says: object) -> str:
    return f"{what}: pack.json says {said!r} but {other} says {says!r}"


def _bench_run(pack_dir: Path) -> BenchRun | None:
    run = _record(pack_dir, "bench", "run.json")
    return None if run is None else BenchRun.from_json(run)


def fact_problems(pack_dir: Path, files: frozenset[str], pj: PackJson, raw: dict, version: int) -> list[str]:
    """Every check of this module, bench/run.json and env.json read once."""
    run = _bench_run(pack_dir)
    env = EnvJson.from_json(_record(pack_dir, "", "env.json"))
    return (unlisted_stage_folders(files, pj.stages) + option_problems(run, pj.options)
            + identity_problems(run, env, pj) + schema_problems(pack_dir, raw, version))


def option_problems(run: BenchRun | None, options: object) -> list[str]:
    if run is None:
        return []
    recorded = run.options
    if not isinstance(recorded, dict):
        return ["bench/run.json records no run options (every benchmark writes them): pack.json's options "
                "cannot be checked"]
    given = options if isinstance(options, dict) else {}
    problems = [_differs(f"options.{k}", given.get(k), "bench/run.json, the benchmark's own record", v)
                for k, v in recorded.items() if given.get(k) != v]
    suite = RunOptions.from_json(recorded).suite
    if "suite" in run.raw and run.suite != suite:
        problems.append(f"bench/run.json: the suite it ran, {run.suite!r}, is not its options' {suite!r}")
    return problems


def identity_problems(run: BenchRun | None, env: EnvJson, pj: PackJson) -> list[str]:
    problems = []
    commit, dirty = present(pj.git.commit), present(pj.git.dirty)
    m = PACK_ID.fullmatch(str(present(pj.pack_id)))
    if m is None:
        problems.append(f"pack id {present(pj.pack_id)!r} is not one a run makes (<UTC time>-<commit[:12] or "
                        f"nogit>[-dirty][-N]): it names no commit to check")
    elif m.group("sha") != (commit or "nogit")[:12]:
        problems.append(_differs("git.commit", commit, f"the pack id {m.group(0)}", m.group("sha")))
    if m is not None and bool(m.group("dirty")) != bool(dirty):
        problems.append(_differs("git.dirty", dirty, f"the pack id {m.group(0)}", bool(m.group("dirty"))))
    for key, said, says in (("git_commit", commit, env.git_commit), ("git_dirty", dirty, env.git_dirty)):
        if key in env.raw and says != said:
            problems.append(_differs(f"git ({key})", said, "env.json", says))
    gpu = run.device.name if run is not None else None
    if run is not None and not isinstance(gpu, str):
        problems.append("bench/run.json names no GPU (device.name; every benchmark records it): the GPU "
                        "pack.json and env.json name cannot be checked")
    if isinstance(gpu, str):
        summary_gpu = pj.summary.gpu_name
        if summary_gpu not in (None, ABSENT) and summary_gpu != gpu:
            problems.append(_differs("summary.gpu_name", summary_gpu, "bench/run.json device.name", gpu))
        if "gpu_name" in env.raw and env.gpu_name != gpu:
            problems.append(f"env.json gpu_name {env.gpu_name!r} is not the GPU the benchmark ran on "
                            f"(bench/run.json device.name {gpu!r})")
    return problems


# pack.json fields by the schema whose evidence run introduced them (records/pack.py PackRecord). Not `signing`:
# `sign` adds it to a pack of any schema (an older pack signed by today's code).
FIELD_SINCE = {"requirement": 2, "incremental": 3}
CELL_STAGES = ("correctness", "sanitize", "stability", "tensor_proof", "ptxas", "sass")


def _canary_since() -> dict[str, int]:
    since: dict[str, int] = {}
    for version in sorted(SCHEMAS):
        for canary, _gate in SCHEMAS[version].canary_gates:
            since.setdefault(canary, version)
    return since


def schema_problems(pack_dir: Path, raw: dict, version: int) -> list[str]:
    """What in the pack a writer of a later schema than the declared one made."""
    problems = [f"pack.json holds {key!r}, which schema-{since} writers introduced, but says schema_version "
                f"{version}" for key, since in FIELD_SINCE.items() if key in raw and since > version]
    since = _canary_since()
    for stage in CELL_STAGES:
        procs = _record(pack_dir, stage, "procs.json") or {}
        later = sorted({part for cell in procs for part in str(cell).split(".") if since.get(part, 0) > version})
        problems += [f"stage {stage} holds cells of {c}, a canary schema-{since[c]} writers planted, but pack.json "
                     f"says schema_version {version}" for c in later]
    return problems
