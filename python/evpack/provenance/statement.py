"""The provenance statement of a pack (pure: values in, records and dicts out; no files, no tools).

`provenance.json` is an in-toto Statement v1. Its subjects are `index.json` (which holds the
SHA-256 of every other file of the pack) and the built shared objects; its predicate says what
made the pack. docs/provenance.md documents every field. The two provenance files are written after
index.json and are therefore the only files of a pack that index.json does not list.

The subject set is exact, and its rule is a property of the predicate type (the statement's own
signed bytes say which rule applies, so an old statement keeps verifying under its own rule):
- v1 (packs of 2026-11-23): `index.json`, then one subject per build record in BINARY_RECORDS
  that the pack holds, named by the basename of the recorded path;
- v2: `index.json`, then one subject per such record, named by the object's path inside the
  build (`python/evpack/<file>`), so no name can stand for another.
Names are unique; a duplicate, unknown or missing subject is a mismatch.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..dictwalk import MISSING, Rules, differences, sorted_keys
from ..records.binary import BinaryRecord
from ..records.env import EnvJson
from ..records.pack import PackJson, SigningEntry
from ..records.provenance import (
    CiIdentity,
    FactsGpu,
    GpuDevice,
    PackFacts,
    Statement,
    StatementSubject,
)

STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
PREDICATE_TYPE_V1 = "urn:evpack:provenance:v1"
PREDICATE_TYPE = "urn:evpack:provenance:v2"  # what this version writes
PREDICATE_TYPES = (PREDICATE_TYPE_V1, PREDICATE_TYPE)
PROVENANCE_FILE = "provenance.json"
SIGNATURE_FILE = "provenance.json.sig"
UNINDEXED_FILES = (PROVENANCE_FILE, SIGNATURE_FILE)
INDEX_SUBJECT = "index.json"
# The build records whose objects are subjects (module -> record file under build/), in subject order.
# A fixed list, not a glob: a file an attacker adds under build/ never becomes a subject.
BINARY_RECORDS = (("evpack._C", "binary.json"), ("evpack._canaries", "binary_canaries.json"))
PACKAGE_DIR = "python/evpack"  # where the build puts the package's shared objects

# GitHub Actions variables recorded as the CI run's identity (those present).
CI_VARIABLES = ("GITHUB_SERVER_URL", "GITHUB_REPOSITORY", "GITHUB_REPOSITORY_ID", "GITHUB_RUN_ID",
                "GITHUB_RUN_ATTEMPT", "GITHUB_RUN_NUMBER", "GITHUB_WORKFLOW", "GITHUB_WORKFLOW_REF",
                "GITHUB_WORKFLOW_SHA", "GITHUB_JOB", "GITHUB_EVENT_NAME", "GITHUB_REF", "GITHUB_SHA",
                "GITHUB_ACTOR", "RUNNER_NAME", "RUNNER_OS", "RUNNER_ARCH", "RUNNER_ENVIRONMENT")


@dataclass(frozen=True)
class Subject:
    name: str
    sha256: str

    def to_json(self) -> dict:
        return {"name": self.name, "digest": {"sha256": self.sha256}}


@dataclass(frozen=True)
class RunFacts:
    """What only the running process knows (collected when the run starts)."""

    command: tuple[str, ...]
    tree: dict  # {"algorithm", "sha256", "files", "missing", "error"}
    gpu_devices: dict  # {"source", "devices": [{"index", "name", "uuid", "driver"}], "visible", "error"}
    ci: dict | None  # {"system": "github-actions", "variables": {...}} or None


def ci_identity(environ: dict[str, str]) -> dict | None:
    """The GitHub Actions identity from the environment, or None outside Actions."""
    found = {k: environ[k] for k in CI_VARIABLES if environ.get(k)}
    if environ.get("GITHUB_ACTIONS") != "true" and not found:
        return None
    return {"system": "github-actions", "variables": found}


def pack_facts(*, pack_id: str, pack_json: PackJson, env_json: EnvJson, clocks_json: dict | None) -> PackFacts:
    """The predicate fields that repeat what the pack's own files say (verify compares them)."""
    return PackFacts(pack_id, pack_json.tool_version, pack_json.created_utc, pack_json.label, pack_json.git.commit,
                     pack_json.git.dirty, pack_json.options, sorted(pack_json.stage_table), pack_json.toolchain,
                     pack_json.python, FactsGpu(env_json.gpu_name, env_json.driver_version,
                                                env_json.compute_capability, env_json.cuda_version), clocks_json)


