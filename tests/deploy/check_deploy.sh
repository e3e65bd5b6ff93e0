#!/usr/bin/env bash
# Checks deploy/ with the tools that will read it: systemd-analyze verify and security (the unit,
# against the built irisd), systemd-sysusers and systemd-tmpfiles (into a scratch root), promtool
# (scrape config, alert rules and their unit tests) and a YAML parse of the DaemonSet with its
# probes. Usage: check_deploy.sh SOURCE_DIR IRISD_BINARY. A missing tool fails with its package
# name (scripts/install-deps.sh installs them all).
set -euo pipefail
src=$1
irisd=$2
max_exposure=3.0
for tool in systemd-analyze systemd-sysusers systemd-tmpfiles promtool python3; do
  command -v "$tool" >/dev/null || { echo "check_deploy: $tool missing (packages systemd, prometheus, python3)"; exit 1; }
done
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT

# The unit as installed, with ExecStart pointing at the binary under test.
sed "s|^ExecStart=/usr/sbin/irisd|ExecStart=$irisd|" "$src/deploy/irisd.service" >"$scratch/irisd.service"
systemd-analyze verify "$scratch/irisd.service"
grep -q '^WatchdogSec=' "$scratch/irisd.service"
grep -q '^Type=notify' "$scratch/irisd.service"
exposure=$(systemd-analyze security --offline=true "$scratch/irisd.service" 2>&1 |
  sed -n 's/.*Overall exposure level for irisd.service: \([0-9.]*\).*/\1/p')
echo "check_deploy: systemd-analyze security exposure $exposure (limit $max_exposure)"
python3 -c "import sys; sys.exit(0 if float('$exposure') <= $max_exposure else 1)" ||
  { echo "check_deploy: the unit's exposure $exposure is above $max_exposure"; exit 1; }

mkdir -p "$scratch/root/etc"
systemd-sysusers --root="$scratch/root" "$src/deploy/irisd.sysusers"
grep -q '^iris:' "$scratch/root/etc/group" || { echo "check_deploy: sysusers made no iris group"; exit 1; }
systemd-tmpfiles --root="$scratch/root" --create "$src/deploy/irisd.tmpfiles"
[ "$(stat -c %a "$scratch/root/run/irisd")" = 755 ] || { echo "check_deploy: tmpfiles did not make /run/irisd 0755"; exit 1; }

cp "$src"/deploy/prometheus/* "$scratch/"
promtool check config "$scratch/prometheus.yml"
promtool check rules "$scratch/irisd-alerts.yml"
promtool test rules "$scratch/irisd-alerts.test.yml"

python3 - "$src/deploy/irisd-daemonset.yaml" <<'PY'
import sys, yaml
doc = yaml.safe_load(open(sys.argv[1]))
pod = doc["spec"]["template"]["spec"]
c = pod["containers"][0]
assert pod.get("hostPID") and pod.get("hostNetwork"), "ROCm dma-buf IPC needs host PID and network namespaces"
for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
    cmd = c[probe]["exec"]["command"]
    assert cmd[0] == "iris-ctl" and "status" in cmd, f"{probe} must run iris-ctl status"
assert any(p.get("name") == "metrics" for p in c["ports"]), "the metrics port is declared"
assert any("--metrics-address" in a for a in c["args"]), "irisd serves metrics"
print("check_deploy: DaemonSet has hostPID, hostNetwork, iris-ctl status probes and the metrics port")
PY
echo "check_deploy: all good"
