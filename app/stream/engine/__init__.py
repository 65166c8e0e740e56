"""The score and dispatch loops: pipeline, scoring stages, durable points and Kafka transactions."""
