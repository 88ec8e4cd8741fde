"""moverd, the process: main (start-up and shutdown), the Kafka-protocol BrokerServer, systemd's notify protocol."""
