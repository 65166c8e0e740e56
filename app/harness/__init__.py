"""The harness that drives the real pipeline: spawned workers and services, log replay, fault
scenarios and their invariants; shared by the fault suite, `fraudstream chaos` and the benchmarks
(as Kafka Streams ships its test utilities)."""
