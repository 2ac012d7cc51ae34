#!/usr/bin/env bash
# Build the local control plane binaries (etcd, kube-apiserver, kube-controller-manager,
# kubectl) from Go modules into a cache folder outside the repo, keyed by version:
#   ${GOALKEEPER_CACHE:-~/.cache/goalkeeper}/k8s-v1.37.2/
# Only missing binaries are built. Binaries are built under a temporary name and renamed
# into place, so a half-finished build never counts. If KUBEBUILDER_ASSETS names a folder
# holding some of the binaries, those are used as they are and only the rest are built.
# Prints the bin folder on stdout (last line); progress goes to stderr.
set -euo pipefail

K8S_VERSION=v1.37.2
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
module_dir="$here/../tests/cluster/k8s"
cache_root="${GOALKEEPER_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/goalkeeper}"
bin_dir="$cache_root/k8s-$K8S_VERSION"
all=(etcd kube-apiserver kube-controller-manager kubectl)

mkdir -p "$bin_dir"

# Serialise concurrent builds (two test sessions starting at once).
if command -v flock >/dev/null 2>&1; then
  exec 9>"$bin_dir.lock"
  flock 9
fi

missing=()
for name in "${all[@]}"; do
  if [[ -n "${KUBEBUILDER_ASSETS:-}" && -x "$KUBEBUILDER_ASSETS/$name" ]]; then
    continue
  fi
  [[ -x "$bin_dir/$name" ]] || missing+=("$name")
done

if ((${#missing[@]} == 0)); then
  echo "k8s $K8S_VERSION binaries present" >&2
  echo "$bin_dir"
  exit 0
fi

echo "building ${missing[*]} ($K8S_VERSION) into $bin_dir" >&2

minor="${K8S_VERSION#v1.}"
minor="${minor%%.*}"
build_date="$(date -u +%Y-%m-%dT%H:%M:%SZ)"
ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  ldflags+=" -X $pkg.gitVersion=$K8S_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
  ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=$build_date"
done

tmp="$(mktemp -d "$bin_dir.tmp.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT

pkgs=()
for name in "${missing[@]}"; do pkgs+=("./cmd/$name"); done

# Sane parallelism on small CI machines: at most 2 compile jobs unless told otherwise.
jobs="${GOALKEEPER_BUILD_JOBS:-2}"
start=$(date +%s)
(
  cd "$module_dir"
  export CGO_ENABLED=0 GOFLAGS="-mod=readonly -buildvcs=false"
  export GOMAXPROCS="${GOMAXPROCS:-$jobs}"
  go build -p "$jobs" -trimpath -ldflags "$ldflags" -o "$tmp/" "${pkgs[@]}"
)
for name in "${missing[@]}"; do
  mv -f "$tmp/$name" "$bin_dir/$name"
done
end=$(date +%s)
echo "built ${missing[*]} in $((end - start)) s" >&2
echo "$bin_dir"
