#!/usr/bin/env bash
# What `make bench` needs beyond `scripts/setup.sh --test` (idempotent, Debian 12):
# sshfs and an OpenSSH server (the remote POSIX file system of the end-to-end
# benchmark), matplotlib (its plots), iproute2 (namespaces, veth, tc); Maven
# and Java 17 with Apache Kafka's jars from Maven Central in target/kafka/lib
# (the streams benchmark's baseline, bench/streams/kafka-pom.xml; never
# committed).
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

PKGS=(sshfs fuse3 openssh-server openssh-client python3-matplotlib iproute2 util-linux hdf5-tools
      maven openjdk-17-jre-headless)

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

# Apache Kafka for bench/streams (docs/benchmarks.md section 12): the broker,
# its storage tool and the perf tools, about 90 jars (54 MB).
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if ! ls "$ROOT"/target/kafka/lib/kafka_2.13-*.jar >/dev/null 2>&1; then
  echo "setup-bench: fetching Apache Kafka's jars into target/kafka/lib"
  mvn -q -B -f "$ROOT/bench/streams/kafka-pom.xml" dependency:copy-dependencies \
    -DincludeScope=runtime -DoutputDirectory="$ROOT/target/kafka/lib"
fi
for t in mvn java; do
  command -v "$t" >/dev/null || { echo "setup-bench: $t missing after install" >&2; exit 1; }
done
ls "$ROOT"/target/kafka/lib/kafka-tools-*.jar >/dev/null 2>&1 || { echo "setup-bench: no Kafka jars in target/kafka/lib" >&2; exit 1; }
echo "setup-bench: ok"
