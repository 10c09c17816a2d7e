#!/usr/bin/env bash
# Build the real controllers of `phalanx dev-cluster up --addons` from the Go module proxy into the ignored
# .cache/addons/<name>-<version>/<name>, reusing what is there (keyed by version, as hack/build.sh does).
#
#   jobset   sigs.k8s.io/jobset v0.11.1                 (its manager: the module's root package)
#   lws      sigs.k8s.io/lws v0.8.0                     (cmd)
#   trainer  github.com/kubeflow/trainer/v2 v2.2.0      (cmd/trainer-controller-manager)
#   kueue    sigs.k8s.io/kueue v0.17.0                  (cmd/kueue)
#
# Two pinned modules (go.mod + go.sum under hack/addons/), so dependencies shared at one version compile
# once: kueue-trainer is Kueue v0.17.0's own dependency graph, which already holds Trainer v2.2.0 (and
# JobSet, LWS); jobset-lws keeps controller-runtime v0.22.4, which JobSet and LWS need (their webhook
# builders do not compile against v0.23's generic one), with every other module at kueue-trainer's version.
# Measured cold times and why: docs/dev-cluster.md.
#
# Usage: hack/build-addons.sh [NAME...]     (default: all four; prints each binary's path)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
out_root=${PHALANX_ADDONS_CACHE:-"$root/.cache/addons"}

log() { printf '[build-addons %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

# name  go-module-dir  main package  module  package stamped with -X <pkg>.GitVersion (or -)
spec() {
  case $1 in
    jobset) echo "jobset-lws sigs.k8s.io/jobset sigs.k8s.io/jobset sigs.k8s.io/jobset/pkg/version" ;;
    lws) echo "jobset-lws sigs.k8s.io/lws/cmd sigs.k8s.io/lws sigs.k8s.io/lws/pkg/version" ;;
    trainer) echo "kueue-trainer github.com/kubeflow/trainer/v2/cmd/trainer-controller-manager github.com/kubeflow/trainer/v2 -" ;;
    kueue) echo "kueue-trainer sigs.k8s.io/kueue/cmd/kueue sigs.k8s.io/kueue sigs.k8s.io/kueue/pkg/version" ;;
    *) echo "unknown addon $1 (jobset, lws, trainer, kueue)" >&2; return 1 ;;
  esac
}

# Kueue first: it is the largest, and trainer then needs seconds (its packages are Kueue's too).
names=("$@")
((${#names[@]})) || names=(kueue trainer jobset lws)
for name in "${names[@]}"; do
  read -r mod pkg module vpkg <<<"$(spec "$name")"
  version=$(cd "$here/addons/$mod" && go list -m -f '{{.Version}}' "$module")
  dir="$out_root/$name-$version"
  if [[ -x "$dir/$name" ]]; then
    log "$name $version present in $dir"
  else
    mkdir -p "$dir"
    ldflags="-s -w"
    [[ $vpkg == - ]] || ldflags+=" -X $vpkg.GitVersion=$version"
    log "building $name $version (hack/addons/$mod)"
    start=$SECONDS
    # A temporary name of this run's own: two checkouts sharing the cache never write the same file.
    (cd "$here/addons/$mod" && CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" -o "$dir/$name.tmp.$$" "$pkg")
    mv "$dir/$name.tmp.$$" "$dir/$name"
    log "built $name in $((SECONDS - start)) s"
  fi
  echo "$dir/$name"
done
