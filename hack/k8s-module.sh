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
# Every module is the proxy's own, at the version k8s.io/kubernetes asks for (v1.38's needed two stand-ins
# while the proxy refused them, until 2026-12-06; docs/versions.md).
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
go get -tool "k8s.io/kubernetes/cmd/kube-apiserver@$version" "k8s.io/kubernetes/cmd/kube-controller-manager@$version" \
  "k8s.io/kubernetes/cmd/kube-scheduler@$version"
go mod tidy
mkdir -p "$dir"
cp go.mod go.sum "$dir/"
echo "$dir/go.mod"
