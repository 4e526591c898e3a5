#!/usr/bin/env bash
# A cluster of several real nodes on one machine, for tests and for trying r8s's multi-node
# networking:
#
#   scripts/multi-node.sh up N DIR [--servers K]
#                                      # returns once all N nodes are Ready;
#                                      # the kubeconfig is DIR/kubeconfig.yaml
#   scripts/multi-node.sh down DIR     # stops the nodes and removes everything `up` made
#   scripts/multi-node.sh kill DIR NODE   # SIGKILL every process of node NODE (node2, or 2), as
#                                         # a power cut: its data, mounts and pods' state stay
#   scripts/multi-node.sh stop DIR NODE   # SIGTERM to node NODE's r8s, as an operator stops
#                                         # it for an upgrade: it leaves the cluster, stops
#                                         # its pods and exits (SIGKILL after 60 s)
#   scripts/multi-node.sh start DIR NODE  # start a killed or stopped node again, as it was
#                                         # started, on its data
#   scripts/multi-node.sh partition DIR NODE  # cut node NODE off the network between hosts
#                                         # (its link to the bridge down): it runs on alone
#   scripts/multi-node.sh heal DIR NODE   # its link up again; returns once it is Ready again
#   scripts/multi-node.sh clock DIR NODE OFFSET  # set node NODE's wall clock OFFSET from the
#                                         # host's (+600, -300: seconds; +10m), a clock jump
#                                         # (needs R8S_MN_FAKETIME=1 at `up`: libfaketime)
#   scripts/multi-node.sh pause DIR NODE  # SIGSTOP every process of node NODE (server or
#                                         # agent, etcd, containerd, shims), as a VM that
#                                         # hangs; its containers' own processes run on
#   scripts/multi-node.sh resume DIR NODE # SIGCONT them
#   scripts/multi-node.sh crash DIR NODE [containerd]  # SIGKILL node NODE's r8s alone (as the
#                                         # OOM killer or a `kill -9`): its containerd and etcd
#                                         # die with it, its shims and containers run on, and
#                                         # the node's init starts r8s again at once (systemd's
#                                         # Restart=always); returns once it is Ready again.
#                                         # With `containerd`: SIGKILL of its containerd alone
#                                         # (r8s starts it again); returns once one runs again
#
# Node 1 is `r8s server` (its own agent is node 1), nodes 2..N are `r8s agent`s joined with
# the server's token. With --servers K, nodes 1..K are servers of one HA cluster: node 1
# starts it with --cluster-init (an etcd member beside each server), nodes 2..K join it with
# --server and the token (each with its own etcd member), the rest are agents. Each node runs in its own network namespace (r8smn-<tag>-<i>, with
# its own containerd, CNI bridge, host-local state, kubelet port, Service proxy, DNS and
# overlay), mount namespace and PID namespace (killing its first process kills the node),
# with its own data dir DIR/node<i> and pod cgroup parent. A bridge on the host stands for
# the underlay network: node i is 10.213.<k>.i/24 on it, the host 10.213.<k>.254 (k from
# DIR, so two harnesses can run side by side). Node addresses are not routed anywhere
# beyond this machine; the nodes' default route points at 10.213.<k>.253, which no one
# holds, so nothing leaves through it.
#
# Environment: R8S_BIN (default target/release/r8s, else target/debug/r8s), R8S_IMAGES (the
# image tarballs each node imports; default target/test-images, built if missing),
# R8S_MN_ARGS (more arguments for every node), R8S_MN_SERVER_ARGS (more for the server),
# R8S_MN_FAKETIME=1 (every node on a clock of its own, for `clock`).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)

usage() {
  echo "usage: $0 up N DIR [--servers K] | down DIR | kill DIR NODE | stop DIR NODE | start DIR NODE | partition DIR NODE | heal DIR NODE | clock DIR NODE OFFSET | pause DIR NODE | resume DIR NODE | crash DIR NODE [containerd]" >&2
  exit 2
}

