#!/usr/bin/env bash
# The whole suite (every unit and integration test: real irisd and client processes) built with
# AddressSanitizer and UndefinedBehaviorSanitizer, then the unit tests built with ThreadSanitizer:
# the daemon's core (ring, scheduler with the host engine's threads, runtime) without gRPC, whose
# uninstrumented code TSan cannot judge (tests/tsan.supp says what it keeps quiet, and why).
# Build folders: build-asan, build-tsan. Any sanitizer report fails the run.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh >/dev/null
jobs=$(nproc)
cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DIRIS_SANITIZE=address,undefined >/dev/null
cmake --build build-asan --parallel "$jobs"
# python3 (the binding's test) is not instrumented: the runtime goes first with LD_PRELOAD.
export IRIS_TEST_PRELOAD="$(g++ -print-file-name=libasan.so):$(g++ -print-file-name=libubsan.so)"
export ASAN_OPTIONS=abort_on_error=1:detect_leaks=1
export LSAN_OPTIONS="suppressions=$PWD/tests/lsan.supp"
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
ctest --test-dir build-asan --output-on-failure --timeout 900

cmake -S . -B build-tsan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DIRIS_SANITIZE=thread \
  >/dev/null
cmake --build build-tsan --parallel "$jobs" --target unit_tests
TSAN_OPTIONS="halt_on_error=1 suppressions=$PWD/tests/tsan.supp" build-tsan/tests/unit_tests