def build_statement(*, subjects: list[Subject], facts: PackFacts, run: RunFacts) -> dict:
    """The in-toto Statement v1 dict: subjects + the evpack provenance predicate."""
    predicate = {
        "pack_id": facts.pack_id,
        "tool_version": facts.tool_version,
        "created_utc": facts.created_utc,
        "label": facts.label,
        "source": {"commit": facts.commit, "dirty": facts.dirty, "tree": run.tree},
        "invocation": {"command": list(run.command), "options": facts.options, "stages": facts.stages},
        "toolchain": facts.toolchain,
        "python": facts.python,
        "gpu": {**facts.gpu.as_dict(), "devices": run.gpu_devices},
        "bench_clocks": facts.bench_clocks,
        "ci": run.ci,
    }
    return {"_type": STATEMENT_TYPE, "subject": [s.to_json() for s in subjects],
            "predicateType": PREDICATE_TYPE, "predicate": predicate}


def facts_of(statement: dict) -> dict:
    """The part of a statement's predicate that pack_facts() re-derives (inverse of build_statement)."""
    return PackFacts.of_predicate(Statement.from_json(statement).pred).as_dict()


_STR = (str, type(None))
# What only the run knew, as build_statement writes it: (path in the predicate, the check, what it must be).
# Verify cannot re-derive these values; it holds each one present to its shape (an absent one is an older
# writer's). A bool is never taken for a number.
_RUN_FACT_SHAPES = (
    (("invocation",), lambda v: isinstance(v, dict), "an object"),
    (("invocation", "command"), lambda v: isinstance(v, list) and all(isinstance(a, str) for a in v),
     "a list of strings"),
    (("source",), lambda v: isinstance(v, dict), "an object"),
    (("source", "tree"), lambda v: isinstance(v, dict), "an object"),
    (("source", "tree", "algorithm"), lambda v: isinstance(v, _STR), "a string or null"),
    (("source", "tree", "sha256"), lambda v: isinstance(v, _STR), "a string or null"),
    (("source", "tree", "files"), lambda v: isinstance(v, int) and not isinstance(v, bool), "an integer"),
    (("source", "tree", "missing"), lambda v: isinstance(v, list) and all(isinstance(a, str) for a in v),
     "a list of strings"),
    (("source", "tree", "error"), lambda v: isinstance(v, _STR), "a string or null"),
    (("gpu",), lambda v: isinstance(v, dict), "an object"),
    (("gpu", "devices"), lambda v: isinstance(v, dict), "an object"),
    (("gpu", "devices", "source"), lambda v: isinstance(v, _STR), "a string or null"),
    (("gpu", "devices", "devices"), lambda v: isinstance(v, list) and all(
        isinstance(d, dict) and GpuDevice.from_json(d).well_formed for d in v),
     "a list of {index, name, uuid, driver}"),
    (("gpu", "devices", "visible"), lambda v: isinstance(v, _STR), "a string or null"),
    (("gpu", "devices", "error"), lambda v: isinstance(v, _STR), "a string or null"),
    (("ci",), lambda v: v is None or (isinstance(v, dict) and CiIdentity.from_json(v).well_formed),
     "null or {system, variables of strings}"),
)
def run_fact_problems(statement: object) -> list[str]:
    """The statement's run-only facts (command, source tree, GPUs, CI identity) that do not have the shape
    build_statement gives them: [] for a well-formed statement."""
    pred = Statement.from_json(statement).predicate
    if not isinstance(pred, dict):
        return ["provenance: the statement's predicate is not an object"]
    problems = []
    for path, ok, what in _RUN_FACT_SHAPES:
        value: object = pred
        for key in path:
            value = value.get(key, MISSING) if isinstance(value, dict) else MISSING
        if value is not MISSING and not ok(value):
            problems.append(f"provenance: predicate.{'.'.join(path)} is not {what}")
    return problems


def object_subject_name(predicate_type: str, module: str, recorded_path: str) -> str:
    """The subject name of a built object under the statement's rule (see the module docstring)."""
    base = recorded_path.replace("\\", "/").rsplit("/", 1)[-1]
    if predicate_type == PREDICATE_TYPE_V1:
        return base
    return f"{PACKAGE_DIR}/{base}"


def expected_subjects(predicate_type: str, index_sha256: str,
                      records: list[tuple[str, dict]]) -> list[Subject]:
    """The exact subject list a statement of this type must hold: index.json, then one per build
    record (module, record dict) in BINARY_RECORDS order. ValueError for a record that names another
    module or no file, or whose name is not unique."""
    out = [Subject(INDEX_SUBJECT, index_sha256)]
    for module, record in records:
        rec = BinaryRecord.from_json(record)
        path, digest = rec.path, rec.sha256
        if rec.module != module or not isinstance(path, str) or not path.strip("/") or \
                not isinstance(digest, str):
            raise ValueError(f"build record of {module} does not name that module, a file and a sha256")
        out.append(Subject(object_subject_name(predicate_type, module, path), digest))
    names = [s.name for s in out]
    if len(set(names)) != len(names):
        raise ValueError(f"build records give subject names that are not unique: {names}")
    return out


