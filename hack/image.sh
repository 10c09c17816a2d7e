#!/usr/bin/env bash
# Build Phalanx's image (Dockerfile) with podman from Debian packages, with no container registry, and save
# it as an OCI archive that containerd imports (`phalanx dev-cluster up --real-node`, docs/install.md).
#
#   1. installs the Debian packages it needs when one is missing (podman, buildah, runc, containerd, ...:
#      also those of the real node, so one call prepares the machine);
#   2. keeps podman's storage and config under .cache/image/podman (outside it only containers/image's
#      blob-info cache /var/lib/containers/cache and runc's state folder /run/runc, both small);
#   3. makes the base image localhost/debian-py:bookworm with mmdebstrap from the Debian mirror apt uses
#      (skipped when podman already holds it);
#   4. builds localhost/phalanx:<version> (FROM that base) and saves .cache/image/phalanx-<version>.oci.tar.
# A warm run (base and layers cached) takes seconds; the image is rebuilt only when its inputs changed.
#
# Usage: hack/image.sh            build (prints the archive's path on stdout)
#        hack/image.sh --lock     regenerate requirements.lock and requirements-build.lock from pyproject.toml
# Env:   PHALANX_IMAGE (default localhost/phalanx:<version>), PHALANX_IMAGE_CACHE (default .cache/image)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

log() { printf '[image %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

version=$(sed -n 's/^version = "\(.*\)"/\1/p' pyproject.toml)
image=${PHALANX_IMAGE:-localhost/phalanx:$version}
base=localhost/debian-py:bookworm
cache=${PHALANX_IMAGE_CACHE:-$root/.cache/image}

if [[ "${1:-}" == "--lock" ]]; then
  # The versions `pip install .` resolves today, from a fresh venv (pyproject.toml keeps the ranges).
  venv=$(mktemp -d)
  trap 'rm -rf "$venv"' EXIT
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check . 'setuptools>=68'
  setuptools=$("$venv/bin/pip" freeze --all | grep '^setuptools==')
  {
    echo "# Exact versions of Phalanx's runtime dependencies, as \`pip install .\` resolved them (Python 3.11)."
    echo "# pyproject.toml stays the source of the ranges; regenerate with \`hack/image.sh --lock\`. The Dockerfile"
    echo "# installs exactly these (--no-deps, then pip check)."
    "$venv/bin/pip" freeze --exclude phalanx --exclude setuptools
  } > requirements.lock
  {
    echo "# The build backend of the image's Phalanx wheel (pyproject's build-system), pinned like requirements.lock;"
    echo "# regenerated with it by \`hack/image.sh --lock\`."
    echo "$setuptools"
  } > requirements-build.lock
  log "wrote requirements.lock ($(grep -c '==' requirements.lock) packages) and requirements-build.lock ($setuptools)"
  exit 0
fi

# ---------------------------------------------------------------- 1. Debian packages
# containerd, runc, the CNI plugins and iptables are the real node's (realnode.py); crun is not used: it
# refuses this host's hybrid cgroup layout.
packages=(podman buildah runc containerd mmdebstrap containernetworking-plugins uidmap iptables conmon
  slirp4netns catatonit golang-github-containers-common ca-certificates)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f '${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if ((${#missing[@]})); then
  if [[ $(id -u) -ne 0 ]]; then
    echo "hack/image.sh: missing Debian packages ${missing[*]}; install them as root" >&2
    exit 1
  fi
  log "installing ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# ---------------------------------------------------------------- 2. podman, all under the cache
pod=$cache/podman
mkdir -p "$pod"/{conf,storage,runroot,tmp,vol,cni-net.d}
cat > "$pod/conf/storage.conf" <<EOF
[storage]
driver = "overlay"
graphroot = "$pod/storage"
runroot = "$pod/runroot"
EOF
# runc, not crun (hybrid cgroups); cgroupfs (PID 1 is not systemd); ulimits within what root may set here
# (no CAP_SYS_RESOURCE: podman's default nofile=1048576 fails).
cat > "$pod/conf/containers.conf" <<EOF
[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
events_logfile_path = "$pod/tmp/events.log"
tmp_dir = "$pod/tmp"
volume_path = "$pod/vol"
[network]
network_config_dir = "$pod/cni-net.d"
[containers]
default_ulimits = ["nofile=20000:20000", "nproc=32768:32768"]
EOF
export CONTAINERS_STORAGE_CONF=$pod/conf/storage.conf CONTAINERS_CONF=$pod/conf/containers.conf TMPDIR=$pod/tmp

# ---------------------------------------------------------------- 3. the base image
# minbase + python3 (python3-venv brings ensurepip's wheels; the image needs no pip of Debian's), without
# docs, man pages and translations (about 50 MB). The recipe's hash is a label: a changed recipe remakes it.
base_args=(--variant=minbase --include=python3,python3-venv,ca-certificates
  --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-include=/usr/share/doc/*/copyright'
  --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/info/*'
  --dpkgopt='path-exclude=/usr/share/locale/*')
recipe=$(printf '%s\n' "${base_args[@]}" | sha256sum | cut -c1-16)
if [[ "$(podman image inspect --format '{{index .Labels "dev.phalanx.base-recipe"}}' "$base" 2>/dev/null)" == "$recipe" ]]; then
  log "base $base present"
else
  mirror=$(awk '/^URIs:/{print $2; exit}' /etc/apt/sources.list.d/*.sources 2>/dev/null || true)
  mirror=${mirror:-http://deb.debian.org/debian}
  log "making $base with mmdebstrap from $mirror (cold: about a minute)"
  start=$SECONDS
  rootfs=$pod/tmp/rootfs-py.tar
  mmdebstrap --quiet "${base_args[@]}" bookworm "$rootfs" \
    "deb $mirror bookworm main" "deb $mirror bookworm-updates main" \
    "deb ${mirror}-security bookworm-security main"
  podman import --quiet --change "LABEL dev.phalanx.base-recipe=$recipe" "$rootfs" "$base" >/dev/null
  rm -f "$rootfs"
  log "made $base in $((SECONDS - start)) s"
fi

# ---------------------------------------------------------------- 4. the image and its archive
# pip inside RUN goes through this machine's TLS-intercepting proxy: the host's CA bundle and pip.conf are
# mounted for the build only (they are not in the image). --network host: no podman bridge, no iptables.
mounts=()
[[ -f /etc/ssl/certs/ca-certificates.crt ]] &&
  mounts+=(-v /etc/ssl/certs/ca-certificates.crt:/etc/ssl/certs/ca-certificates.crt:ro)
[[ -f /etc/pip.conf ]] && mounts+=(-v /etc/pip.conf:/etc/pip.conf:ro)
log "building $image"
start=$SECONDS
podman build --quiet --network host --build-arg BASE="$base" "${mounts[@]}" -t "$image" . >/dev/null
log "built $image in $((SECONDS - start)) s ($(podman image inspect --format '{{.Size}}' "$image" | numfmt --to=iec) uncompressed)"

archive=$cache/phalanx-$version.oci.tar
id=$(podman image inspect --format '{{.Id}}' "$image")
if [[ -f "$archive" && "$(cat "$archive.id" 2>/dev/null)" == "$id" ]]; then
  log "archive $archive is up to date"
else
  rm -f "$archive" "$archive.id"
  podman save --quiet --format oci-archive -o "$archive.tmp" "$image"
  mv "$archive.tmp" "$archive"
  echo "$id" > "$archive.id"
  log "saved $archive ($(du -h "$archive" | cut -f1))"
fi
echo "$archive"
