"""The Kafka client layer: topic plan and creation, admin and inspection helpers, the batch sink
and the records it produces; used by stream/, transactions/ and stack/ alike."""