def subjects_of(statement: object) -> list[Subject]:
    """The subjects of a statement, in order; ValueError naming what is malformed."""
    if not isinstance(statement, dict):
        raise ValueError("provenance.json is not a JSON object")
    st = Statement.from_json(statement)
    if st._type != STATEMENT_TYPE:
        raise ValueError(f"provenance.json _type is {st._type!r}, not {STATEMENT_TYPE}")
    if st.predicateType not in PREDICATE_TYPES:
        raise ValueError(f"provenance.json predicateType is {st.predicateType!r}, "
                         f"not one of {', '.join(PREDICATE_TYPES)}")
    if not isinstance(st.predicate, dict):
        raise ValueError("provenance.json has no predicate object")
    subjects = st.subject
    if not isinstance(subjects, list) or not subjects:
        raise ValueError("provenance.json has no subject list")
    out = []
    for s in subjects:
        sub = StatementSubject.from_json(s)
        if not isinstance(s, dict) or not isinstance(sub.name, str) or not isinstance(sub.sha256, str):
            raise ValueError(f"provenance.json subject {s!r} has no name and sha256 digest")
        out.append(Subject(sub.name, sub.sha256))
    return out


def subject_problems(stated: list[Subject], expected: list[Subject]) -> list[str]:
    """Where the statement's subjects differ from the exact list the pack gives (empty: they match).
    Compared as lists, not as a dict by name: a duplicate never hides a subject."""
    out = []
    seen: set[str] = set()
    for s in stated:
        if s.name in seen:
            out.append(f"provenance digest: subject {s.name} appears more than once in the statement")
        seen.add(s.name)
    want = {s.name: s.sha256 for s in expected}
    for s in stated:
        if s.name not in want:
            out.append(f"provenance digest: subject {s.name} is not in the pack (no such file or build record)")
        elif s.sha256 != want[s.name]:
            out.append(f"provenance digest: {s.name} has sha256 {want[s.name][:12]} but the statement says "
                       f"{s.sha256[:12]}: the pack changed after the statement was made")
    out += [f"provenance digest: {s.name} (sha256 {s.sha256[:12]}) is not a subject of the statement"
            for s in expected if s.name not in seen]
    return out


# A key of one side only counts (as None against the other side's value); bench_clocks is compared whole.
FACT_RULES = Rules(mismatch=lambda path, stated, derived: path, keys=sorted_keys,
                   same=lambda a, b: (None if a is MISSING else a) == (None if b is MISSING else b),
                   leaf=lambda key: key == "bench_clocks")


def diff_facts(stated: dict, derived: dict, prefix: str = "") -> list[str]:
    """Dotted names of the fields where the statement and the pack's files disagree."""
    return differences(stated, derived, FACT_RULES, prefix.removesuffix("."))


def report_line(pack_json: dict) -> str | None:
    """The report's signature line; None for packs made before provenance (their report has none)."""
    if "signing" not in pack_json:
        return None
    pj = PackJson.from_json(pack_json)
    if not pj.signing:
        return (f"- signature: unsigned (`{PROVENANCE_FILE}` records the origin; no key signed it, so "
                f"`verify --require-signature` rejects this pack)")
    rec = SigningEntry.from_json(pj.signing)
    who = f" `{rec.key_comment}`" if rec.key_comment else ""
    return (f"- signature: signed by{who} with {rec.key_type} key `{rec.key_fingerprint}` "
            f"(`{SIGNATURE_FILE}`, checked by `python -m evpack verify {pj.pack_id} "
            f"--allowed-signers FILE`)")


GPU_QUERY = ("index", "name", "uuid", "driver_version")


def parse_gpu_query(text: str) -> list[dict]:
    """Rows of `nvidia-smi --query-gpu=index,name,uuid,driver_version --format=csv,noheader`."""
    rows = []
    for line in text.splitlines():
        cells = [c.strip() for c in line.split(",")]
        if len(cells) == len(GPU_QUERY) and cells[0].isdigit():
            rows.append({"index": int(cells[0]), "name": cells[1], "uuid": cells[2], "driver": cells[3]})
    return rows


def tree_line(sha256: str, path: str) -> str:
    """One line of the tree listing, in `sha256sum`'s output format."""
    return f"{sha256}  {path}\n"
