"""The controller: rooms by step of the flow, the data going one way.

    watch/    Kopf handlers on an explicit registry: admission webhooks, one watch per watched kind
              (watched.py, the one table that also drives priming and relisting), the Relister
    cache/    typed records of every watched kind, indexes, expectations for our own writes, the live
              placement snapshot; the kinds' ClusterView
    loop/     the one scheduling loop: cache -> plan_input (every kind's units) -> plan() -> applier
    plan/     pure: the one gang state machine over units, ordered by priority then age -> typed actions
    apply/    the applier (per unit, isolated, retried, backed off, write-through), API client, events
    process/  `phalanx run`: settings, runtime wiring, leader election, probes, metrics server, TLS
    kinds/    the workload-kind interface and its implementations (batch/v1 Job, hand-made trees)
    model/    typed values every room shares: records, refs, actions, unit keys, Topologies
    metrics.py  the Prometheus metrics (no Phalanx imports)

import-linter enforces the layers (pyproject.toml): process > watch > loop > apply > plan | cache > kinds >
model, and plan/, kinds/ and model/ import no Kopf, API client, aiohttp or asyncio.
"""
