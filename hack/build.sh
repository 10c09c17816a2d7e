#!/usr/bin/env bash
# Build the Kubernetes control plane (v1.37.2), kubectl, kubelet (for `dev-cluster up --real-node`), etcd,
# kwok and helm from the Go module proxy into an ignored cache folder. Reuses binaries that are already
# there (keyed by version).
#
# Usage: hack/build.sh [OUT_DIR]     (default: .cache/k8s/<versions>/bin)
#        hack/build.sh --kubernetes-version VERSION [OUT_DIR]   (default: .cache/k8s/VERSION/bin)
#   Only that version's kube-apiserver, kube-controller-manager and kube-scheduler (etcd, kwok and kubectl
#   stay the default version's), from its pinned module hack/k8s-VERSION (made by hack/k8s-module.sh); a
#   `toolchain` line there picks the Go toolchain (v1.38 needs go1.27.x, fetched through the module proxy).
set -euo pipefail

if [[ ${1:-} == --kubernetes-version ]]; then
  version=${2:?usage: hack/build.sh --kubernetes-version VERSION [OUT_DIR]}
  here=$(cd "$(dirname "$0")" && pwd)
  module="$here/k8s-$version"
  [[ -f $module/go.mod ]] || { echo "no pinned module $module/go.mod: run hack/k8s-module.sh $version" >&2; exit 1; }
  out=${3:-"$(cd "$here/.." && pwd)/.cache/k8s/$version/bin"}
  mkdir -p "$out"
  # The toolchain line of that module alone picks its Go (v1.38: go1.27.3, which the go command fetches through
  # the module proxy); the default build and everything else keep the machine's Go (GOTOOLCHAIN=local).
  toolchain=$(sed -n 's/^toolchain \(go[0-9.]*\)$/\1/p' "$module/go.mod")
  export GOTOOLCHAIN=${toolchain:-local}
  minor=${version#v1.}; minor=${minor%%.*}
  ldflags="-s -w"
  for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ldflags+=" -X $p.gitVersion=$version -X $p.gitMajor=1 -X $p.gitMinor=$minor -X $p.gitTreeState=clean"
  done
  for b in kube-apiserver kube-controller-manager kube-scheduler; do
    if [[ -x "$out/$b" ]]; then
      printf '[build %s] %s %s present\n' "$(date +%H:%M:%S)" "$b" "$version" >&2
      continue
    fi
    printf '[build %s] building %s %s (%s; cold: minutes)\n' "$(date +%H:%M:%S)" "$b" "$version" "$GOTOOLCHAIN" >&2
    start=$SECONDS
    (cd "$module" && CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" -o "$out/$b.tmp.$$" "k8s.io/kubernetes/cmd/$b")
    mv "$out/$b.tmp.$$" "$out/$b"
    printf '[build %s] built %s in %d s\n' "$(date +%H:%M:%S)" "$b" "$((SECONDS - start))" >&2
  done
  echo "$out"
  exit 0
fi

K8S_VERSION=v1.37.2
ETCD_VERSION=v3.7.3
KWOK_VERSION=v0.8.0
HELM_VERSION=v3.22.0  # hack/helm/go.mod pins the same
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
out=${1:-"$root/.cache/k8s/${K8S_VERSION}-etcd${ETCD_VERSION}-kwok${KWOK_VERSION}/bin"}
mkdir -p "$out"

log() { printf '[build %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

need_k8s=()
for b in kube-apiserver kube-controller-manager kube-scheduler kubectl kubelet; do
  [[ -x "$out/$b" ]] || need_k8s+=("$b")
done

if ((${#need_k8s[@]})); then
  minor=${K8S_VERSION#v1.}; minor=${minor%%.*}
  ldflags="-s -w"
  for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ldflags+=" -X $p.gitVersion=$K8S_VERSION -X $p.gitMajor=1 -X $p.gitMinor=$minor -X $p.gitTreeState=clean"
  done
  for b in "${need_k8s[@]}"; do
    log "building $b $K8S_VERSION (cold: several minutes on 2 cores)"
    start=$SECONDS
    # A temporary name of this run's own: two builds at once (several checkouts share the cache) never
    # write the same file.
    (cd "$here/k8s" && CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" -o "$out/$b.tmp.$$" "k8s.io/kubernetes/cmd/$b")
    mv "$out/$b.tmp.$$" "$out/$b"
    log "built $b in $((SECONDS - start)) s"
  done
else
  log "kubernetes $K8S_VERSION binaries present in $out"
fi

if [[ ! -x "$out/etcd" ]]; then
  log "building etcd $ETCD_VERSION"
  start=$SECONDS
  (cd "$here/etcd" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$out/etcd.tmp" go.etcd.io/etcd/server/v3)
  mv "$out/etcd.tmp" "$out/etcd"
  log "built etcd in $((SECONDS - start)) s"
else
  log "etcd $ETCD_VERSION present"
fi

if [[ ! -x "$out/kwok" ]]; then
  log "building kwok $KWOK_VERSION (simulated kubelet)"
  start=$SECONDS
  (cd "$here/kwok" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$out/kwok.tmp" sigs.k8s.io/kwok/cmd/kwok)
  mv "$out/kwok.tmp" "$out/kwok"
  log "built kwok in $((SECONDS - start)) s"
else
  log "kwok $KWOK_VERSION present"
fi

# pause: the sandbox image of the real node (dev-cluster up --real-node), a static "wait for SIGTERM, reap
# children" program; it has no version of its own, so it is rebuilt only when absent (well under a second).
if [[ ! -x "$out/pause" ]]; then
  (cd "$here/pause" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$out/pause.tmp.$$" .)
  mv "$out/pause.tmp.$$" "$out/pause"
  log "built pause"
fi

# helm: for the chart (charts/phalanx) and manifests/phalanx.yaml. Not keyed by the folder's name, so
# the binary's own version decides: another version is rebuilt. Cold: about 2 minutes on 2 cores.
if [[ ! -x "$out/helm" ]] || [[ "$("$out/helm" version --template '{{.Version}}' 2>/dev/null)" != "$HELM_VERSION" ]]; then
  log "building helm $HELM_VERSION"
  start=$SECONDS
  ldflags="-s -w -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION -X helm.sh/helm/v3/internal/version.gitTreeState=clean"
  # As helm's Makefile: the Kubernetes version `helm template` and `helm lint` assume (its client-go's, v0.37).
  for p in helm.sh/helm/v3/pkg/lint/rules helm.sh/helm/v3/pkg/chartutil; do
    ldflags+=" -X $p.k8sVersionMajor=1 -X $p.k8sVersionMinor=37"
  done
  (cd "$here/helm" && CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" -o "$out/helm.tmp" helm.sh/helm/v3/cmd/helm)
  mv "$out/helm.tmp" "$out/helm"
  log "built helm in $((SECONDS - start)) s"
else
  log "helm $HELM_VERSION present"
fi

echo "$out"
