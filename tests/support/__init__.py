"""Helpers only the tests use: dashboard queries, log scanning, Kafka's default partitioner (the
harness the tests share with `fraudstream chaos` and the benchmarks is app.harness)."""
