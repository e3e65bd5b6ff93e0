#!/usr/bin/env bash
# irisd as a systemd service under a real systemd as PID 1, with a job running through its
# restarts: a Debian 12 root made with debootstrap from Debian's packages (cached in
# $IRIS_NSPAWN_ROOT, default /var/cache/irisd-ci/bookworm), the .deb of scripts/check-deb.sh
# installed in it, booted with systemd-nspawn. Inside, a 2-rank job (tests' iris-test-rank, all six
# collectives, every byte checked) runs while irisd is SIGKILLed (`systemctl kill -s KILL`;
# Restart= brings it back), SIGSTOPped (the watchdog kills it and systemd restarts it) and
# reloaded (`systemctl reload` changes the log level) and upgraded (the package installed again
# with dpkg: its scripts `systemctl try-restart` irisd), under the unit's hardening; the job must
# finish well and `iris-ctl status` must show its sessions resumed.
# Needs root, systemd-nspawn and debootstrap (installed with apt-get when missing) and Debian's
# mirror; says why and skips (exit 0) where it cannot run.
set -euo pipefail
cd "$(dirname "$0")/.."
src=$PWD
root=${IRIS_NSPAWN_ROOT:-/var/cache/irisd-ci/bookworm}
deb=$(ls "$src"/build-deb/irisd_*.deb 2>/dev/null | head -1 || true)
rank=$src/build/tests/iris-test-rank
skip() { echo "check-systemd: SKIPPED: $*"; exit 0; }
[ "$(id -u)" -eq 0 ] || skip "needs root"
[ -n "$deb" ] || skip "no package in build-deb/ (run scripts/check-deb.sh first)"
[ -x "$rank" ] || skip "no $rank (run scripts/build.sh first)"
if ! command -v systemd-nspawn >/dev/null || ! command -v debootstrap >/dev/null; then
  DEBIAN_FRONTEND=noninteractive timeout 600 apt-get install -y -q systemd-container debootstrap \
    >/dev/null || skip "cannot install systemd-container and debootstrap"
fi
if [ ! -x "$root/lib/systemd/systemd" ]; then
  rm -rf "$root"
  mkdir -p "$(dirname "$root")"
  timeout 900 debootstrap --variant=minbase --include=systemd,systemd-sysv,dbus,procps bookworm \
    "$root" http://deb.debian.org/debian >/tmp/check-systemd-debootstrap.log 2>&1 ||
    skip "debootstrap failed (no network to Debian's mirror?): /tmp/check-systemd-debootstrap.log"
fi
nspawn=(systemd-nspawn --quiet --register=no --keep-unit -D "$root")
"${nspawn[@]}" /bin/true 2>/dev/null || skip "systemd-nspawn cannot start a container here"

# The package (its dependencies from Debian's mirror), enabled, and a test unit that runs the job.
rm -rf "$root/ci" && mkdir -p "$root/ci"
cp "$deb" "$root/ci/"
cat >"$root/ci/inside.sh" <<EOF
#!/bin/sh
# Runs as a oneshot unit once the machine is up; writes /ci/result, then powers off.
out=/ci/result
sock=/run/irisd/irisd.sock
say() { echo "\$*" >>\$out; }
up() {  # up OLD_PID: irisd active again with another main pid
  for i in \$(seq 600); do
    p=\$(systemctl show -p MainPID --value irisd)
    if [ "\$p" != 0 ] && [ "\$p" != "\$1" ] && systemctl is-active -q irisd && [ -S \$sock.attach ]; then return 0; fi
    sleep 0.1
  done
  return 1
}
up 0 && say "started: yes" || { say "started: no"; journalctl -u irisd --no-pager >/ci/irisd.journal 2>&1; systemctl poweroff; exit 1; }
for r in 0 1; do
  $rank --socket \$sock --nranks 2 --rank \$r --key systemd --collective mixed --max-bytes 262144 \
    --iterations 1000000 --inflight 2 --seed 7 --stop-file /ci/stop >/ci/rank\$r.log 2>&1 &
  eval pid\$r=\\\$!
