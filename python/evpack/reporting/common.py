"""What every report of a pack shows, read from the pack's files only (no renderer here).

Every pack value goes into Markdown through evpack.markdown (text, code): see that module.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from ..gates import derive_gates
from ..jsonio import read_json
from ..labels import carried_note
from ..markdown import code, short, table, text
from ..model import StageOutcome
from ..provenance.statement import PROVENANCE_FILE, SIGNATURE_FILE
from ..records.env import EnvJson
from ..records.migrations import read_pack_view
from ..records.pack import PackRecord, SigningEntry
from ..stages.order import STAGE_ORDER

# A status in Markdown: the word (report.html colours every cell that holds one: see report_html.STATUS_CLASS)
ICON = {"pass": "PASS", "fail": "FAIL", "error": "ERROR", "skipped": "SKIPPED"}
MARKER = "<!-- evidence-pack -->"  # first line of report.md and comment.md: the sticky comment's key
LABEL_MARK = {"evidence:complete": "✅", "evidence:partial": "⚠️", "evidence:failed": "❌"}


@dataclass(frozen=True)
class PackView:
    """A pack's metadata and stage outcomes, loaded once for every report."""

    dir: Path
    pack: PackRecord
    env: dict
    outcomes: dict[str, StageOutcome]  # in pipeline order, only the stages the pack lists

    @property
    def pack_id(self) -> str:
        return str(self.pack.pack_id)

    @property
    def label(self) -> str:
        return str(self.pack.label)


def load_view(pack_dir: Path, outcomes: dict[str, StageOutcome] | None = None) -> PackView:
    """The pack's records and stage outcomes: `outcomes` when given (`report`: those verify derived from the raw
    files, so nothing a stored outcome.json adds or leaves out reaches a view), else as the pack holds them
    (outcome.json: the evidence run writes the reports right after deriving them). With `outcomes`, the stage and
    gate reasons shown are theirs too: pack.json's reasons are prose that verify never compares."""
    pj = read_pack_view(read_json(pack_dir / "pack.json"))
    env = read_json(pack_dir / "env.json")
    if outcomes is None:
        outcomes = {s: StageOutcome.from_json(read_json(pack_dir / s / "outcome.json")) for s in STAGE_ORDER
                    if s in pj.stages}
    else:
        pj = derived_reasons(pj, outcomes, pack_dir)
    return PackView(pack_dir, pj, env, {s: outcomes[s] for s in STAGE_ORDER if s in outcomes and s in pj.stages})


def derived_reasons(pj: PackRecord, outcomes: dict[str, StageOutcome], pack_dir: Path) -> PackRecord:
    """pack.json's record with each stage's and gate's reason as the derived outcomes give it."""
    gates = derive_gates(outcomes, pack_dir)
    stages = {s: replace(e, reason=outcomes[s].reason) if s in outcomes else e for s, e in pj.stages.items()}
    return replace(pj, stages=stages,
                   gates={g: replace(e, reason=gates[g].reason) if g in gates else e for g, e in pj.gates.items()})


def status_word(status: object) -> str:
    """A stage or gate status as the reports write it (an unknown one as escaped text)."""
    return ICON.get(status, text(status)) if isinstance(status, str) else text(status)


def gate_table(pj: PackRecord, reason_limit: int | None = None) -> list[str]:
    rows = [[text(g), status_word(v.status), text(short(v.reason, reason_limit or 100_000))]
            for g, v in pj.gates.items()]
    return table(["gate", "status", "reason"], rows)


def labels_line(pj: PackRecord) -> str:
    """'Labels: ...', and for a pack that carried cells from an earlier one, how many and from where."""
    note = carried_note(pj)
    return "Labels: " + ", ".join(code(x) for x in pj.labels) + (f" · {text(note)}" if note else "")


def headline(view: PackView) -> list[str]:
    """The verdict line and the labels: the first thing every report says."""
    return [f"# Evidence pack {code(view.pack_id)}: **{text(view.label)}**", "", labels_line(view.pack)]


def _or_dash(value: object) -> str:
    return text(value) if value else "-"


def machine_line(env: dict) -> str:
    e = EnvJson.from_json(env)
    return (f"GPU: {text(e.gpu_name or 'none')}; driver {_or_dash(e.driver_version)}; "
            f"torch {_or_dash(e.torch_version)} (CUDA {_or_dash(e.cuda_version)})")


def signature_line(pj: PackRecord) -> str | None:
    """The report's signature line; None for packs made before provenance (their report has none)."""
    if not pj.has_signing_record:
        return None
    rec = pj.signing
    if not rec:
        return (f"- signature: unsigned ({code(PROVENANCE_FILE)} records the origin; no key signed it, so "
                "`verify --require-signature` rejects this pack)")
    key = SigningEntry.from_json(rec)
    who = f" {code(key.key_comment)}" if key.key_comment else ""
    command = f"python -m evpack verify {pj.pack_id} --allowed-signers FILE"
    return (f"- signature: signed by{who} with {text(key.key_type)} key {code(key.key_fingerprint)} "
            f"({code(SIGNATURE_FILE)}, checked by {code(command)})")