# Names derived from DIR: a 6-hex-digit tag and the underlay's third octet.
names() {
  dir=$(realpath -m "$1")
  tag=$(printf %s "$dir" | md5sum | cut -c1-6)
  octet=$((16#${tag:0:4} % 250 + 1))
  net=10.213.$octet
  bridge=r8smn$tag
}

ns_of() { echo "r8smn-$tag-$1"; }

own_cgroup() {
  awk -F: '$2 ~ /(^|,)memory(,|$)/ {print $3; found=1} END {if (!found) print ""}' /proc/self/cgroup |
    head -1
}

# A node's init (PID 1 of its PID namespace), as systemd is a machine's: it runs r8s, passes
# SIGTERM on to it, reaps the orphans (shims whose parent died), and ends, ending the node,
# when r8s ends; but when `crash` SIGKILLed r8s alone (it leaves DIR/node<i>/crashed), it
# starts r8s again at once, as systemd's Restart=always would.
# shellcheck disable=SC2016 # expanded by the init's bash
node_init='d=$1; shift
trap '"'"'kill -TERM "$child" 2>/dev/null'"'"' TERM INT
while :; do
  "$@" &
  child=$!
  while :; do
    wait "$child"
    rc=$?
    kill -0 "$child" 2>/dev/null || break
  done
  if [ "$rc" = 137 ] && [ -f "$d/crashed" ]; then
    rm -f "$d/crashed"
    echo "--- started again $(date -u +%FT%TZ) after a crash"
    continue
  fi
  exit "$rc"
done'

start_node() { # i args...
  local i=$1
  shift
  local d=$dir/node$i
  mkdir -p "$d/agent/images"
  if [ -d "$images" ]; then
    # Not the dnsutils image (bind's libraries, 23 MB): each node would import it at start.
    find "$images" -maxdepth 1 -type f ! -name dnsutils.tar -exec cp -f {} "$d/agent/images/" \;
  fi
  # nsenter joins the node's network; unshare gives it a PID namespace (its first process
  # is the node's init, `node_init`: SIGKILL of it kills every process of the node) with a
  # /proc of its own, and a mount namespace where containerd's netns mounts stay.
  # How it was started, for `start` after a `kill`.
  printf '%s\0' "$bin" "$@" >"$d/cmdline"
  # With R8S_MN_FAKETIME=1 at `up`, the node's wall clock is libfaketime's, offset by what
  # `clock` last wrote in DIR/node<i>/clock (its monotonic clock is left alone, as a real
  # clock jump leaves it).
  local fake=()
  if [ -f "$dir/faketime" ]; then
    [ -f "$d/clock" ] || echo "+0" >"$d/clock"
    fake=(env "LD_PRELOAD=$(cat "$dir/faketime")" "FAKETIME_TIMESTAMP_FILE=$d/clock"
      FAKETIME_DONT_FAKE_MONOTONIC=1 FAKETIME_CACHE_DURATION=1)
  fi
  nsenter --net="/run/netns/$(ns_of "$i")" \
    unshare --pid --fork --mount-proc --propagation slave -- \
    bash -c "$node_init" node-init "$d" "${fake[@]}" "$bin" "$@" >>"$d/log" 2>&1 &
  echo $! >"$d/pid"
}

# The number of node NODE (`node2` or `2`) of the cluster in DIR.
node_number() {
  local i=${2#node}
  [[ "$i" =~ ^[0-9]+$ ]] && [ -f "$1/node$i/cmdline" ] || {
    echo "multi-node: no node $2 in $1" >&2
    exit 1
  }
  echo "$i"
}

# Whether node I of the cluster in $dir runs.
node_running() { # I
  local pf=$dir/node$1/pid
  [ -f "$pf" ] && kill -0 "$(cat "$pf")" 2>/dev/null
}

# SIGKILL to a node's init (PID 1 of its PID namespace, the child of the PID `start_node`
# recorded) kills every process of the node at once: server or agent, containerd, shims and
# containers.
kill_init() { # PID
  local init
  init=$(pgrep -P "$1" | head -1 || true)
  [ -n "$init" ] && kill -KILL "$init" 2>/dev/null || true
  kill -KILL "$1" 2>/dev/null || true
}

# Sets dir (and the names) and i, the number of NODE, which must be running.
running_node() { # DIR NODE
  names "$1"
  i=$(node_number "$dir" "$2")
  node_running "$i" || {
    echo "multi-node: node$i is not running" >&2
    exit 1
  }
}

kill_node() { # DIR NODE
  local i
  running_node "$1" "$2"
  local pid
  pid=$(cat "$dir/node$i/pid")
  kill_init "$pid"
  for ((t = 0; t < 100; t++)); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  echo "multi-node: node$i killed"
}

# SIGTERM to a node's init, which passes it to r8s: a server leaves the kubernetes Service's endpoints and
# hands its Leases on, its agent stops the node's pods, and it exits; the node goes with it.
stop_node() { # DIR NODE
  local i
  running_node "$1" "$2"
  local pid init t
  pid=$(cat "$dir/node$i/pid")
  init=$(pgrep -P "$pid" | head -1 || true)
  [ -n "$init" ] && kill -TERM "$init" 2>/dev/null || true
  for ((t = 0; t < 600; t++)); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  if kill -0 "$pid" 2>/dev/null; then
    echo "multi-node: node$i still runs 60 s after SIGTERM; killing it" >&2
    kill_init "$pid"
  fi
  echo "multi-node: node$i stopped in $((t / 10)).$((t % 10)) s"
}

# Every process in node I's PID namespace (its init's), not those of the containers, which
# have namespaces of their own.
node_pids() { # I
  local init ns p
  init=$(pgrep -P "$(cat "$dir/node$1/pid")" | head -1 || true)
  [ -n "$init" ] || return 0
  ns=$(readlink "/proc/$init/ns/pid") || return 0
  for p in /proc/[0-9]*; do
    [ "$(readlink "$p/ns/pid" 2>/dev/null)" = "$ns" ] && echo "${p#/proc/}"
  done
  return 0
}

signal_node() { # DIR NODE SIGNAL WHAT
  local i
  running_node "$1" "$2"
  local pids
  pids=$(node_pids "$i")
  [ -n "$pids" ] || {
    echo "multi-node: node$i has no processes" >&2
    exit 1
  }
  # shellcheck disable=SC2086 # one pid per word
  kill "-$3" $pids 2>/dev/null || true
  echo "multi-node: node$i $4 ($(echo $pids | wc -w) processes)"
}

start_again() { # DIR NODE
  names "$1"
  local i
  i=$(node_number "$dir" "$2")
  if node_running "$i"; then
    echo "multi-node: node$i is running" >&2
    exit 1
  fi
  local args=()
  mapfile -d '' args <"$dir/node$i/cmdline"
  bin=${args[0]}
  images='' # imported at its first start
  local since
  since=$(date -u +%FT%TZ)
  echo "--- started again $since" >>"$dir/node$i/log"
  start_node "$i" "${args[@]:1}"
  ready_since "$i" "$since" "its start"
  echo "multi-node: node$i started again and Ready"
}

# The PID of node I's containerd (not its shims), if one runs.
containerd_of() { # I
  local p
  for p in $(node_pids "$1"); do
    [ "$(cat "/proc/$p/comm" 2>/dev/null)" = containerd ] && echo "$p"
  done
  return 0
}

# SIGKILL of node NODE's r8s alone (its init's child), or of its containerd alone (found by
# name among the node's processes); the init (or r8s) starts it again.
crash_node() { # DIR NODE [containerd]
  local i what=${3:-r8s}
  running_node "$1" "$2"
  local init old p t since
  init=$(pgrep -P "$(cat "$dir/node$i/pid")" | head -1 || true)
  case $what in
    r8s) old=$(pgrep -P "$init" | head -1 || true) ;;
    containerd) old=$(containerd_of "$i") ;;
    *) usage ;;
  esac
  [ -n "$old" ] || {
    echo "multi-node: node$i runs no $what" >&2
    exit 1
  }
  since=$(date -u +%FT%TZ)
  [ "$what" = r8s ] && : >"$dir/node$i/crashed"
  kill -KILL "$old"
  for ((t = 0; t < 600; t++)); do
    case $what in
      r8s) p=$(pgrep -P "$init" | head -1 || true) ;;
      containerd) p=$(containerd_of "$i") ;;
    esac
    [ -n "$p" ] && [ "$p" != "$old" ] && break
    sleep 0.1
  done
  [ -n "$p" ] && [ "$p" != "$old" ] || {
    echo "multi-node: node$i's $what not started again 60 s after its SIGKILL" >&2
    exit 1
  }
  if [ "$what" = r8s ]; then
    ready_since "$i" "$since" "its crash"
    echo "multi-node: node$i's r8s crashed, started again and Ready"
  else
    echo "multi-node: node$i's containerd crashed and started again"
  fi
}

