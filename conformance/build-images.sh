#!/usr/bin/env bash
# Build the images upstream's conformance specs run, as OCI image-layout tarballs in DIR, under
# the exact references `e2e.test --list-images` names (pods leave imagePullPolicy unset, so a
# tagged image present in the node's containerd is never pulled; no registry is reachable here).
# (DIR/e2e-NAME.tar, its reference in DIR/e2e-NAME.ref.) Each is rebuilt from Debian packages and the Go programs of this module, on the layout the
# real image has (paths, users, entrypoint), not copied from it:
#
#   e2e-test-images/agnhost:2.53        /agnhost (+ /agnhost-2), bash, curl, dig/nslookup/host,
#                                       nc (OpenBSD's), ip, iperf, busybox for the rest; the
#                                       users and groups the image defines; ENTRYPOINT /agnhost
#   e2e-test-images/busybox:1.36.1-1    busybox 1.37 with upstream's ash as sh (every applet works)
#   e2e-test-images/httpd:2.4.38-4      Debian's Apache under /usr/local/apache2 (htdocs/index.html
#   e2e-test-images/httpd:2.4.39-4      "It works!", logs to stdout/stderr), CMD httpd-foreground
#   e2e-test-images/nginx:1.14-4        Debian's nginx on port 80, as r8s's test image
#   e2e-test-images/nginx:1.15-4
#   e2e-test-images/jessie-dnsutils:1.7 dig, host, nslookup, getent, busybox
#   e2e-test-images/nautilus:1.7        agnhost serving nautilus.jpg and data.json (test-webserver)
#   e2e-test-images/kitten:1.7          the same with kitten.jpg
#   e2e-test-images/nonewprivs:1.3      /usr/local/bin/nnp, setuid root, prints its effective uid
#   registry.k8s.io/pause:3.10          r8s's pause (crates/pause)
#   e2e-test-images/sample-apiserver:1.29.2  /sample-apiserver (k8s.io/sample-apiserver at the
#                                       module's version), ENTRYPOINT /sample-apiserver
#   registry.k8s.io/etcd:3.5.21-0       Debian's etcd (3.4; the sample API server needs only its
#                                       v3 API) at /usr/local/bin/etcd
#
# Usage: conformance/build-images.sh DIR [BINDIR]
#   BINDIR holds agnhost and nnp (conformance/build.sh builds them; default target/conformance/bin)
#   PAUSE_IMAGE_TAR: r8s's pause image tarball (default target/test-images/pause.tar)
set -euo pipefail
umask 022
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)

die() {
  echo "conformance/build-images: $*" >&2
  exit 1
}
log() { echo "conformance/build-images: $*" >&2; }

