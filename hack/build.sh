#!/usr/bin/env bash
# Build the Kubernetes control plane (v1.37.2), kubectl, kubelet (for `dev-cluster up --real-node`), etcd,
# kwok and helm from the Go module proxy into an ignored cache folder. Reuses binaries that are already
# there (keyed by version).
#
# Usage: hack/build.sh [OUT_DIR]     (default: .cache/k8s/<versions>/bin)
set -euo pipefail

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
