#!/usr/bin/env bash
# The fuzz + sanitizer stage of ./test.sh (issue #15): configures build-fuzz with clang-22 and
# ASan + UBSan (-DMLA_FUZZ=ON), builds the libFuzzer targets of tests/fuzz/ and the config, loader
# and runtime unit tests there, runs those tests once, then each fuzzer for MLA_FUZZ_SECONDS (30)
# on a scratch copy of its committed corpus (tests/fuzz/corpus/<target>/ is never written).
# A crash, sanitizer report, leak or timeout fails the stage and prints the reproducer's path.
#
#   scripts/fuzz.sh                        # everything, 30 s per fuzzer
#   MLA_FUZZ_SECONDS=600 scripts/fuzz.sh fuzz_capi   # one fuzzer, 10 minutes (no unit tests)
set -euo pipefail
top=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build="$top/build-fuzz"
seconds=${MLA_FUZZ_SECONDS:-30}
jobs=${MLA_JOBS:-$(nproc)}
all_targets=(fuzz_config fuzz_npy fuzz_problem fuzz_code_object fuzz_dispatch_json fuzz_capi)

# libFuzzer and the sanitizer runtimes come with libclang-rt-22-dev (scripts/setup.sh installs it).
rtdir=$(clang++-22 --print-runtime-dir 2>/dev/null || true)
if [ -z "$rtdir" ] || [ ! -f "$rtdir/libclang_rt.fuzzer-x86_64.a" ] || [ ! -f "$rtdir/libclang_rt.asan-x86_64.a" ]; then
  echo "fuzz: clang-22 with libFuzzer and the sanitizer runtimes not found (apt install clang-22 libclang-rt-22-dev)"
  # CI must not pass by skipping the stage.
  [ "${CI:-}" = "true" ] && exit 1
  echo "fuzz: skipped"
  exit 0
fi

CC=clang-22 CXX=clang++-22 cmake -S "$top" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMLA_FUZZ=ON >/dev/null
if [ $# -gt 0 ]; then targets=("$@"); run_unit_tests=0; else targets=("${all_targets[@]}"); run_unit_tests=1; fi
build_targets=("${targets[@]}")
[ $run_unit_tests = 1 ] && build_targets+=(san_config san_loader san_runtime)
cmake --build "$build" -j "$jobs" --target "${build_targets[@]}"

# Leaks are findings too; UBSan stops at the first report with a stack.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0:allocator_may_return_null=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
logs="$build/fuzz-logs"
mkdir -p "$logs"
passed=0 failed=0

if [ $run_unit_tests = 1 ]; then
  for t in san_config san_loader san_runtime; do
    start=$SECONDS
    if (cd "$build/tests" && "./$t" >"$logs/$t.log" 2>&1); then
      passed=$((passed + 1)); echo "fuzz: $t (unit tests under ASan + UBSan) passed in $((SECONDS - start)) s"
    else
      failed=$((failed + 1)); tail -n 60 "$logs/$t.log"; echo "fuzz: $t FAILED under ASan + UBSan (log: $logs/$t.log)"
    fi
  done
fi

# One fuzzer: a fresh scratch corpus seeded from the committed one; findings land in artifacts/.
run_fuzzer() {
  local t=$1 work="$build/fuzz-work/$1"
  rm -rf "$work"; mkdir -p "$work/corpus" "$work/artifacts" "$work/scratch"
  cp -r "$top/tests/fuzz/corpus/$t/." "$work/corpus/"
  MLA_FUZZ_SCRATCH="$work/scratch" "$build/tests/fuzz/$t" -max_total_time="$seconds" -timeout=20 -rss_limit_mb=4096 \
    -print_final_stats=1 -artifact_prefix="$work/artifacts/" "$work/corpus" >"$logs/$t.log" 2>&1
}

# Two at a time (the machine has 2 cores); each result is read back from its log.
status_of() { grep -q "^Done [0-9]* runs in" "$logs/$1.log" && [ -z "$(ls -A "$build/fuzz-work/$1/artifacts")" ]; }
pending=("${targets[@]}")
while [ ${#pending[@]} -gt 0 ]; do
  batch=("${pending[@]:0:2}"); pending=("${pending[@]:2}")
  pids=()
  for t in "${batch[@]}"; do run_fuzzer "$t" & pids+=($!); done
  for i in "${!batch[@]}"; do
    t=${batch[$i]}
    rc=0; wait "${pids[$i]}" || rc=$?
    execs=$(grep -o "stat::number_of_executed_units: *[0-9]*" "$logs/$t.log" | grep -o "[0-9]*$" || echo "?")
    cov=$(grep -o "cov: [0-9]*" "$logs/$t.log" | tail -n 1 || true)
    if [ $rc -eq 0 ] && status_of "$t"; then
      passed=$((passed + 1)); echo "fuzz: $t clean for $seconds s ($execs runs, $cov)"
    else
      failed=$((failed + 1))
      tail -n 60 "$logs/$t.log"
      for r in "$build/fuzz-work/$t/artifacts/"*; do
        [ -e "$r" ] && echo "fuzz: $t FAILED; reproducer: $r (rerun: $build/tests/fuzz/$t $r)"
      done
      echo "fuzz: $t FAILED (exit $rc; log: $logs/$t.log)"
    fi
  done
done
echo "fuzz: $passed passed, $failed failed"
[ $failed -eq 0 ]
