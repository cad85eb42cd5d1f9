"""Benchmark suites: shape grids read from bench/suites/<name>.toml, and ad-hoc shapes.

A suite file is data, not code:

    name = "quick"
    budget_s = 90                    # wall-time target of the measuring loop
    canonical = "B=16,H=16,S=512,D=64,dtype=fp16,causal=0"
    primary_mode = "cold"            # the mode the leaderboard and speedups use
    [sampling]                       # fields of stats.StopRule
    [[group]]                        # one grid; shapes = product of its lists
    name = "canonical grid"
    BH = [[2, 8], [4, 16]]           # or B = [...] and H = [...], or tokens = 8192 and H = [...]
    S = [512]; D = [64]; dtype = ["fp16"]; causal = [false, true]
    modes = ["cold", "warm", "graph"]

`tokens` fixes B*S (B = tokens // S): the sequence sweep at constant work per token.
Shapes that appear in several groups are measured once (modes and tags merged).
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field, fields
from pathlib import Path

import tomllib

from ..records.suite import SuiteFile, SuiteGroup
from .stats import StopRule

DTYPES = ("fp16", "bf16")
MODES = ("cold", "warm", "graph")
ELEM_BYTES = {"fp16": 2, "bf16": 2}
ADHOC = "adhoc"  # suite name meaning "only the ad-hoc shapes"


class SuiteError(ValueError):
    """A suite file or shape string that does not follow the rules (message names the field)."""


@dataclass(frozen=True, order=True)
class Shape:
    B: int
    H: int
    S: int
    D: int
    dtype: str = "fp16"
    causal: bool = False

    def __post_init__(self) -> None:
        for name in ("B", "H", "S", "D"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise SuiteError(f"shape: {name} must be a positive integer, got {value!r}")
        if self.dtype not in DTYPES:
            raise SuiteError(f"shape: dtype must be one of {DTYPES}, got {self.dtype!r}")
        if not isinstance(self.causal, bool):
            raise SuiteError(f"shape: causal must be a boolean, got {self.causal!r}")

    @property
    def key(self) -> str:
        return f"B={self.B},H={self.H},S={self.S},D={self.D},dtype={self.dtype},causal={int(self.causal)}"

    @property
    def elem_bytes(self) -> int:
        return ELEM_BYTES[self.dtype]

    @property
    def numel(self) -> int:
        """Elements of one of Q, K, V, O: B*H*S*D."""
        return self.B * self.H * self.S * self.D


_BOOL = {"1": True, "0": False, "true": True, "false": False, "yes": True, "no": False}


def parse_shape(text: str) -> Shape:
    """'B=16,H=16,S=512,D=64,dtype=fp16,causal=1' -> Shape (dtype defaults to fp16, causal to 0)."""
    values: dict[str, str] = {}
    for part in text.replace(" ", "").split(","):
        if not part:
            continue
        if "=" not in part:
            raise SuiteError(f"shape {text!r}: expected KEY=VALUE, got {part!r}")
        k, v = part.split("=", 1)
        k = k if k in ("B", "H", "S", "D") else k.lower()
        if k not in ("B", "H", "S", "D", "dtype", "causal"):
            raise SuiteError(f"shape {text!r}: unknown key {k!r} (keys: B, H, S, D, dtype, causal)")
        if k in values:
            raise SuiteError(f"shape {text!r}: key {k!r} given twice")
        values[k] = v
    missing = [k for k in ("B", "H", "S", "D") if k not in values]
    if missing:
        raise SuiteError(f"shape {text!r}: missing {', '.join(missing)}")
    ints = {}
    for k in ("B", "H", "S", "D"):
        try:
            ints[k] = int(values[k])
        except ValueError:
            raise SuiteError(f"shape {text!r}: {k} must be an integer, got {values[k]!r}") from None
    causal = values.get("causal", "0").lower()
    if causal not in _BOOL:
        raise SuiteError(f"shape {text!r}: causal must be 0/1/true/false, got {causal!r}")
    return Shape(**ints, dtype=values.get("dtype", "fp16").lower(), causal=_BOOL[causal])


@dataclass(frozen=True)
class SuiteShape:
    shape: Shape
    modes: tuple[str, ...]
    tags: tuple[str, ...]


@dataclass(frozen=True)
class Suite:
    name: str
    shapes: tuple[SuiteShape, ...]
    rule: StopRule
    canonical: Shape
    primary_mode: str = "cold"
    budget_s: float = 90.0
    description: str = ""
    extra: dict = field(default_factory=dict)

    @property
    def measurements(self) -> int:
        return sum(len(s.modes) for s in self.shapes)


def suite_path(repo: Path, name: str) -> Path:
    return repo / "bench" / "suites" / f"{name}.toml"


def _list(group: dict, key: str, where: str) -> list:
    value = group.get(key)
    if not isinstance(value, list) or not value:
        raise SuiteError(f"{where}: '{key}' must be a non-empty list")
    return value


def _expand_group(group: dict, where: str) -> list[tuple[Shape, tuple[str, ...]]]:
    known = {"name", "BH", "B", "H", "tokens", "S", "D", "dtype", "causal", "modes"}
    unknown = set(group) - known
    if unknown:
        raise SuiteError(f"{where}: unknown keys {sorted(unknown)}")
    modes = tuple(_list(group, "modes", where))
    bad = [m for m in modes if m not in MODES]
    if bad:
        raise SuiteError(f"{where}: modes must be among {MODES}, got {bad}")
    S_list, D_list = _list(group, "S", where), _list(group, "D", where)
    dtypes, causals = _list(group, "dtype", where), _list(group, "causal", where)
    how = [k for k in ("BH", "B", "tokens") if k in group]
    if len(how) != 1:
        raise SuiteError(f"{where}: give exactly one of 'BH', 'B' (with 'H') or 'tokens' (with 'H')")
    out = []
    for S, D, dtype, causal in itertools.product(S_list, D_list, dtypes, causals):
        if how == ["BH"]:
            pairs = _list(group, "BH", where)
            if not all(isinstance(p, list) and len(p) == 2 for p in pairs):
                raise SuiteError(f"{where}: 'BH' must be a list of [B, H] pairs")
        elif how == ["B"]:
            pairs = list(itertools.product(_list(group, "B", where), _list(group, "H", where)))
        else:
            tokens = SuiteGroup.from_json(group).tokens
            if not isinstance(tokens, int) or tokens <= 0 or tokens % S:
                raise SuiteError(f"{where}: tokens={tokens!r} must be a positive multiple of S={S}")
            pairs = [(tokens // S, h) for h in _list(group, "H", where)]
        for B, H in pairs:
            out.append((Shape(B, H, S, D, dtype, causal), modes))
    return out


def _merge(entries: list[tuple[Shape, tuple[str, ...], str]]) -> tuple[SuiteShape, ...]:
    merged: dict[Shape, tuple[list[str], list[str]]] = {}
    for shape, modes, tag in entries:
        m, t = merged.setdefault(shape, ([], []))
        m.extend(x for x in modes if x not in m)
        if tag not in t:
            t.append(tag)
    return tuple(SuiteShape(s, tuple(sorted(m, key=MODES.index)), tuple(t)) for s, (m, t) in merged.items())


def parse_suite(data: dict, where: str = "suite") -> Suite:
    """Validate a parsed suite TOML document."""
    doc = SuiteFile.from_json(data)
    name = doc.name
    if not isinstance(name, str) or not name:
        raise SuiteError(f"{where}: 'name' must be a non-empty string")
    rule_fields = {f.name for f in fields(StopRule)}
    sampling = {} if doc.sampling is None else doc.sampling
    unknown = set(sampling) - rule_fields
    if unknown:
        raise SuiteError(f"{where}: [sampling] unknown keys {sorted(unknown)} (known: {sorted(rule_fields)})")
    try:
        rule = StopRule(**sampling)
    except (TypeError, ValueError) as exc:
        raise SuiteError(f"{where}: [sampling] {exc}") from None
    groups = [] if doc.group is None else doc.group
    if not isinstance(groups, list):
        raise SuiteError(f"{where}: 'group' must be an array of tables")
    entries = []
    for i, group in enumerate(groups):
        given = SuiteGroup.from_json(group).name
        label = f"group{i}" if given is None else given
        entries += [(s, m, label) for s, m in _expand_group(group, f"{where} group {label!r}")]
    primary = "cold" if doc.primary_mode is None else doc.primary_mode
    if primary not in MODES:
        raise SuiteError(f"{where}: primary_mode must be one of {MODES}")
    budget = 90 if doc.budget_s is None else doc.budget_s
    if not isinstance(budget, (int, float)) or budget <= 0:
        raise SuiteError(f"{where}: budget_s must be a positive number")
    canonical = "B=16,H=16,S=512,D=64" if doc.canonical is None else doc.canonical
    return Suite(name, _merge(entries), rule, parse_shape(canonical), primary, float(budget),
                 "" if doc.description is None else doc.description)


def load_suite(name_or_path: str | Path, repo: Path) -> Suite:
    path = Path(name_or_path)
    if not path.suffix:
        path = suite_path(repo, str(name_or_path))
    if not path.exists():
        raise SuiteError(f"suite: no suite file {path}")
    with open(path, "rb") as f:
        try:
            data = tomllib.load(f)
        except tomllib.TOMLDecodeError as exc:
            raise SuiteError(f"suite {path.name}: {exc}") from None
    return parse_suite(data, path.name)


def with_adhoc(suite: Suite, shape_texts: list[str] | None, only: bool = False) -> Suite:
    """The suite plus ad-hoc shapes (measured in every mode); `only` drops the suite's own shapes."""
    adhoc = [(parse_shape(t), MODES, ADHOC) for t in (shape_texts or [])]
    base = [] if only else [(s.shape, s.modes, tag) for s in suite.shapes for tag in s.tags]
    if only and not adhoc:
        raise SuiteError("suite adhoc: give at least one shape")
    return Suite(ADHOC if only else suite.name, _merge(base + adhoc), suite.rule, suite.canonical,
                 suite.primary_mode, suite.budget_s, suite.description)
