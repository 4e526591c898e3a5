#!/usr/bin/env bash
# Build r8s's test images from Debian packages, without docker or buildah, as OCI image-layout
# tarballs in DIR:
#   DIR/busybox.tar  docker.io/library/busybox:latest  busybox-static, an applet link for every
#                                                      command in /bin; Cmd ["sh"]
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
for pkg in busybox-static nginx jq bind9-dnsutils; do
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

# ldd exits 1 for a static non-PIE program, 0 for a static PIE: judge by what it says.
is_static() {
  case $(ldd "$1" 2>&1 || true) in
    *'statically linked'* | *'not a dynamic executable'*) ;;
    *) false ;;
  esac
}

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
is_static /bin/busybox || die "/bin/busybox is not busybox-static's"

# --- Root filesystems ---------------------------------------------------------------------------

# The directories and /etc files a Debian-like image has.
base_rootfs() {
  local root=$1
  mkdir -p "$root"/{bin,dev,etc,proc,root,run,sys,tmp,usr/sbin,var/lock,var/tmp}
  chmod 700 "$root/root"
  chmod 1777 "$root/tmp" "$root/var/tmp"
  cat >"$root/etc/passwd" <<'EOF'
root:x:0:0:root:/root:/bin/sh
www-data:x:33:33:www-data:/var/www:/usr/sbin/nologin
nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin
EOF
  cat >"$root/etc/group" <<'EOF'
root:x:0:
www-data:x:33:
nogroup:x:65534:
EOF
  printf 'passwd: files\ngroup: files\nhosts: files dns\n' >"$root/etc/nsswitch.conf"
}

# busybox-static as /bin/busybox, and a relative symlink for each of its applets.
add_busybox() {
  local root=$1 applet
  install -m 755 /bin/busybox "$root/bin/busybox"
  for applet in $(/bin/busybox --list); do
    [ -e "$root/bin/$applet" ] || ln -s busybox "$root/bin/$applet"
  done
}

# A dynamically linked program at the same path, with every library ldd lists (the dynamic
# loader among them) copied to the path it is found at.
add_program() {
  local root=$1 prog=$2 lib
  install -D -m 755 "$prog" "$root$prog"
  for lib in $(ldd "$prog" | awk '{ for (i = 1; i <= NF; i++) if ($i ~ /^\//) print $i }'); do
    mkdir -p "$root$(dirname "$lib")"
    cp -L "$lib" "$root$lib"
  done
}

# --- OCI image layout ---------------------------------------------------------------------------

# Moves FILE into LAYOUT's blob store under its digest; prints "sha256:HEX SIZE".
blob() {
  local layout=$1 file=$2 hex size
  hex=$(sha256sum "$file" | cut -d' ' -f1)
  size=$(stat -c %s "$file")
  mv "$file" "$layout/blobs/sha256/$hex"
  echo "sha256:$hex $size"
}

