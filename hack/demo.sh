#!/usr/bin/env bash
# Phalanx on the built-in local cluster: install, build (first time only, ~10 min on 2 cores),
# start a stock Kubernetes v1.37.2 with the article's 8 GPU nodes, run the operator, submit a gang.
# Ctrl-C stops the operator; `phalanx dev-cluster down` stops the cluster.
set -euo pipefail
cd "$(dirname "$0")/.."

python3 -m pip install --quiet --disable-pip-version-check -e .
bin=$(bash hack/build.sh)

if ! phalanx dev-cluster status >/dev/null 2>&1; then
  phalanx dev-cluster up
fi
export KUBECONFIG=$PWD/.dev-cluster/kubeconfig
kubectl=$bin/kubectl

phalanx run --kubeconfig "$KUBECONFIG" > .dev-cluster/logs/phalanx.log 2>&1 &
operator=$!
trap 'kill $operator 2>/dev/null; wait $operator 2>/dev/null' EXIT INT TERM
until grep -q "scheduling loop started" .dev-cluster/logs/phalanx.log 2>/dev/null; do
  kill -0 $operator 2>/dev/null || { cat .dev-cluster/logs/phalanx.log; exit 1; }
  sleep 0.5
done
sleep 1  # the webhook configuration is written right after the loop starts

"$kubectl" delete job gang-4 --ignore-not-found --wait=true >/dev/null
"$kubectl" apply -f examples/gang-4.yaml
sleep 3
"$kubectl" get pods -o wide -l job-name=gang-4
"$kubectl" get podgroups

cat <<EOT

Phalanx is running (log: .dev-cluster/logs/phalanx.log). In another terminal:
  export KUBECONFIG=$KUBECONFIG
  alias kubectl=$kubectl
  kubectl apply -f examples/local-4.yaml && kubectl get podgroups
Ctrl-C stops the operator; phalanx dev-cluster down stops the cluster.
EOT
wait $operator
