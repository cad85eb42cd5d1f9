"""The provenance statement of a pack (pure: values in, dicts out; no files, no tools).

`provenance.json` is an in-toto Statement v1. Its subjects are `index.json` (which holds the
SHA-256 of every other file of the pack) and the built shared objects; its predicate says what
made the pack. docs/provenance.md documents every field. The two provenance files are written after
index.json and are therefore the only files of a pack that index.json does not list.
"""
from __future__ import annotations

from dataclasses import dataclass

STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
PREDICATE_TYPE = "urn:evpack:provenance:v1"
PROVENANCE_FILE = "provenance.json"
SIGNATURE_FILE = "provenance.json.sig"
UNINDEXED_FILES = (PROVENANCE_FILE, SIGNATURE_FILE)
INDEX_SUBJECT = "index.json"

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


def pack_facts(*, pack_id: str, pack_json: dict, env_json: dict, clocks_json: dict | None) -> dict:
    """The predicate fields that repeat what the pack's own files say (verify compares them)."""
    return {
        "pack_id": pack_id,
        "tool_version": pack_json.get("tool_version"),
        "created_utc": pack_json.get("created_utc"),
        "label": pack_json.get("label"),
        "source": {"commit": (pack_json.get("git") or {}).get("commit"),
                   "dirty": (pack_json.get("git") or {}).get("dirty")},
        "options": pack_json.get("options"),
        "stages": sorted((pack_json.get("stages") or {}).keys()),
        "toolchain": pack_json.get("toolchain"),
        "python": pack_json.get("python"),
        "gpu": {"name": env_json.get("gpu_name"), "driver": env_json.get("driver_version"),
                "compute_capability": env_json.get("compute_capability"),
                "cuda": env_json.get("cuda_version")},
        "bench_clocks": clocks_json,
    }


def build_statement(*, subjects: list[Subject], facts: dict, run: RunFacts) -> dict:
    """The in-toto Statement v1 dict: subjects + the evpack provenance predicate."""
    predicate = {
        "pack_id": facts["pack_id"],
        "tool_version": facts["tool_version"],
        "created_utc": facts["created_utc"],
        "label": facts["label"],
        "source": dict(facts["source"], tree=run.tree),
        "invocation": {"command": list(run.command), "options": facts["options"], "stages": facts["stages"]},
        "toolchain": facts["toolchain"],
        "python": facts["python"],
        "gpu": dict(facts["gpu"], devices=run.gpu_devices),
        "bench_clocks": facts["bench_clocks"],
        "ci": run.ci,
    }
    return {"_type": STATEMENT_TYPE, "subject": [s.to_json() for s in subjects],
            "predicateType": PREDICATE_TYPE, "predicate": predicate}


def facts_of(statement: dict) -> dict:
    """The part of a statement's predicate that pack_facts() re-derives (inverse of build_statement)."""
    p = statement["predicate"]
    return {
        "pack_id": p.get("pack_id"),
        "tool_version": p.get("tool_version"),
        "created_utc": p.get("created_utc"),
        "label": p.get("label"),
        "source": {"commit": (p.get("source") or {}).get("commit"), "dirty": (p.get("source") or {}).get("dirty")},
        "options": (p.get("invocation") or {}).get("options"),
        "stages": (p.get("invocation") or {}).get("stages"),
        "toolchain": p.get("toolchain"),
        "python": p.get("python"),
        "gpu": {k: (p.get("gpu") or {}).get(k) for k in ("name", "driver", "compute_capability", "cuda")},
        "bench_clocks": p.get("bench_clocks"),
    }


def subjects_of(statement: object) -> list[Subject]:
    """The subjects of a statement; ValueError naming what is malformed."""
    if not isinstance(statement, dict):
        raise ValueError("provenance.json is not a JSON object")
    if statement.get("_type") != STATEMENT_TYPE:
        raise ValueError(f"provenance.json _type is {statement.get('_type')!r}, not {STATEMENT_TYPE}")
    if statement.get("predicateType") != PREDICATE_TYPE:
        raise ValueError(f"provenance.json predicateType is {statement.get('predicateType')!r}, "
                         f"not {PREDICATE_TYPE}")
    if not isinstance(statement.get("predicate"), dict):
        raise ValueError("provenance.json has no predicate object")
    subjects = statement.get("subject")
    if not isinstance(subjects, list) or not subjects:
        raise ValueError("provenance.json has no subject list")
    out = []
    for s in subjects:
        digest = s.get("digest") if isinstance(s, dict) else None
        if not isinstance(digest, dict) or not isinstance(s.get("name"), str) or \
                not isinstance(digest.get("sha256"), str):
            raise ValueError(f"provenance.json subject {s!r} has no name and sha256 digest")
        out.append(Subject(s["name"], digest["sha256"]))
    return out


def diff_facts(stated: dict, derived: dict, prefix: str = "") -> list[str]:
    """Dotted names of the fields where the statement and the pack's files disagree."""
    out = []
    for key in sorted(set(stated) | set(derived)):
        a, b = stated.get(key), derived.get(key)
        if isinstance(a, dict) and isinstance(b, dict) and key != "bench_clocks":
            out += diff_facts(a, b, f"{prefix}{key}.")
        elif a != b:
            out.append(f"{prefix}{key}")
    return out


def report_line(pack_json: dict) -> str | None:
    """The report's signature line; None for packs made before provenance (their report has none)."""
    if "signing" not in pack_json:
        return None
    rec = pack_json["signing"]
    if not rec:
        return (f"- signature: unsigned (`{PROVENANCE_FILE}` records the origin; no key signed it, so "
                f"`verify --require-signature` rejects this pack)")
    who = f" `{rec['key_comment']}`" if rec.get("key_comment") else ""
    return (f"- signature: signed by{who} with {rec.get('key_type')} key `{rec.get('key_fingerprint')}` "
            f"(`{SIGNATURE_FILE}`, checked by `python -m evpack verify {pack_json.get('pack_id')} "
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
