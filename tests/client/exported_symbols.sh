#!/usr/bin/env bash
# libiris.so exports the C API and the public C++ API, nothing else: no generated protobuf code
# (a program using protobuf itself would clash with it), no shared-memory layer, no Impl. Every
# symbol nm -D lists as defined must be one of those, and the API's anchors must all be there.
#   tests/client/exported_symbols.sh path/to/libiris.so
set -euo pipefail
lib=$1
symbols=$(nm -D --defined-only "$lib" | awk '{ $1 = ""; $2 = ""; sub(/^  /, ""); print }' | c++filt)
allowed='^(iris_[a-z_0-9]+|iris::(Client|Communicator|Request|Buffer|Error)::[^I].*|iris::default_socket_path.*|iris::wait_all\(.*|iris::meet_nodes\(.*|iris::group_(start|end)\(\)|(typeinfo|typeinfo name|vtable) for iris::Error)$'
stray=$(grep -Ev "$allowed" <<<"$symbols" | grep -Ev '^(_init|_fini)$' || true)
if [ -n "$stray" ]; then
  echo "libiris.so exports symbols outside its API (client/libiris.map):" >&2
  head -20 <<<"$stray" >&2
  exit 1
fi
missing=0
for anchor in 'iris_connect' 'iris_all_gather' 'iris_gpu_memory_freed' 'iris_error_name' \
  'iris::Client::connect(iris::ClientOptions const&)' 'iris::Request::wait(' \
  'iris::Communicator::all_gather(' 'iris::Buffer::data() const' 'typeinfo for iris::Error' \
  'iris::meet_nodes('; do
  if ! grep -qF "$anchor" <<<"$symbols"; then
    echo "libiris.so does not export $anchor" >&2
    missing=1
  fi
done
[ "$missing" = 0 ] || exit 1
echo "libiris.so: $(wc -l <<<"$symbols") exported symbols, all of the API"
