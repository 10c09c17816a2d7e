"""The Phalanx API: the scheduling.phalanx.dev kinds, their CRDs, and how a Job maps onto them.

Import from the modules, which have one job each:

- ``models`` every model; ``workload``, ``podgroup``, ``compositepodgroup`` the kinds;
  ``scheduling`` their shared building blocks; ``status`` and ``conditions`` what Phalanx reports.
- ``crdgen`` the CRDs (``crd_documents()``; ``python -m phalanx.api.crdgen``), built by ``schema``.
- ``job_policy`` a Job's annotations to a ``JobPolicy``; ``keys`` the label and annotation names.
- ``naming`` upstream-compatible object names; ``builders`` the Workload and PodGroup of a Job.

Nothing here talks to a cluster: no Kopf, no Kubernetes client, no other Phalanx package.
"""
