"""PR labels: decided here and nowhere else, from gate results only."""
from __future__ import annotations

import json
import os
import re
import shlex

from .model import ERROR, FAIL, PASS, SKIPPED, LabelDecision
from .records.pack import PackRecord

COMPLETE, PARTIAL, FAILED = "evidence:complete", "evidence:partial", "evidence:failed"
MAIN_LABELS = (COMPLETE, PARTIAL, FAILED)
# finer label -> gates that must all pass
FINER = {
    "tensor-cores-verified": ("sass_tensor_proof", "executed_tensor_work"),
    "sanitizer-clean": ("sanitizer_clean", "gates_live"),
    "correctness-verified": ("correctness", "stability"),
    "resources-clean": ("ptxas_resources",),
}
PERF_REGRESSION = "perf-regression"
ALL_LABELS = MAIN_LABELS + tuple(FINER) + (PERF_REGRESSION,)
_PACK_ID = re.compile(r"[0-9A-Za-z-]{1,80}\Z")


def main_label(gate_status: dict[str, str]) -> str:
    """complete: every gate ran and passed; failed: any fail/error; partial: otherwise (some skipped)."""
    statuses = list(gate_status.values())
    if not statuses or any(s in (FAIL, ERROR) for s in statuses):
        return FAILED
    if any(s == SKIPPED for s in statuses):
        return PARTIAL
    assert all(s == PASS for s in statuses)
    return COMPLETE


def decide(gate_status: dict[str, str], perf_regression: bool = False) -> LabelDecision:
    label = main_label(gate_status)
    labels = [label]
    for name, needs in FINER.items():
        if all(gate_status.get(g) == PASS for g in needs):
            labels.append(name)
    if perf_regression:
        labels.append(PERF_REGRESSION)
    return LabelDecision(label, tuple(labels))


def merged_label(member_labels: list[str], signatures_ok: list[bool] | None = None) -> str:
    """The one label of a merged verdict over packs of one commit made on several GPUs.

    complete: every member is complete and, when signatures are checked (signatures_ok given: one entry
    per member, True when its signature verifies against the allowed signers), every member is signed and
    its signature verifies; failed: any member failed (or there is no member, or a label this code does
    not know); partial: otherwise (a member partial, or a complete member without a verified signature).
    """
    if not member_labels or any(lab not in MAIN_LABELS or lab == FAILED for lab in member_labels):
        return FAILED
    if all(lab == COMPLETE for lab in member_labels) and (signatures_ok is None or all(signatures_ok)):
        return COMPLETE
    return PARTIAL


def merged_labels(member_labels: list[list[str]], label: str) -> list[str]:
    """The merged verdict's labels: its label, each finer label that every member holds, and
    perf-regression when any member holds it."""
    labels = [label] + [name for name in FINER if all(name in m for m in member_labels)]
    if any(PERF_REGRESSION in m for m in member_labels):
        labels.append(PERF_REGRESSION)
    return labels


def _id(value: object) -> str:
    """A pack id as the label lines may print it (one token of letters, digits and dashes), else a placeholder:
    these lines go to CI step outputs, where a newline would start another output."""
    return value if isinstance(value, str) and _PACK_ID.match(value) else "(an invalid pack id)"


def carried_note(pack: PackRecord | dict) -> str | None:
    """'N cells carried from <pack id>[, <pack id>]' for a pack that carried cells (evpack.incremental), else
    None. The label itself never depends on it: a carried cell was verified in its source pack, and `verify`
    checks the chain."""
    inc = pack.get("incremental")
    carried = inc.get("carried") if isinstance(inc, dict) else None
    if not isinstance(carried, list) or not carried:
        return None
    sources = sorted({_id(c.get("source_pack")) for c in carried if isinstance(c, dict)})
    return f"{len(carried)} cell{'s' if len(carried) != 1 else ''} carried from {', '.join(sources)}"


def gh_args(labels: list[str]) -> list[str]:
    """Arguments for `gh pr edit`: add the pack's labels, remove every other label this tool owns."""
    args: list[str] = []
    for lab in labels:
        args += ["--add-label", lab]
    for lab in ALL_LABELS:
        if lab not in labels:
            args += ["--remove-label", lab]
    return args


def format_labels(pack: PackRecord | dict, fmt: str, *, signer: str | None = None) -> str:
    """The labels in a format; `signer` is the allowed signer verify named (None: not checked or unsigned).
    `pack`: a pack's record, or an object of pack.json's shape (a merged verdict's label view)."""
    if isinstance(pack, dict):
        pack = PackRecord.from_json(pack)
    label, labels = pack.label, pack.labels
    note = carried_note(pack)
    if fmt == "text":
        return "\n".join(labels)
    if fmt == "json":
        record = {"pack_id": pack.pack_id, "label": label, "labels": labels, "signer": signer,
                  "gates": pack.gate_statuses()}
        if note:  # only packs that carried cells say so: the output for every other pack is as before
            carried = pack.get("incremental")["carried"]
            record["carried"] = {"cells": len(carried), "note": note,
                                 "source_packs": sorted({_id(c.get("source_pack")) for c in carried
                                                         if isinstance(c, dict)})}
        return json.dumps(record, indent=2)
    if fmt == "gh-args":
        return " ".join(shlex.quote(a) for a in gh_args(labels))
    if fmt == "github":
        lines = [f"label={label}", f"labels={','.join(labels)}", f"signer={signer or ''}"]
        if note:
            lines.append(f"carried={note}")
        _append_all({"GITHUB_OUTPUT": "\n".join(lines) + "\n", "GITHUB_STEP_SUMMARY": "".join(
            [f"### Evidence pack `{pack.pack_id}`: **{label}**\n\n"] + ([f"{note}\n\n"] if note else [])
            + ["| gate | status | reason |\n|---|---|---|\n"]
            + [f"| {g} | {v.status} | {v.reason} |\n" for g, v in pack.gates.items()])})
        return "\n".join(lines)
    raise ValueError(f"--format must be one of text, json, github, gh-args; got {fmt!r}")


def _append_all(texts: dict[str, str]) -> None:
    """Append each text to the file its environment variable names (the CI's step outputs), for those set.
    Every file is opened before any is written: when one cannot be, none is written (a file this call
    created is removed again) and the OSError says which variable named the path."""
    opened: list[tuple[object, str, bool]] = []
    try:
        for var, text in texts.items():
            path = os.environ.get(var)
            if not path:
                continue
            existed = os.path.lexists(path)
            try:
                opened.append((open(path, "a", encoding="utf-8"), text, existed))  # noqa: SIM115 (closed below)
            except OSError as exc:
                raise OSError(exc.errno, f"${var} cannot be appended to ({exc.strerror})", path) from None
    except OSError:
        for f, _, existed in opened:
            f.close()
            if not existed:
                os.unlink(f.name)
        raise
    for f, text, _ in opened:
        with f:
            f.write(text)
