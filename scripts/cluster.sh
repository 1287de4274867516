#!/usr/bin/env bash
# A pretend cluster on one Linux machine, for the multi-host tests: N "hosts", each a network
# namespace with its own address, joined through veth pairs to a bridge that sits in a namespace
# of its own, so nothing in the machine's own network changes and no route leads out.  With
# --sshd every host runs an sshd (in its own UTS namespace, so it has its own hostname) that
# takes only a key made for this cluster; with --rate every link is capped in both directions
# (tbf), e.g. --rate 1gbit.  Needs root, iproute2 (ip, tc), and for --sshd openssh-server.
#
#   scripts/cluster.sh up 3 [--sshd] [--rate 1gbit]
#   scripts/cluster.sh exec 1 CMD...         # run CMD on host 1 (the launcher's host, say)
#   scripts/cluster.sh down                  # stop every process on the hosts, delete them
#
# CLUSTER_NAME (default fuc) prefixes every namespace: host i is the namespace and hostname
# ${CLUSTER_NAME}$i at ${CLUSTER_NET}.$((10 + i)) (CLUSTER_NET default 10.231.0).  Two clusters
# with different names can be up at once.  CLUSTER_DIR (default /tmp/fuse-cluster-$CLUSTER_NAME)
# holds the state: `hosts` (address, name per line), the keys, `ssh_config` for
# `ssh -F $CLUSTER_DIR/ssh_config root@ADDRESS`, and each sshd's log.
set -euo pipefail

NAME=${CLUSTER_NAME:-fuc}
NET=${CLUSTER_NET:-10.231.0}
DIR=${CLUSTER_DIR:-${TMPDIR:-/tmp}/fuse-cluster-$NAME}
SWITCH=${NAME}sw

die() { echo "cluster.sh: $*" >&2; exit 1; }

address() { echo "$NET.$((10 + $1))"; }

link_cap() {  # namespace, device, rate
  ip netns exec "$1" tc qdisc add dev "$2" root tbf rate "$3" burst 256kb latency 50ms
}

start_sshd() {  # host number
  local host=$NAME$1 listen
  listen=$(address "$1")
  ip netns exec "$host" unshare --uts sh -c \
    "hostname $host && exec /usr/sbin/sshd -D -e -f '$DIR/sshd_config' -o ListenAddress=$listen" \
    > "$DIR/sshd-$host.log" 2>&1 &
}

make_keys() {
  rm -f "$DIR"/host_key* "$DIR"/client_key*
  ssh-keygen -q -t ed25519 -N '' -C "fuse test cluster host" -f "$DIR/host_key"
  ssh-keygen -q -t ed25519 -N '' -C "fuse test cluster client" -f "$DIR/client_key"
  cp "$DIR/client_key.pub" "$DIR/authorized_keys"
  chmod 600 "$DIR/authorized_keys"
  # sshd: the cluster's key only, root allowed (by key), nothing from the machine's own setup;
  # fuserun opens one ssh per rank at once, so a host of 16 ranks needs more than the default
  # 10 unauthenticated connections at a time
  cat > "$DIR/sshd_config" <<EOF
HostKey $DIR/host_key
AuthorizedKeysFile $DIR/authorized_keys
PermitRootLogin prohibit-password
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
PidFile none
MaxStartups 256
EOF
  # ssh: trust exactly the cluster's host key, log in as root with the cluster's key
  echo "$NET.* $(cut -d' ' -f1-2 "$DIR/host_key.pub")" > "$DIR/known_hosts"
  cat > "$DIR/ssh_config" <<EOF
Host $NET.*
  User root
  IdentityFile $DIR/client_key
  IdentitiesOnly yes
  UserKnownHostsFile $DIR/known_hosts
  StrictHostKeyChecking yes
  BatchMode yes
EOF
}

up() {
  local n=$1 rate="" sshd=0
  shift
  while [ $# -gt 0 ]; do
    case "$1" in
      --sshd) sshd=1 ;;
      --rate) rate=${2:?--rate needs a value, e.g. 1gbit}; shift ;;
      *) die "unknown option $1" ;;
    esac
    shift
  done
  [ "$(id -u)" = 0 ] || die "needs root (it makes network namespaces)"
  command -v ip >/dev/null || die "needs ip (apt-get install iproute2)"
  if [ "$sshd" = 1 ] && [ ! -x /usr/sbin/sshd ]; then
    die "--sshd needs /usr/sbin/sshd (apt-get install openssh-server)"
  fi
  if ip netns list | grep -qw "$SWITCH"; then die "cluster $NAME is up already (down first)"; fi
  mkdir -p "$DIR"
  echo "$n" > "$DIR/size"
  ip netns add "$SWITCH"
  ip -n "$SWITCH" link add bridge type bridge
  ip -n "$SWITCH" link set bridge up
  : > "$DIR/hosts"
  local i host
  for i in $(seq 1 "$n"); do
    host=$NAME$i
    ip netns add "$host"
    ip -n "$host" link set lo up
    # one cable: eth0 on the host, port$i on the switch
    ip link add eth0 netns "$host" type veth peer name "port$i" netns "$SWITCH"
    ip -n "$SWITCH" link set "port$i" master bridge up
    ip -n "$host" addr add "$(address "$i")/24" dev eth0
    ip -n "$host" link set eth0 up
    if [ -n "$rate" ]; then
      link_cap "$host" eth0 "$rate"           # what the host sends
      link_cap "$SWITCH" "port$i" "$rate"     # what it receives, so many-to-one is capped too
    fi
    echo "$(address "$i") $host" >> "$DIR/hosts"
  done
  if [ "$sshd" = 1 ]; then
    make_keys
    mkdir -p /run/sshd    # sshd's privilege-separation directory
    for i in $(seq 1 "$n"); do start_sshd "$i"; done
    # ready when every sshd answers
    for i in $(seq 1 "$n"); do
      local tries=0
      until ip netns exec "${NAME}1" ssh -F "$DIR/ssh_config" -o ConnectTimeout=2 \
          "$(address "$i")" true 2>/dev/null; do
        tries=$((tries + 1))
        if [ "$tries" -ge 50 ]; then
          cat "$DIR/sshd-$NAME$i.log" >&2
          die "the sshd of $NAME$i does not answer"
        fi
        sleep 0.2
      done
    done
  fi
  cat "$DIR/hosts"
}

down() {
  local n i ns
  n=$(cat "$DIR/size" 2>/dev/null || echo 0)
  for i in $(seq 1 "$n") sw; do
    ns=$NAME$i
    ip netns list | grep -qw "$ns" || continue
    # whatever still runs on the host (its sshd, workers it started) goes with it
    for pid in $(ip netns pids "$ns"); do kill -KILL "$pid" 2>/dev/null || true; done
    ip netns del "$ns"
  done
  rm -f "$DIR/size"
}

case "${1:-}" in
  up) shift; up "${1:?up needs the number of hosts}" "${@:2}" ;;
  down) down ;;
  exec) shift; host=${1:?exec needs a host number}; shift; exec ip netns exec "$NAME$host" "$@" ;;
  *) echo "usage: $0 up N [--sshd] [--rate RATE] | exec I CMD... | down" >&2; exit 2 ;;
esac
