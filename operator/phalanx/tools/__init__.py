"""Command-line tools for any cluster: `phalanx explain`, `phalanx where`, `phalanx convert`.

They read the cluster through a kubeconfig (`kube.py`) and reuse the API models (`phalanx.api`) and the
pure placement engine (`phalanx.placement`); they never import the controller (import-linter checks it).
"""
