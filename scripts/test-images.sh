#!/usr/bin/env bash
# Check scripts/build-test-images.sh against a real containerd (Debian's, 1.6), as root:
#   - a registry (Debian's docker-registry) on 127.0.0.1 and a private containerd, each with
#     all its files under one temporary directory;
#   - the images are built into it and pushed to the registry (--push);
#   - `ctr images import` of each tarball names the three images;
#   - busybox runs `echo hello`, its sh passes `data-1=…` on to `env`, and its wget (-T), nc,
#     nslookup, ping and httpd work;
#     nginx passes `nginx -t`, and started with its own Cmd serves
#     "Welcome to nginx!" inside its own network namespace (no host network); pause runs as
#     PID 1 of its PID namespace and exits 0 on SIGTERM;
#   - busybox pulled back from the registry has the digest the tarball had, and runs.
# Whatever happens, every task, shim and server it started is stopped, everything mounted under
# the temporary directory is unmounted, and the directory is removed.
# PAUSE_BIN=path is passed on to build-test-images.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] || { echo "test-images: run as root" >&2; exit 1; }

need=()
command -v containerd >/dev/null && command -v ctr >/dev/null || need+=(containerd)
command -v docker-registry >/dev/null || need+=(docker-registry)
command -v curl >/dev/null || need+=(curl)
if [ ${#need[@]} -gt 0 ]; then
  echo "test-images: installing ${need[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

X=$(mktemp -d /tmp/r8s-test-images.XXXXXX)
SOCK=$X/containerd.sock
pids=()
[ -d /run/containerd ] && run_existed=1 || run_existed=0

step() { echo "test-images: $*" >&2; }
fail() {
  echo "test-images: FAIL: $*" >&2
  exit 1
}
c() { ctr --address "$SOCK" --namespace k8s.io "$@"; }
# ctr run with its files under $X: no cgroup, runc state and I/O fifos in the temporary directory.
crun() { c run --cgroup "" --runc-root "$X/runc" --fifo-dir "$X/fifo" "$@"; }
cexec() { c tasks exec --fifo-dir "$X/fifo" "$@"; }

# PIDs of the shims this containerd started (they outlive it if tasks are left).
our_shims() {
  local f
  for f in /proc/[0-9]*/cmdline; do
    { tr '\0' '\n' <"$f"; } 2>/dev/null | grep -qxF -- "$SOCK" && basename "$(dirname "$f")"
  done
  return 0
}

cleanup() {
  local status=$? id pid
  set +e
  trap - EXIT INT TERM
  if [ -S "$SOCK" ]; then
    for id in $(c tasks ls -q 2>/dev/null); do
      c tasks kill -s SIGKILL "$id" >/dev/null 2>&1
      c tasks delete -f "$id" >/dev/null 2>&1
    done
    for id in $(c containers ls -q 2>/dev/null); do c containers delete "$id" >/dev/null 2>&1; done
  fi
  for pid in $(our_shims) "${pids[@]}"; do
    kill "$pid" 2>/dev/null
  done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null; done
  # A shim exits once its task is gone; give the last ones a moment, then force them.
  for _ in $(seq 25); do [ -z "$(our_shims)" ] && break; sleep 0.2; done
  for pid in $(our_shims); do kill -9 "$pid" 2>/dev/null; done
  # Deepest first: snapshot mounts, the shims' rootfs mounts, anything else left.
  awk -v x="$X/" 'index($5, x) == 1 { print $5 }' /proc/self/mountinfo | sort -r |
    while read -r mnt; do umount -l "$mnt"; done
  rm -rf "$X"
  if [ "$run_existed" = 0 ]; then
    # The shims' sockets live in /run/containerd/s whatever the state directory: remove what
    # this run created if nothing else uses it.
    rmdir /run/containerd/s /run/containerd 2>/dev/null
  fi
  if [ "$status" = 0 ]; then step "all checks passed"; else step "failed (exit $status)"; fi
  exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# wait_for SECONDS COMMAND...: runs COMMAND every 0.2s until it succeeds; fails after SECONDS.
wait_for() {
  local deadline=$((SECONDS + $1))
  shift
  until "$@" >/dev/null 2>&1; do
    [ "$SECONDS" -lt "$deadline" ] || return 1
    sleep 0.2
  done
}
task_status() { c tasks ls | awk -v id="$1" '$1 == id { print $3 }'; }
task_pid() { c tasks ls | awk -v id="$1" '$1 == id { print $2 }'; }
task_is() { [ "$(task_status "$1")" = "$2" ]; }

# --- A registry on loopback ---------------------------------------------------------------------
free_port() {
  local port
  while :; do
    port=$((20000 + RANDOM % 20000))
    [ -z "$(ss -Htln "sport = :$port")" ] && { echo "$port"; return; }
  done
}
port=$(free_port)
registry=127.0.0.1:$port
cat >"$X/registry.yml" <<EOF
version: 0.1
log:
  level: warn
storage:
  filesystem:
    rootdirectory: $X/registry
http:
  addr: $registry
EOF
step "registry on $registry"
docker-registry serve "$X/registry.yml" >"$X/registry.log" 2>&1 &
pids+=($!)
wait_for 20 curl -fsS "http://$registry/v2/" || fail "registry did not start: $(cat "$X/registry.log")"

# --- Build and push -----------------------------------------------------------------------------
step "building the images"
scripts/build-test-images.sh "$X/images" --push "$registry" >"$X/built"
for name in busybox nginx pause dnsutils; do
  grep -qx "$X/images/$name.tar" "$X/built" || fail "build-test-images did not print $name.tar"
  printf '  %-8s %s bytes\n' "$name" "$(stat -c %s "$X/images/$name.tar")" >&2
done
[ "$(cat "$X/images/pause-image.txt")" = docker.io/r8s/pause:0.1 ] || fail "pause-image.txt"
for repo in library/busybox library/nginx r8s/pause e2e-test-images/jessie-dnsutils; do
  curl -fsS "http://$registry/v2/$repo/tags/list" | grep -q '"tags":\["\(latest\|0.1\|1.3\)"\]' ||
    fail "registry has no tag for $repo"
done

# --- containerd ---------------------------------------------------------------------------------
cat >"$X/config.toml" <<EOF
version = 2
root = "$X/root"
state = "$X/state"
disabled_plugins = ["io.containerd.grpc.v1.cri"]
[grpc]
  address = "$SOCK"
[plugins."io.containerd.internal.v1.opt"]
  path = "$X/opt"
EOF
step "containerd at $SOCK"
containerd --config "$X/config.toml" >"$X/containerd.log" 2>&1 &
pids+=($!)
wait_for 20 c version || fail "containerd did not start: $(tail -20 "$X/containerd.log")"

step "importing"
for name in busybox nginx pause dnsutils; do
  c images import "$X/images/$name.tar" >&2
done
c images ls -q >"$X/images.ls"
for ref in docker.io/library/busybox:latest docker.io/library/nginx:latest docker.io/r8s/pause:0.1 \
  registry.k8s.io/e2e-test-images/jessie-dnsutils:1.3; do
  grep -qxF "$ref" "$X/images.ls" || fail "$ref not in 'ctr images ls': $(cat "$X/images.ls")"
done

step "busybox: echo hello"
out=$(crun --rm docker.io/library/busybox:latest t-busybox echo hello)
[ "$out" = hello ] || fail "busybox printed '$out'"

step "busybox: sh passes on environment variables whose names are not shell names"
# A ConfigMap's keys become such variables through envFrom; upstream's ash passes them on to
# the programs it runs (Debian's patched ash drops them).
out=$(crun --rm --env data-1=value-1 docker.io/library/busybox:latest t-env sh -c env)
grep -qxF data-1=value-1 <<<"$out" || fail "sh -c env dropped data-1: $out"

step "busybox: the applets a debug pod reaches for (sh, wget -T, nc, nslookup, ping)"
# One container, its own network namespace: busybox's httpd serves a file on loopback, wget
# (with -T, which Debian 12's busybox died on) and nc fetch it, ping reaches loopback, and
# nslookup asks a server that is not there and says so (exit 1, not a crash; the node tests
# ask the cluster DNS with it).
applets='
set -e
echo hello-from-httpd >/tmp/index.html
httpd -p 127.0.0.1:8080 -h /tmp
nc -l -p 9000 -e echo hello-from-nc &
sleep 0.5
wget -T 5 -qO- http://127.0.0.1:8080/index.html
echo x | nc -w 5 127.0.0.1 9000
ping -c 1 -W 5 127.0.0.1 >/dev/null && echo ping-ok
rc=0
nslookup -type=a localhost 127.0.0.1 >/dev/null 2>&1 || rc=$?
echo nslookup-ran-$rc
'
out=$(crun --rm docker.io/library/busybox:latest t-applets sh -c "$applets" 2>&1) ||
  fail "busybox applets: $out"
for want in hello-from-httpd hello-from-nc ping-ok nslookup-ran-1; do
  grep -qxF "$want" <<<"$out" || fail "busybox applets: no '$want' in: $out"
done

step "nginx: nginx -t"
crun --rm docker.io/library/nginx:latest t-nginx-t nginx -t || fail "nginx -t"

step "nginx: serves its page (own network namespace, fetched from inside it)"
crun -d --null-io docker.io/library/nginx:latest t-nginx
page_ok() {
  cexec --exec-id "probe-$RANDOM" t-nginx wget -qO- http://127.0.0.1/ | grep -q 'Welcome to nginx!'
}
wait_for 10 page_ok || fail "nginx did not serve its page"
c tasks kill t-nginx # the image's StopSignal: SIGQUIT, a graceful stop
wait_for 10 task_is t-nginx STOPPED || fail "nginx did not stop on its StopSignal"
c tasks delete t-nginx || fail "nginx exited non-zero after SIGQUIT"
c containers delete t-nginx

step "pause: -v, PID 1, SIGTERM"
out=$(crun --rm docker.io/r8s/pause:0.1 t-pause-v /pause -v)
case $out in "pause "*" (r8s)") ;; *) fail "pause -v printed '$out'" ;; esac
crun -d --null-io docker.io/r8s/pause:0.1 t-pause
wait_for 10 task_is t-pause RUNNING || fail "pause did not start"
pid=$(task_pid t-pause)
grep -q "^NSpid:[[:space:]]*${pid}[[:space:]]*1\$" "/proc/$pid/status" ||
  fail "pause is not PID 1 in its namespace"
grep -q '^Uid:[[:space:]]*65535' "/proc/$pid/status" || fail "pause does not run as 65535"
c tasks kill -s SIGTERM t-pause
wait_for 5 task_is t-pause STOPPED || fail "pause still running 5s after SIGTERM"
c tasks delete t-pause || fail "pause exited non-zero after SIGTERM"
c containers delete t-pause

step "busybox pulled from the registry"
c images pull --plain-http "$registry/library/busybox:latest" >/dev/null
digest() { c images ls | awk -v r="$1" '$1 == r { print $3 }'; }
[ "$(digest "$registry/library/busybox:latest")" = "$(digest docker.io/library/busybox:latest)" ] ||
  fail "the pulled busybox has another digest than the imported one"
out=$(crun --rm "$registry/library/busybox:latest" t-pulled echo pulled)
[ "$out" = pulled ] || fail "pulled busybox printed '$out'"
