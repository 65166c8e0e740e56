"""Transport security and secrets: Kafka TLS/SASL, Redis TLS/ACL, action-service tokens."""
