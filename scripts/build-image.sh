#!/usr/bin/env bash
# Build the goalkeeper image (Dockerfile) on a machine that reaches package registries only:
# no container registry, so the Dockerfile's Python base is replaced by a local stand-in,
# a minimal Debian of the same release (bookworm: python3 3.11, python3-venv) made with
# debootstrap and imported into dockerd. The debootstrap tarball is cached under
#   ${GOALKEEPER_CACHE:-~/.cache/goalkeeper}/debian-bookworm-python3.tar
# Idempotent: present tools, tarball, base image and a running dockerd are reused. Needs
# root (apt-get, debootstrap, dockerd). Prints the image name on stdout (last line).
# The tag is pyproject.toml's version, as the chart's appVersion (tests/unit/test_releases.py);
# `--print-image` prints the name and builds nothing.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$here/.."
# The `version = "X.Y.Z"` line of pyproject.toml's [project] table.
version="$(awk '/^\[/ { project = ($0 == "[project]") }
  project && /^version *= *"/ { gsub(/^version *= *"|".*$/, ""); print; exit }' "$repo/pyproject.toml")"
[[ -n "$version" ]] || { echo "no [project] version in $repo/pyproject.toml" >&2; exit 1; }
IMAGE="${GOALKEEPER_IMAGE:-goalkeeper:$version}"
if [[ "${1:-}" == "--print-image" ]]; then
  echo "$IMAGE"
  exit 0
fi
RELEASE=bookworm
BASE_IMAGE="goalkeeper-base:$RELEASE-python3"
MIRROR="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
cache_root="${GOALKEEPER_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/goalkeeper}"
tarball="$cache_root/debian-$RELEASE-python3.tar"
# The host's CA bundle: pip inside the build must trust what the host trusts.
ca_bundle="${GOALKEEPER_CA_BUNDLE:-/etc/ssl/certs/ca-certificates.crt}"
mkdir -p "$cache_root"

need=()
command -v dockerd >/dev/null 2>&1 || need+=(docker.io)
command -v debootstrap >/dev/null 2>&1 || need+=(debootstrap)
if ((${#need[@]})); then
  echo "installing ${need[*]}" >&2
  apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >&2
fi

# dockerd without a bridge or NAT rules: builds and containers use the host network only.
if ! docker info >/dev/null 2>&1; then
  echo "starting dockerd (log: $cache_root/dockerd.log)" >&2
  nohup dockerd --bridge=none --iptables=false --ip6tables=false \
    >"$cache_root/dockerd.log" 2>&1 &
  for _ in $(seq 1 120); do
    docker info >/dev/null 2>&1 && break
    sleep 0.5
  done
  docker info >/dev/null 2>&1 || { tail -20 "$cache_root/dockerd.log" >&2; exit 1; }
fi

if [[ ! -s "$tarball" ]]; then
  echo "debootstrap $RELEASE into $tarball" >&2
  root="$(mktemp -d "$cache_root/rootfs.XXXXXX")"
  trap 'rm -rf "$root"' EXIT
  debootstrap --variant=minbase --include=python3,python3-venv,ca-certificates \
    "$RELEASE" "$root" "$MIRROR" >&2
  # What an image does not need: package lists, docs, man pages, locales.
  rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/* "$root"/usr/share/doc/* \
    "$root"/usr/share/man/* "$root"/usr/share/info/* "$root"/var/log/*
  find "$root/usr/share/locale" -mindepth 1 -maxdepth 1 ! -name 'C.*' -exec rm -rf {} +
  tar --numeric-owner -C "$root" -cf "$tarball.tmp" .
  mv -f "$tarball.tmp" "$tarball"
  rm -rf "$root"
  trap - EXIT
fi

# The stand-in base: the tarball plus the host's CA bundle, rebuilt only when either changed.
stamp="$(cat "$tarball.sha256" 2>/dev/null || true)"
want="$( (stat -c '%s %Y' "$tarball"; sha256sum <"$ca_bundle") | sha256sum | cut -d' ' -f1)"
if [[ "$stamp" != "$want" ]] || ! docker image inspect "$BASE_IMAGE" >/dev/null 2>&1; then
  echo "importing $BASE_IMAGE" >&2
  ctx="$(mktemp -d)"
  trap 'rm -rf "$ctx"' EXIT
  ln "$tarball" "$ctx/rootfs.tar" 2>/dev/null || cp "$tarball" "$ctx/rootfs.tar"
  cp "$ca_bundle" "$ctx/ca-certificates.crt"
  printf '%s\n' 'FROM scratch' 'ADD rootfs.tar /' \
    'COPY ca-certificates.crt /etc/ssl/certs/ca-certificates.crt' \
    'CMD ["/bin/bash"]' >"$ctx/Dockerfile"
  DOCKER_BUILDKIT=0 docker build -q -t "$BASE_IMAGE" "$ctx" >&2
  rm -rf "$ctx"
  trap - EXIT
  echo "$want" >"$tarball.sha256"
fi

echo "building $IMAGE from $BASE_IMAGE" >&2
start=$(date +%s)
DOCKER_BUILDKIT=0 docker build --network host \
  --build-arg BASE_IMAGE="$BASE_IMAGE" \
  --build-arg PIP_CERT=/etc/ssl/certs/ca-certificates.crt \
  -t "$IMAGE" "$repo" >&2
echo "built $IMAGE in $(($(date +%s) - start)) s ($(docker image inspect -f '{{.Size}}' "$IMAGE") bytes)" >&2
echo "$IMAGE"