# Until node I's kubelet reports it Ready again: a Ready heartbeat not older than SINCE (the
# condition from before may still read Ready). Asked of a server other than node I, if any.
ready_since() { # I SINCE WHAT
  local ready= kc=$dir/kubeconfig.yaml s
  for ((s = 1; s <= $(cat "$dir/nodes"); s++)); do
    if [ "$s" != "$1" ] && [ -f "$dir/node$s/server/node-token" ] && node_running "$s"; then
      kc=$dir/node$s/kubeconfig.yaml
      break
    fi
  done
  for ((t = 0; t < 600; t++)); do
    ready=$(kubectl --kubeconfig "$kc" get node "node$1" -o \
      jsonpath='{range .status.conditions[?(@.type=="Ready")]}{.status} {.lastHeartbeatTime}{end}' 2>/dev/null |
      awk -v since="$2" '$1 == "True" && $2 >= since' || true)
    [ -n "$ready" ] && return 0
    sleep 0.2
  done
  echo "multi-node: node$1 not Ready 120 s after $3" >&2
  exit 1
}

# Cut node NODE off the bridge (the host side of its link down): nothing reaches it or leaves
# it, while everything on it runs on; `heal` brings the link up again.
partition_node() { # DIR NODE
  local i
  running_node "$1" "$2"
  ip link set "mn$tag$i" down
  echo "multi-node: node$i cut off"
}

