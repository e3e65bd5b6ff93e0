#!/usr/bin/env bash
# The Python package as a user installs it, with no settings: Debian's python3 in a fresh virtual
# environment (its setuptools and wheel, offline), libiris installed into the same prefix by
# `cmake --install`, the package by `pip install --no-build-isolation ./client/python`; then a
# real irisd and an all-gather through the installed package, which must have found libiris in
# its prefix (not through IRIS_LIBRARY, LD_LIBRARY_PATH or PYTHONPATH, all unset). The same for
# the copy `cmake --install` puts under <prefix>/share/iris/python.
# Usage: check_package.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
src=$1
build=$2
python=/usr/bin/python3
"$python" -c "import venv, setuptools, wheel" 2>/dev/null ||
  { echo "check_package: Debian's python3 with venv, setuptools and wheel is needed (packages python3-venv python3-setuptools python3-wheel)"; exit 1; }
scratch=$(mktemp -d)
daemon=
cleanup() {
  [ -n "$daemon" ] && kill "$daemon" 2>/dev/null && wait "$daemon" 2>/dev/null || true
  rm -rf "$scratch"
}
trap cleanup EXIT
unset IRIS_LIBRARY LD_LIBRARY_PATH PYTHONPATH
# Under scripts/sanitize.sh libiris is instrumented and python3 is not: the sanitizer runtime
# must come first (python's own allocations are no leaks of ours).
run_python=(env)
[ -n "${IRIS_TEST_PRELOAD:-}" ] && run_python=(env "LD_PRELOAD=$IRIS_TEST_PRELOAD" ASAN_OPTIONS=detect_leaks=0)

"$python" -m venv --system-site-packages "$scratch/venv"
cmake --install "$build" --prefix "$scratch/venv" >/dev/null
"$scratch/venv/bin/pip" install --no-index --no-build-isolation -q "$src/client/python"

"$build/daemon/irisd" --socket "$scratch/irisd.sock" --engine host >"$scratch/irisd.log" 2>&1 &
daemon=$!
for _ in $(seq 100); do [ -S "$scratch/irisd.sock.attach" ] && break; sleep 0.1; done

check='
import sys, irisd
where = sys.argv[1]
assert irisd.__file__.startswith(where), (irisd.__file__, where)
assert irisd._lib._name.startswith(sys.argv[2]), irisd._lib._name
# The torch allocator library, installed beside libiris, exports what CUDAPluggableAllocator loads.
import ctypes
allocator = ctypes.CDLL(irisd.torch_allocator_path())
assert allocator._name.startswith(sys.argv[2]), allocator._name
allocator.iris_torch_alloc, allocator.iris_torch_free
client = irisd.Client(sys.argv[3], name="check_package")
comm = irisd.Communicator(client, "check_package", nranks=1, rank=0)
send, recv = client.allocate(4096), client.allocate(4096)
send.view()[:] = bytes(range(256)) * 16
comm.all_gather(send, recv, 4096).wait()
assert bytes(recv.view()) == bytes(send.view())
print("check_package:", irisd.__file__, "->", irisd._lib._name)
'
cd "$scratch"  # not the source tree: its client/python must not be what imports
site=$("$scratch/venv/bin/python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
"${run_python[@]}" "$scratch/venv/bin/python" -c "$check" "$site/irisd" "$scratch/venv/lib" \
  "$scratch/irisd.sock"
# cmake --install's copy, found by its path (as a user would put it on sys.path).
"${run_python[@]}" PYTHONPATH="$scratch/venv/share/iris/python" "$python" -c "$check" \
  "$scratch/venv/share/iris/python/irisd" "$scratch/venv/lib" "$scratch/irisd.sock"
# Beside another package named `iris` (ROCm/iris and SciTools' iris are both imported so):
# a stand-in installed by pip into the same venv, and both import, each itself.
mkdir -p "$scratch/standin/iris"
echo 'STANDIN = "not irisd"' >"$scratch/standin/iris/__init__.py"
printf 'from setuptools import setup\nsetup(name="iris", version="9.9", packages=["iris"])\n' \
  >"$scratch/standin/setup.py"
"$scratch/venv/bin/pip" install --no-index --no-build-isolation -q "$scratch/standin"
"${run_python[@]}" "$scratch/venv/bin/python" -c '
import sys, iris, irisd
assert iris.STANDIN == "not irisd", iris.__file__
assert irisd.__file__.startswith(sys.argv[1]), irisd.__file__
c = irisd.Client(sys.argv[2], name="beside-iris")
irisd.Communicator(c, "beside-iris", nranks=1, rank=0).barrier()
print("check_package: iris (stand-in) at", iris.__file__, "and irisd at", irisd.__file__)
' "$site/irisd" "$scratch/irisd.sock"
# Python's ErrorCode is libiris's, value for value and name for name.
"${run_python[@]}" "$scratch/venv/bin/python" -c '
import irisd
for code in irisd.ErrorCode:
    name = irisd._lib.iris_error_name(int(code)).decode()
    assert name == code.name.lower(), (int(code), name, code.name)
beyond = len(irisd.ErrorCode)
assert irisd._lib.iris_error_name(beyond).decode() == "unknown", "libiris has codes Python lacks"
print("check_package: irisd.ErrorCode matches libiris:", beyond, "codes")
'
# IRIS_LIBRARY still overrides, and a wrong one is a clear import error.
if IRIS_LIBRARY=/nonexistent/libiris.so.0 "$scratch/venv/bin/python" -c "import irisd" 2>"$scratch/err"; then
  echo "check_package: a missing IRIS_LIBRARY was accepted"; exit 1
fi
grep -q "cannot load libiris" "$scratch/err" || { cat "$scratch/err"; exit 1; }
echo "check_package: all good"
