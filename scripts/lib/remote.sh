#!/usr/bin/env bash
# The half of scripts/gpu-session that runs ON THE GPU HOST.
#
# It is never installed there: gpu-session sends it over ssh's standard input, after
# scripts/lib/safe-dir.sh (`ssh HOST bash -s -- VERB DIR TOKEN ARGS... < safe-dir.sh+remote.sh`),
# so the host always runs the version that matches the local checkout. Everything it decides
# from is under DIR/.evpack-run/ (git-ignored), written by the run itself:
#   state       running | done:<exit code>      (replaced atomically)
#   heartbeat   touched every heartbeat_s seconds while the run's process is alive
#   heartbeat_s the heartbeat period of this run
#   log         stdout+stderr of the evidence command
#   pid, run_id, cmd, runner.sh, synced (touched after each sync)
# and DIR/.evpack-session, the marker `create` writes: "evpack-session TOKEN".
#
# Verbs: resolve | create | own | synced | probe | start CMD HEARTBEAT_S STARTED RATE
#        | follow OFFSET | latest
# TOKEN is the session's marker token ('' when the verb needs none). The verbs that write
# (create aside) run only in a folder that holds the marker with this TOKEN.
# Exit codes: 0 ok, 3 a run is already active, 4 nothing there (no run, no pack, no folder),
# 6 stale run, 9 refused: not this session's folder (no marker, another token, or a folder
# that `create` may not create).
#
# The files under .evpack-run/ can be written by the code under test: what this script
# prints from them is the first line only, and only when it has the expected form. It never
# does arithmetic on their text unchecked. (gpu-session checks every answer again: a host
# that does not run this script can answer anything.)
set -euo pipefail

if ! declare -F evpack_dir_refusal >/dev/null; then # run as a file (tests), not over ssh
    # shellcheck source-path=SCRIPTDIR source=safe-dir.sh
    . "$(dirname -- "${BASH_SOURCE[0]}")/safe-dir.sh"
fi

verb=${1:?verb}
dir=${2:?remote dir}
token=${3:-}
shift "$(($# < 3 ? $# : 3))"
R=.evpack-run
SKEW_S=120 # a heartbeat dated further in the future than this is not a sign of life

mtime() { if [ -e "$1" ]; then stat -c %Y -- "$1"; else echo 0; fi; }

# first_line FILE REGEX: the file's first line when it matches REGEX, else nothing.
first_line() {
    local line=''
    if [ -f "$1" ]; then IFS= read -r line <"$1" || true; fi
    if [[ $line =~ $2 ]]; then printf '%s' "$line"; fi
}

# A run is active when its state says running and its heartbeat is younger than this.
stale_after() {
    local hb
    hb=$(first_line "$R/heartbeat_s" '^[0-9]{1,6}([.][0-9]+)?$')
    hb=${hb%.*}
    echo $((3 * 10#${hb:-10} + 5))
}

# hb_fresh AGE: a heartbeat AGE seconds old (negative: dated in the future) is a sign of life.
hb_fresh() { [ "$1" -le "$(stale_after)" ] && [ "$1" -ge "-$SKEW_S" ]; }

cd_dir() {
    cd -- "$dir" 2>/dev/null || {
        echo "remote dir '$dir' does not exist: run 'scripts/gpu-session init' for a new one" >&2
        exit 4
    }
}

# own_dir: cd into DIR, which must hold this session's marker; else refuse (exit 9).
own_dir() {
    cd_dir
    evpack_marker_ok "$token" || {
        echo "refused: '$dir' holds no marker of this session ($EVPACK_MARKER): nothing written there" >&2
        exit 9
    }
}

# home_and_login: set home and login to the canonical host home and login folder.
home_and_login() {
    login=$(pwd -P)
    home=''
    if [ -n "${HOME:-}" ]; then home=$(cd -P -- "$HOME" 2>/dev/null && pwd) || home=''; fi
}

case $verb in
resolve)
    # Where DIR lands on this host; gpu-session checks the answer before it asks for create.
    home_and_login
    # shellcheck disable=SC2088 # a literal ~/ from the user, expanded here by hand
    case $dir in
    '~/'*) want=${home:-${HOME:?the host user has no HOME}}/${dir#'~/'} ;;
    *) want=$dir ;;
    esac
    path=$(realpath -m -- "$want") || { echo "realpath -m cannot resolve '$want' on this host" >&2; exit 2; }
    echo "path=$path"
    echo "home=$home"
    echo "login=$login"
    if [ -e "$path" ] || [ -L "$path" ]; then echo "exists=1"; else echo "exists=0"; fi
    ;;