# Jump node NODE's wall clock to OFFSET from the host's (libfaketime reads it within a second).
clock_node() { # DIR NODE OFFSET
  local i
  running_node "$1" "$2"
  [ -f "$dir/faketime" ] || {
    echo "multi-node: the nodes' clocks are the host's (R8S_MN_FAKETIME=1 at up moves them)" >&2
    exit 1
  }
  [[ "$3" =~ ^[+-][0-9]+[smhd]?$ ]] || usage
  echo "$3" >"$dir/node$i/clock"
  echo "multi-node: node$i's clock is $3 off"
}

heal_node() { # DIR NODE
  local i since
  running_node "$1" "$2"
  since=$(date -u +%FT%TZ)
  ip link set "mn$tag$i" up
  ready_since "$i" "$since" "the heal"
  echo "multi-node: node$i joined again and Ready"
}

# Until server node I has written its join token and kubeconfig (it serves).
wait_server() {
  local d=$dir/node$1
  for ((t = 0; t < 600; t++)); do
    [ -s "$d/server/node-token" ] && [ -s "$d/kubeconfig.yaml" ] && return 0
    kill -0 "$(cat "$d/pid")" 2>/dev/null || {
      tail -20 "$d/log" >&2
      return 1
    }
    sleep 0.2
  done
  echo "multi-node: server node$1 wrote no join token in 120 s" >&2
  return 1
}

