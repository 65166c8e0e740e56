"""The one place the environment is read: a frozen Settings object built at the entry point."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, get_args

StoreKind = Literal["memory", "rocksdb"]
AppendFsync = Literal["always", "everysec", "no"]
ScorerDevice = Literal["auto", "cpu", "cuda"]
KafkaSecurityProtocol = Literal["PLAINTEXT", "SSL", "SASL_SSL"]
KafkaSaslMechanism = Literal["SCRAM-SHA-512", "PLAIN"]
StackProfile = Literal["single", "cluster"]
Processing = Literal["at_least_once", "exactly_once"]

#: Brokers of the cluster profile's Kafka (each a combined KRaft broker+controller).
KAFKA_CLUSTER_NODES = 3


class SettingsError(ValueError):
    """An environment variable holds a value its setting cannot take."""


def _env(name: str, doc: str, default: Any) -> Any:
    """Declare a settings field read from environment variable `name`, documented by `doc`."""
    return field(default=default, metadata={"env": name, "doc": doc})


def _secret(name: str, doc: str) -> Any:
    """Declare a secret field: unset by default and left out of the object's repr."""
    return field(default=None, repr=False, metadata={"env": name, "doc": doc, "secret": True})


#: The project's own models/ (beside the installed `app` package): found from any directory.
SHIPPED_MODEL_DIR = Path(__file__).resolve().parents[1] / "models"