[ $# -ge 1 ] || die "usage: $0 DIR [BINDIR]"
out=$1
bindir=${2:-$repo/target/conformance/bin}
for b in agnhost nnp sample-apiserver; do [ -x "$bindir/$b" ] || die "no $bindir/$b (run conformance/build.sh)"; done

E2E=registry.k8s.io/e2e-test-images
PATH_ENV=PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin

need=()
for pkg in jq curl bind9-dnsutils netcat-openbsd iproute2 iperf bash apache2-bin media-types nginx etcd-server; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'ok installed' || need+=("$pkg")
done
if [ ${#need[@]} -gt 0 ]; then
  log "installing ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  # No init system here: the packages start no servers.
  apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

arch=$(dpkg --print-architecture)
epoch=${SOURCE_DATE_EPOCH:-0}
created=$(date -u -d "@$epoch" +%Y-%m-%dT%H:%M:%SZ)
registry=''
work=$(mktemp -d /tmp/r8s-conformance-images.XXXXXX)
trap 'rm -rf "$work"' EXIT
# shellcheck source=scripts/oci-image-lib.sh
. "$repo/scripts/oci-image-lib.sh"

# build NAME REF CONFIG: ROOTFS is $work/NAME; the tarball is DIR/NAME.tar.
build() {
  local name=$1 ref=$2 config=$3
  image "$ref" "$work/$name" "$config" "$work/$name.oci"
  mkdir -p "$out"
  pack "$work/$name.oci" "$out/e2e-$name.tar"
  echo "$ref" >"$out/e2e-$name.ref"
  log "$ref"
}

# --- agnhost ------------------------------------------------------------------------------------
agnhost_root() {
  local root=$1 prog
  base_rootfs "$root"
  install -m 755 "$bindir/agnhost" "$root/agnhost"
  ln -s agnhost "$root/agnhost-2"
  for prog in /usr/bin/bash /usr/bin/curl /usr/bin/dig /usr/bin/nslookup /usr/bin/host \
    /usr/bin/nc.openbsd /usr/bin/ip /usr/bin/iperf /usr/bin/getent; do
    add_program "$root" "$prog"
  done
  mkdir -p "$root/usr/local/bin" "$root/uploads" "$root/home/user-defined-in-image"
  ln -s nc.openbsd "$root/usr/bin/nc"
  ln -s /usr/bin/iperf "$root/usr/local/bin/iperf"
  ln -s ../usr/bin/bash "$root/bin/bash"
  # /bin/sh is bash, not busybox: Debian's busybox shell runs its own applets before the PATH
  # (FEATURE_PREFER_APPLETS), so `sh -c "nc …"` would get busybox's nc instead of OpenBSD's.
  ln -s ../usr/bin/bash "$root/bin/sh"
  ln -s ../usr/bin/ip "$root/bin/ip"
  # curl's TLS: the CA bundle where libcurl looks (agnhost's own tests mostly use plain HTTP).
  [ -f /etc/ssl/certs/ca-certificates.crt ] &&
    install -D -m 644 /etc/ssl/certs/ca-certificates.crt "$root/etc/ssl/certs/ca-certificates.crt"
  add_busybox "$root"
  # porter's TLS pair, where the image's Dockerfile ADDs it.
  local src
  src=$(cd "$here" && go list -mod=mod -f '{{.Dir}}' k8s.io/kubernetes/test/images/agnhost/porter)
  install -m 644 "$src/localhost.crt" "$root/localhost.crt"
  install -m 644 "$src/localhost.key" "$root/localhost.key"
  # adduser -u 1000 -D user-defined-in-image; addgroup -g 50000 group-defined-in-image (with
  # the user as a member), as the image's Dockerfile does.
  echo 'user-defined-in-image:x:1000:1000:Linux User,,,:/home/user-defined-in-image:/bin/sh' \
    >>"$root/etc/passwd"
  printf 'user-defined-in-image:x:1000:\ngroup-defined-in-image:x:50000:user-defined-in-image\n' \
    >>"$root/etc/group"
  chown 1000:1000 "$root/home/user-defined-in-image"
}
agnhost_config() { # CMD as a JSON array
  jq -cn --arg path "$PATH_ENV" --argjson cmd "$1" '{Env: [$path], Entrypoint: ["/agnhost"],
    Cmd: $cmd, ExposedPorts: {"80/tcp": {}, "8080/tcp": {}, "8081/tcp": {}, "9376/tcp": {},
    "5000/tcp": {}}}'
}
agnhost_root "$work/agnhost"
build agnhost "$E2E/agnhost:2.53" "$(agnhost_config '["pause"]')"

# kitten and nautilus: agnhost's test-webserver over two files of the image's html/ folder.
html_src=$(cd "$here" && go list -mod=mod -f '{{.Dir}}' k8s.io/kubernetes/test/images/agnhost)/../
for pet in kitten nautilus; do
  cp -a "$work/agnhost" "$work/$pet"
  install -m 644 "$html_src/$pet/html/$pet.jpg" "$work/$pet/$pet.jpg"
  install -m 644 "$html_src/$pet/html/data.json" "$work/$pet/data.json"
  build "$pet" "$E2E/$pet:1.7" "$(agnhost_config '["test-webserver"]')"
done

# --- busybox ------------------------------------------------------------------------------------
# busybox alone, its ash as /bin/sh, as upstream's image: the suite reads ash's own messages
# ("/bin/sh: can't create /file: Read-only file system"), and ash passes environment variables
# whose names are not shell names (`data-1` from a ConfigMap's envFrom) on to `env` (busybox_bin
# builds it with upstream's ash for that).
base_rootfs "$work/busybox"
add_busybox "$work/busybox"
build busybox "$E2E/busybox:1.36.1-1" "$(jq -cn --arg path "$PATH_ENV" '{Env: [$path], Cmd: ["sh"]}')"

# --- sample-apiserver and etcd (the Aggregator spec) ---------------------------------------------
root=$work/sample-apiserver
base_rootfs "$root"
install -m 755 "$bindir/sample-apiserver" "$root/sample-apiserver"
build sample-apiserver "$E2E/sample-apiserver:1.29.2" \
  "$(jq -cn --arg path "$PATH_ENV" '{Env: [$path], Entrypoint: ["/sample-apiserver"]}')"
root=$work/etcd
base_rootfs "$root"
add_program "$root" /usr/bin/etcd
mkdir -p "$root/usr/local/bin" "$root/var/lib/etcd"
ln -s /usr/bin/etcd "$root/usr/local/bin/etcd"
build etcd registry.k8s.io/etcd:3.5.21-0 \
  "$(jq -cn --arg path "$PATH_ENV" '{Env: [$path], Cmd: ["/usr/local/bin/etcd"], WorkingDir: "/var/lib/etcd"}')"

# --- nonewprivs ---------------------------------------------------------------------------------
root=$work/nonewprivs
base_rootfs "$root"
add_busybox "$root"
install -D -m 4755 "$bindir/nnp" "$root/usr/local/bin/nnp"
build nonewprivs "$E2E/nonewprivs:1.3" "$(jq -cn --arg path "$PATH_ENV" '{Env: [$path], Cmd: ["nnp"]}')"

# --- jessie-dnsutils ----------------------------------------------------------------------------
root=$work/jessie-dnsutils
base_rootfs "$root"
for prog in /usr/bin/dig /usr/bin/host /usr/bin/nslookup /usr/bin/getent; do
  add_program "$root" "$prog"
done
add_busybox "$root"
build jessie-dnsutils "$E2E/jessie-dnsutils:1.7" \
  "$(jq -cn --arg path "$PATH_ENV" '{Env: [$path], Cmd: ["/bin/sh"]}')"

# --- httpd --------------------------------------------------------------------------------------
# The official image's layout (ServerRoot /usr/local/apache2, bin/httpd, htdocs, logs to the
# container's stdout and stderr, workers as `daemon`), with Debian's Apache and its modules.
root=$work/httpd
base_rootfs "$root"
echo 'daemon:x:1:1:daemon:/usr/sbin:/usr/sbin/nologin' >>"$root/etc/passwd"
echo 'daemon:x:1:' >>"$root/etc/group"
add_program "$root" /usr/sbin/apache2
# (log_config and unixd are built into Debian's apache2.)
mods=(mpm_event authz_core mime dir alias headers setenvif)
for m in "${mods[@]}"; do add_program "$root" "/usr/lib/apache2/modules/mod_$m.so"; done
install -D -m 644 /etc/mime.types "$root/etc/mime.types"
ap=$root/usr/local/apache2
mkdir -p "$ap/bin" "$ap/conf" "$ap/htdocs" "$ap/logs" "$root/usr/local/bin"
ln -s /usr/sbin/apache2 "$ap/bin/httpd"
{
  echo 'ServerRoot "/usr/local/apache2"'
  echo 'Listen 80'
  for m in "${mods[@]}"; do echo "LoadModule ${m}_module /usr/lib/apache2/modules/mod_$m.so"; done
  cat <<'EOF'
User daemon
Group daemon
ServerName localhost
ServerAdmin you@example.com
PidFile logs/httpd.pid
DocumentRoot "/usr/local/apache2/htdocs"
<Directory />
    AllowOverride none
    Require all denied
</Directory>
<Directory "/usr/local/apache2/htdocs">
    Options Indexes FollowSymLinks
    AllowOverride None
    Require all granted
</Directory>
DirectoryIndex index.html
<Files ".ht*">
    Require all denied
</Files>
ErrorLog /proc/self/fd/2
LogLevel warn
LogFormat "%h %l %u %t \"%r\" %>s %b" common
CustomLog /proc/self/fd/1 common
TypesConfig /etc/mime.types
EOF
} >"$ap/conf/httpd.conf"
echo '<html><body><h1>It works!</h1></body></html>' >"$ap/htdocs/index.html"
# The whole path: the busybox shell would run its own httpd applet before the PATH's.
cat >"$root/usr/local/bin/httpd-foreground" <<'EOF'
#!/bin/sh
set -e
# Apache gets grumpy about PID files pre-existing
rm -f /usr/local/apache2/logs/httpd.pid
exec /usr/local/apache2/bin/httpd -d /usr/local/apache2 -f conf/httpd.conf -DFOREGROUND "$@"
EOF
chmod 755 "$root/usr/local/bin/httpd-foreground"
ln -s ../apache2/bin/httpd "$root/usr/local/bin/httpd"
add_busybox "$root"
httpd_config() { # VERSION
  jq -cn --arg path "PATH=/usr/local/apache2/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" \
    --arg v "HTTPD_VERSION=$1" '{Env: [$path, "HTTPD_PREFIX=/usr/local/apache2", $v],
    WorkingDir: "/usr/local/apache2", Cmd: ["httpd-foreground"], ExposedPorts: {"80/tcp": {}}}'
}
cp -a "$root" "$work/httpd-new"
build httpd "$E2E/httpd:2.4.38-4" "$(httpd_config 2.4.38)"
build httpd-new "$E2E/httpd:2.4.39-4" "$(httpd_config 2.4.39)"

# --- nginx --------------------------------------------------------------------------------------
root=$work/nginx
base_rootfs "$root"
add_program "$root" /usr/sbin/nginx
mkdir -p "$root"/etc/nginx/conf.d "$root"/usr/share/nginx/html "$root"/var/cache/nginx \
  "$root"/var/lib/nginx "$root"/var/log/nginx "$root"/var/www
install -m 644 /etc/nginx/mime.types "$root/etc/nginx/mime.types"
ln -s /dev/stdout "$root/var/log/nginx/access.log"
ln -s /dev/stderr "$root/var/log/nginx/error.log"
cat >"$root/etc/nginx/nginx.conf" <<'EOF'
user www-data;
worker_processes 1;
error_log /var/log/nginx/error.log warn;
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
    server {
        listen 80;
        server_name localhost;
        location / {
            root /usr/share/nginx/html;
            index index.html index.htm;
        }
    }
}
EOF
echo '<!DOCTYPE html><html><head><title>Welcome to nginx!</title></head><body><h1>Welcome to nginx!</h1></body></html>' \
  >"$root/usr/share/nginx/html/index.html"
