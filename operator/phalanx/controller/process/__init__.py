"""process/: `phalanx run` and what runs around the loop.

main.py        the process: Kopf embedded, bounded stopping
runtime.py     the wiring: client, cache, registry, priming, the loop (or leader election), TLS
settings.py    every flag and PHALANX_* environment variable
leader.py      Lease-based leader election (client-go's rules)
health.py      /healthz and /readyz; httpserver.py serves them with /metrics
webhook_tls.py the webhook certificate from a Secret, made and renewed; logs.py JSON logs
"""
