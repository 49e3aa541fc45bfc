"""Effectors: the only code that changes the node or the cluster."""
