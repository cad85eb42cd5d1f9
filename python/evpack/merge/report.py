"""report.md and comment.md of a merged verdict, rendered from its merged.json record alone.

report.md has one column per member (headed by its GPU): pack, label, signature, GPU identity, every
gate, and the headline numbers the stages offer (the canonical benchmark speedup). comment.md is the
short PR comment: verdict, labels, one line per GPU, the gates that did not pass everywhere. Every value
of the record is escaped (evpack.markdown).
"""
from __future__ import annotations

import os
from collections.abc import Mapping

from ..markdown import code, table, text
from ..records.merged import Member, MergedRecord
from ..reporting.comment_md import ci_links, fit
from ..reporting.common import MARKER, status_word
from .record import RULE, UNCHECKED_SIG, UNSIGNED, VERIFIED

SIGNATURE_TEXT = {VERIFIED: "verified", UNCHECKED_SIG: "signed, signer not checked", UNSIGNED: "unsigned"}


def _value(v: object) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.2f}"
    return text(v)


def column_names(record: MergedRecord) -> list[str]:
    """One heading per member: its GPU name, numbered when several members share it."""
    names = [m.gpu_name for m in record.members]
    seen: dict[str, int] = {}
    out = []
    for n in names:
        seen[n] = seen.get(n, 0) + 1
        out.append(f"{n} #{seen[n]}" if names.count(n) > 1 else n)
    return [text(n) for n in out]


def signature_text(m: Member) -> str:
    sig = m.signature
    out = SIGNATURE_TEXT.get(sig.state) or text(sig.state)
    if sig.state == VERIFIED and sig.principal:
        out += f" ({code(sig.principal, in_table=True)})"
    return out


def headline_lines(record: MergedRecord) -> list[str]:
    n, kinds = len(record.members), record.gpu_types
    types = ", ".join(f"{text(t.name or 'no GPU')} ({t.count})" for t in kinds)
    src = record.source
    labels = record.labels if isinstance(record.labels, list) else []
    return [MARKER, f"# Evidence on {n} GPU{'s' if n != 1 else ''}, one commit: **{text(record.label)}**", "",
            f"Labels: {', '.join(code(x) for x in labels)}", "",
            f"Merged verdict {code(record.verdict_id)} of commit {code(src.commit)}"
            f"{' (dirty)' if src.dirty else ''}: "
            f"{n} pack{'s' if n != 1 else ''} on {len(kinds)} GPU type{'s' if len(kinds) != 1 else ''}: {types}."]


def rule_line(record: MergedRecord) -> str:
    rule = record.rule
    checked = ("signatures checked against the allowed signers (file sha256 "
               f"{code(str(rule.allowed_signers_sha256 or '-')[:12])})" if rule.signatures_checked
               else "signatures not checked (made without --allowed-signers)")
    return f"Rule: {RULE}. Here: {checked}."


def per_gpu_table(record: MergedRecord) -> list[str]:
    members = record.members
    rows = [["pack", *[code(m.pack_id, in_table=True) for m in members]],
            ["label", *[f"**{text(m.label)}**" for m in members]],
            ["signature", *[signature_text(m) for m in members]],
            ["GPU UUID", *[_value(m.gpu.uuid) for m in members]],
            ["compute capability", *[_value(m.gpu.compute_capability) for m in members]],
            ["driver", *[_value(m.gpu.driver) for m in members]]]
    for g in record.gates:
        rows.append([f"gate {text(g)}", *[status_word(m.gates[g]) if g in m.gates else "-" for m in members]])
    names: list[str] = []
    for m in members:
        names += [k for k in m.headline if k not in names]
    for k in names:
        rows.append([text(k), *[_value(m.headline.get(k)) for m in members]])
    return table(["", *column_names(record)], rows)


def members_table(record: MergedRecord) -> list[str]:
    rows = [[code(m.path, in_table=True),
             *[code(m.digests.get(f, "-"), in_table=True) for f in ("index.json", "pack.json", "provenance.json")]]
            for m in record.members]
    return table(["member (copied here)", "index.json sha256", "pack.json sha256", "provenance.json sha256"], rows)


def render_report(stored: dict) -> str:
    record = MergedRecord.from_json(stored)
    lines = [*headline_lines(record), "", rule_line(record), "", "## Per GPU", "", *per_gpu_table(record), "",
             "## Members", "", *members_table(record), "",
             "Each member is a whole pack with its own report.md and report.html. Check everything offline: "
             "`python -m evpack verify MERGED_DIR --allowed-signers FILE`.", ""]
    return "\n".join(lines)


def _comment_rows(record: MergedRecord) -> list[str]:
    members = record.members
    speed = "speedup vs SDPA default"
    rows = [[name, code(m.pack_id, in_table=True), text(m.label), signature_text(m), _value(m.headline.get(speed))]
            for name, m in zip(column_names(record), members, strict=True)]
    return table(["GPU", "pack", "label", "signature", speed], rows)


def render_comment(stored: dict, environ: Mapping[str, str] | None = None) -> str:
    record = MergedRecord.from_json(stored)
    links = ci_links(os.environ if environ is None else environ)
    lines = [*headline_lines(record), "", *_comment_rows(record), ""]
    not_passed = [(g, s) for g, s in record.gates.items() if s != "pass"]
    if not_passed:
        names = column_names(record)
        lines += ["Gates that did not pass on every GPU:", ""]
        lines += [f"- {text(g)} ({status_word(s)}): " + ", ".join(
            f"{n} {status_word(m.gates[g]) if g in m.gates else '-'}" for n, m in
            zip(names, record.members, strict=True)) for g, s in not_passed[:12]]
        lines.append("")
    else:
        lines += ["Every gate passed on every GPU.", ""]
    lines.append(rule_line(record))
    if links:
        lines += ["", f"Reports: the merged verdict and each pack (with its report.html) are artifacts of "
                      f"[CI run {links['run'].rsplit('/runs/', 1)[1]}]({links['run']}) "
                      f"([artifacts]({links['artifacts']}))"]
    lines += ["", "Full table: `report.md` in the merged verdict. Check it offline: "
                  "`python -m evpack verify MERGED_DIR --allowed-signers FILE`.", ""]
    return fit(lines)
