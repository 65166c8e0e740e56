"""`fraudstream watch`: a live view of a running pipeline from its metrics and Kafka's offsets."""
