#!/usr/bin/env bash
# The Debian package, end to end: builds it (cpack -G DEB from a /usr-prefixed build in
# build-deb/, whose compiles ccache takes from build/'s where that ran first), installs it with
# apt-get, runs /usr/sbin/irisd and /usr/bin/iris-ctl status, imports the Python package with the
# system python3, builds examples/collective_sweep against the installed CMake package and runs
# it against the installed daemon, then removes the package and checks that only its config is
# left, and purges it. Installing needs root (or sudo); without either it builds the package and
# says why it stops there.
set -euo pipefail
cd "$(dirname "$0")/.."
src=$PWD
cmake -S . -B build-deb -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_INSTALL_PREFIX=/usr \
  -DIRIS_BUILD_TESTS=OFF -DIRIS_BUILD_BENCH=OFF -DIRIS_BUILD_GPU_TESTS=OFF >/dev/null
cmake --build build-deb --parallel "$(nproc)"
rm -f build-deb/irisd_*.deb
(cd build-deb && cpack -G DEB >/dev/null)
deb=$(ls "$src"/build-deb/irisd_*.deb)
echo "check-deb: built $(basename "$deb"): $(dpkg-deb -f "$deb" Depends)"

sudo_cmd=()
if [ "$(id -u)" -ne 0 ]; then
  if sudo -n true 2>/dev/null; then
    sudo_cmd=(sudo -n)
  else
    echo "check-deb: SKIPPED the install test: it needs root or password-less sudo"
    exit 0
  fi
fi
if dpkg-query -W -f='${Status}' irisd 2>/dev/null | grep -q "install ok"; then
  echo "check-deb: irisd is already installed on this machine; not touching it"
  exit 1
fi
run=$(mktemp -d /tmp/irisd-deb-XXXXXX)
chmod 755 "$run"
daemon=
cleanup() {
  [ -n "$daemon" ] && kill "$daemon" 2>/dev/null && wait "$daemon" 2>/dev/null || true
  "${sudo_cmd[@]}" dpkg --purge irisd >/dev/null 2>&1 || true
  rm -rf "$run"
}
trap cleanup EXIT

DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq "$deb" >"$run/apt.log" 2>&1 ||
  { cat "$run/apt.log"; exit 1; }
getent group iris >/dev/null || { echo "check-deb: postinst made no iris group"; exit 1; }
[ -f /etc/irisd/irisd.toml ] && [ -f /usr/lib/systemd/system/irisd.service ]
grep -q '^ExecStart=/usr/sbin/irisd --config /etc/irisd/irisd.toml' /usr/lib/systemd/system/irisd.service
# The unit's Documentation= and the alert rules the docs point at are where they say.
doc=$(sed -n 's|^Documentation=file://||p' /usr/lib/systemd/system/irisd.service)
[ -f "$doc" ] && [ -f /usr/share/doc/irisd/examples/irisd-alerts.yml ] ||
  { echo "check-deb: $doc or the example alert rules are missing"; exit 1; }

socket=$run/irisd.sock
/usr/sbin/irisd --config /etc/irisd/irisd.toml --socket "$socket" --socket-group "" --engine host \
  --metrics-address 127.0.0.1:0 >"$run/irisd.log" 2>&1 &
daemon=$!
for _ in $(seq 100); do [ -S "$socket.attach" ] && break; sleep 0.1; done
/usr/bin/iris-ctl --socket "$socket" status >"$run/status.txt" || { cat "$run/irisd.log"; exit 1; }
grep -q "SERVING" "$run/status.txt"
/usr/bin/python3 -c "import irisd, sys; sys.exit(0 if irisd.__file__.startswith('/usr/lib/python3/dist-packages') else 1)"

cmake -S examples/collective_sweep -B "$run/example" -G Ninja >/dev/null
cmake --build "$run/example" >/dev/null
pids=()
for rank in 0 1; do
  "$run/example/collective_sweep" --socket "$socket" --nranks 2 --rank "$rank" --max-bytes 65536 \
    >"$run/rank$rank.txt" 2>&1 &
  pids+=($!)
