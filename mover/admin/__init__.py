"""The tools' admin library: a blocking Kafka client, log-dir state, throttles, reassignment files and ZooKeeper reads.
`mover-log-dirs` (mover/cli), `mover-audit` (mover/audit) and `mover-reassign` are thin fronts over it, as Kafka's
LogDirsCommand is over its Admin client. It raises AdminError (mover.admin.common); only the command lines turn that
into exit codes."""
