#!/usr/bin/env bash
# Build r8s's test images from Debian packages, without docker or buildah, as OCI image-layout
# tarballs in DIR:
#   DIR/busybox.tar  docker.io/library/busybox:latest  static busybox 1.37 built from Debian 13's
#                                                      source with upstream's ash (12's wget dies
#                                                      on -T), an applet link for every command
#                                                      in /bin; Cmd ["sh"]
#   DIR/nginx.tar    docker.io/library/nginx:latest    Debian's nginx with the libraries it links,
#                                                      configured like the upstream image (port 80,
#                                                      logs to stdout/stderr), busybox for a shell
#   DIR/pause.tar    docker.io/r8s/pause:0.1           crates/pause, built statically; the name is
#                                                      also written to DIR/pause-image.txt
#   DIR/dnsutils.tar registry.k8s.io/e2e-test-images/jessie-dnsutils:1.3
#                                                      Debian's dig, host and nslookup (bind9-dnsutils)
#                                                      with busybox: the image Kubernetes' "Debugging
#                                                      DNS Resolution" page runs (bookworm's tools,
#                                                      under the name its manifest uses)
# The names are the ones `--image=busybox` and `--image=nginx` normalise to. Import one with
#   ctr -n k8s.io images import DIR/nginx.tar
# --push HOST:PORT also pushes the images to a registry on loopback, over plain HTTP, with
# curl (OCI distribution API). PAUSE_BIN=path puts that binary in the pause image instead of
# building crates/pause with cargo.
#
# Run as root on Debian 12: packages that are missing are installed with apt-get. Safe to run
# again; the same packages give the same bytes (fixed owners and times, SOURCE_DATE_EPOCH or 0).
# Prints the tarballs' paths, one a line.
set -euo pipefail
umask 022

usage() {
  echo "usage: $0 DIR [--push HOST:PORT]" >&2
  exit 2
}
die() {
  echo "build-test-images: $*" >&2
  exit 1
}
log() { echo "build-test-images: $*" >&2; }

out='' registry=''
while [ $# -gt 0 ]; do
  case $1 in
    --push) [ $# -ge 2 ] || usage; registry=$2; shift 2 ;;
    --push=*) registry=${1#--push=}; shift ;;
    -*) usage ;;
    *) [ -z "$out" ] || usage; out=$1; shift ;;
  esac
done
[ -n "$out" ] || usage
if [ -n "$registry" ]; then
  case $registry in
    127.*:[0-9]* | localhost:[0-9]* | \[::1\]:[0-9]*) ;;
    *) die "--push takes a registry on loopback: 127.0.0.1:PORT, localhost:PORT or [::1]:PORT" ;;
  esac
fi

BUSYBOX_REF=docker.io/library/busybox:latest
NGINX_REF=docker.io/library/nginx:latest
PAUSE_REF=docker.io/r8s/pause:0.1
DNSUTILS_REF=registry.k8s.io/e2e-test-images/jessie-dnsutils:1.3
PATH_ENV=PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin

