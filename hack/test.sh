#!/usr/bin/env bash
# Everything CI checks, on a fresh machine too: install, build the control plane (cached in
# .cache/), lint, type-check, layering, CRD drift, then every test (unit + real control plane).
# Extra arguments go to pytest, e.g. `hack/test.sh -m "not integration"`.
set -euo pipefail
cd "$(dirname "$0")/.."

python3 -m pip install --quiet --disable-pip-version-check -e '.[test]'
bash hack/build.sh >/dev/null
bash hack/build-addons.sh >/dev/null  # JobSet, LWS, Trainer, Kueue for tests/integration/test_addons.py
bash hack/build.sh --kubernetes-version v1.30.14 >/dev/null  # the oldest promised version's control plane

ruff check operator tests bench
ruff format --check operator tests bench
mypy
lint-imports
python3 -m phalanx.api.crdgen --check

set +e
python3 -m pytest "$@"
rc=$?
set -e
if [[ $rc -eq 5 ]]; then
  echo "pytest collected no tests: that is a failure, not a pass" >&2
  exit 1
fi
exit $rc
