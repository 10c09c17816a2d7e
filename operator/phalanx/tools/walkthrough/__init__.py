"""`phalanx demo`: the article's experiments, one after another, on the dev cluster with Phalanx running.

`steps` holds the experiments and what to notice in each; `runner` plays them (preflight, OK / FAILED /
SKIP, cleanup after each step); `demo` is the cluster as the steps drive it; `facts` the pure parts.
"""
