"""fraudstream: real-time card-fraud scoring on Kafka."""
