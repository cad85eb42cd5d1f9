"""The packs committed under artifacts/reference/, named by the role a test needs them for.

Each role is found from the packs' own pack.json (schema, suite, signature, `incremental` record, commit,
A/B), never from a pack id, so that replacing the packs needs no test edit. A role with no pack is None
(or an empty tuple); a test that needs it is skipped by `needs(...)` with a reason that says which pack is
missing. The rule for the folder (artifacts/reference/README.md): at most four packs, the newest full suite,
the newest default run, an incremental rerun and one old pack kept as the compatibility fixture.

Roles:
  COMPAT       the compatibility fixture: the newest pack of the lowest schema version (schema 1 today)
  FULL         the newest signed full-suite pack that carried nothing
  DEFAULT      the newest default-suite (`--suite` left out: quick) pack that carried nothing
  INCREMENTAL  the newest pack that carried cells from an earlier one (pack.json `incremental.carried`)
  SIGNED       a signed pack: FULL when there is one, else the newest signed pack
  SIGNED_ALL   every signed pack, newest first
  SIGNED_WHOLE every signed pack that carried nothing (verifies alone, with no source pack beside it), newest
               first
  SIGNED_ONE_COMMIT  two or more of those of one commit (what two GPU jobs of one PR bring to a merge)
  UNSIGNED     the newest unsigned pack
  OTHER_SIGNED a signed pack other than SIGNED (the newest such)
  SHARDED      the newest pack whose benchmark ran in shards over several GPUs (bench/shards.json)
  SIGNERS      artifacts/reference/allowed_signers
  SAME_COMMIT_AB  two or more schema-2 packs of one clean commit and suite, each with a same-run A/B
                  (bench/ab.json): the packs whose real samples test_ab.py's older checks were written on
  SAME_COMMIT_V1  two or more schema-1 packs of one clean commit and suite without an A/B (two benchmarks of
                  one binary, 7 minutes apart): the pair that older literal checks were written on
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
REFERENCE = REPO / "artifacts" / "reference"
SIGNERS = REFERENCE / "allowed_signers"
DEFAULT_SUITE = "quick"  # the CLI's --suite default (test_reference_packs checks it against the parser)


@dataclass(frozen=True)
class RefPack:
    """What a test selects a reference pack by, read from its pack.json."""

    path: Path
    schema: int
    suite: str | None
    signed: bool
    carried: int  # cells carried from earlier packs (pack.json `incremental.carried`)
    label: str
    commit: str | None
    dirty: bool
    gpus: int  # GPUs the cells ran on (options.gpus; 1 when absent)
    ab: bool  # the bench stage holds an A/B against a base (bench/ab.json)

    @property
    def name(self) -> str:
        return self.path.name

    @classmethod
    def read(cls, path: Path) -> RefPack:
        pj = json.loads((path / "pack.json").read_text(encoding="utf-8"))
        options = pj.get("options") or {}
        inc = pj.get("incremental") or {}
        git = pj.get("git") or {}
        return cls(path=path, schema=int(pj["schema_version"]), suite=options.get("suite"),
                   signed=(path / "provenance.json.sig").is_file(), carried=len(inc.get("carried") or []),
                   label=pj.get("label", ""), commit=git.get("commit"), dirty=bool(git.get("dirty")),
                   gpus=len(options.get("gpus") or []) or 1,
                   ab=any((path / "bench").rglob("ab.json*")) if (path / "bench").is_dir() else False)


def _packs() -> tuple[RefPack, ...]:
    """Every committed pack, oldest first (pack ids start with their UTC time)."""
    if not REFERENCE.is_dir():
        return ()
    return tuple(RefPack.read(p) for p in sorted(REFERENCE.iterdir())
                 if p.is_dir() and not p.is_symlink() and (p / "index.json").is_file())


ALL: tuple[RefPack, ...] = _packs()
PACKS: tuple[Path, ...] = tuple(p.path for p in ALL)


def _newest(packs) -> Path | None:
    packs = list(packs)
    return packs[-1].path if packs else None


def _compat() -> Path | None:
    if not ALL:
        return None
    low = min(p.schema for p in ALL)
    return _newest(p for p in ALL if p.schema == low)


def _newest_group(packs, key) -> tuple[Path, ...]:
    """Of the packs sharing a key, the newest group of two or more (by its first pack); () when there is none."""
    groups: dict[object, list[Path]] = {}
    for p in packs:
        groups.setdefault(key(p), []).append(p.path)
    best = [g for g in groups.values() if len(g) >= 2]
    return tuple(best[-1]) if best else ()


def same_commit(schema: int, ab: bool) -> tuple[Path, ...]:
    """The newest group of two or more packs of one schema, one clean commit and one suite, each with (ab=True)
    or without an A/B; () when there is none."""
    return _newest_group((p for p in ALL if p.schema == schema and p.ab == ab and p.commit and not p.dirty),
                         key=lambda p: (p.commit, p.suite))


COMPAT = _compat()
FULL = _newest(p for p in ALL if p.signed and p.suite == "full" and not p.carried)
DEFAULT = _newest(p for p in ALL if p.suite == DEFAULT_SUITE and not p.carried)
INCREMENTAL = _newest(p for p in ALL if p.carried)
SIGNED_ALL: tuple[Path, ...] = tuple(reversed([p.path for p in ALL if p.signed]))
SIGNED_WHOLE: tuple[Path, ...] = tuple(reversed([p.path for p in ALL if p.signed and not p.carried]))
SIGNED_ONE_COMMIT = _newest_group((p for p in ALL if p.signed and not p.carried and p.commit), key=lambda p: p.commit)
SIGNED = FULL or (SIGNED_ALL[0] if SIGNED_ALL else None)
UNSIGNED = _newest(p for p in ALL if not p.signed)
OTHER_SIGNED = next((p for p in SIGNED_ALL if p != SIGNED), None)
SHARDED = _newest(p for p in ALL if (p.path / "bench" / "shards.json").is_file())
SAME_COMMIT_AB = same_commit(2, ab=True)
SAME_COMMIT_V1 = same_commit(1, ab=False)

WHAT = {"COMPAT": "the compatibility fixture (a pack of the oldest schema)",
        "FULL": "a signed full-suite pack", "DEFAULT": f"a default-suite ({DEFAULT_SUITE}) pack",
        "INCREMENTAL": "a pack that carried cells from an earlier pack", "SIGNED": "a signed pack",
        "UNSIGNED": "an unsigned pack", "SIGNERS": "the allowed_signers file",
        "OTHER_SIGNED": "a second signed pack", "SHARDED": "a pack whose benchmark ran in shards over GPUs"}


def info(path: Path) -> RefPack:
    return next(p for p in ALL if p.path == path)


def pack_json(path: Path) -> dict:
    return json.loads((path / "pack.json").read_text(encoding="utf-8"))


def needs(*roles: str, reason: str = "") -> pytest.MarkDecorator:
    """A skipif mark for a test that needs the packs of these roles (names of this module's roles)."""
    g = globals()
    missing = [r for r in roles if not g[r] or (r == "SIGNERS" and not SIGNERS.is_file())]
    why = "; ".join(f"no reference pack of role {r} ({WHAT.get(r, r)}) under artifacts/reference" for r in missing)
    return pytest.mark.skipif(bool(missing), reason=(why + (f": {reason}" if reason else "")) or "-")


def skip_unless(path: Path | None, role: str) -> Path:
    """The pack of a role, or a skip of the running test naming the role."""
    if path is None:
        pytest.skip(f"no reference pack of role {role} ({WHAT.get(role, role)}) under artifacts/reference")
    return path


def param(*pairs: tuple[str, Path | None]) -> list:
    """pytest params of (role, pack) pairs: each role with no pack is a skipped param that names it."""
    out = []
    for role, path in pairs:
        marks = () if path else (pytest.mark.skip(reason=f"no reference pack of role {role} "
                                                     f"({WHAT.get(role, role)}) under artifacts/reference"),)
        out.append(pytest.param(path, id=role, marks=marks))
    return out


def signer_names() -> set[str]:
    """The principals of the committed allowed_signers file (the name `verify` prints for a signed pack)."""
    if not SIGNERS.is_file():
        return set()
    return {line.split()[0] for line in SIGNERS.read_text().splitlines() if line.strip() and not line.startswith("#")}
