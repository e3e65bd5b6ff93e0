# Sourced by the benchmark scripts. With BENCH_PIN=1, plan_pinning NRANKS WORKERS picks where the
# threads run, so that rounds do not differ by where the kernel happened to put them: irisd (its
# progress thread and WORKERS engine workers) on the first WORKERS + 1 CPUs of a list, each rank on
# one CPU after them. The list takes one logical CPU per physical core, socket by socket, before
# any core's second hyperthread, so that irisd and the ranks share a socket's cache where it has
# room and never a core while there are cores left; where CPUs run out, ranks wrap around. It sets
# `irisd_pin` and `rank_pin[r]` (taskset prefixes, empty without BENCH_PIN), `ring_pin` (irisd's
# CPUs and rank 0's: for iris-bench-ring, which starts an irisd of its own) and `rank_cpu_list`
# (the ranks' CPUs, comma-separated, for pinned_mpi_rank.sh).
plan_pinning() {
  local nranks=$1 workers=$2 cpus r
  irisd_pin=() rank_pin=() ring_pin=() rank_cpu_list=
  [ "${BENCH_PIN:-0}" = 1 ] || return 0
  command -v taskset >/dev/null || { echo "BENCH_PIN=1 needs taskset (util-linux)" >&2; exit 1; }
  # CPU,CORE,SOCKET: the first hyperthread of every core by socket and core, then the others.
  mapfile -t cpus < <(lscpu -p=CPU,CORE,SOCKET | grep -v '^#' |
    sort -t, -k3,3n -k2,2n -k1,1n | awk -F, '{n = seen[$3 "," $2]++; print n "," NR "," $1}' |
    sort -t, -k1,1n -k2,2n | cut -d, -f3)
  local total=${#cpus[@]} daemon=$((workers + 1))
  [ "$daemon" -lt "$total" ] || daemon=1
  local daemon_cpus
  daemon_cpus=$(IFS=,; echo "${cpus[*]:0:daemon}")
  irisd_pin=(taskset -c "$daemon_cpus")
  ring_pin=(taskset -c "$daemon_cpus,${cpus[$((daemon % total))]}")
  for ((r = 0; r < nranks; r++)); do
    local cpu=${cpus[$(((daemon + r) % total))]}
    rank_pin[r]="taskset -c $cpu"
    rank_cpu_list+=${rank_cpu_list:+,}$cpu
  done
}

# Where the threads run, in words, for a report (after plan_pinning).
placement() {
  if [ -z "$rank_cpu_list" ]; then
    echo "placed by the kernel"
  else
    echo "pinned (irisd on CPUs ${irisd_pin[2]}, ranks on $rank_cpu_list)"
  fi
}