@dataclass(frozen=True, slots=True)
class Settings:
    """Every tunable of fraudstream, each read from one environment variable."""

    # --- services -----------------------------------------------------------------------
    kafka_bootstrap: str | None = _env(
        "KAFKA_BOOTSTRAP",
        "host:port of an existing Kafka cluster; when set, `stack up` starts no Kafka.",
        None,
    )
    redis_url: str | None = _env(
        "REDIS_URL",
        "URL of an existing Redis; when set, `stack up` starts no Redis. redis:// (rediss://) "
        "names a single node; redis+cluster://HOST:PORT (rediss+cluster://) names any node of "
        "a Redis Cluster, whose slot map the clients then read.",
        None,
    )
    state_dir: Path = _env(
        "FRAUDSTREAM_STATE_DIR",
        "Project-local directory for service data, logs and pid files (git-ignored).",
        Path(".fraudstream"),
    )
    jar_cache: Path = _env(
        "FRAUDSTREAM_JAR_CACHE",
        "Where Kafka's jars are copied from Maven Central (outside the repo).",
        Path.home() / ".cache" / "fraudstream" / "kafka-jars",
    )
    stack_profile: StackProfile | None = _env(
        "FRAUDSTREAM_STACK_PROFILE",
        "Local stack layout: single (one Kafka node, one Redis) or cluster (three KRaft Kafka "
        "nodes, replication 3, min.insync.replicas 2; Redis Cluster). Unset: the profile "
        "`stack up` last brought up in the state dir, else single.",
        None,
    )
    kafka_port: int = _env("FRAUDSTREAM_KAFKA_PORT", "Local Kafka broker port.", 19092)
    kafka_controller_port: int = _env(
        "FRAUDSTREAM_KAFKA_CONTROLLER_PORT", "Local KRaft controller port.", 19093
    )
    kafka_heap: str = _env("FRAUDSTREAM_KAFKA_HEAP", "JVM heap for the local broker.", "1g")
    kafka_cluster_port: int = _env(
        "FRAUDSTREAM_KAFKA_CLUSTER_PORT",
        "Cluster profile: first Kafka port; node N (1..3) listens on this + 2(N-1) (broker) "
        "and the port after it (KRaft controller).",
        19192,
    )
    kafka_cluster_heap: str = _env(
        "FRAUDSTREAM_KAFKA_CLUSTER_HEAP", "Cluster profile: JVM heap of each Kafka node.", "768m"
    )
    redis_port: int = _env("FRAUDSTREAM_REDIS_PORT", "Local Redis port.", 16379)
    redis_cluster_port: int = _env(
        "FRAUDSTREAM_REDIS_CLUSTER_PORT",
        "Cluster profile: first Redis Cluster port; its 6 nodes (3 masters, 1 replica each) "
        "listen on this and the next 5, their cluster bus on the 6 after.",
        16400,
    )
    redis_appendfsync: AppendFsync = _env(
        "FRAUDSTREAM_REDIS_APPENDFSYNC", "Redis AOF fsync policy: always|everysec|no.", "always"
    )
    kafka_security_protocol: KafkaSecurityProtocol = _env(
        "FRAUDSTREAM_KAFKA_SECURITY_PROTOCOL",
        "How every Kafka client connects: PLAINTEXT|SSL|SASL_SSL.",
        "PLAINTEXT",
    )
    kafka_sasl_mechanism: KafkaSaslMechanism = _env(
        "FRAUDSTREAM_KAFKA_SASL_MECHANISM", "SASL mechanism under SASL_SSL: SCRAM-SHA-512|PLAIN.",
        "SCRAM-SHA-512",
    )
    kafka_ssl_cafile: Path | None = _env(
        "FRAUDSTREAM_KAFKA_SSL_CAFILE",
        "PEM CA bundle that signed the brokers' certificates (SSL, SASL_SSL); unset: system CAs.",
        None,
    )
    kafka_ssl_certfile: Path | None = _env(
        "FRAUDSTREAM_KAFKA_SSL_CERTFILE", "PEM client certificate for mutual TLS (optional).", None
    )
    kafka_ssl_keyfile: Path | None = _env(
        "FRAUDSTREAM_KAFKA_SSL_KEYFILE", "PEM private key of the client certificate.", None
    )
    kafka_sasl_username: str | None = _env(
        "FRAUDSTREAM_KAFKA_SASL_USERNAME", "SASL user (SASL_SSL).", None
    )
    kafka_sasl_password: str | None = _secret(
        "FRAUDSTREAM_KAFKA_SASL_PASSWORD", "SASL password (SASL_SSL; never logged)."
    )
    kafka_sasl_password_file: Path | None = _env(
        "FRAUDSTREAM_KAFKA_SASL_PASSWORD_FILE",
        "File holding the SASL password (first line); used when FRAUDSTREAM_KAFKA_SASL_PASSWORD is unset.",
        None,
    )
    redis_ssl_ca_file: Path | None = _env(
        "FRAUDSTREAM_REDIS_SSL_CA_FILE",
        "PEM CA bundle that signed Redis's certificate (rediss:// URLs); unset: system CAs.",
        None,
    )
    redis_username: str | None = _env(
        "FRAUDSTREAM_REDIS_USERNAME", "Redis ACL user (overrides a user in REDIS_URL).", None
    )
    redis_password: str | None = _secret(
        "FRAUDSTREAM_REDIS_PASSWORD", "Password of the Redis ACL user (never logged)."
    )
    redis_password_file: Path | None = _env(
        "FRAUDSTREAM_REDIS_PASSWORD_FILE",
        "File holding the Redis password (first line); used when FRAUDSTREAM_REDIS_PASSWORD is unset.",
        None,
    )
    topic_partitions: int = _env(
        "FRAUDSTREAM_PARTITIONS", "Partitions of every fraudstream topic.", 8
    )
    topic_replication: int | None = _env(
        "FRAUDSTREAM_REPLICATION",
        "Replication factor of every fraudstream topic; unset: 1 on the single profile, 3 on "
        "the cluster profile.",
        None,
    )
    topic_prefix: str = _env(
        "FRAUDSTREAM_TOPIC_PREFIX",
        "Prefix for every topic name (lets tests run on fresh topics).",
        "",
    )

    # --- worker -------------------------------------------------------------------------
    app_id: str = _env(
        "FRAUDSTREAM_APP_ID", "Faust app id: consumer group and changelog prefix.", "fraudstream"
    )
    web_port: int = _env("FRAUDSTREAM_WEB_PORT", "Worker web port (metrics, control).", 6066)
    store: StoreKind = _env(
        "FRAUDSTREAM_STORE",
        "Card state store: rocksdb (one RocksDB database per worker under the state dir; a "
        "restart reads only the changelog after the offsets it holds) or memory (restored "
        "from the whole changelog on every start; tests and demos).",
        "rocksdb",
    )
    card_cache: int = _env(
        "FRAUDSTREAM_CARD_CACHE",
        "Decoded card states a worker keeps between batches (least recently used let go "
        "first; 0: no bound). Each costs about 7 KB of worker memory; a card outside it is "
        "read from the store and decoded when it transacts.",
        50_000,
    )
    store_cache_mb: int = _env(
        "FRAUDSTREAM_STORE_CACHE_MB",
        "RocksDB block cache of the card store (MiB): its only read cache; memtables add up "
        "to 2 x 16 MiB.",
        64,
    )
    standby_replicas: int = _env(
        "FRAUDSTREAM_STANDBY_REPLICAS",
        "Other workers that keep each partition's card state warm (read from its changelog), "
        "to take it over without a restore when its worker dies.",
        1,
    )
    processing: Processing = _env(
        "FRAUDSTREAM_PROCESSING",
        "at_least_once: outputs, card state and offsets made durable in that order (a crash can "
        "leave a second copy of a served row or action in Kafka; effects stay exactly once by "
        "idempotency key). exactly_once: each checkpoint is one Kafka transaction per input "
        "partition holding the outputs, card changelog and input offsets, and every reader "
        "reads read_committed (no duplicate row downstream; costs throughput and latency, "
        "see docs/benchmarks.md).",
        "at_least_once",
    )
    max_message_bytes: int = _env(
        "FRAUDSTREAM_MAX_MESSAGE_BYTES",
        "Transactions larger than this are rejected to the DLQ.",
        8192,
    )
    allowed_lateness_ms: int = _env(
        "FRAUDSTREAM_ALLOWED_LATENESS_MS",
        "Events older than the card's max_ts minus this go to transactions.late.",
        300_000,
    )
    session_timeout_s: float = _env(
        "FRAUDSTREAM_SESSION_TIMEOUT_S",
        "Consumer-group session timeout: how soon a dead worker's partitions move (seconds).",
        10.0,
    )
    commit_stall_s: float = _env(
        "FRAUDSTREAM_COMMIT_STALL_S",
        "A partition whose commit is stuck behind an unprocessed message this long is re-read.",
        10.0,
    )
    max_batch: int = _env(
        "FRAUDSTREAM_MAX_BATCH",
        "Largest scoring micro-batch: the engine takes what is fetched, up to this (grows under lag).",
        512,
    )
    max_in_flight: int = _env(
        "FRAUDSTREAM_MAX_IN_FLIGHT",
        "Batches a worker may have sent but not yet made durable (pipelined checkpoint).",
        4,
    )
    max_held: int = _env(
        "FRAUDSTREAM_MAX_HELD",
        "Most input messages a worker holds served but not yet durable; past it, it makes them "
        "durable before it takes more (a backlog above its pace waits in Kafka, not in memory).",
        32_768,
    )
    state_interval_ms: int = _env(
        "FRAUDSTREAM_STATE_INTERVAL_MS",
        "How often a worker writes the card state its batches changed (one changelog record per "
        "card for all of them) and acks their input, at any load; 0: with every batch.",
        1000,
    )
    producer_linger_ms: float = _env(
        "FRAUDSTREAM_PRODUCER_LINGER_MS",
        "How long the worker's producer lets record batches gather into one produce request "
        "(0: send as soon as the connection is free; each batch is one record batch already).",
        0.0,
    )
    latency_budget_ms: float = _env(
        "FRAUDSTREAM_LATENCY_BUDGET_MS",
        "The event → served-row latency budget `fraudstream watch` and the dashboard measure p99 "
        "and the share of events within against (milliseconds).",
        50.0,
    )
    max_wait_s: float = _env(
        "FRAUDSTREAM_MAX_WAIT_S",
        "Longest wait to fill a dispatch batch (seconds); scoring never waits to fill one.",
        0.05,
    )

    # --- scoring and actions -------------------------------------------------------------
    model_dir: Path = _env(
        "FRAUDSTREAM_MODEL_DIR",
        "Directory of ONNX models and cards [default: the shipped models/ of the installed "
        "project, wherever the command runs].", SHIPPED_MODEL_DIR)
    model_version: str | None = _env(
        "FRAUDSTREAM_MODEL_VERSION",
        "Model a worker starts with (default: models/DEFAULT; `model activate` switches it).",
        None,
    )
    scorer_device: ScorerDevice = _env(
        "FRAUDSTREAM_SCORER_DEVICE", "auto: CUDA when present, else CPU; cpu; cuda (required).",
        "auto",
    )
    gpu_min_batch: int | None = _env(
        "FRAUDSTREAM_GPU_MIN_BATCH",
        "With CUDA: batches of at least this many rows are scored on CUDA, smaller ones on the "
        "CPU session (1: all on CUDA); unset: the crossover is measured at start-up.",
        None,
    )
    gpu_max_rows: int = _env(
        "FRAUDSTREAM_GPU_MAX_ROWS",
        "With CUDA: rows of the largest preallocated device buffer; larger batches are scored "
        "in chunks of it.",
        4096,
    )
    cuda_graph: bool = _env(
        "FRAUDSTREAM_CUDA_GRAPH",
        "With CUDA: capture one CUDA graph per buffer size (onnxruntime enable_cuda_graph); "
        "falls back to plain IO binding when onnxruntime refuses. On by default (2-3x cheaper a "
        "call on an H200, docs/performance.md).",
        True,
    )
    explain: bool = _env(
        "FRAUDSTREAM_EXPLAIN",
        "Worker: attach to every action its top contributing features (occlusion against the "
        "training reference, one extra model row per feature, for rows that produce an action).",
        True,
    )
    drift: bool = _env(
        "FRAUDSTREAM_DRIFT",
        "Worker: count every served row's features and score into the model's reference bins "
        "over 1 h and 24 h of event time and export PSI (needs a model card with a drift "
        "reference; without one the worker logs it and counts nothing).",
        True,
    )
    drift_psi_watch: float = _env(
        "FRAUDSTREAM_DRIFT_PSI_WATCH",
        "PSI from which a feature or the score is shown as drifting (watch, dashboard).", 0.1
    )
    drift_psi_alert: float = _env(
        "FRAUDSTREAM_DRIFT_PSI_ALERT",
        "PSI from which drift alerts (watch, dashboard, Prometheus alert rules).", 0.25
    )
    drift_min_events: int = _env(
        "FRAUDSTREAM_DRIFT_MIN_EVENTS",
        "Fewest served rows in a window for its PSI to be reported (fewer: NaN, no alert).",
        200,
    )
    freeze_threshold: float | None = _env(
        "FRAUDSTREAM_FREEZE_THRESHOLD", "Override the model card's freeze threshold.", None
    )
    alert_threshold: float | None = _env(
        "FRAUDSTREAM_ALERT_THRESHOLD", "Override the model card's alert threshold.", None
    )
    action_service_url: str = _env(
        "FRAUDSTREAM_ACTION_SERVICE_URL",
        "Base URL the dispatcher POSTs actions to.",
        "http://127.0.0.1:8088",
    )
    action_service_port: int = _env(
        "FRAUDSTREAM_ACTION_SERVICE_PORT", "Port the action service listens on.", 8088
    )
    action_token: str | None = _secret(
        "FRAUDSTREAM_ACTION_TOKEN",
        "Bearer token(s) with full access, comma-separated: the service accepts each (rotation "
        "without downtime), the dispatcher sends the first; each may be `name:token`, the name "
        "recorded as the author of analyst decisions. Unset: a built-in dev token, only "
        "on loopback addresses (never logged).",
    )
    action_token_file: Path | None = _env(
        "FRAUDSTREAM_ACTION_TOKEN_FILE",
        "File of full-access bearer tokens, one a line (`name:token` or `token`; # comments); "
        "joins FRAUDSTREAM_ACTION_TOKEN.",
        None,
    )
    action_read_token: str | None = _secret(
        "FRAUDSTREAM_ACTION_READ_TOKEN",
        "Read-only bearer token(s), comma-separated: GET routes only, 403 on POST (never logged).",
    )
    action_read_token_file: Path | None = _env(
        "FRAUDSTREAM_ACTION_READ_TOKEN_FILE",
        "File of read-only bearer tokens, one a line; joins FRAUDSTREAM_ACTION_READ_TOKEN.",
        None,
    )
    idempotency_ttl_s: int = _env(
        "FRAUDSTREAM_IDEMPOTENCY_TTL_S", "How long idempotency keys live in Redis.", 86_400
    )
    idempotency_margin_s: int = _env(
        "FRAUDSTREAM_IDEMPOTENCY_MARGIN_S",
        "Actions decided more than TTL minus this ago are refused with 410.",
        3_600,
    )
    dispatch_concurrency: int = _env(
        "FRAUDSTREAM_DISPATCH_CONCURRENCY", "Concurrent POSTs per dispatcher.", 16
    )
    dispatch_backoff_base_s: float = _env(
        "FRAUDSTREAM_DISPATCH_BACKOFF_BASE_S",
        "Dispatcher retry backoff: first ceiling (seconds); full jitter, doubling per attempt.",
        0.05,
    )
    dispatch_backoff_cap_s: float = _env(
        "FRAUDSTREAM_DISPATCH_BACKOFF_CAP_S", "Dispatcher retry backoff: largest wait (seconds).", 5.0
    )
    dispatch_request_timeout_s: float = _env(
        "FRAUDSTREAM_DISPATCH_REQUEST_TIMEOUT_S",
        "Dispatcher: timeout of one POST attempt (seconds); a timed-out attempt is retried.",
        10.0,
    )
    action_redis_timeout_s: float = _env(
        "FRAUDSTREAM_ACTION_REDIS_TIMEOUT_S",
        "Action service: Redis connect/command timeout (seconds); past it the answer is 503.",
        2.0,
    )
    labels_forward: bool = _env(
        "FRAUDSTREAM_LABELS_FORWARD",
        "Action service: forward analyst labels (release/confirm) from the Redis outbox to the "
        "Kafka topic `labels` (a task of the service; off: they wait in the outbox).",
        True,
    )
    action_alerts_per_card: int = _env(
        "FRAUDSTREAM_ACTION_ALERTS_PER_CARD",
        "Action service: newest alerts kept per card for GET /v1/cards/{card_id}.",
        100,
    )
    action_redis_max_connections: int = _env(
        "FRAUDSTREAM_ACTION_REDIS_MAX_CONNECTIONS",
        "Action service: Redis pool size for reads (GET routes, readyz); beyond it they wait.",
        64,
    )
    action_apply_connections: int = _env(
        "FRAUDSTREAM_ACTION_APPLY_CONNECTIONS",
        "Action service: dedicated Redis connections of the apply batcher (batches in flight).",
        2,
    )
    action_apply_max_batch: int = _env(
        "FRAUDSTREAM_ACTION_APPLY_MAX_BATCH",
        "Action service: most actions the apply batcher sends in one script call.",
        256,
    )
    redis_wait_replicas: int | None = _env(
        "FRAUDSTREAM_REDIS_WAIT_REPLICAS",
        "Action service: replicas that must acknowledge a write (Redis WAIT) before 201/200; "
        "fewer within the WAIT timeout answers 503. Unset: 1 on a redis+cluster:// URL, 0 "
        "(no WAIT) on a single node.",
        None,
    )
    redis_wait_timeout_ms: int = _env(
        "FRAUDSTREAM_REDIS_WAIT_TIMEOUT_MS",
        "Action service: how long WAIT waits for the replicas (ms); below the Redis timeout.",
        1000,
    )
    # --- live quality (app.quality) ---------------------------------------------------------
    quality_port: int = _env(
        "FRAUDSTREAM_QUALITY_PORT",
        "`fraudstream quality`: port of its /metrics (precision and recall by day and label "
        "maturity); `watch` reads it there.",
        8090,
    )
    quality_days: int = _env(
        "FRAUDSTREAM_QUALITY_DAYS",
        "`fraudstream quality`: days of event time it keeps transactions for (older ones are "
        "forgotten; 0 keeps all).",
        35,
    )
    quality_interval_s: float = _env(
        "FRAUDSTREAM_QUALITY_INTERVAL_S",
        "`fraudstream quality`: seconds between recomputations of the figures.",
        2.0,
    )

    @property
    def isolation_level(self) -> str:
        """What every consumer of the pipeline's topics reads: committed data only in
        exactly_once (aborted and still-open transactions' records are never seen)."""
        return "read_committed" if self.processing == "exactly_once" else "read_uncommitted"

    @property
    def profile(self) -> StackProfile:
        """The local stack's layout (single when FRAUDSTREAM_STACK_PROFILE is unset here)."""
        return self.stack_profile or "single"

    @property
    def replication(self) -> int:
        """Replication factor of every topic the pipeline creates (its own and Faust's)."""
        if self.topic_replication is not None:
            return self.topic_replication
        return KAFKA_CLUSTER_NODES if self.profile == "cluster" else 1

    @property
    def kafka_cluster_ports(self) -> tuple[tuple[int, int], ...]:
        """(broker port, controller port) of each cluster-profile Kafka node, node 1 first."""
        base = self.kafka_cluster_port
        return tuple((base + 2 * i, base + 2 * i + 1) for i in range(KAFKA_CLUSTER_NODES))

    @property
    def local_kafka_bootstrap(self) -> str:
        """Bootstrap address(es) of the locally managed broker(s): every node on the cluster."""
        if self.profile == "cluster":
            return ",".join(f"127.0.0.1:{broker}" for broker, _ in self.kafka_cluster_ports)
        return f"127.0.0.1:{self.kafka_port}"

    @property
    def local_redis_url(self) -> str:
        """URL of the locally managed Redis (a cluster seed URL on the cluster profile)."""
        if self.profile == "cluster":
            return f"redis+cluster://127.0.0.1:{self.redis_cluster_port}"
        return f"redis://127.0.0.1:{self.redis_port}/0"

    @property
    def effective_kafka_bootstrap(self) -> str:
        """The external cluster when KAFKA_BOOTSTRAP is set, else the local broker."""
        return self.kafka_bootstrap or self.local_kafka_bootstrap

    @property
    def effective_redis_url(self) -> str:
        """The external Redis when REDIS_URL is set, else the local one."""
        return self.redis_url or self.local_redis_url

    @property
    def effective_redis_wait_replicas(self) -> int:
        """Replicas WAIT asks for: the setting, else 1 on a cluster URL and 0 on a node."""
        if self.redis_wait_replicas is not None:
            return self.redis_wait_replicas
        from app.redis_url import is_cluster_url

        return 1 if is_cluster_url(self.effective_redis_url) else 0

    def topic(self, name: str) -> str:
        """Full topic name for a logical topic (see app.kafka.topics)."""
        return f"{self.topic_prefix}{name}"

    def replace(self, **changes: Any) -> Settings:
        """A copy with some fields changed (tests, CLI overrides)."""
        return dataclasses.replace(self, **changes)


