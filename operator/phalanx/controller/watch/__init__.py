"""watch/: where the cluster comes in.

watched.py   every watched kind, in one table (watches, priming, relisting)
registry.py  Kopf handlers on an explicit registry: webhooks and one watch per table row
webhooks.py  the admission handlers as plain functions of the request and a WatchContext
trainjob_gate.py  the TrainJob's gate: webhooks.py's, with the runtime it refers to read live
relist.py    drops from the cache what was deleted while a watch was away
"""