add_busybox "$root"
nginx_config() {
  jq -cn --arg path "$PATH_ENV" '{Env: [$path], Cmd: ["nginx", "-g", "daemon off;"],
    ExposedPorts: {"80/tcp": {}}, StopSignal: "SIGTERM"}'
}
cp -a "$root" "$work/nginx-new"
build nginx "$E2E/nginx:1.14-4" "$(nginx_config)"
build nginx-new "$E2E/nginx:1.15-4" "$(nginx_config)"

# --- pause --------------------------------------------------------------------------------------
# r8s's own pause program under the name the suite's pods ask for (the scheduling specs run
# pause containers of their own).
pause_tar=${PAUSE_IMAGE_TAR:-$repo/target/test-images/pause.tar}
[ -f "$pause_tar" ] || die "no $pause_tar (scripts/build-test-images.sh target/test-images)"
mkdir -p "$work/pause.oci"
tar -xf "$pause_tar" -C "$work/pause.oci"
jq -c '.manifests[0].annotations["io.containerd.image.name"] = "registry.k8s.io/pause:3.10" |
  .manifests[0].annotations["org.opencontainers.image.ref.name"] = "3.10"' \
  "$work/pause.oci/index.json" >"$work/pause.index"
mv -f "$work/pause.index" "$work/pause.oci/index.json"
pack "$work/pause.oci" "$out/e2e-pause.tar"
echo registry.k8s.io/pause:3.10 >"$out/e2e-pause.ref"
log registry.k8s.io/pause:3.10
