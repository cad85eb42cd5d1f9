"""What every pack of a schema version must hold, written out per version.

A pack's schema version is a promise made when it was written: the gates it holds, the canaries it
planted, the files at its root and which keys of its records are prose. These are literal values per
version, never the live lists of the code (adding a gate, a canary or a prose key to today's code must
not make an older pack fail `verify`). A new schema version adds an entry; an old entry never changes.

Standard library only, no imports from the package: model.py re-exports these names.
"""
from __future__ import annotations

from dataclasses import dataclass

SCHEMA_VERSION = 3
KNOWN_SCHEMAS = (1, 2, 3)

_GATES_V1 = ("build", "ptxas_resources", "sass_tensor_proof", "executed_tensor_work", "sanitizer_clean",
             "correctness", "stability", "gates_live", "performance", "one_binary")

_CANARIES_V1 = ("canary_oob_write", "canary_smem_race", "canary_uninit_read", "canary_divergent_sync",
                "canary_wrong_result", "canary_second_launch", "canary_decoy_hmma")
_CANARIES_V2 = _CANARIES_V1 + ("canary_memo", "canary_wrong_stream", "canary_partial_write",
                               "canary_input_mutation", "canary_side_stream", "canary_foreign_work",
                               "canary_serialized_wgmma")
_CANARIES_V3 = _CANARIES_V2 + ("canary_capture_aware", "canary_output_alias", "canary_fp16_accum",
                               "canary_input_family", "canary_content_cache", "canary_timing_aware")

# The gate each canary a pack of the schema may plant must be caught by: verify judges a planted canary by this
# table, never by the pack's canaries/expected.json (which must agree with it). Required canaries and the optional
# ones (canary_triton_decoy: planted where the build has Triton) alike; a canary missing here is not one the schema
# knows. Literal pairs: moving a canary to another gate in today's registry must not change an older pack's matrix.
_CANARY_GATES_V1 = (("canary_oob_write", "memcheck"), ("canary_smem_race", "racecheck"),
                    ("canary_uninit_read", "initcheck"), ("canary_divergent_sync", "synccheck"),
                    ("canary_wrong_result", "correctness"), ("canary_second_launch", "stability"),
                    ("canary_decoy_hmma", "tensor_proof"))
_CANARY_GATES_V2 = _CANARY_GATES_V1 + (("canary_memo", "stability"), ("canary_wrong_stream", "stability"),
                                       ("canary_partial_write", "correctness"),
                                       ("canary_input_mutation", "correctness"), ("canary_side_stream", "bench"),
                                       ("canary_foreign_work", "tensor_proof"), ("canary_serialized_wgmma", "ptxas"))
_CANARY_GATES_V3 = _CANARY_GATES_V2 + (("canary_capture_aware", "stability"), ("canary_output_alias", "stability"),
                                       ("canary_fp16_accum", "sass"), ("canary_input_family", "correctness"),
                                       ("canary_content_cache", "bench"), ("canary_triton_decoy", "tensor_proof"),
                                       ("canary_timing_aware", "bench"))

# The call tensor_proof profiles, per kernel (oracles/tensor_target.py CANONICAL): batch, heads, sequence length.
_TENSOR_PROOF_SHAPE_V1 = (2, 8, 512)

_ROOT_V1 = ("pack.json", "env.json", "report.md", "report.html")
_ROOT_V2 = _ROOT_V1 + ("comment.md",)

# Keys whose values were written as prose (views) by the code of schemas 1-3. Stage data of these schemas has
# no decision under any of these names. Used by the content digest (zero-delta): its definition stays as the
# writers of these schemas computed it, so two packs of one commit compare equal across code versions.
_DIGEST_PROSE_V1 = frozenset({"reason", "observed", "fault", "note", "notes", "description", "message", "detail",
                              "why", "text", "hint"})
