"""The Kafka client layer: topic plan and creation, admin and inspection helpers, the batch sink
and the records it produces, log replay and label import; used by stream/, stack/ and the CLI
alike. It reads the transaction contract (app.transactions), which does no Kafka I/O."""
