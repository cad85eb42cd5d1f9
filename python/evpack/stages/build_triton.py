"""The build stage's Triton part: the ahead-of-time kernels (python/evpack/triton_aot.py) kept in the pack.

run side (`keep`): for each built extension with Triton kernels, build/triton/<ext>/manifest.json and every
file it names but the fat binaries (cubin, PTX, Triton metadata, ptxas report) go to the pack's
build/triton/<ext>/, each inside an xz stream (`<file>.xz`: 1.85 MB raw, 0.26 MB in xz on a quick pack; packs
written before hold the plain files, and readers take either form through packfs.member); each ptxas report also goes to build/ptxas/ (the PTXAS stage reads it like nvcc's);
build/triton.json records, per extension, the Triton versions and whether every cubin is embedded byte for
byte in the shared object the build recorded (the binary the other stages load and hash).

derive side (`check`): the kept files' raw bytes (inflated) hash to what the manifest says, each cubin was found in the shared
object, and the Triton is the one torch requires. Standard library only.
"""
from __future__ import annotations

import hashlib
import json
import re
import shutil
from pathlib import Path

from ..packfs import member, plain_name, read_stored, write_stored
from ..records.triton import TritonManifest, TritonRecord

RECORD = "triton.json"
KEPT = ("cubin", "ptx", "json", "ptxas.log")
STORED_SUFFIX = ".xz"  # the form `keep` writes each kept file in; the manifest's sha256 is of the raw bytes


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _safe(rel: str) -> bool:
    return bool(re.fullmatch(r"[A-Za-z0-9_]+/[A-Za-z0-9_.-]+", rel)) and ".." not in rel


def keep(repo: Path, dest: Path, built: dict[str, Path]) -> None:
    """built: extension ("_C") -> the shared object the build recorded for it."""
    record = {}
    for ext, so in built.items():
        src = repo / "build" / "triton" / ext
        manifest_path = src / "manifest.json"
        if not manifest_path.is_file():
            continue
        manifest = TritonManifest.from_json(json.loads(manifest_path.read_text(encoding="utf-8")))
        out = dest / "triton" / ext
        out.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(manifest_path, out / "manifest.json")
        so_bytes = so.read_bytes()
        embedded, problems = 0, []
        for k in manifest.rows:
            for kind in KEPT:
                rel = k.file(kind).path
                if not _safe(rel):
                    problems.append(f"{rel!r} is not a <variant>/<file> name")
                    continue
                write_stored(out / f"{rel}{STORED_SUFFIX}", (src / rel).read_bytes())
                if kind == "ptxas.log":
                    shutil.copyfile(src / rel, dest / "ptxas" / f"triton_{ext}_{rel.replace('/', '_')}")
            if (src / k.cubin.path).read_bytes() in so_bytes:
                embedded += 1
            else:
                problems.append(f"{k.symbol} on {k.arch}: its cubin is not in {so.name}")
        record[ext] = {"manifest_sha256": _sha256(out / "manifest.json"), "so_sha256": hashlib.sha256(so_bytes).hexdigest(),
                       "kernels": len(manifest.kernels), "cubins_embedded": embedded,
                       "triton_version": manifest.triton_version,
                       "triton_required": manifest.triton_required, "problems": problems}
    if record:
        (dest / RECORD).write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")


def check(stage_dir: Path, so_sha256: dict[str, str]) -> tuple[list[str], dict]:
    """(problems, data for the outcome) of the Triton kernels a build kept; ([], {}) for a build without."""
    path = stage_dir / RECORD
    if not path.is_file():
        return [], {}
    problems: list[str] = []
    data: dict = {}
    for ext, value in json.loads(path.read_text(encoding="utf-8")).items():
        rec = TritonRecord.from_json(value)
        base = stage_dir / "triton" / ext
        try:
            manifest = TritonManifest.from_json(json.loads((base / "manifest.json").read_text(encoding="utf-8")))
        except (OSError, ValueError) as e:
            problems.append(f"triton {ext}: manifest unreadable ({e})")
            continue
        if _sha256(base / "manifest.json") != rec.manifest_sha256:
            problems.append(f"triton {ext}: manifest.json is not the one the build recorded")
        if rec.so_sha256 != so_sha256.get(ext):
            problems.append(f"triton {ext}: cubins were matched against shared object {rec.so_sha256}, "
                            f"not the recorded {so_sha256.get(ext)}")
        if rec.triton_version != rec.triton_required:
            problems.append(f"triton {ext}: built with triton {rec.triton_version}, torch requires "
                            f"{rec.triton_required}")
        problems += [f"triton {ext}: {p}" for p in ([] if "problems" not in rec.raw else rec.problems)]
        kernels = manifest.rows if "kernels" in manifest.raw else []
        if rec.cubins_embedded != len(kernels):
            problems.append(f"triton {ext}: {rec.cubins_embedded} of {len(kernels)} cubins are in the binary")
        for k in kernels:
            for kind in KEPT:
                f = k.file(kind)
                problem = _kept_problem(base, f.path, f.sha256)
                if problem:
                    problems.append(f"triton {ext}: {problem}")
        data[ext] = {"kernels": len(kernels), "triton_version": rec.triton_version,
                     "triton_required": rec.triton_required,
                     "cubins": {f"{k.symbol}@{k.arch}": k.cubin.sha256 for k in kernels}}
    return problems, data


def _kept_problem(base: Path, rel: str, sha256: str) -> str:
    """'' when the kept file `rel` (plain, or inside its xz or gzip stream) holds bytes hashing to `sha256`;
    else one clause naming what is wrong (missing, stored twice, not inflatable, another hash)."""
    if not isinstance(rel, str) or not _safe(rel):
        return f"{rel} is missing"
    folder, name = rel.split("/")
    if not plain_name(folder) or not plain_name(name):
        return f"{rel} is missing"
    try:
        path = member(base / folder, name)
        if not path.is_file():
            return f"{rel} is missing"
        data = read_stored(path)
    except (OSError, ValueError) as exc:  # stored twice, or a corrupt/truncated/bomb stream (CompressedFileError)
        return f"{rel}: {exc}"
    if hashlib.sha256(data).hexdigest() != sha256:
        return f"{rel} does not hash to the manifest's {str(sha256)[:12]}"
    return ""
