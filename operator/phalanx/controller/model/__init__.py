"""model/: the typed values every room of the controller shares (pure).

records.py   pods, PodGroups, CompositePodGroups, Workloads, PriorityClasses as read, parsed once
refs.py      ObjectRef: what actions, events and logs name
actions.py   what a pass decided to do (UnitPlan: one unit's actions), run by the applier
keys.py      unit keys: one format for what backs off and what a plan is grouped by
topology.py  Topology records and the label -> Topology index
"""