create)
    # DIR: the canonical absolute path gpu-session checked. Creates it (never an existing
    # folder, unless it holds this very token's marker: init --force of the same session).
    [[ $token =~ ^[0-9a-f]{32}$ ]] || { echo "create: the token is not 32 hex digits" >&2; exit 2; }
    home_and_login
    refuse() { echo "refused: '$dir' $1" >&2; exit 9; }
    why=$(evpack_canonical_refusal "$dir")
    [ -z "$why" ] || refuse "$why"
    [ "$(realpath -m -- "$dir")" = "$dir" ] || refuse "resolves to $(realpath -m -- "$dir") on this host"
    why=$(evpack_dir_refusal "$dir" "$home" "$login")
    [ -z "$why" ] || refuse "$why"
    parent=${dir%/*}
    parent=${parent:-/}
    mkdir -p -- "$parent"
    [ "$(cd -P -- "$parent" && pwd)" = "$parent" ] || refuse "has a parent that is a link now"
    if mkdir -- "$dir" 2>/dev/null; then
        cd -- "$dir"
        [ "$(pwd -P)" = "$dir" ] || refuse "is a link now"
        (umask 077 && set -C && printf 'evpack-session %s\n' "$token" >"$EVPACK_MARKER")
        echo "created=1"
    elif cd -- "$dir" 2>/dev/null && [ "$(pwd -P)" = "$dir" ] && evpack_marker_ok "$token"; then
        echo "created=0"
    else
        refuse "already exists and holds no marker of this session: init only uses a folder it creates"
    fi
    ;;
own)
    own_dir
    ;;
synced)
    own_dir
    mkdir -p "$R"
    touch "$R/synced"
    ;;
probe)
    # key=value lines; all times come from this host's clock, so no clock skew matters.
    echo "now=$(date +%s)"
    if ! cd -- "$dir" 2>/dev/null; then
        echo "dir=missing"
        echo "state=none"
        exit 0
    fi
    echo "dir=present"
    state=none
    if [ -f "$R/state" ]; then
        state=$(first_line "$R/state" '^(running|done:[0-9]{1,3})$')
        state=${state:-unknown}
    fi
    echo "state=$state"
    echo "state_mtime=$(mtime "$R/state")"
    echo "hb_mtime=$(mtime "$R/heartbeat")"
    echo "sync_mtime=$(mtime "$R/synced")"
    echo "stale_after=$(stale_after)"
    echo "run_id=$(first_line "$R/run_id" '^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$')"
    log_size=0
    [ -f "$R/log" ] && log_size=$(stat -c %s "$R/log")
    echo "log_size=$log_size"
    pid=$(first_line "$R/pid" '^[1-9][0-9]{0,9}$')
    if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then echo "pid_alive=1"; else echo "pid_alive=0"; fi
    ;;
start)
    cmd=${1:?command}
    hb=${2:-10}
    [[ $hb =~ ^[0-9]{1,6}([.][0-9]+)?$ ]] || { echo "heartbeat period '$hb' is not a number of seconds" >&2; exit 2; }
    started=${3:-}
    rate=${4:-}
    own_dir
    mkdir -p "$R"
    if [ -f "$R/state" ] && [ "$(cat "$R/state")" = running ]; then
        age=$(($(date +%s) - $(mtime "$R/heartbeat")))
        if hb_fresh "$age"; then
            echo "a run is already active here (heartbeat ${age}s ago): not starting another" >&2
            exit 3
        fi
    fi
    run_id="$(date -u +%Y%m%dT%H%M%SZ)-$$"
    printf '%s\n' "$cmd" >"$R/cmd"
    echo "$hb" >"$R/heartbeat_s"
    echo "$run_id" >"$R/run_id"
    {
        printf 'export EVPACK_REMOTE_RUN_ID=%q\n' "$run_id"
        printf 'export EVPACK_SESSION_STARTED=%q\n' "$started"
        printf 'export EVPACK_RATE_USD_PER_HOUR=%q\n' "$rate"
    } >"$R/env"
    cat >"$R/runner.sh" <<'RUNNER'
#!/usr/bin/env bash
# Written by scripts/lib/remote.sh for one run; detached from ssh with setsid + nohup.
set -u
cd "$(dirname "$0")/.." || exit 1
R=.evpack-run
echo "$$" >"$R/pid"
hb=$(cat "$R/heartbeat_s")
# The heartbeat lives exactly as long as this process: a killed run stops beating.
( while kill -0 "$$" 2>/dev/null; do touch "$R/heartbeat"; sleep "$hb"; done ) &
hb_pid=$!
finish() {
    kill "$hb_pid" 2>/dev/null
    touch "$R/heartbeat"
    echo "done:$1" >"$R/state.tmp" && mv -f "$R/state.tmp" "$R/state"
}
trap 'finish 143; exit 143' TERM
trap 'finish 130; exit 130' INT
# shellcheck disable=SC1091
. "$R/env"
# A login shell, so the PATH the host's profile sets up (CUDA, conda, ...) is there.
bash -lc "$(cat "$R/cmd")" >>"$R/log" 2>&1 </dev/null
finish "$?"
RUNNER
    : >"$R/log"
    touch "$R/heartbeat"
    echo running >"$R/state.tmp" && mv -f "$R/state.tmp" "$R/state"
    setsid nohup bash "$R/runner.sh" </dev/null >/dev/null 2>&1 &
    echo "started run $run_id in $dir: $cmd"
    ;;
follow)
    # Stream the log from byte OFFSET until the run is over. The state is read before
    # the log each round: the runner writes its last log byte before it writes done:*.
    off=${1:-0}
    [[ $off =~ ^[0-9]{1,18}$ ]] || { echo "follow: offset '$off' is not a number" >&2; exit 2; }
    off=$((10#$off))
    cd_dir
    [ -f "$R/log" ] || { echo "no run has been started in '$dir'" >&2; exit 4; }
    while :; do
        state=$(cat "$R/state" 2>/dev/null || echo none)
        size=$(stat -c %s "$R/log")
        if [ "$size" -gt "$off" ]; then
            tail -c "+$((off + 1))" "$R/log" | head -c "$((size - off))"
            off=$size
        fi
        [ "$state" = running ] || exit 0
        age=$(($(date +%s) - $(mtime "$R/heartbeat")))
        if [ "$age" -lt "-$SKEW_S" ]; then
            echo "the run's heartbeat is dated $((-age))s in the future: it is no sign of life" >&2
            exit 6
        fi
        if ! hb_fresh "$age"; then
            echo "the run's heartbeat stopped ${age}s ago: it died without finishing" >&2
            exit 6
        fi
        sleep 0.5
    done
    ;;
latest)
    # The newest pack: the target of artifacts/packs/latest, as a folder name.
    cd_dir
    link=artifacts/packs/latest
    [ -L "$link" ] || [ -d "$link" ] || { echo "no pack on the host: $dir/$link is missing" >&2; exit 4; }
    target=$(readlink -f "$link")
    [ -f "$target/pack.json" ] || { echo "the latest pack '$target' has no pack.json" >&2; exit 4; }
    case $target in
    "$(pwd -P)/artifacts/packs/"*) ;;
    *) echo "the latest pack '$target' is not under $dir/artifacts/packs" >&2; exit 4 ;;
    esac
    name=$(basename -- "$target")
    [[ $name =~ ^[0-9]{8}T[0-9]{6}Z-[0-9a-z]{5,12}(-dirty)?(-[0-9]+)?$ ]] || {
        printf 'the latest pack %q is not named by a pack id\n' "$name" >&2
        exit 4
    }
    echo "$name"
    ;;
*)
    echo "remote.sh: unknown verb '$verb'" >&2
    exit 2
    ;;
esac
