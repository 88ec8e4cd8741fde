"""The broker's replicas: LogManager (the owner of the log dirs and their Replicas) and Replica
(one partition's copy)."""
