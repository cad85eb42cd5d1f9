#!/usr/bin/env bash
# Put a pack (or a merged verdict of several GPUs' packs) on its pull request (called by
# .github/workflows/evidence-sign.yml, after `merge`); PACK_DIR is a pack or a merged verdict folder:
#   scripts/lib/pr-evidence.sh comment      PACK_DIR PR   create or update THE evidence comment (comment.md)
#   scripts/lib/pr-evidence.sh comment-file FILE     PR   the same comment, from a prepared body
#   scripts/lib/pr-evidence.sh labels       PACK_DIR PR   set the pack's labels, drop stale ones
#   scripts/lib/pr-evidence.sh failed       -        PR   label evidence:failed, drop every other label of ours
# Needs GITHUB_REPOSITORY (owner/name) and an authenticated `gh` (GH_TOKEN).
# Environment for tests: GH (default gh), EVPACK_LABEL_CMD (default python -m evpack label),
# EVPACK_PYTHON (default python), EVPACK_COMMENT_AUTHOR (the login whose comment is updated;
# default github-actions[bot]).
set -euo pipefail

MARKER='<!-- evidence-pack -->'
MAX_BODY=60000 # GitHub refuses comments over 65536 characters

die() { echo "pr-evidence: $*" >&2; exit 2; }

verb=${1:-}
pack=${2:-}
pr=${3:-}
{ [ -n "$verb" ] && [ -n "$pack" ] && [ -n "$pr" ]; } || die "usage: $0 comment|comment-file|labels|failed PACK_DIR|FILE|- PR"
case $verb in
comment | labels) [ -f "$pack/pack.json" ] || [ -f "$pack/merged.json" ] ||
    die "$pack is neither a pack nor a merged verdict (no pack.json, no merged.json)" ;;
comment-file) [ -f "$pack" ] || die "no such comment body file: $pack" ;;
esac
[[ $pr =~ ^[0-9]+$ ]] || die "PR must be a number, not '$pr'"
repo=${GITHUB_REPOSITORY:?GITHUB_REPOSITORY (owner/name) is required}
read -r -a GH <<<"${GH:-gh}"
read -r -a LABEL_CMD <<<"${EVPACK_LABEL_CMD:-python -m evpack label}"
read -r -a PY <<<"${EVPACK_PYTHON:-python}"

comment() {
    # comment.md (made for this comment); packs older than comment.md have only report.md.
    local report="$pack/comment.md"
    [ -f "$report" ] || report="$pack/report.md"
    [ -f "$report" ] || die "$pack has neither comment.md nor report.md"
    post_comment "$report"
}

post_comment() {
    local report=$1 body id author=${EVPACK_COMMENT_AUTHOR:-github-actions[bot]}
    body=$(mktemp)
    {
        # The marker once, first: comment.md and report.md start with it already.
        [ "$(head -n 1 "$report")" = "$MARKER" ] || echo "$MARKER"
        head -c "$MAX_BODY" "$report"
        if [ "$(wc -c <"$report")" -gt "$MAX_BODY" ]; then
            printf '\n\n*(report truncated: the full report.md is in the uploaded pack artifact)*\n'
        fi
    } >"$body"
    # The one comment this workflow owns: ours (author) and starting with the marker.
    id=$("${GH[@]}" api --paginate "repos/$repo/issues/$pr/comments" \
        --jq ".[] | select(.user.login == \"$author\" and (.body | startswith(\"$MARKER\"))) | .id" | head -n 1)
    if [ -n "$id" ]; then
        "${GH[@]}" api --method PATCH "repos/$repo/issues/comments/$id" -F "body=@$body" >/dev/null
        echo "pr-evidence: updated comment $id on #$pr"
    else
        "${GH[@]}" api --method POST "repos/$repo/issues/$pr/comments" -F "body=@$body" >/dev/null
        echo "pr-evidence: created the evidence comment on #$pr"
    fi
    rm -f "$body"
}

label_color() {
    case $1 in
    evidence:complete) echo 0e8a16 ;;
    evidence:partial) echo fbca04 ;;
    evidence:failed | perf-regression) echo b60205 ;;
    *) echo 1d76db ;;
    esac
}

has() {
    local needle=$1 x
    shift
    for x in "$@"; do [ "$x" = "$needle" ] && return 0; done
    return 1
}

labels() {
    set_labels "$("${LABEL_CMD[@]}" "$pack" --format gh-args)"
}

failed() {
    # The pack did not verify, or there is none: nothing in it is trusted, the label is evidence:failed.
    set_labels "$("${PY[@]}" -c 'import shlex; from evpack.labels import FAILED, gh_args
print(" ".join(shlex.quote(a) for a in gh_args([FAILED])))')"
}

set_labels() {
    local out=$1 args=() current=() existing=() add=() remove=() edit=() i name got
    case $out in *[\'\"\\]*) die "unexpected quoting in the label arguments: $out" ;; esac
    read -r -a args <<<"$out"
    # Read into a variable first: a failed read stops here (a `< <(...)` would hide it, and the
    # stale labels it should have listed, evidence:complete included, would stay on the PR).
    got=$("${GH[@]}" pr view "$pr" --repo "$repo" --json labels --jq '.labels[].name') ||
        die "cannot read the labels of #$pr: no label changed"
    [ -z "$got" ] || mapfile -t current <<<"$got"
    for ((i = 0; i < ${#args[@]}; i += 2)); do
        name=${args[i + 1]:-}
        [ -n "$name" ] || die "odd label arguments: $out"
        case ${args[i]} in
        --add-label) add+=("$name") ;;
        # Only labels the PR has: gh fails on removing a label the repository does not know.
        --remove-label) if has "$name" "${current[@]}"; then remove+=("$name"); fi ;;
        *) die "unexpected label argument '${args[i]}' in: $out" ;;
        esac
    done
    [ ${#add[@]} -gt 0 ] || die "the pack gave no label to add: $out"
    # Any other evidence:* label on the PR is stale too.
    for name in "${current[@]}"; do
        if [[ $name == evidence:* ]] && ! has "$name" "${add[@]}" && ! has "$name" "${remove[@]}"; then
            remove+=("$name")
        fi
    done
    got=$("${GH[@]}" label list --repo "$repo" --limit 1000 --json name --jq '.[].name') ||
        die "cannot read the labels of $repo: no label changed"
    [ -z "$got" ] || mapfile -t existing <<<"$got"
    for name in "${add[@]}"; do
        if ! has "$name" "${existing[@]}"; then
            "${GH[@]}" label create "$name" --repo "$repo" --color "$(label_color "$name")" \
                --description "set by the evidence-pack workflow"
        fi
        has "$name" "${current[@]}" || edit+=(--add-label "$name")
    done
    for name in "${remove[@]}"; do edit+=(--remove-label "$name"); done
    if [ ${#edit[@]} -eq 0 ]; then
        echo "pr-evidence: labels of #$pr already match the pack: ${add[*]}"
        return 0
    fi
    "${GH[@]}" pr edit "$pr" --repo "$repo" "${edit[@]}"
    echo "pr-evidence: #$pr labels: ${edit[*]}"
}

case $verb in
comment) comment ;;
comment-file) post_comment "$pack" ;;
labels) labels ;;
failed) failed ;;
*) die "unknown verb '$verb': comment, comment-file, labels or failed" ;;
esac
