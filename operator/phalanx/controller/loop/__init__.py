"""loop/: the one scheduling loop (scheduler.py): woken by the cache, it takes `plan_input` (every kind's
units and the cluster), calls the pure `plan()`, and hands the actions to the applier."""
