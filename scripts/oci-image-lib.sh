# A static busybox whose applets work as upstream's: built here from Debian 13's (trixie) source
# of busybox 1.37 — Debian 12's 1.35 lacks FEATURE_WGET_TIMEOUT and dies with SIGSEGV on
# `wget -T` — with Debian's static configuration but none of Debian's patches: Debian reverts
# upstream's ash change that passes environment variables whose names are not shell names
# (`data-1` from a ConfigMap's envFrom) on to the programs it runs, which upstream's busybox
# image (and the conformance specs that print `env` through `sh -c`) rely on. Fetched with apt
# from trixie's sources through a private sources list (the machine's apt configuration is left
# alone) and built once into target/debian (about 35 s on 2 cores). BUSYBOX_BIN overrides it.
busybox_bin() {
  if [ -n "${BUSYBOX_BIN:-}" ]; then
    echo "$BUSYBOX_BIN"
    return
  fi
  local cache=${R8S_DEB_CACHE:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/target/debian}
  local bin=$cache/busybox-upstream-ash/busybox
  if [ ! -x "$bin" ]; then
    log "building busybox from Debian 13 (trixie) source into $cache"
    local src=$cache/busybox-src
    rm -rf "$src" && mkdir -p "$src/apt/lists/partial" "$src/apt/archives/partial"
    echo "deb-src [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian trixie main" \
      >"$src/apt/sources.list"
    local apt=(-o "Dir::Etc::SourceList=$src/apt/sources.list" -o Dir::Etc::SourceParts=/dev/null
      -o "Dir::State::Lists=$src/apt/lists" -o "Dir::Cache=$src/apt" -o APT::Sandbox::User=root -qq)
    apt-get "${apt[@]}" update >&2 || die "apt-get update of trixie's sources failed"
    (cd "$src" && apt-get "${apt[@]}" source --download-only busybox/trixie >&2) ||
      die "apt-get source busybox/trixie failed"
    (
      cd "$src"
      tar xf busybox_*.orig.tar.*
      mkdir debian-files && tar xf busybox_*.debian.tar.* -C debian-files
      cd busybox-*/
      cp ../debian-files/debian/config/pkg/static .config
      yes "" | make oldconfig >/dev/null 2>&1
      make -j"$(nproc)" busybox >build.log 2>&1 || { tail -20 build.log >&2; exit 1; }
      mkdir -p "$cache/busybox-upstream-ash"
      install -m 755 busybox "$cache/busybox-upstream-ash/busybox"
    ) || die "building busybox failed"
    rm -rf "$src"
  fi
  is_static "$bin" || die "$bin is not a static program"
  echo "$bin"
}

# ldd exits 1 for a static non-PIE program, 0 for a static PIE: judge by what it says.
is_static() {
  case $(ldd "$1" 2>&1 || true) in
    *'statically linked'* | *'not a dynamic executable'*) ;;
    *) false ;;
  esac
}

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

# busybox (busybox_bin) as /bin/busybox, and a relative symlink for each of its applets.
add_busybox() {
  local root=$1 applet
  install -m 755 "$(busybox_bin)" "$root/bin/busybox"
  for applet in $("$root/bin/busybox" --list); do
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
    # glibc loads libgcc_s at run time (pthread_exit, pthread_cancel: Apache's workers abort
    # with "libgcc_s.so.1 must be installed for pthread_exit to work" without it).
    case $lib in
      */libc.so.6)
        local gcc_s
        gcc_s=$(dirname "$lib")/libgcc_s.so.1
        if [ -e "$gcc_s" ]; then cp -L "$gcc_s" "$root$gcc_s"; fi
        ;;
    esac
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