done
for p in "${pids[@]}"; do wait "$p" || { cat "$run"/rank*.txt; exit 1; }; done
# The NCCL-API library as installed: the README's C example built against its header, run
# linked to it and on the library path.
ncclinc=/usr/include/irisd-nccl
nccllib=$(dirname "$(dpkg-query -L irisd | grep '/irisd-nccl/libnccl.so.2$')")
[ -f "$ncclinc/nccl.h" ] && [ -n "$nccllib" ] || { echo "check-deb: no libnccl.so.2 or nccl.h"; exit 1; }
awk '/readme-example: nccl/ {on=1; next} on && /^```c/ {code=1; next} code && /^```/ {exit}
     code {print}' README.md >"$run/nccl_example.c"
cc -std=c11 -I"$ncclinc" "$run/nccl_example.c" -o "$run/nccl_example" -L"$nccllib" -lnccl \
  -Wl,-rpath,"$nccllib"
IRIS_SOCKET=$socket "$run/nccl_example" | grep -q "element 1023 = 3.0" ||
  { echo "check-deb: the NCCL example failed"; cat "$run/irisd.log"; exit 1; }
cc -std=c11 -I"$ncclinc" "$run/nccl_example.c" -o "$run/nccl_example_path" -L"$nccllib" -lnccl
IRIS_SOCKET=$socket LD_LIBRARY_PATH=$nccllib "$run/nccl_example_path" | grep -q "= 3.0" ||
  { echo "check-deb: the NCCL example on the library path failed"; exit 1; }
# The RCCL build where the package has it (built with ROCm's HIP headers): the same example
# against <rccl/rccl.h>, linked to librccl.so.1.
rccllib=$(dpkg-query -L irisd | grep '/irisd-rccl/librccl.so.1$' || true)
if [ -n "$rccllib" ]; then
  sed 's|#include "nccl.h"|#include <rccl/rccl.h>|; s|#include <nccl.h>|#include <rccl/rccl.h>|' \
    "$run/nccl_example.c" >"$run/rccl_example.c"
  grep -q 'rccl/rccl.h' "$run/rccl_example.c" || { echo "check-deb: the example includes no nccl.h"; exit 1; }
  cc -std=c11 -I/usr/include/irisd-rccl "$run/rccl_example.c" -o "$run/rccl_example" \
    -L"$(dirname "$rccllib")" -lrccl -Wl,-rpath,"$(dirname "$rccllib")"
  IRIS_SOCKET=$socket "$run/rccl_example" | grep -q "element 1023 = 3.0" ||
    { echo "check-deb: the RCCL example failed"; cat "$run/irisd.log"; exit 1; }
  echo "check-deb: the example ran against the installed librccl.so.1 too"
fi
kill "$daemon"
wait "$daemon" || true
daemon=

dpkg-query -L irisd >"$run/files.txt"
"${sudo_cmd[@]}" apt-get remove -y -qq irisd >>"$run/apt.log" 2>&1
dpkg-query -W -f='${Status}\n' irisd | grep -q "config-files" ||
  { echo "check-deb: after remove, irisd is not in state config-files"; exit 1; }
left=()
while read -r path; do
  [ -f "$path" ] && [ "$path" != /etc/irisd/irisd.toml ] && left+=("$path")
done <"$run/files.txt"
[ ${#left[@]} -eq 0 ] || { echo "check-deb: files left after remove: ${left[*]}"; exit 1; }
[ -f /etc/irisd/irisd.toml ] || { echo "check-deb: remove deleted the config"; exit 1; }
"${sudo_cmd[@]}" dpkg --purge irisd >/dev/null
[ ! -e /etc/irisd ] || { echo "check-deb: purge left /etc/irisd"; exit 1; }
echo "check-deb: installed, ran irisd and iris-ctl from /usr, built and ran the example against" \
  "the installed package, removed (config kept) and purged cleanly"
