"""`phalanx run`: the operator process (Kopf, embedded so Phalanx owns its CLI and settings)."""

from __future__ import annotations

import asyncio
import logging
import os

import kopf

from phalanx.controller.runtime import Options


def run_operator(
    kubeconfig: str | None,
    webhook_host: str,
    webhook_port: int,
    verbose: bool,
    install_crds: bool = True,
) -> int:
    if kubeconfig:
        # Kopf's login reads $KUBECONFIG; our client gets the path explicitly.
        kubeconfig = os.path.abspath(kubeconfig)
        os.environ["KUBECONFIG"] = kubeconfig
    kopf.configure(verbose=verbose, log_format=kopf.LogFormat.FULL)
    if not verbose:
        # Kopf reports every watch event it handled; our own loggers say what matters.
        logging.getLogger("kopf.objects").setLevel(logging.WARNING)
    from phalanx.controller import handlers  # registers the handlers

    handlers.runtime.configure(Options(webhook_host, webhook_port, install_crds, kubeconfig))
    # Always cluster-wide: every pod on a node takes capacity, whatever its namespace.
    asyncio.run(kopf.operator(standalone=True, clusterwide=True))
    return 0
