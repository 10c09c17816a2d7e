#!/usr/bin/env bash
# Phalanx on the built-in local cluster: install, build (first time only, ~10 min on 2 cores), start a
# stock Kubernetes v1.37.2 with the article's 8 GPU nodes, run the operator, and play the article's
# experiments one after another (`phalanx demo`, a few minutes; docs/demo.md). The operator keeps
# running afterwards: Ctrl-C stops it; `phalanx dev-cluster down` stops the cluster.
#
#   ./hack/demo.sh                    # the whole walk-through
#   ./hack/demo.sh --short            # fewer repeats (what CI plays)
#   ./hack/demo.sh --steps preemption # any `phalanx demo` flags
#
# PHALANX_DEV_DIR: the cluster's folder (default .dev-cluster). PHALANX_DEMO_STAY=0: stop the operator
# when the walk-through ends instead of keeping it running.
set -euo pipefail
cd "$(dirname "$0")/.."

dir=${PHALANX_DEV_DIR:-.dev-cluster}
python3 -m pip install --quiet --disable-pip-version-check -e .
# Through the module: pip may put the `phalanx` script in a folder that is not on PATH (~/.local/bin).
phalanx() { python3 -m phalanx.cli "$@"; }
bin=$(bash hack/build.sh)

if ! phalanx dev-cluster status --dir "$dir" >/dev/null 2>&1; then
  phalanx dev-cluster up --dir "$dir"
fi
dir=$(cd "$dir" && pwd)
export KUBECONFIG=$dir/kubeconfig
log=$dir/logs/phalanx.log

# One operator per cluster: a second scheduling loop beside the first would fight over the same gangs.
if [[ -f $dir/phalanx.pid ]] && kill -0 "$(cat "$dir/phalanx.pid")" 2>/dev/null; then
  echo "Phalanx from an earlier ./hack/demo.sh still runs on this cluster (pid $(cat "$dir/phalanx.pid")):" \
    "stop it (Ctrl-C there, or kill $(cat "$dir/phalanx.pid")) and run this again" >&2
  exit 1
fi
read -r webhook_port metrics_port < <(python3 -c \
  'from phalanx.devcluster.cluster import free_ports; print(*free_ports(2))')
# Not through the function: $! must be the operator's own pid, for the trap and the check below.
python3 -m phalanx.cli run --kubeconfig "$KUBECONFIG" --webhook-port "$webhook_port" \
  --metrics-port "$metrics_port" >"$log" 2>&1 &
operator=$!
echo $operator >"$dir/phalanx.pid"
trap 'kill $operator 2>/dev/null; wait $operator 2>/dev/null; rm -f "$dir/phalanx.pid"' EXIT INT TERM

# Ready: CRDs installed, cache primed, webhook listening (/readyz); `phalanx demo` then also checks that
# the webhook gates a Job before its first step.
ready() {
  python3 -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=2)' \
    "http://127.0.0.1:$metrics_port/readyz" 2>/dev/null
}
deadline=$((SECONDS + 90))
until ready; do
  if ! kill -0 $operator 2>/dev/null || ((SECONDS > deadline)); then
    echo "Phalanx did not get ready; its log ($log):" >&2
    tail -n 40 "$log" >&2
    exit 1
  fi
  sleep 0.5
done
echo "Phalanx is running (pid $operator, log $log)"
echo

if ! phalanx demo --dir "$dir" "$@"; then
  echo "the walk-through failed (see above); Phalanx's log: $log" >&2
  exit 1
fi

cat <<EOT

Go on by hand (the Jobs in examples/ are the article's, in the Phalanx form):
  export KUBECONFIG=$KUBECONFIG
  alias kubectl=$bin/kubectl
  kubectl apply -f examples/gang-4.yaml && phalanx where job-name=gang-4 && kubectl get podgroups
  phalanx explain job/gang-4
  phalanx demo --dir $dir --steps preemption    # one step again; phalanx demo --list names them
Ctrl-C stops the operator; phalanx dev-cluster down --dir $dir stops the cluster.
EOT
if [[ ${PHALANX_DEMO_STAY:-1} == 0 ]]; then
  exit 0
fi
wait $operator
