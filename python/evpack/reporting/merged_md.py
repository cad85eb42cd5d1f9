"""report.md and comment.md of a merged verdict, rendered from its merged.json record alone.

report.md has one column per member (headed by its GPU): pack, label, signature, GPU identity, every
gate, and the headline numbers the stages offer (the canonical benchmark speedup). comment.md is the
short PR comment: verdict, labels, one line per GPU, the gates that did not pass everywhere.
"""
from __future__ import annotations

import os
from collections.abc import Mapping

from ..merge_record import RULE, UNCHECKED_SIG, UNSIGNED, VERIFIED
from .comment_md import ci_links, fit
from .common import ICON, MARKER, cell, table

SIGNATURE_TEXT = {VERIFIED: "verified", UNCHECKED_SIG: "signed, signer not checked", UNSIGNED: "unsigned"}


def _value(v: object) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.2f}"
    return cell(v)


def column_names(record: dict) -> list[str]:
    """One heading per member: its GPU name, numbered when several members share it."""
    names = [m["gpu"]["name"] or "no GPU" for m in record["members"]]
    seen: dict[str, int] = {}
    out = []
    for n in names:
        seen[n] = seen.get(n, 0) + 1
        out.append(f"{n} #{seen[n]}" if names.count(n) > 1 else n)
    return [cell(n) for n in out]


def signature_text(m: dict) -> str:
    sig = m["signature"]
    text = SIGNATURE_TEXT.get(sig["state"], sig["state"])
    if sig["state"] == VERIFIED and sig.get("principal"):
        text += f" ({cell(sig['principal'])})"
    return text


def headline_lines(record: dict) -> list[str]:
    n, kinds = len(record["members"]), record["gpu_types"]
    types = ", ".join(f"{cell(t['name'] or 'no GPU')} ({len(t['members'])})" for t in kinds)
    src = record["source"]
    return [MARKER, f"# Evidence on {n} GPU{'s' if n != 1 else ''}, one commit: **{record['label']}**", "",
            f"Labels: {', '.join(f'`{x}`' for x in record['labels'])}", "",
            f"Merged verdict `{record['verdict_id']}` of commit `{src['commit']}`{' (dirty)' if src['dirty'] else ''}: "
            f"{n} pack{'s' if n != 1 else ''} on {len(kinds)} GPU type{'s' if len(kinds) != 1 else ''}: {types}."]


def rule_line(record: dict) -> str:
    rule = record["rule"]
    checked = ("signatures checked against the allowed signers (file sha256 "
               f"`{(rule.get('allowed_signers_sha256') or '-')[:12]}`)" if rule["signatures_checked"]
               else "signatures not checked (made without --allowed-signers)")
    return f"Rule: {RULE}. Here: {checked}."


def per_gpu_table(record: dict) -> list[str]:
    members = record["members"]
    rows = [["pack", *[f"`{m['pack_id']}`" for m in members]],
            ["label", *[f"**{m['label']}**" for m in members]],
            ["signature", *[signature_text(m) for m in members]],
            ["GPU UUID", *[_value(m["gpu"]["uuid"]) for m in members]],
            ["compute capability", *[_value(m["gpu"]["compute_capability"]) for m in members]],
            ["driver", *[_value(m["gpu"]["driver"]) for m in members]]]
    for g in record["gates"]:
        rows.append([f"gate {g}", *[ICON.get(m["gates"].get(g), "-") for m in members]])
    names: list[str] = []
    for m in members:
        names += [k for k in m["headline"] if k not in names]
    for k in names:
        rows.append([cell(k), *[_value(m["headline"].get(k)) for m in members]])
    return table(["", *column_names(record)], rows)


def members_table(record: dict) -> list[str]:
    rows = [[f"`{m['path']}`", *[f"`{m['digests'].get(f, '-')}`" for f in ("index.json", "pack.json")],
             f"`{m['digests'].get('provenance.json', '-')}`"] for m in record["members"]]
    return table(["member (copied here)", "index.json sha256", "pack.json sha256", "provenance.json sha256"], rows)


def render_report(record: dict) -> str:
    lines = [*headline_lines(record), "", rule_line(record), "", "## Per GPU", "", *per_gpu_table(record), "",
             "## Members", "", *members_table(record), "",
             "Each member is a whole pack with its own report.md and report.html. Check everything offline: "
             "`python -m evpack verify MERGED_DIR --allowed-signers FILE`.", ""]
    return "\n".join(lines)


def _comment_rows(record: dict) -> list[str]:
    members = record["members"]
    speed = "speedup vs SDPA default"
    rows = [[name, f"`{m['pack_id']}`", m["label"], signature_text(m), _value(m["headline"].get(speed))]
            for name, m in zip(column_names(record), members, strict=True)]
    return table(["GPU", "pack", "label", "signature", speed], rows)


def render_comment(record: dict, environ: Mapping[str, str] | None = None) -> str:
    links = ci_links(os.environ if environ is None else environ)
    lines = [*headline_lines(record), "", *_comment_rows(record), ""]
    not_passed = [(g, s) for g, s in record["gates"].items() if s != "pass"]
    if not_passed:
        names = column_names(record)
        lines += ["Gates that did not pass on every GPU:", ""]
        lines += [f"- {g} ({ICON.get(s, s)}): " + ", ".join(f"{n} {ICON.get(m['gates'].get(g), '-')}" for n, m in
                                                          zip(names, record["members"], strict=True))
                  for g, s in not_passed[:12]]
        lines.append("")
    else:
        lines += ["Every gate passed on every GPU.", ""]
    lines.append(rule_line(record))
    if links:
        lines += ["", f"CI run: [{links['run']}]({links['run']}) · the merged verdict and each pack: "
                      f"artifacts of [this run]({links['artifacts']})"]
    lines += ["", "Full table: `report.md` in the merged verdict. Check it offline: "
                  "`python -m evpack verify MERGED_DIR --allowed-signers FILE`.", ""]
    return fit(lines)
