"""Local services: Kafka (KRaft) and Redis started from the project's own files."""