# --- What the images are made of ----------------------------------------------------------------
need=()
for pkg in nginx jq bind9-dnsutils; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'ok installed' || need+=("$pkg")
done
[ -z "$registry" ] || command -v curl >/dev/null || need+=(curl)
if [ ${#need[@]} -gt 0 ]; then
  log "installing ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  # policy-rc.d or no init system: nginx's package does not start a server here.
  apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

arch=$(dpkg --print-architecture) # amd64, arm64: the same words OCI uses
epoch=${SOURCE_DATE_EPOCH:-0}
created=$(date -u -d "@$epoch" +%Y-%m-%dT%H:%M:%SZ)
work=$(mktemp -d /tmp/r8s-build-images.XXXXXX)
trap 'rm -rf "$work"' EXIT
# shellcheck source=scripts/oci-image-lib.sh
. "$(dirname "$0")/oci-image-lib.sh"

if [ -n "${PAUSE_BIN:-}" ]; then
  pause_bin=$PAUSE_BIN
else
  command -v cargo >/dev/null || die "cargo is needed to build crates/pause (or set PAUSE_BIN)"
  repo=$(cd "$(dirname "$0")/.." && pwd)
  triple=$(uname -m)-unknown-linux-gnu
  log "building crates/pause (static, $triple)"
  (cd "$repo" && RUSTFLAGS='-C target-feature=+crt-static' CARGO_PROFILE_RELEASE_DEBUG=false \
    CARGO_PROFILE_RELEASE_STRIP=symbols cargo build --quiet --release --locked -p r8s-pause \
    --target "$triple" >&2)
  target_dir=$(cd "$repo" && cargo metadata --format-version 1 --no-deps | jq -r .target_directory)
  pause_bin=$target_dir/$triple/release/pause
fi
[ -x "$pause_bin" ] || die "no pause binary at $pause_bin"
is_static "$pause_bin" || die "$pause_bin is dynamically linked; the pause image has no libc"

# --- The three images ---------------------------------------------------------------------------
log "busybox"
root=$work/busybox
base_rootfs "$root"
add_busybox "$root"
image "$BUSYBOX_REF" "$root" "$(jq -cn --arg path "$PATH_ENV" '{Env: [$path], Cmd: ["sh"]}')" \
  "$work/busybox.oci"

log "nginx"
root=$work/nginx
base_rootfs "$root"
add_busybox "$root"
add_program "$root" /usr/sbin/nginx
mkdir -p "$root"/etc/nginx/conf.d "$root"/usr/share/nginx/html "$root"/var/cache/nginx \
  "$root"/var/lib/nginx "$root"/var/log/nginx "$root"/var/www
cp /etc/nginx/mime.types "$root/etc/nginx/mime.types"
# As upstream's image: the logs are the container's stdout and stderr.
ln -s /dev/stdout "$root/var/log/nginx/access.log"
ln -s /dev/stderr "$root/var/log/nginx/error.log"
# No `daemon off;` here: like upstream's, the image's Cmd passes it with -g (twice is an error).
cat >"$root/etc/nginx/nginx.conf" <<'EOF'
user www-data;
worker_processes 1;
error_log /var/log/nginx/error.log notice;
pid /run/nginx.pid;

events {
    worker_connections 1024;
}

http {
    include /etc/nginx/mime.types;
    default_type application/octet-stream;
    access_log /var/log/nginx/access.log;
    sendfile on;
    keepalive_timeout 65;
    include /etc/nginx/conf.d/*.conf;
}
EOF
cat >"$root/etc/nginx/conf.d/default.conf" <<'EOF'
server {
    listen 80;
    server_name localhost;
    root /usr/share/nginx/html;
    location / {
        index index.html;
    }
}
EOF
cat >"$root/usr/share/nginx/html/index.html" <<'EOF'
<!DOCTYPE html>
<html>
<head><title>Welcome to nginx!</title></head>
<body>
<h1>Welcome to nginx!</h1>
<p>nginx from Debian's package, in r8s's test image.</p>
</body>
</html>
EOF
nginx_version=$(dpkg-query -W -f='${Version}' nginx)
image "$NGINX_REF" "$root" "$(jq -cn --arg path "$PATH_ENV" --arg v "NGINX_VERSION=${nginx_version%%-*}" '{
    Env: [$path, $v], Cmd: ["nginx", "-g", "daemon off;"],
    ExposedPorts: {"80/tcp": {}}, StopSignal: "SIGQUIT"}')" "$work/nginx.oci"

log "pause"
root=$work/pause
mkdir -p "$root"
install -m 755 "$pause_bin" "$root/pause"
# As upstream's pause image: nothing but the program, run as an unprivileged user.
image "$PAUSE_REF" "$root" "$(jq -cn --arg path "$PATH_ENV" '{
    Env: [$path], Entrypoint: ["/pause"], User: "65535:65535", WorkingDir: "/"}')" \
  "$work/pause.oci"

log "dnsutils"
root=$work/dnsutils
base_rootfs "$root"
add_busybox "$root"
for prog in /usr/bin/dig /usr/bin/host /usr/bin/nslookup; do
  add_program "$root" "$prog"
done
image "$DNSUTILS_REF" "$root" "$(jq -cn --arg path "$PATH_ENV" '{Env: [$path], Cmd: ["sh"]}')" \
  "$work/dnsutils.oci"

mkdir -p "$out"
for name in busybox nginx pause dnsutils; do
  pack "$work/$name.oci" "$out/$name.tar"
done
echo "$PAUSE_REF" >"$out/pause-image.txt"

if [ -n "$registry" ]; then
  push "$work/busybox.oci" "$BUSYBOX_REF"
  push "$work/nginx.oci" "$NGINX_REF"
  push "$work/pause.oci" "$PAUSE_REF"
  push "$work/dnsutils.oci" "$DNSUTILS_REF"
fi

for name in busybox nginx pause dnsutils; do
  echo "$(cd "$out" && pwd)/$name.tar"
done
