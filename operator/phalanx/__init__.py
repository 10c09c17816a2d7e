"""Phalanx: gang and topology-aware admission for Kubernetes batch Jobs."""
