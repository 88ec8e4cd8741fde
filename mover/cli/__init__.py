"""Command-line tools: `mover-log-dirs` (mover.cli.log_dirs), the kafka-log-dirs.sh / kafka-reassign-partitions.sh
of a JBOD broker. See docs/cli.md."""
