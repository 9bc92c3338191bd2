#!/usr/bin/env bash
# Build the libFuzzer targets of tests/fuzz/ with clang-14, ASan and
# UBSan (in $BUILD/meson-fuzz) and run each for SECONDS, from its seed
# corpus tests/fuzz/corpus/TARGET/ and what earlier runs found
# ($BUILD/fuzz/corpus/TARGET/).  Fails on any crash, leak, sanitizer
# report or timeout, leaving the input that caused it in
# $BUILD/fuzz/artifacts/ (replay: $BUILD/meson-fuzz/fuzz-TARGET FILE).
#
#   scripts/fuzz.sh SECONDS [TARGET...]      targets: proto agent
#
# SPDX-License-Identifier: GPL-2.0-or-later
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
top=$(dirname "$here")
build=${BUILD:-$top/build}
meson=$build/venv/bin/meson
dir=$build/meson-fuzz

if [ $# -lt 1 ]; then
    echo "usage: $0 SECONDS [TARGET...]" >&2
    exit 2
fi
seconds=$1
shift
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(proto agent)

# Longest input: one datagram and a bit (proto); a few (agent).
declare -A max_len=([proto]=65600 [agent]=70000)

if [ ! -f "$dir/build.ninja" ]; then
    CC=clang-14 "$meson" setup -Dwerror=true -Dfuzzing=true \
        -Db_sanitize=address,undefined -Db_lundef=false "$dir" >/dev/null
fi
ninja -C "$dir" "${targets[@]/#/fuzz-}"

# UBSan reports are fatal; GLib allocates with malloc, which ASan sees.
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 G_SLICE=always-malloc
status=0
for t in "${targets[@]}"; do
    corpus=$build/fuzz/corpus/$t
    artifacts=$build/fuzz/artifacts
    log=$build/fuzz/$t.log
    mkdir -p "$corpus" "$artifacts"
    echo "==> fuzz-$t: $seconds s (log: $log)"
    if "$dir/fuzz-$t" -max_total_time="$seconds" -max_len="${max_len[$t]}" \
           -timeout=30 -print_final_stats=1 \
           -artifact_prefix="$artifacts/$t-" \
           "$corpus" "$top/tests/fuzz/corpus/$t" >"$log" 2>&1; then
        runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
        rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log")
        added=$(sed -n 's/^stat::new_units_added: *//p' "$log")
        echo "fuzz-$t: ${runs:-?} inputs (${rate:-?}/s), none failed;" \
             "${added:-?} new corpus inputs"
    else
        tail -n 80 "$log"
        echo "fuzz-$t: FAILED, the input is in $artifacts/" >&2
        status=1
    fi
done
exit $status