done
sleep 1
p=\$(systemctl show -p MainPID --value irisd)
systemctl kill -s KILL irisd
up \$p && say "after systemctl kill -s KILL: restarted" || say "after systemctl kill -s KILL: NOT restarted"
sleep 1
p=\$(systemctl show -p MainPID --value irisd)
systemctl kill -s STOP irisd
up \$p && say "after SIGSTOP: restarted by the watchdog" || say "after SIGSTOP: NOT restarted"
sleep 1
sed -i 's/^log-level = .*/log-level = "debug"/' /etc/irisd/irisd.toml
systemctl reload irisd
sleep 1
journalctl -u irisd --no-pager | grep -q "SIGHUP: log level info -> debug" && say "reload: log level changed" || say "reload: log level NOT changed"
p=\$(systemctl show -p MainPID --value irisd)
DEBIAN_FRONTEND=noninteractive dpkg -i /ci/$(basename "$deb") >/ci/upgrade.log 2>&1
up \$p && say "after the package upgrade: restarted" || say "after the package upgrade: NOT restarted"
sleep 1
touch /ci/stop
wait \$pid0; r0=\$?
wait \$pid1; r1=\$?
say "ranks: \$r0 \$r1"
say "sessions_resumed: \$(/usr/bin/iris-ctl status --json | sed -n 's/.*"sessions_resumed": *\([0-9]*\).*/\1/p')"
journalctl -u irisd --no-pager >/ci/irisd.journal 2>&1
say "done"
systemctl poweroff
EOF
chmod +x "$root/ci/inside.sh"
cat >"$root/etc/systemd/system/iris-ci.service" <<'EOF'
[Unit]
Description=irisd under systemd: a job through restarts (scripts/check-systemd.sh)
After=irisd.service multi-user.target
Wants=irisd.service
[Service]
Type=oneshot
ExecStart=/ci/inside.sh
[Install]
WantedBy=multi-user.target
EOF
timeout 600 "${nspawn[@]}" sh -c "DEBIAN_FRONTEND=noninteractive apt-get install --reinstall -y -q /ci/$(basename "$deb") >/ci/install.log 2>&1 && systemctl enable irisd iris-ci >/dev/null 2>&1" ||
  { tail -20 "$root/ci/install.log"; echo "check-systemd: installing the package in the root failed"; exit 1; }

# The conffile survives reinstalls: start from info, so that the reload below is a change.
sed -i 's/^log-level = .*/log-level = "info"/' "$root/etc/irisd/irisd.toml"
echo "check-systemd: booting $root with systemd-nspawn"
timeout 300 "${nspawn[@]}" --bind-ro="$src/build" -b >"$root/ci/boot.log" 2>&1 || true
echo "check-systemd: what the job inside saw:"
cat "$root/ci/result" 2>/dev/null || { tail -30 "$root/ci/boot.log"; exit 1; }
fail=0
for want in "started: yes" "after systemctl kill -s KILL: restarted" \
  "after SIGSTOP: restarted by the watchdog" "reload: log level changed" \
  "after the package upgrade: restarted" "ranks: 0 0" "done"; do
  grep -qx "$want" "$root/ci/result" || { echo "check-systemd: expected '$want'"; fail=1; }
done
resumed=$(sed -n 's/^sessions_resumed: //p' "$root/ci/result")
[ "${resumed:-0}" -ge 2 ] || { echo "check-systemd: expected the job's 2 sessions resumed, got '$resumed'"; fail=1; }
if [ $fail -ne 0 ]; then
  tail -40 "$root/ci/irisd.journal" 2>/dev/null
  tail -20 "$root/ci/upgrade.log" 2>/dev/null
  cat "$root/ci/rank0.log" "$root/ci/rank1.log" 2>/dev/null
  exit 1
fi
"${nspawn[@]}" apt-get purge -y -q irisd >/dev/null 2>&1 || true
echo "check-systemd: ok"
