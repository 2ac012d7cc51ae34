#!/usr/bin/env bash
# Build the pinned helm CLI from Go modules (tests/cluster/helm/go.mod) into a cache folder
# outside the repo, keyed by version, the same way build-k8s.sh builds the control plane:
#   ${GOALKEEPER_CACHE:-~/.cache/goalkeeper}/helm-v4.3.2/helm
# Built under a temporary name and renamed into place, so a half-finished build never
# counts. Prints the bin folder on stdout (last line); progress goes to stderr.
set -euo pipefail

HELM_VERSION=v4.3.2
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
module_dir="$here/../tests/cluster/helm"
cache_root="${GOALKEEPER_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/goalkeeper}"
bin_dir="$cache_root/helm-$HELM_VERSION"

mkdir -p "$bin_dir"

# Serialise concurrent builds (two test sessions starting at once).
if command -v flock >/dev/null 2>&1; then
  exec 9>"$bin_dir.lock"
  flock 9
fi

if [[ -x "$bin_dir/helm" ]]; then
  echo "helm $HELM_VERSION present" >&2
  echo "$bin_dir"
  exit 0
fi

echo "building helm $HELM_VERSION into $bin_dir" >&2
tmp="$(mktemp -d "$bin_dir.tmp.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT

# Upstream's Makefile stamps the version the same way; without it `helm version` is blank.
ldflags="-s -w -X helm.sh/helm/v4/internal/version.version=$HELM_VERSION"
ldflags+=" -X helm.sh/helm/v4/internal/version.gitTreeState=clean"
jobs="${GOALKEEPER_BUILD_JOBS:-2}"
start=$(date +%s)
(
  cd "$module_dir"
  export CGO_ENABLED=0 GOFLAGS="-mod=readonly -buildvcs=false"
  export GOMAXPROCS="${GOMAXPROCS:-$jobs}"
  go build -p "$jobs" -trimpath -ldflags "$ldflags" -o "$tmp/helm" helm.sh/helm/v4/cmd/helm
)
mv -f "$tmp/helm" "$bin_dir/helm"
end=$(date +%s)
echo "built helm in $((end - start)) s" >&2
echo "$bin_dir"
