"""Command-line tools for any cluster: `phalanx explain`, `where`, `topology`, `convert` (and the demo).

Their map: `kube.py` reads a cluster through a kubeconfig (GETs only); `view.py` turns live pods and nodes
into what the placement engine sees; `targets.py` is the table of kinds `explain` resolves (a workload kind
is one row) and reads one target's objects; `explain.py` renders the status and the engine's own diagnosis
(`placement.diagnose`), as text or JSON; `where.py` is the article's where.sh; `topologies.py` holds the
presets and the nesting check; `convert.py` rewrites upstream `spec.scheduling` Jobs; `chart_readme.py`
generates the chart's README from its values. They reuse the API models (`phalanx.api`) and the pure
placement engine (`phalanx.placement`) and never import the controller (import-linter checks it).
"""
