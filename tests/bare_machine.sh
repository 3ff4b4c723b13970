#!/usr/bin/env bash
# Runs a command as on a machine with Python alone, the machine `make test-fast` must pass
# on: no PostgreSQL, Redis or RabbitMQ answering (a network namespace of its own, with
# a loopback and one interface besides, as a machine has), and no podman, runc, Chromium,
# nft, sshd, C compiler or npm (the machine's /usr/bin and /usr/sbin replaced, in a mount
# namespace of its own, by copies made of hard links without them). Needs root; changes
# nothing outside its namespaces but the copies under ${TMPDIR:-/tmp}.
#
#   unshare -m -n --propagation private tests/bare_machine.sh make test-fast
set -euo pipefail
cd "$(dirname "$0")/.."
ip link set lo up
ip link add bare0 type veth peer name bare1
ip addr add 10.99.0.1/24 dev bare0
ip link set bare0 up
ip link set bare1 up
copies="${TMPDIR:-/tmp}/runyard-bare-machine"
rm -rf "$copies"
mkdir -p "$copies"
cp -al /usr/bin "$copies/bin"
cp -al /usr/sbin "$copies/sbin"
for program in podman chromium cc gcc npm node psql pg_isready redis-cli redis-server runc; do
  rm -f "$copies/bin/$program"
done
rm -f "$copies"/bin/gcc-* "$copies"/bin/x86_64-linux-gnu-gcc*
for program in nft sshd runc rabbitmq-server rabbitmqctl; do
  rm -f "$copies/sbin/$program"
done
mount --bind "$copies/bin" /usr/bin
mount --bind "$copies/sbin" /usr/sbin
exec "$@"
