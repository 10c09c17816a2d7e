"""`phalanx run`: the operator process (Kopf, embedded so Phalanx owns its CLI and settings)."""

from __future__ import annotations

import asyncio
import os

import kopf

from phalanx.controller import logs
from phalanx.controller.settings import Settings


def run_operator(settings: Settings) -> int:
    if settings.kubeconfig:
        # Kopf's login reads $KUBECONFIG; our client gets the path explicitly.
        os.environ["KUBECONFIG"] = settings.kubeconfig
    logs.configure(settings.log_format, settings.verbose)
    from phalanx.controller import handlers  # registers the handlers

    handlers.runtime.configure(settings)
    # Always cluster-wide for Kopf: every pod on a node takes capacity, whatever its namespace;
    # settings.namespaces narrows the managed Jobs only.
    asyncio.run(kopf.operator(standalone=True, clusterwide=True))
    return 0
