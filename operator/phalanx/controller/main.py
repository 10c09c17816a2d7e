"""`phalanx run`: the operator process (Kopf, embedded so Phalanx owns its CLI and settings)."""

from __future__ import annotations

import asyncio
import logging
import os

import kopf

from phalanx.controller.settings import Settings


def run_operator(settings: Settings) -> int:
    if settings.kubeconfig:
        # Kopf's login reads $KUBECONFIG; our client gets the path explicitly.
        os.environ["KUBECONFIG"] = settings.kubeconfig
    kopf.configure(verbose=settings.verbose, log_format=kopf.LogFormat.FULL)
    if not settings.verbose:
        # Kopf reports every watch event it handled; our own loggers say what matters.
        logging.getLogger("kopf.objects").setLevel(logging.WARNING)
    from phalanx.controller import handlers  # registers the handlers

    handlers.runtime.configure(settings)
    # Always cluster-wide: every pod on a node takes capacity, whatever its namespace.
    asyncio.run(kopf.operator(standalone=True, clusterwide=True))
    return 0
