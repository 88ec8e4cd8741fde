"""ZooKeeper coordination of a moverd cluster (kazoo): membership, reassignments, status, dynamic configs.

Modules: znodes (Kafka's formats), client (the session and its worker thread), registration, reassignment, status,
cleaner (the elected broker), config_changes, coordinator (the daemon's handle). See docs/zookeeper.md.
"""
