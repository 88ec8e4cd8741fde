"""Reassignment as a service of the cluster: the requests and their status kept in the cluster (status_log.py,
status_store.py, request_store.py)."""
