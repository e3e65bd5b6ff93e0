# Sourced: start_node_daemons IRISD DIR COUNT starts COUNT irisd daemons (the host engine unless
# $NODE_ENGINE names another) with sockets DIR/node<N>.sock, each standing in for a node, and
# waits until they accept. Fills the arrays `node_sockets` and `node_pids`; stop_node_daemons ends
# them. $IRISD_ARGS, when set, is added to each irisd's command line (word-split).
start_node_daemons() {
  local irisd=$1 dir=$2 count=$3 n s
  node_sockets=() node_pids=()
  for ((n = 0; n < count; n++)); do
    # shellcheck disable=SC2086
    "$irisd" --socket "$dir/node$n.sock" --engine "${NODE_ENGINE:-host}" ${IRISD_ARGS:-} \
      >"$dir/node$n.log" 2>&1 &
    node_pids+=($!)
    node_sockets+=("$dir/node$n.sock")
  done
  for s in "${node_sockets[@]}"; do
    for _ in $(seq 100); do [ -S "$s.attach" ] && break; sleep 0.1; done
  done
}

stop_node_daemons() {
  kill "${node_pids[@]}" 2>/dev/null || true
  wait 2>/dev/null || true
}