up() {
  local n=$1 k=${3:-1}
  [ "$n" -ge 1 ] 2>/dev/null || usage
  [ "$k" -ge 1 ] 2>/dev/null && [ "$k" -le "$n" ] || usage
  names "$2"
  mkdir -p "$dir"
  bin=${R8S_BIN:-}
  if [ -z "$bin" ]; then
    if [ -x "$root/target/release/r8s" ]; then
      bin=$root/target/release/r8s
    else
      bin=$root/target/debug/r8s
    fi
  fi
  [ -x "$bin" ] || {
    echo "no r8s binary at $bin (cargo build --release -p r8s, or set R8S_BIN)" >&2
    exit 1
  }
  images=${R8S_IMAGES:-$root/target/test-images}
  if [ ! -f "$images/pause-image.txt" ]; then
    bash "$root/scripts/build-test-images.sh" "$images" >/dev/null
  fi
  # Cluster DNS forwards outside names to no one: nothing leaves the machine.
  echo "# no upstream nameservers on the multi-node harness" >"$dir/resolv.conf"
  local cg
  cg=$(own_cgroup)
  cg=${cg%/}
  echo "$n" >"$dir/nodes"
  echo "$cg" >"$dir/cgroup"
  if [ "${R8S_MN_FAKETIME:-}" = 1 ]; then
    local lib
    lib=$(ls /usr/lib/*/faketime/libfaketimeMT.so.1 2>/dev/null | head -1)
    [ -n "$lib" ] || {
      echo "multi-node: R8S_MN_FAKETIME=1 needs libfaketime (apt-get install libfaketime)" >&2
      exit 1
    }
    echo "$lib" >"$dir/faketime"
  fi
  trap 'echo "multi-node: up failed; removing what was made" >&2; down "$dir"' ERR

  ip link add "$bridge" type bridge
  ip addr add "$net.254/24" dev "$bridge"
  ip link set "$bridge" up
  for ((i = 1; i <= n; i++)); do
    local ns
    ns=$(ns_of "$i")
    ip netns add "$ns"
    ip link add "mn$tag$i" type veth peer name eth0 netns "$ns"
    ip link set "mn$tag$i" master "$bridge" up
    ip -n "$ns" addr add "$net.$i/24" dev eth0
    ip -n "$ns" link set eth0 up
    ip -n "$ns" link set lo up
    # A default route, as every real node has (k3s and kube-proxy assume one): a Service's
    # ClusterIP is DNATed only after the first route lookup, so a node without one cannot
    # reach Services from its own processes (the API server calling a webhook). It points at
    # an address no one holds (.253), so whatever is not DNATed goes nowhere.
    ip -n "$ns" route add default via "$net.253" dev eth0
  done

  local common=(--resolv-conf "$dir/resolv.conf")
  # shellcheck disable=SC2206
  local extra=(${R8S_MN_ARGS:-})
  # shellcheck disable=SC2206
  local server_extra=(${R8S_MN_SERVER_ARGS:-})
  local ha=()
  [ "$k" -gt 1 ] && ha=(--cluster-init)
  start_node 1 server --data-dir "$dir/node1" --bind-address "$net.1" --node-ip "$net.1" \
    --node-name node1 --cgroup-root "$cg/r8s-mn-$tag-node1" "${ha[@]}" "${common[@]}" "${extra[@]}" \
    "${server_extra[@]}"
  local token=$dir/node1/server/node-token
  wait_server 1
  cp "$dir/node1/kubeconfig.yaml" "$dir/kubeconfig.yaml"
  # One server at a time: etcd adds a member only while every other one is connected.
  for ((i = 2; i <= k; i++)); do
    start_node "$i" server --server "https://$net.1:6443" --token-file "$token" \
      --data-dir "$dir/node$i" --bind-address "$net.$i" --node-ip "$net.$i" --node-name "node$i" \
      --cgroup-root "$cg/r8s-mn-$tag-node$i" "${common[@]}" "${extra[@]}" "${server_extra[@]}"
    wait_server "$i"
  done
  for ((i = k + 1; i <= n; i++)); do
    start_node "$i" agent --server "https://$net.1:6443" --token-file "$token" \
      --data-dir "$dir/node$i" --node-name "node$i" --node-ip "$net.$i" \
      --cgroup-root "$cg/r8s-mn-$tag-node$i" "${common[@]}" "${extra[@]}"
  done
  local ready=0
  for ((t = 0; t < 600; t++)); do
    ready=$(kubectl --kubeconfig "$dir/kubeconfig.yaml" get nodes --no-headers 2>/dev/null |
      awk '$2 == "Ready"' | wc -l)
    [ "$ready" -ge "$n" ] && break
    sleep 0.2
  done
  [ "$ready" -ge "$n" ] || {
    echo "multi-node: $ready of $n nodes Ready after 120 s" >&2
    false
  }
  trap - ERR
  echo "multi-node: $n nodes Ready; kubeconfig $dir/kubeconfig.yaml"
}

down() {
  names "$1"
  local n=0 cg=
  [ -f "$dir/nodes" ] && n=$(cat "$dir/nodes")
  [ -f "$dir/cgroup" ] && cg=$(cat "$dir/cgroup")
  # A clean stop first (agents stop their pods), all nodes at once; then whatever is left.
  local pids=()
  for ((i = 1; i <= n; i++)); do
    local pf=$dir/node$i/pid
    if [ -f "$pf" ] && kill -0 "$(cat "$pf")" 2>/dev/null; then
      # The node's init is unshare's child (PID 1 inside): SIGTERM to it.
      local init
      init=$(pgrep -P "$(cat "$pf")" | head -1 || true)
      [ -n "$init" ] && kill -TERM "$init" 2>/dev/null || true
      pids+=("$(cat "$pf")")
    fi
  done
  for ((t = 0; t < 400; t++)); do
    local alive=0
    for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
    [ $alive = 0 ] && break
    sleep 0.2
  done
  for p in "${pids[@]}"; do
    kill_init "$p"
  done
  # Processes naming DIR (containerd and shims of a node whose PID namespace outlived it).
  for p in $(pgrep -f "$dir/" || true); do
    [ "$p" != $$ ] && kill -KILL "$p" 2>/dev/null || true
  done
  sleep 0.2
  for ((i = 1; i <= n; i++)); do
    ip netns del "$(ns_of "$i")" 2>/dev/null || true
    ip link del "mn$tag$i" 2>/dev/null || true
  done
  ip link del "$bridge" 2>/dev/null || true
  # The nodes' pod network namespaces: containerd creates their files in the shared
  # /run/netns but mounts them in the node's own mount namespace, so a node that did not remove
  # its sandboxes (SIGKILL, or stopped before its pods) leaves empty files there. Those made
  # since `up` that are no mount point here are such leftovers (a pod netns of a host-level
  # containerd is mounted in this namespace and stays).
  if [ -f "$dir/nodes" ] && [ -d /run/netns ]; then
    find /run/netns -maxdepth 1 -name 'cni-*' -newer "$dir/nodes" | while read -r f; do
      mountpoint -q "$f" || rm -f "$f"
    done
  fi
  # Mounts under DIR (a node's rootfs or volumes left by a SIGKILL), deepest first.
  awk -v d="$dir/" '$5 ~ "^"d {print $5}' /proc/self/mountinfo | sort -r | while read -r m; do
    umount -l "$m" 2>/dev/null || true
  done
  # The nodes' pod cgroups, in every hierarchy.
  if [ -n "$n" ] && [ "$n" -gt 0 ]; then
    for h in /sys/fs/cgroup/*/ /sys/fs/cgroup/; do
      for ((i = 1; i <= n; i++)); do
        local c=$h${cg#/}/r8s-mn-$tag-node$i
        c=${c//\/\//\/}
        [ -d "$c" ] && find "$c" -depth -type d -exec rmdir {} \; 2>/dev/null || true
      done
    done
  fi
  rm -rf "$dir"
  echo "multi-node: down; $dir removed"
}

case "${1:-}" in
  up)
    if [ $# = 3 ]; then
      up "$2" "$3"
    elif [ $# = 5 ] && [ "$4" = --servers ]; then
      up "$2" "$3" "$5"
    else
      usage
    fi
    ;;
  down)
    [ $# = 2 ] || usage
    down "$2"
    ;;
  kill)
    [ $# = 3 ] || usage
    kill_node "$2" "$3"
    ;;
  stop)
    [ $# = 3 ] || usage
    stop_node "$2" "$3"
    ;;
  start)
    [ $# = 3 ] || usage
    start_again "$2" "$3"
    ;;
  clock)
    [ $# = 4 ] || usage
    clock_node "$2" "$3" "$4"
    ;;
  partition)
    [ $# = 3 ] || usage
    partition_node "$2" "$3"
    ;;
  heal)
    [ $# = 3 ] || usage
    heal_node "$2" "$3"
    ;;
  pause)
    [ $# = 3 ] || usage
    signal_node "$2" "$3" STOP paused
    ;;
  resume)
    [ $# = 3 ] || usage
    signal_node "$2" "$3" CONT resumed
    ;;
  crash)
    [ $# = 3 ] || [ $# = 4 ] || usage
    crash_node "$2" "$3" "${4:-r8s}"
    ;;
  *) usage ;;
esac
