# shellcheck shell=bash
# Which folder on the GPU host a gpu-session may create and write into.
#
# Shared by scripts/gpu-session (it checks the --remote-dir text before it connects, and the
# host's answer to `resolve` before it asks the host to create anything) and by
# scripts/lib/remote.sh (the host checks again before it creates the folder). gpu-session
# sends this file to the host in front of remote.sh, so both sides apply the same rules.
#
# A session's folder is one that `init` created itself, with the marker file below in it;
# every verb that writes or deletes on the host checks the marker first, in the same remote
# command that writes. Everything else is refused: /, the host user's home or a folder that
# holds it, a top-level folder, the system trees, a path with a `..` component, `.`, `~`.

EVPACK_MARKER=.evpack-session # holds one line: "evpack-session <token>"
# Top-level folders whose whole tree belongs to the system.
EVPACK_SYSTEM_TREES="bin boot dev etc lib lib32 lib64 libx32 proc run sbin sys usr"

# evpack_raw_dir_refusal TEXT: why the --remote-dir TEXT is refused, on its text alone
# (nothing when it is not). A relative TEXT is relative to the host user's login folder;
# `~/` at its start is the host user's home.
evpack_raw_dir_refusal() {
    local raw=$1 rest part n=0 norm='' parts=()
    # shellcheck disable=SC2088 # a literal ~ from the user: never expanded here
    case $raw in
    '') echo "is empty"; return ;;
    -*) echo "starts with '-'"; return ;;
    '~' | '~/') echo "is the host user's home"; return ;;
    '~/'*) rest=${raw#'~/'} ;;
    '~'*) echo "starts with '~' but not '~/' (another user's home is never a session folder)"; return ;;
    *) rest=$raw ;;
    esac
    case $raw in *[[:cntrl:]]*) echo "contains a control character"; return ;; esac
    IFS=/ read -r -a parts <<<"$rest"
    for part in ${parts[@]+"${parts[@]}"}; do
        case $part in
        '' | .) ;;
        ..) echo "has a '..' component"; return ;;
        *) n=$((n + 1)); norm+="/$part" ;;
        esac
    done
    if [ "$n" -eq 0 ]; then
        case $raw in
        /*) echo "is /, the root folder" ;;
        *) echo "is the host user's home (the login folder)" ;;
        esac
        return
    fi
    case $raw in /*) evpack_dir_refusal "$norm" ;; esac
}

# evpack_canonical_refusal PATH: why PATH is not an absolute path in canonical form
# (no empty, '.' or '..' component, no trailing '/'); nothing when it is one.
evpack_canonical_refusal() {
    local p=$1
    case $p in
    /) return ;;
    /*) ;;
    *) echo "is not an absolute path"; return ;;
    esac
    case $p in *[[:cntrl:]]*) echo "contains a control character"; return ;; esac
    case $p/ in
    *//* | */./* | */../*) echo "is not in canonical form (an empty, '.' or '..' component)" ;;
    esac
}

# evpack_dir_refusal PATH [KEEP...]: why the absolute, canonical PATH cannot be a session
# folder (nothing when it can). KEEP: folders (canonical) that PATH may neither be nor hold,
# such as the host user's home and login folder.
evpack_dir_refusal() {
    local p=$1 top rest t keep
    shift
    [ "$p" != / ] || { echo "is /, the root folder"; return; }
    top=${p#/}
    top=${top%%/*}
    rest=${p#/"$top"}
    for t in $EVPACK_SYSTEM_TREES; do
        [ "$top" != "$t" ] || { echo "is inside /$t, a system folder"; return; }
    done
    [ -n "$rest" ] || {
        echo "is /$top, a top-level folder (name a new folder inside one, such as /$top/evidence-pack)"
        return
    }
    case $top$rest in
    var/*/*) ;;
    var/*) echo "is $p, a system folder"; return ;;
    esac
    for keep in "$@"; do
        [ -n "$keep" ] || continue
        [ "$p" != "$keep" ] || { echo "is the host user's home or login folder ($keep)"; return; }
        case $keep/ in "$p"/*) echo "holds the host user's home or login folder ($keep)"; return ;; esac
    done
}

# evpack_marker_ok TOKEN: the current folder holds this session's marker: a regular file,
# not a link, whose text is the line "evpack-session TOKEN" (trailing newlines aside).
evpack_marker_ok() {
    [[ $1 =~ ^[0-9a-f]{32}$ ]] || return 1
    [ -f "$EVPACK_MARKER" ] && [ ! -L "$EVPACK_MARKER" ] || return 1
    [ "$(head -c 100 -- "$EVPACK_MARKER")" = "evpack-session $1" ]
}
