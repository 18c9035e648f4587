"""The one typed configuration object.

Every setting is a keyword argument, a CLI flag and an environment variable
``STREAMIQ_<NAME>`` (upper case), e.g. ``STREAMIQ_BOOTSTRAP_SERVERS``. Raw Kafka
client settings pass through ``kafka_config`` (env ``STREAMIQ_KAFKA_CONFIG`` as JSON)
so SASL/SSL and tuning knobs reach librdkafka untouched; secrets are ``SecretStr``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from streamiq.defaults import DEFAULT_CLUSTER, DEFAULT_PARTITIONS
from streamiq.state.base import DEFAULT_MEMORY_MB, StoreKind

__all__ = ["WILDCARD_HOSTS", "Settings", "token_file"]

#: listen hosts that bind every interface: never an address to advertise to peers
WILDCARD_HOSTS = frozenset({"0.0.0.0", "::", "[::]", ""})


class Settings(BaseSettings):
    """streamiq settings. Construct with keyword arguments or from the environment."""

    model_config = SettingsConfigDict(
        env_prefix="STREAMIQ_", extra="forbid", frozen=True, populate_by_name=True
    )

    # --- Kafka ---
    bootstrap_servers: str = Field(
        "127.0.0.1:9092", description="Kafka bootstrap servers (host:port[,host:port])."
    )
    kafka_config: dict[str, str] = Field(
        default_factory=dict,
        description="Raw librdkafka settings passed to every client (e.g. security.protocol).",
    )
    kafka_password: SecretStr | None = Field(
        None, description="SASL password; sent as sasl.password when set."
    )
    cluster: str = Field(DEFAULT_CLUSTER, pattern=r"^[A-Za-z0-9._-]{1,100}$",
                         description="Cluster name: scopes membership (node discovery).")
    topic_prefix: str = Field("", pattern=r"^[A-Za-z0-9._-]{0,100}$",
                              description="Prefix of every topic streamiq reads or writes.")
    app: str = Field("bank,orders",
                     description="Built-in app(s) to run: bank, orders or bank,orders. "
                                 "A node given neither this nor --views-module serves "
                                 "the views on the cluster's catalog only.")
    views_module: str | None = Field(
        None, description="Python module defining APP, a streamiq.App (overrides --app); "
                          "it may also declare query types of its own (docs/http-api.md).")
    partitions: int = Field(DEFAULT_PARTITIONS, ge=1, le=1024,
                            description="Partitions of created topics.")

    log_level: str = Field("info", pattern="^(debug|info|warning|error)$",
                           description="Log level of every part (debug, info, warning, error).")
    log_format: str = Field(
        "auto", pattern="^(auto|json|text)$",
        description="Log lines as JSON objects or text; auto: text on a terminal, else JSON.")
    metrics: bool = Field(True, description="Prometheus metrics at /metrics (nodes, ingest) "
                          "and on --metrics-port (pipeline); off: nothing recorded.")

    # --- embedded broker ---
    broker_host: str = Field("127.0.0.1", description="Embedded broker listen host.")
    broker_port: int = Field(9092, ge=1, le=65535, description="Embedded broker listen port.")
    broker_dir: Path = Field(Path(".streamiq/kafka"),
                             description="Embedded broker's log (Apache Kafka, KRaft): kept "
                                         "across restarts; removed by up --fresh.")
    broker_heap_mb: int = Field(384, ge=128, le=65_536,
                                description="Embedded broker's JVM heap (-Xmx), in MB.")
    restart_max_s: float = Field(
        30.0, ge=1, le=3600, description="streamiq up: the longest wait before restarting a "
                                         "part that exited (1 s, doubling up to this).")

    # --- ingest ---
    ingest_host: str = Field("127.0.0.1", description="Ingest HTTP listen host.")
    ingest_port: int = Field(8080, ge=1, le=65535, description="Ingest HTTP listen port.")
    request_read_timeout_s: float = Field(
        20.0, gt=0, le=3600,
        description="A client must send a whole HTTP request (line, headers, body) within "
                    "this many seconds of starting it (or of connecting), else it is answered "
                    "408 and closed (nodes, ingest): slow or stalled clients hold nothing.")

    # --- serving node ---
    host: str = Field("127.0.0.1", description="Node HTTP listen host.")
    port: int = Field(9001, ge=1, le=65535, description="Node HTTP listen port.")
    advertised: str | None = Field(
        None, description="host:port peers use to reach this node (default host:port)."
    )
    state_dir: Path = Field(Path(".streamiq/state"), description="Local RocksDB state root.")
    store: StoreKind = Field(
        "rocksdb", description="Where a node keeps its views' rows: rocksdb (on disk under "
        "--state-dir, kept across restarts) or memory (in the process: lost when the node "
        "stops, so it restores every partition from the changelog when it starts).")
    store_memory_mb: int = Field(
        DEFAULT_MEMORY_MB, ge=16, le=1 << 20, description="Memory each view's RocksDB store "
        "may take on a node, in MiB: three quarters its block cache (data blocks, and the "
        "index and bloom filter blocks: 10M keys' filters take about 12 MB), a quarter its "
        "write buffers; shared by the partitions it holds. A node's budget is this times "
        "its views.")
    peer_copy: bool = Field(
        True, description="A partition a node must restore and never held (a new node, a "
        "wiped disk, a new standby) is first copied from a peer that holds it, when its "
        "changelog holds 50,000 records or more; off: always replayed from the changelog.")
    restore_processes: bool = Field(
        True, description="A partition a node must restore and never held, whose changelog "
        "holds 50,000 records or more and that no peer copied, is replayed from its "
        "changelog by a process of its own (one per core and one more at once, at most 8; "
        "each takes up to half --store-memory-mb while it runs) and taken in whole; off: "
        "by the node's own thread, one partition after another.")
    standby_replicas: int = Field(
        1, ge=0, le=8, description="Warm standby copies of each partition (when 2+ nodes)."
    )
    heartbeat_ms: int = Field(250, ge=20, le=10_000, description="Membership heartbeat period.")
    member_timeout_ms: int = Field(
        1500, ge=100, le=120_000, description="A member silent this long is considered dead."
    )
    membership_period_s: float = Field(
        60.0, ge=1, le=86_400,
        description="Heartbeats go to a new membership topic every period, old ones are "
                    "deleted (same on every node; node clocks within a period).",
    )
    max_view_partitions: int = Field(
        256, ge=1, le=100_000, description="A view described on the catalog with more "
        "partitions than this is refused (never served, counted): heartbeats stay bounded.")
    max_views: int = Field(
        64, ge=1, le=10_000, description="Views a node serves from the catalog at most; "
        "descriptions of more are refused and counted.")
    max_lag: int = Field(
        10_000, ge=0, description="Default max changelog lag (records) a standby may answer with."
    )
    wait_timeout_ms: int = Field(
        5_000, ge=0, le=120_000, description="Default bound for read-your-writes waits."
    )
    max_waiters: int = Field(
        1_000, ge=1, le=100_000, description="Queries a node holds waiting for a position "
        "at once; more are refused (503 OVERLOADED) rather than slowing every answer."
    )
    changes_buffer: int = Field(
        1_000, ge=1, le=1_000_000, description="Changes a live subscription holds for a "
        "reader that has not taken them; past it the newest value per key is sent, marked "
        "coalesced.")
    changes_keepalive_s: float = Field(
        15.0, ge=0.05, le=3_600, description="A live subscription with nothing to send "
        "sends a ': keepalive' comment this often.")
    changes_max_subscriptions: int = Field(
        10_000, ge=1, le=1_000_000, description="Live subscriptions a node serves its "
        "clients at once; more are refused (429 TOO_MANY_SUBSCRIPTIONS).")
    changes_max_per_token: int = Field(
        1_000, ge=1, le=1_000_000, description="Live subscriptions one token holds on a "
        "node at once (with --auth); more are refused (429 TOO_MANY_SUBSCRIPTIONS).")
    changes_replay_max: int = Field(
        100_000, ge=0, le=100_000_000, description="A subscription resumed this many "
        "changelog records or fewer behind is replayed from Kafka exactly; further behind "
        "it restarts with a reset and the current values.")
    internal_concurrency: int = Field(
        64, ge=1, le=10_000, description="Concurrent internal (forwarded) requests per node."
    )
    snapshot_send_mb_s: float = Field(
        200.0, gt=0, le=100_000, description="Megabytes a second a node sends a partition's "
        "snapshot to a peer copying it, at most (its network and disk for queries first).")
    redirect: bool = Field(False, description="Answer 307 to the owner instead of proxying.")
    sql_port: int = Field(
        0, ge=0, le=65535, description="A node's SQL (PostgreSQL wire) port, on --host; the "
        "password is a client token (0: no SQL). 'streamiq up' gives its nodes 5433 and up.")
    sql_max_connections: int = Field(
        64, ge=1, le=10_000, description="Authenticated SQL sessions a node holds at once; "
        "more are refused (SQLSTATE 53300). Connections still authenticating have their own "
        "bound (--sql-max-startups) and never take one of these.")
    sql_max_per_address: int = Field(
        16, ge=1, le=10_000, description="Authenticated SQL sessions from one client address "
        "at once; more are refused (SQLSTATE 53300).")
    sql_max_startups: int = Field(
        1024, ge=2, le=100_000, description="SQL connections still authenticating at once (a "
        "quarter of them from one address; a few KiB and one open file each). Past either "
        "bound the oldest that has not answered its password request is closed (SQLSTATE "
        "53300) to make room, never one that has: a client answering promptly gets in "
        "through a flood of unfinished startups, even from its own address.")
    sql_startup_timeout_s: float = Field(
        10.0, gt=0, le=600, description="A SQL connection must authenticate within this many "
        "seconds of connecting, else it is closed.")
    sql_idle_timeout_s: float = Field(
        900.0, ge=0, le=86_400, description="A SQL session that runs no statement for this "
        "many seconds is closed (SQLSTATE 57P05; 0: never).")
    sql_max_rows: int = Field(
        10_000, ge=1, description="Rows a SQL statement may return (more: SQLSTATE 54000).")
    sql_max_gather: int = Field(
        100_000, ge=1, description="Rows a SQL statement may gather from the owners for its "
        "final step (joins, ORDER BY...; more: SQLSTATE 54000).")
    sql_statement_timeout_s: float = Field(
        30.0, gt=0, le=86_400, description="A SQL statement running longer, its wait for a "
        "SQL worker included, is cancelled (SQLSTATE 57014); a session's SET "
        "statement_timeout may lower it.")
    sql_max_statement_bytes: int = Field(
        1 << 20, ge=1024, le=256 << 20, description="A SQL statement (or any message) longer "
        "than this is refused before it is parsed (SQLSTATE 54000) and its connection closed.")
    sql_max_in_list: int = Field(
        10_000, ge=1, le=1_000_000, description="Values one IN (...) list may hold, counted "
        "before the statement is parsed (more: SQLSTATE 54000).")
    sql_workers: int = Field(
        2, ge=1, le=64, description="Processes that parse, plan and run DuckDB for a node's "
        "SQL, at most (one runs always, more while statements wait): SQL never runs on the "
        "node's own threads. One is kept for parsing and planning while the others run "
        "statements; a statement running past 0.1 s is lowered to nice 10.")
    sql_max_queued: int = Field(
        32, ge=0, le=10_000, description="SQL statements waiting for a worker at once; more "
        "are refused (SQLSTATE 53300).")
    sql_memory_mb: int = Field(
        512, ge=64, le=1 << 20, description="Memory of a node's SQL workers together; each "
        "statement may use its worker's share (--sql-memory-mb / --sql-workers), past which "
        "it is stopped (SQLSTATE 54000) and the worker replaced.")
    sql_spill_mb: int = Field(
        256, ge=0, le=1 << 20, description="Disk a node's SQL workers may spill to together "
        "(DuckDB's sorts and joins past their memory), in <state-dir>/<node>/.sql-spill, "
        "emptied at start; past a worker's share a statement is refused (SQLSTATE 54000).")
    cluster_secret: SecretStr | None = Field(
        None, description="Secret shared by a cluster's nodes: heartbeats are signed with "
        "it (HMAC-SHA256) and unsigned or forged ones ignored. Unset: membership is not "
        "authenticated (a warning says so). 'streamiq up' makes one for its nodes.")

    # --- security ---
    auth: bool = Field(
        True, description="Require a client token (Authorization: Bearer) on every endpoint "
        "but /health; needs --jwt-secret or --api-keys, and --cluster-secret on nodes. "
        "'streamiq up' makes a secret and prints a demo token.")
    jwt_secret: SecretStr | None = Field(
        None, description="Secret of the HS256 JWTs clients send; a token's scope claim "
        "lists views:NAME, views:* and ingest (no claim: read every view).")
    api_keys: dict[str, str] = Field(
        default_factory=dict, repr=False,
        description='Static API keys and their scopes, as JSON: {"KEY": "views:* ingest"}.')

    tls_cert_file: Path | None = Field(
        None, description="PEM certificate (chain): serve HTTPS, and call peers over TLS.")
    tls_key_file: Path | None = Field(None, description="PEM private key of --tls-cert-file.")
    tls_ca_file: Path | None = Field(
        None, description="PEM CA bundle peers' certificates are verified with (default: "
        "the system's).")

    # --- pipeline ---
    master: str = Field("local[*]", description="Spark master URL.")
    checkpoint_dir: Path = Field(
        Path(".streamiq/checkpoints"), description="Spark streaming checkpoint root."
    )
    trigger: str = Field(
        "real-time", pattern="^(real-time|micro-batch)$",
        description="How the views' queries run: real-time (each record goes through as it "
        "arrives: milliseconds; every task holds a slot) or micro-batch.")
    realtime_batch_s: int = Field(
        300, ge=5, le=86400,
        description="Real-time mode's batch length in seconds: at each batch's end Spark "
        "checkpoints (records then wait 0.3-2 s) and the changelog's markers are written, "
        "the bound on position waits of any read but the written key's.")
    trigger_ms: int = Field(0, ge=0, description="Micro-batch trigger interval (0 = asap).")
    max_offsets_per_trigger: int | None = Field(
        None, ge=1, description="Cap on input records per micro-batch."
    )
    spark_config: dict[str, str] = Field(
        default_factory=dict,
        description="Spark settings (JSON object) over the pipeline's own (pipeline/session.py).")
    warmup: bool = Field(
        True, description="Run every view's plan once on an example record, in its mode and "
        "through Spark's Kafka sink, before the pipeline says ready (pipeline/warmup.py), so "
        "the first write runs warm.")
    metrics_host: str = Field("127.0.0.1", description="The pipeline's metrics listen host.")
    metrics_port: int = Field(9400, ge=0, le=65535,
                              description="The pipeline's Prometheus metrics port (0: none).")

    @field_validator("bootstrap_servers")
    @classmethod
    def _check_servers(cls, v: str) -> str:
        for hp in v.split(","):
            host, sep, port = hp.strip().rpartition(":")
            if not sep or not host or not port.isdigit():
                raise ValueError(f"expected host:port[,host:port], got {v!r}")
        return v

    @field_validator("tls_cert_file", "tls_key_file", "tls_ca_file")
    @classmethod
    def _check_tls_file(cls, v: Path | None) -> Path | None:
        if v is not None and not Path(v).is_file():
            raise ValueError(f"no such file: {v}")
        return v

    @model_validator(mode="after")
    def _check_tls(self) -> Settings:
        if (self.tls_cert_file is None) != (self.tls_key_file is None):
            raise ValueError("--tls-cert-file and --tls-key-file go together")
        return self

    @field_validator("advertised")
    @classmethod
    def _check_advertised(cls, v: str | None) -> str | None:
        if v is not None:
            host, sep, port = v.rpartition(":")
            if not sep or not host or not port.isdigit():
                raise ValueError(f"expected host:port, got {v!r}")
        return v

    @property
    def endpoint(self) -> str:
        """The host:port other nodes use to reach this node."""
        return self.advertised or f"{self.host}:{self.port}"

    def check_auth(self, *, node: bool) -> None:
        """Refuse to serve with authentication on but nothing to check it with (a
        ``ValueError`` naming the flags)."""
        if not self.auth:
            return
        if self.jwt_secret is None and not self.api_keys:
            raise ValueError("--auth is on but neither --jwt-secret nor --api-keys is set: "
                             "give one (or --no-auth to serve without authentication)")
        if node and self.cluster_secret is None:
            raise ValueError("--auth is on but --cluster-secret is not set: the nodes of a "
                             "cluster share it (or --no-auth to serve without "
                             "authentication)")
        if any(not k or any(c.isspace() for c in k) for k in self.api_keys):
            raise ValueError("--api-keys: a key must be non-empty, without whitespace")

    def topic(self, name: str) -> str:
        """The real name of a streamiq topic (``topic_prefix`` + name)."""
        return self.topic_prefix + name

    def kafka(self, **overrides: Any) -> dict[str, Any]:
        """librdkafka configuration: bootstrap servers, passthrough, then overrides."""
        conf: dict[str, Any] = {"bootstrap.servers": self.bootstrap_servers}
        conf.update(self.kafka_config)
        if self.kafka_password is not None:
            conf["sasl.password"] = self.kafka_password.get_secret_value()
        conf.update(overrides)
        return conf


def token_file(s: Settings) -> Path:
    """Where ``streamiq up`` saves its demo token (next to the state directory) and the
    client commands look for one when neither --token nor STREAMIQ_TOKEN is given."""
    return Path(s.state_dir).parent / "token"
