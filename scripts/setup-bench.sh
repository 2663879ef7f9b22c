#!/usr/bin/env bash
# What `make bench` needs beyond `scripts/setup.sh --test` (idempotent, Debian 12):
# sshfs and an OpenSSH server (the remote POSIX file system of the end-to-end
# benchmark), matplotlib (its plots), iproute2 (namespaces, veth, tc).
# The OpenSSH server is only ever started by the benchmark itself, inside its
# own network namespace with its own configuration; the package's own service
# is not started here (policy-rc.d forbids it during the install when no init
# system runs, and nothing enables it otherwise).
set -euo pipefail

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "setup-bench: need root or sudo to install packages" >&2; exit 1; }
  SUDO="sudo"
fi

PKGS=(sshfs fuse3 openssh-server openssh-client python3-matplotlib iproute2 util-linux hdf5-tools)

missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
  echo "setup-bench: installing ${missing[*]}"
  # Keep package scripts from starting sshd on the host (only without an
  # existing policy-rc.d of the machine's own).
  added_policy=""
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' | $SUDO tee /usr/sbin/policy-rc.d >/dev/null
    $SUDO chmod 755 /usr/sbin/policy-rc.d
    added_policy=1
  fi
  trap '[ -z "$added_policy" ] || $SUDO rm -f /usr/sbin/policy-rc.d' EXIT
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

for t in sshfs /usr/sbin/sshd ssh-keygen tc ip nsenter; do
  command -v "$t" >/dev/null || { echo "setup-bench: $t missing after install" >&2; exit 1; }
done
[ -e /dev/fuse ] || { echo "setup-bench: /dev/fuse is missing (sshfs needs FUSE)" >&2; exit 1; }
/usr/bin/python3 -c 'import matplotlib' || { echo "setup-bench: matplotlib does not import" >&2; exit 1; }
echo "setup-bench: ok"