_LITERALS: dict[str, Any] = {"StoreKind": StoreKind, "AppendFsync": AppendFsync,
                             "ScorerDevice": ScorerDevice,
                             "KafkaSecurityProtocol": KafkaSecurityProtocol,
                             "KafkaSaslMechanism": KafkaSaslMechanism,
                             "StackProfile": StackProfile, "Processing": Processing}


def _coerce(raw: str, f: dataclasses.Field[Any]) -> Any:
    """Parse one variable by its field's annotation (annotations are strings here)."""
    name = f.metadata["env"]
    text = str(f.type).replace(" | None", "")
    try:
        if text == "Path":
            return Path(raw).expanduser()
        if text == "int":
            return int(raw)
        if text == "float":
            return float(raw)
        if text == "bool":
            if raw.lower() not in ("1", "0", "true", "false", "yes", "no"):
                raise ValueError("must be true or false")
            return raw.lower() in ("1", "true", "yes")
        if text in _LITERALS:
            allowed = get_args(_LITERALS[text])
            if raw not in allowed:
                raise ValueError(f"must be one of {', '.join(allowed)}")
        return raw
    except ValueError as exc:
        raise SettingsError(f"environment variable {name}={raw!r}: {exc}") from None


def load_settings(environ: Mapping[str, str] | None = None, **overrides: Any) -> Settings:
    """Build Settings from `environ` (default: os.environ), then apply keyword overrides."""
    env = os.environ if environ is None else environ
    values: dict[str, Any] = {}
    for f in dataclasses.fields(Settings):
        raw = env.get(f.metadata["env"])
        if raw is not None and raw != "":
            values[f.name] = _coerce(raw, f)
    values.update({k: v for k, v in overrides.items() if v is not None})
    return Settings(**values)


def describe_settings() -> list[tuple[str, str, str]]:
    """(variable, default, doc) for every setting: used by `--help` and the README."""
    rows = []
    for f in dataclasses.fields(Settings):
        default = f.default
        shown = "" if default is None else str(default)
        rows.append((f.metadata["env"], shown, f.metadata["doc"]))
    return rows


def settings_environ(settings: Settings, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """An environment (base: os.environ) under which a child process loads exactly `settings`."""
    env = dict(os.environ if base is None else base)
    for f in dataclasses.fields(Settings):
        value = getattr(settings, f.name)
        if value is None:
            env.pop(f.metadata["env"], None)
        else:
            env[f.metadata["env"]] = str(value)
    return env
