"""apply/: the imperative end of a pass.

applier.py  runs each unit's actions in order, units in isolation; backoff; write-through to the cache
kube.py     the API calls, idempotent and retried on transient failures (tenacity)
events.py   core/v1 Events aggregated like client-go's recorder
faults.py   test-only fault switches (inert unless set): SIGKILL at chosen points
"""
