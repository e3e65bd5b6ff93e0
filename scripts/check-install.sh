#!/usr/bin/env bash
# `cmake --install` gives headers, library and a CMake package: build the example against it.
set -euo pipefail
cd "$(dirname "$0")/.."
prefix=$PWD/build/install
rm -rf "$prefix" build/example
cmake --install build --prefix "$prefix" >/dev/null
cmake -S examples/collective_sweep -B build/example -G Ninja -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
cmake --build build/example >/dev/null
test -x build/example/collective_sweep
echo "check-install: examples/collective_sweep built against the installed package in $prefix"
