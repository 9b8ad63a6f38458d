#!/usr/bin/env bash
# Run an app's tests against a fakehop server started for them, then judge what the app sent.
#
#   run-with-fakehop.sh [SERVE OPTION...] -- COMMAND [ARG...]
#
# Starts `fakehop serve` in the background on a free port, with the SERVE OPTIONs if any
# (--scenarios tests/scenarios, --time-scale 0.1, --port 8080, ...), waits until it listens
# (its --ready-file) and answers (fakehop wait), and runs COMMAND with the app pointed at it:
#
#   FAKEHOP_URL          the server's root: the fakehop commands and the control API
#   OPENAI_BASE_URL      $FAKEHOP_URL/v1, which the openai SDKs read
#   ANTHROPIC_BASE_URL   $FAKEHOP_URL, which the anthropic SDKs read
#   OPENAI_API_KEY, ANTHROPIC_API_KEY   sk-fakehop, unless they are set already
#
# Then it writes into $FAKEHOP_RESULTS (default: fakehop-results):
#
#   requests.jsonl   every request the server got, one JSON record a line (fakehop requests --json;
#                    the journal keeps the last 1000 unless --journal-size N says otherwise)
#   verdict.txt      what the app's clients did, judged by HopBase's rules (fakehop verdict)
#   verdict.json     the same as JSON (fakehop verdict --json)
#   server.log       what the server printed
#
# and stops the server, whatever happened. Exit status: COMMAND's when it failed; else 1 when
# the verdict has an error finding (or could not be had); else 0. 2 when the server did not
# start (its output is shown), its health check did not pass, or a setting is wrong.
#
# Settings, from the environment:
#   FAKEHOP_RESULTS         where the results go (made if missing)
#   FAKEHOP_VERDICT         error (default): an error finding fails the run; off: saved only
#   FAKEHOP_READY_TIMEOUT   whole seconds to wait for the server to listen (default 30)
#   FAKEHOP_ADMIN_TOKEN     when set, the control API needs it: serve and the commands read it
set -uo pipefail

me=${0##*/}
say() { printf '%s: %s\n' "$me" "$*" >&2; }
usage() {
    say "usage: $me [SERVE OPTION...] -- COMMAND [ARG...]"
    exit 2
}

serve_options=()
for ((i = 1; i <= $#; i++)); do
    if [[ ${!i} == -- ]]; then
        serve_options=("${@:1:i-1}")
        shift "$i"
        break
    fi
done
(($#)) || usage

results=${FAKEHOP_RESULTS:-fakehop-results}
gate=${FAKEHOP_VERDICT:-error}
ready_timeout=${FAKEHOP_READY_TIMEOUT:-30}
[[ $gate == error || $gate == off ]] || { say "FAKEHOP_VERDICT must be error or off, got '$gate'"; exit 2; }
[[ $ready_timeout =~ ^[0-9]+$ ]] || { say "FAKEHOP_READY_TIMEOUT must be a whole number of seconds, got '$ready_timeout'"; exit 2; }
command -v fakehop >/dev/null || { say "no fakehop command on PATH: install fakehop first"; exit 2; }
mkdir -p "$results" || exit 2

workdir=$(mktemp -d) || exit 2
ready=$workdir/url
server=

stop_server() {
    if [[ -n $server ]] && kill -0 "$server" 2>/dev/null; then
        kill -TERM "$server"
        wait "$server"
    fi
    rm -rf "$workdir"
}
trap stop_server EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

fakehop serve --port 0 --ready-file "$ready" ${serve_options[@]+"${serve_options[@]}"} >"$results/server.log" 2>&1 &
server=$!

deadline=$((SECONDS + ready_timeout))
until [[ -s $ready ]]; do
    if ! kill -0 "$server" 2>/dev/null; then
        wait "$server"
        say "fakehop serve stopped (exit $?) before it listened:"
        cat "$results/server.log" >&2
        server=
        exit 2
    fi
    if ((SECONDS >= deadline)); then
        say "fakehop serve did not listen within ${ready_timeout}s:"
        cat "$results/server.log" >&2
        exit 2
    fi
    sleep 0.1
done
url=$(<"$ready")
# Listening is not all: the control API must answer the commands below, with their admin token.
if ! fakehop wait --url "$url" --timeout "$ready_timeout" >/dev/null; then
    say "fakehop serves at $url, but its health check did not pass (see above)"
    exit 2
fi

export FAKEHOP_URL=$url OPENAI_BASE_URL=$url/v1 ANTHROPIC_BASE_URL=$url
export OPENAI_API_KEY=${OPENAI_API_KEY:-sk-fakehop} ANTHROPIC_API_KEY=${ANTHROPIC_API_KEY:-sk-fakehop}
say "fakehop serves at $url; running: $*"
"$@"
tests=$?

fakehop requests --json >"$results/requests.jsonl" || say "could not read the request journal"
fakehop verdict --json >"$results/verdict.json"
fakehop verdict | tee "$results/verdict.txt"
verdict=${PIPESTATUS[0]}

if ((tests != 0)); then
    say "the tests failed (exit $tests); the journal and the verdict are in $results/"
    exit "$tests"
fi
if ((verdict != 0)) && [[ $gate == error ]]; then
    say "the tests passed, but fakehop verdict failed (exit $verdict): see $results/verdict.txt"
    exit 1
elif ((verdict != 0)); then
    say "fakehop verdict failed (exit $verdict); FAKEHOP_VERDICT=off, so it is only saved in $results/"
fi
say "the tests passed; the journal and the verdict are in $results/"
