#!/usr/bin/env bash
# Install the Debian packages fencegate runs for real: Redis, ZooKeeper,
# PostgreSQL, etcd, a C compiler (the lab's clock shim, spin models), spin, wrk,
# Chromium (the lab report test), HAProxy (the native deployment's load
# balancer), openssl (compose/make-secrets.sh, tested) and curl (docs/deploy.md's
# examples, tested). Idempotent: it installs only what is missing.
set -euo pipefail

missing=()
command -v redis-server >/dev/null || missing+=(redis-server)
command -v java >/dev/null || missing+=(default-jre-headless)
[ -e /usr/share/java/zookeeper.jar ] || missing+=(zookeeper)
compgen -G '/usr/lib/postgresql/*/bin/postgres' >/dev/null || missing+=(postgresql)
command -v etcd >/dev/null || missing+=(etcd-server)
command -v faketime >/dev/null || missing+=(faketime)
command -v openssl >/dev/null || missing+=(openssl)
command -v curl >/dev/null || missing+=(curl)
command -v gcc >/dev/null || missing+=(gcc)
command -v spin >/dev/null || missing+=(spin)
command -v wrk >/dev/null || missing+=(wrk)
command -v chromium >/dev/null || missing+=(chromium)
command -v haproxy >/dev/null || [ -x /usr/sbin/haproxy ] || missing+=(haproxy)
python3 -c 'import ensurepip, venv' 2>/dev/null || missing+=(python3-venv)

if [ ${#missing[@]} -eq 0 ]; then
    exit 0
fi

echo "installing Debian packages: ${missing[*]}" >&2
sudo=()
if [ "$(id -u)" -ne 0 ]; then
    sudo=(sudo)
fi
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get update -q
"${sudo[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}"
# The package may start a system-wide etcd on the default ports where systemd runs; the project
# starts its own members on free loopback ports, so that service is not wanted.
if [[ " ${missing[*]} " == *" etcd-server "* ]] && command -v systemctl >/dev/null \
    && systemctl is-active --quiet etcd 2>/dev/null; then
    "${sudo[@]}" systemctl disable --now etcd
fi