# What verify does not compare in a stage's data: the digest's prose keys and "expected", the sentence a canary
# record says it expects ("fail", "memcheck flags it", ...; the decision is `caught`). Written by every schema
# since 1; rewording it in today's code must not break an older pack.
_PROSE_V1 = _DIGEST_PROSE_V1 | {"expected"}


@dataclass(frozen=True)
class SchemaSpec:
    """What a pack of one schema version holds and how its records are read."""

    version: int
    required_gates: tuple[str, ...]  # gates pack.json must hold (dropping one is a forgery)
    required_canaries: tuple[str, ...]  # planted faults, whatever canaries/expected.json says
    canary_gates: tuple[tuple[str, str], ...]  # (canary, the gate that must catch it), whatever expected.json says
    tensor_proof_shape: tuple[int, int, int]  # (B, H, S) of every call tensor_proof profiles
    root_files: tuple[str, ...]  # files at the pack's root (index.json is checked separately)
    prose_keys: frozenset[str]  # keys of stage data that verify never compares (views)
    digest_prose_keys: frozenset[str]  # keys the content digest leaves out
    empty_folders_refused: bool  # its writer removes empty folders: an empty one is a mismatch
    pack_fields: tuple[str, ...]  # pack.json's keys in the order its writer wrote them
    # content_digest is the digest (derivation.content_digest, this schema's digest prose keys) of the pack's own
    # outcome.json files, gates and label (schema 3 on; older writers digested other views, so theirs is only
    # checked against zero_delta). Never the digest of today's derivation: a field a newer derivation adds must
    # not break an older pack.
    digest_of_outcomes: bool = False


_PACK_FIELDS_V1 = ("schema_version", "pack_id", "created_utc", "tool_version", "git", "toolchain", "python",
                   "warnings", "options", "stages", "gates", "label", "labels", "so_sha256", "summary", "timings",
                   "content_digest", "zero_delta", "complete")
_PACK_FIELDS_V2 = ("schema_version", "pack_id", "created_utc", "tool_version", "git", "toolchain", "python",
                   "warnings", "options", "stages", "gates", "label", "labels", "requirement", "so_sha256",
                   "summary", "timings", "content_digest", "zero_delta", "complete", "signing")

SCHEMAS: dict[int, SchemaSpec] = {
    1: SchemaSpec(1, _GATES_V1, _CANARIES_V1, _CANARY_GATES_V1, _TENSOR_PROOF_SHAPE_V1, _ROOT_V1, _PROSE_V1,
                  _DIGEST_PROSE_V1, False, _PACK_FIELDS_V1),
    2: SchemaSpec(2, _GATES_V1, _CANARIES_V2, _CANARY_GATES_V2, _TENSOR_PROOF_SHAPE_V1, _ROOT_V2, _PROSE_V1,
                  _DIGEST_PROSE_V1, False, _PACK_FIELDS_V2),
    3: SchemaSpec(3, _GATES_V1, _CANARIES_V3, _CANARY_GATES_V3, _TENSOR_PROOF_SHAPE_V1, _ROOT_V2, _PROSE_V1,
                  _DIGEST_PROSE_V1, True, _PACK_FIELDS_V2, digest_of_outcomes=True),
}
CURRENT = SCHEMAS[SCHEMA_VERSION]

# The per-version views older code imported by these names.
REQUIRED_GATES: dict[int, tuple[str, ...]] = {v: s.required_gates for v, s in SCHEMAS.items()}
REQUIRED_CANARIES: dict[int, tuple[str, ...]] = {v: s.required_canaries for v, s in SCHEMAS.items()}
CANARY_GATES: dict[int, dict[str, str]] = {v: dict(s.canary_gates) for v, s in SCHEMAS.items()}
REQUIRED_ROOT_FILES: dict[int, tuple[str, ...]] = {v: s.root_files for v, s in SCHEMAS.items()}


def spec(version: object) -> SchemaSpec | None:
    """The spec of a schema version; None for one this code does not know (verify names it)."""
    return SCHEMAS.get(version) if isinstance(version, int) and not isinstance(version, bool) else None
