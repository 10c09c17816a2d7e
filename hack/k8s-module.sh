#!/usr/bin/env bash
# Write the pinned module that builds one Kubernetes version's control plane: hack/k8s-<VERSION>/go.mod
# and go.sum (committed; hack/build.sh --kubernetes-version VERSION builds from it). The default version's
# module is hack/k8s. Run once per new version, then commit the two files.
#
# k8s.io/kubernetes requires its staging modules at v0.0.0 with `replace => ./staging/...`, which
# `go install pkg@version` refuses: every staging module is replaced by k8s.io/<name> v0.<minor>.<patch>
# (the list read from that version's own go.mod), its godebug default copied, and the go line kept >= 1.24
# for the `tool` directives (the godebug line, or go<its go line> without one, keeps its runtime defaults).
#
# Usage: hack/k8s-module.sh VERSION [GOTOOLCHAIN]   e.g. v1.30.14, or v1.38.0-beta.0 go1.27.3
# v1.38 needs two more replaces, for modules the proxy refuses (403 "This module version is not available",
# 2026-12-02): sigs.k8s.io/structured-merge-diff/v7 v7.0.1 -> v7.0.0 (served), and
# k8s.io/apiextensions-api v0.38.0-beta.0 (a staging module new in 1.38) -> a folder under .cache laid out
# by hack/k8s-apiextensions-api.sh from apiextensions-apiserver v0.37.2; docs/dev-cluster.md.
set -euo pipefail
version=$1
toolchain=${2:-}
here=$(cd "$(dirname "$0")" && pwd)
dir="$here/k8s-$version"
staging="v0.${version#v1.}"
export GOTOOLCHAIN=${toolchain:-local} GOFLAGS=-mod=mod
# Written in a scratch folder and moved into place only when complete: a version whose modules the proxy
# does not serve leaves nothing behind. The scratch folder sits beside the result (hack/), so a replace by a
# relative folder (../../.cache/...) means the same in both.
work=$(mktemp -d "$here/.k8s-module.XXXXXX")
trap 'rm -rf "$work"' EXIT
cd "$work"
gomod=$(go mod download -json "k8s.io/kubernetes@$version" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')
their_go=$(sed -n 's/^go \([0-9.]*\).*/\1/p' "$gomod")
their_debug=$(sed -n 's/^godebug default=\(.*\)$/\1/p' "$gomod")
go_line=$their_go
if [[ $(printf '%s\n1.24.0\n' "$their_go" | sort -V | head -1) != 1.24.0 ]]; then go_line=1.24.0; fi
{
  echo "module phalanx.dev/hack/k8s-$version"
  echo
  echo "go $go_line"
  [[ -n $toolchain ]] && echo && echo "toolchain $toolchain"
  echo
  echo "godebug default=${their_debug:-go${their_go%.*}}"
} > go.mod
sed -n 's#^[[:space:]]*\(k8s.io/[^ ]*\) => \./staging/.*#\1#p' "$gomod" |
  while read -r m; do go mod edit -replace="$m=$m@$staging"; done
case $version in
  v1.38.*)
    go mod edit -replace=sigs.k8s.io/structured-merge-diff/v7=sigs.k8s.io/structured-merge-diff/v7@v7.0.0
    apiext=../../.cache/k8s/src/apiextensions-api-from-v0.37.2
    bash "$here/k8s-apiextensions-api.sh" v0.37.2 "$work/$apiext" >/dev/null
    go mod edit -replace="k8s.io/apiextensions-api=$apiext"
    ;;
esac
go get -tool "k8s.io/kubernetes/cmd/kube-apiserver@$version" "k8s.io/kubernetes/cmd/kube-controller-manager@$version" \
  "k8s.io/kubernetes/cmd/kube-scheduler@$version"
# v1.38: tidy also walks the tests of every dependency, and k8s.io/ktesting v0.38.0-beta.0 (imported only by
# tests) is refused too; -e keeps going, and what the three commands build is complete without it.
case $version in
  v1.38.*)
    go mod tidy -e
    # Now that the module resolves: the go.sum lines of what generates the client (1.38's code generators,
    # models-schema), written even when the generated folder is already in .cache; then the client.
    go list -deps k8s.io/code-generator/cmd/applyconfiguration-gen k8s.io/code-generator/cmd/client-gen \
      k8s.io/code-generator/cmd/lister-gen k8s.io/code-generator/cmd/informer-gen \
      k8s.io/apiextensions-apiserver/pkg/generated/openapi/cmd/models-schema >/dev/null
    bash "$here/k8s-apiextensions-api.sh" v0.37.2 "$work/$apiext" "$work" >/dev/null
    ;;
  *) go mod tidy ;;
esac
mkdir -p "$dir"
cp go.mod go.sum "$dir/"
echo "$dir/go.mod"
