#!/usr/bin/env bash
# Everything CI checks, on a fresh machine too: install, build the control plane (cached in
# .cache/), lint, type-check, layering, CRD drift, then every test (unit + real control plane).
# Extra arguments go to pytest, e.g. `hack/test.sh -m "not integration"`.
#
# Without arguments (CI), what only some tests need — the addon controllers (JobSet, LWS, Trainer, Kueue)
# and the oldest promised Kubernetes version's control plane — is built while the other tests run (they
# mostly wait on the control plane, on two pytest-xdist workers), and the tests that need it (marker
# needs_builds) run last.
set -euo pipefail
cd "$(dirname "$0")/.."

python3 -m pip install --quiet --disable-pip-version-check -e '.[test]'
bash hack/build.sh >/dev/null

build_the_rest() {
  bash hack/build-addons.sh >/dev/null  # JobSet, LWS, Trainer, Kueue for the addon tests
  bash hack/build.sh --kubernetes-version v1.30.14 >/dev/null  # the oldest promised version
}

run_pytest() {
  set +e
  python3 -m pytest "$@"
  local rc=$?
  set -e
  if [[ $rc -eq 5 ]]; then
    echo "pytest collected no tests ($*): that is a failure, not a pass" >&2
    return 1
  fi
  return $rc
}

checks() {
  ruff check operator tests bench
  ruff format --check operator tests bench
  mypy
  lint-imports
  python3 -m phalanx.api.crdgen --check
}

if (($#)); then
  build_the_rest
  checks
  run_pytest "$@"
  exit $?
fi

# Two workers (PHALANX_TEST_WORKERS) for what does not need the later builds: the integration tests mostly
# wait on their control planes; a file's tests stay on one worker (--dist loadfile: its module's cluster
# starts once, and the real node's host network is never set up twice at a time). The tests that need the
# later builds run on two workers too, each worker with its own cluster and addon controllers (a session's
# cluster is its worker's): their files take turns on two clusters instead of one.
workers=(-n "${PHALANX_TEST_WORKERS:-2}" --dist loadfile)

mkdir -p .cache
build_the_rest > .cache/builds.log 2>&1 &
builds=$!
checks
rc=0
run_pytest "${workers[@]}" -m "not needs_builds" || rc=$?
if ! wait "$builds"; then
  echo "building the addons or the oldest control plane failed:" >&2
  tail -n 50 .cache/builds.log >&2
  exit 1
fi
run_pytest "${workers[@]}" -m needs_builds || rc=$?
exit $rc