# image REF ROOTFS CONFIG LAYOUT: one gzip layer of ROOTFS, the image config around CONFIG (the
# JSON of the config's "config" object), the manifest, and index.json naming it REF.
image() {
  local ref=$1 root=$2 config=$3 layout=$4
  local b diff_id layer layer_size cfg cfg_size man man_size
  mkdir -p "$layout/blobs/sha256"
  # The rootfs as a tar: paths relative to it, in a fixed order, owned by root, all one mtime.
  (cd "$root" && find . -mindepth 1 -printf '%P\0' | LC_ALL=C sort -z |
    tar --create --file=- --format=gnu --owner=0 --group=0 --numeric-owner --mtime="@$epoch" \
      --no-recursion --null --files-from=-) >"$layout/layer.tar"
  diff_id=sha256:$(sha256sum "$layout/layer.tar" | cut -d' ' -f1)
  gzip -n -9 "$layout/layer.tar"
  b=$(blob "$layout" "$layout/layer.tar.gz")
  layer=${b% *} layer_size=${b#* }

  jq -cn --arg arch "$arch" --arg created "$created" --arg diff_id "$diff_id" \
    --argjson config "$config" '{
      created: $created, architecture: $arch, os: "linux", config: $config,
      rootfs: {type: "layers", diff_ids: [$diff_id]},
      history: [{created: $created, created_by: "r8s scripts/build-test-images.sh"}]
    }' >"$layout/config.json"
  b=$(blob "$layout" "$layout/config.json")
  cfg=${b% *} cfg_size=${b#* }

  jq -cn --arg cfg "$cfg" --argjson cfg_size "$cfg_size" \
    --arg layer "$layer" --argjson layer_size "$layer_size" '{
      schemaVersion: 2, mediaType: "application/vnd.oci.image.manifest.v1+json",
      config: {mediaType: "application/vnd.oci.image.config.v1+json", digest: $cfg, size: $cfg_size},
      layers: [{mediaType: "application/vnd.oci.image.layer.v1.tar+gzip",
                digest: $layer, size: $layer_size}]
    }' >"$layout/manifest.json"
  b=$(blob "$layout" "$layout/manifest.json")
  man=${b% *} man_size=${b#* }

  # containerd's import names the image after io.containerd.image.name; the OCI ref name is the
  # tag alone, as the image-layout spec has it.
  jq -cn --arg man "$man" --argjson man_size "$man_size" --arg arch "$arch" \
    --arg ref "$ref" --arg tag "${ref##*:}" '{
      schemaVersion: 2, mediaType: "application/vnd.oci.image.index.v1+json",
      manifests: [{mediaType: "application/vnd.oci.image.manifest.v1+json",
                   digest: $man, size: $man_size, platform: {architecture: $arch, os: "linux"},
                   annotations: {"io.containerd.image.name": $ref,
                                 "org.opencontainers.image.ref.name": $tag}}]
    }' >"$layout/index.json"
  echo '{"imageLayoutVersion":"1.0.0"}' >"$layout/oci-layout"
}

# Tars LAYOUT into OUT (written beside it first, then renamed: a reader never sees half a file).
pack() {
  local layout=$1 out=$2
  tar --create --file="$out.tmp" --sort=name --format=gnu --owner=0 --group=0 --numeric-owner \
    --mtime="@$epoch" -C "$layout" oci-layout index.json blobs
  mv -f "$out.tmp" "$out"
}

# push LAYOUT REF: blobs first (skipping those the registry has), then the manifest under the tag.
push() {
  local layout=$1 ref=$2 repo tag base man digest location sep
  repo=${ref#*/} # the registry's host is ours: docker.io/library/nginx:latest -> library/nginx
  tag=${repo##*:}
  repo=${repo%:*}
  base=http://$registry/v2/$repo
  man=$layout/blobs/sha256/$(jq -r '.manifests[0].digest | sub("^sha256:"; "")' "$layout/index.json")
  for digest in $(jq -r '.config.digest, .layers[].digest' "$man"); do
    curl -fsS -o /dev/null --head "$base/blobs/$digest" 2>/dev/null && continue
    location=$(curl -fsS -X POST -o /dev/null -D - "$base/blobs/uploads/" |
      tr -d '\r' | awk 'tolower($1) == "location:" { print $2 }')
    [ -n "$location" ] || die "push $ref: the registry gave no upload location"
    case $location in /*) location=http://$registry$location ;; esac
    case $location in *\?*) sep='&' ;; *) sep='?' ;; esac
    curl -fsS -o /dev/null -X PUT -H 'Content-Type: application/octet-stream' \
      -T "$layout/blobs/sha256/${digest#sha256:}" "$location${sep}digest=$digest"
  done
  curl -fsS -o /dev/null -X PUT -H 'Content-Type: application/vnd.oci.image.manifest.v1+json' \
    -T "$man" "$base/manifests/$tag"
  log "pushed $registry/$repo:$tag"
}

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
