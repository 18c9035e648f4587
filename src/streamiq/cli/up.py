"""``streamiq up``: broker, ingest, pipeline and nodes as supervised child processes.

Children's output is relayed with a ``[part]`` prefix and each part is announced when
ready. A part that exits or is killed is restarted with backoff (1 s doubling to a cap
of 30 s, back to 1 s once it has stayed ready for 60 s: Kubernetes' CrashLoopBackOff)
while the others keep running; one line says why and when (and, from the third exit in
a row, that it is crash-looping), another when it is ready again. A crash-looping part
is retried for as long as ``up`` runs: it never stops the others. ``streamiq status``
shows each part's restarts from ``up.json``, which ``up`` keeps beside the state
directory (cli/supervisor.py); so does the dashboard of every node, which up tells where
the file is (``STREAMIQ_UP_STATE``). A restarted part resumes from its own checkpoint (a node
from its RocksDB stores, the pipeline from its Spark checkpoints). The embedded broker
(Apache Kafka, its log on disk under ``--broker-dir``) is started first and restarted on
its log when it dies; the other parts reconnect to it by themselves, and only a broker
that cannot be started again stops everything (``up`` then exits 1). Nothing is wiped at
start: a second ``up`` resumes every view, store and checkpoint (``--fresh`` starts from
a clean slate). Ctrl-C or SIGTERM, sent to ``up`` alone or to its whole process group,
stops every part (nodes first, broker last; a part still running 30 s later is killed)
and ``up`` exits 0. With authentication on, the demo token (24 h, renewed by ``up``) is
printed with "all parts ready" and saved with the JWT secret beside the state directory
(cli/tokens.py). Preconditions (Java, free ports, the app) are checked first so a bad start
fails with one clear line; what the parts need beyond pip (Kafka's jars, Spark's connector)
is installed then when missing (``streamiq install``).
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import sys
import time
from pathlib import Path

from pydantic import SecretStr

from streamiq._signals import stop_on_signals
from streamiq.cli.readybar import ReadyBar
from streamiq.cli.supervisor import (
    OUT,
    Part,
    RestartPolicy,
    Supervisor,
    http_ok,
    keep_output,
    saw_ready_line,
    say,
    write_state,
)
from streamiq.cli.tokens import DemoToken, write_private
from streamiq.config import WILDCARD_HOSTS, Settings, token_file
from streamiq.kafka.broker import BrokerError, EmbeddedBroker, port_in_use

__all__ = ["run_broker", "run_up"]


def _fail(msg: str) -> None:
    print(f"streamiq: error: {msg}", file=sys.stderr, flush=True)
    raise SystemExit(2)


def _common(s: Settings) -> list[str]:
    argv = ["--bootstrap-servers", s.bootstrap_servers, "--cluster", s.cluster,
            "--topic-prefix", s.topic_prefix,
            "--app", s.app, "--partitions", str(s.partitions), "--log-level", s.log_level,
            "--log-format", _log_format(s)] + ([] if s.metrics else ["--no-metrics"])
    if s.views_module:
        argv += ["--views-module", s.views_module]
    if s.kafka_config:
        import json
        argv += ["--kafka-config", json.dumps(s.kafka_config)]
    return argv


def _log_format(s: Settings) -> str:
    """The children's stderr is a pipe to up, relayed to up's stdout: they log as that
    is read (text on a terminal, JSON lines otherwise), unless told."""
    if s.log_format != "auto":
        return s.log_format
    return "text" if sys.stdout.isatty() else "json"


def _parts(s: Settings, nodes: int, node_port: int, sql_port: int = 0) -> list[Part]:
    """The parts up runs; node i listens on ``node_port + i`` (and SQL on ``sql_port + i``,
    unless 0)."""
    py = [sys.executable, "-m", "streamiq"]
    ingest = f"http://{s.ingest_host}:{s.ingest_port}"
    out = [Part("ingest", [*py, "ingest", *_common(s), "--ingest-host", s.ingest_host,
                           "--ingest-port", str(s.ingest_port)],
                ingest, http_ok(f"{ingest}/health")),
           Part("pipeline", [*py, "pipeline", *_common(s), "--master", s.master,
                             "--checkpoint-dir", str(s.checkpoint_dir),
                             "--trigger", s.trigger,
                             "--realtime-batch-s", str(s.realtime_batch_s),
                             "--trigger-ms", str(s.trigger_ms),
                             "--spark-config", json.dumps(s.spark_config),
                             "--warmup" if s.warmup else "--no-warmup",
                             "--metrics-host", s.metrics_host,
                             "--metrics-port", str(s.metrics_port)],
                f"Spark {s.master}", saw_ready_line)]
    for i in range(nodes):
        port = node_port + i
        # one machine: a node bound to every interface is reached on loopback
        reach = "127.0.0.1" if s.host in WILDCARD_HOSTS else s.host
        url = f"http://{reach}:{port}"
        argv = [*py, "node", *_common(s), "--host", s.host, "--port", str(port),
                "--advertised", f"{reach}:{port}",
                "--state-dir", str(s.state_dir), "--standby-replicas", str(s.standby_replicas),
                "--max-lag", str(s.max_lag), "--store", s.store,
                "--store-memory-mb", str(s.store_memory_mb)] + (
                    ["--redirect"] if s.redirect else []) + (
                    ["--sql-port", str(sql_port + i)] if sql_port else [])
        out.append(Part(f"node:{port}", argv, url, http_ok(f"{url}/health")))
    for part in out:
        part.policy = RestartPolicy(max_delay=s.restart_max_s)
    return out


def _all_ready_line(s: Settings, topics: tuple[str, ...], nodes: int, node_port: int) -> str:
    from streamiq.views import bank, orders

    ingest = f"http://{s.ingest_host}:{s.ingest_port}"
    posts = ([f"{ingest}/account/{{id}}?amount=N"] if bank.TOPIC in topics else []) + \
            ([f"{ingest}/orders"] if orders.TOPIC in topics else [])
    first = f"POST {' or '.join(posts)}" if posts else f"ingest at {ingest}"
    last = node_port + nodes - 1
    ports = f"{node_port}-{last}" if nodes > 1 else str(node_port)
    return (f"all parts ready: {first}, then GET any node ({s.host}:{ports}); "
            f"queries at http://{s.host}:{node_port}/docs")


def _check(s: Settings, nodes: int, node_port: int, embedded: bool, sql_port: int = 0
           ) -> tuple[str, ...]:
    """Fail with one line unless Java, the app and every port are there; the app's topics."""
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        _fail("Java was not found (PySpark needs Java 17): install it or set JAVA_HOME")
    from streamiq.views.base import load_app

    try:
        topics = load_app(s.app, s.views_module).topics
    except (ImportError, ValueError) as exc:
        _fail(f"--app/--views-module: {exc}")
    ports = [(s.ingest_host, s.ingest_port, "--ingest-port")]
    ports += [(s.host, node_port + i, "--node-port") for i in range(nodes)]
    ports += [(s.host, sql_port + i, "--sql-port") for i in range(nodes) if sql_port]
    if embedded:
        ports.append((s.broker_host, s.broker_port, "--broker-port"))
    for host, port, flag in ports:
        if port_in_use(host, port):
            _fail(f"port {host}:{port} is already in use (choose another with {flag})")
    return topics


def run_up(settings: Settings, nodes: int = 3, node_port: int = 9001,
           sql_port: int = 5433, fresh: bool = False) -> None:
    embedded = "bootstrap_servers" not in settings.model_fields_set
    topics = _check(settings, nodes, node_port, embedded, sql_port)
    _install(embedded)
    if fresh:
        _clean_slate(settings, embedded)
    # Before any child exists: Ctrl-C from here on stops cleanly, never a traceback;
    # whoever reads up's output may leave, and up runs on
    stopping = stop_on_signals()
    keep_output()
    broker = None
    if embedded:
        broker = _embedded_broker(settings)
        try:
            broker.start()
        except BrokerError as exc:
            _fail(str(exc))
        settings = settings.model_copy(update={"bootstrap_servers": broker.bootstrap_servers})
        say(f"embedded Apache Kafka broker ready on {broker.bootstrap_servers} "
            f"(log in {settings.broker_dir})")
        if broker.formatted:
            _stale_state(settings)
    else:
        say(f"using Kafka at {settings.bootstrap_servers}")
    Path(settings.state_dir).mkdir(parents=True, exist_ok=True)
    demo = _share_secrets(settings)
    ready_line = _all_ready_line(settings, topics, nodes, node_port)
    state = token_file(settings).with_name("up.json").resolve()
    # where the nodes' dashboards read the parts' state (serving/http/dashboard/upstate.py ENV;
    # named here, not imported: the CLI does not load the web stack)
    os.environ["STREAMIQ_UP_STATE"] = str(state)
    sup = Supervisor(_parts(settings, nodes, node_port, sql_port), broker,
                     announce=lambda: [f"streamiq: {ready_line}", *_token_lines(demo),
                                       *_psql_lines(settings, demo, nodes, sql_port)],
                     changed=lambda parts, now: write_state(state, parts, now))
    code = 0
    try:
        if not stopping.is_set():
            with ReadyBar(sup.parts, OUT) as bar:
                def tick(parts: list[Part]) -> None:
                    bar.tick(parts)
                    _renew(demo, shown=sup.announced)
                code = sup.run(stopping, tick=tick)
    finally:
        say("stopping")
        sup.stop()
        for gone in (state, state.with_suffix(".prom")):
            gone.unlink(missing_ok=True)
        say("stopped")
    raise SystemExit(code)


def _install(embedded: bool) -> None:
    """What the parts need beyond pip (``streamiq install``), resolved now when missing,
    so a pip-installed streamiq comes up in an empty folder; one line if it cannot be."""
    from streamiq.cli.install import ensure_installed
    from streamiq.kafka.jars import JarsError

    try:
        ensure_installed(say, broker=embedded)
    except JarsError as exc:
        _fail(str(exc))


def _share_secrets(s: Settings) -> DemoToken | None:
    """The nodes sign their heartbeats and hops with one cluster secret, and check client
    tokens with one JWT secret: the ones given, or new ones per run. Handed down in the
    environment (never on a command line, where ps shows it). Both are saved (0600)
    beside the state directory: the JWT secret for ``streamiq token``, the cluster
    secret for a node added by hand (docs/quickstart.md); and a demo token issued
    (printed once all parts are ready)."""
    def given_or_new(secret: SecretStr | None) -> str:
        return secret.get_secret_value() if secret is not None else secrets.token_urlsafe(32)

    cluster_secret = given_or_new(s.cluster_secret)
    os.environ["STREAMIQ_CLUSTER_SECRET"] = cluster_secret
    os.environ["STREAMIQ_AUTH"] = "true" if s.auth else "false"
    try:
        write_private(token_file(s).with_name("cluster-secret"), cluster_secret + "\n")
    except OSError as exc:
        _fail(f"cannot save the cluster secret beside --state-dir: {exc}")
    if not s.auth:
        say("authentication is off (--no-auth): anyone who reaches a node reads every view")
        return None
    jwt_secret = given_or_new(s.jwt_secret)
    os.environ["STREAMIQ_JWT_SECRET"] = jwt_secret
    if s.api_keys:
        os.environ["STREAMIQ_API_KEYS"] = json.dumps(s.api_keys)
    demo = DemoToken(jwt_secret, token_file(s))
    try:
        write_private(token_file(s).with_name("jwt-secret"), jwt_secret + "\n")
        demo.issue()
    except OSError as exc:
        _fail(f"cannot save the demo token and its secret beside --state-dir: {exc}")
    return demo


def _renew(demo: DemoToken | None, shown: bool) -> None:
    """A new demo token once two thirds of the old one's life have passed, saved where
    the CLI reads it; printed when the first one was (``shown``)."""
    if demo is None or not demo.due():
        return
    before = demo.expires_at
    try:
        demo.issue()  # the new token and its expiry are taken before the file is written
    except OSError as exc:  # not due again for a while: one line, the parts keep running
        say(f"could not save the renewed demo token in {demo.path}: {exc}")
        return
    if shown:
        with OUT:
            print("\n".join(_token_lines(demo, before)), flush=True)


def _token_lines(demo: DemoToken | None, renewed: float | None = None) -> list[str]:
    """The demo token's lines: what it may do, where it is saved, the export line
    (``renewed``: when the one it replaces expires)."""
    if demo is None:
        return []
    hours = f"{demo.ttl_s / 3600:g} h"
    head = (f"streamiq: demo token renewed (valid {hours}; saved in {demo.path}; the one "
            f"before expires at {time.strftime('%H:%M:%S', time.localtime(renewed))}):"
            if renewed is not None else
            f"streamiq: demo token (reads every view, writes through ingest; valid {hours}, "
            f"renewed by up; saved in {demo.path}, where streamiq status/query/load find it; "
            f"'streamiq token --scope views:NAME --ttl 1h' mints others):")
    return [head, f"  export STREAMIQ_TOKEN={demo.token}"]


def _psql_lines(s: Settings, demo: DemoToken | None, nodes: int, sql_port: int) -> list[str]:
    """How to reach the nodes with psql (the demo token as the password)."""
    if not sql_port:
        return []
    reach = "127.0.0.1" if s.host in WILDCARD_HOSTS else s.host
    last = f"-{sql_port + nodes - 1}" if nodes > 1 else ""
    password = demo.token if demo is not None else "any"  # --no-auth: any password
    return [f"streamiq: SQL on every node (ports {sql_port}{last}, PostgreSQL wire):",
            f'  psql "host={reach} port={sql_port} dbname=streamiq user=demo '
            f'password={password}"']


def _embedded_broker(s: Settings) -> EmbeddedBroker:
    return EmbeddedBroker(s.broker_host, s.broker_port, s.broker_dir, heap_mb=s.broker_heap_mb)


def _stale_state(s: Settings) -> None:
    """The broker's log was just made: node stores and Spark checkpoints left in the
    folders describe another log (one removed by hand, or an earlier version's), whose
    offsets would be taken for this one's."""
    for d in (Path(s.state_dir), Path(s.checkpoint_dir)):
        if d.exists() and any(d.iterdir()):
            say(f"the broker's log is new: removing {d}, state of an earlier log")
            shutil.rmtree(d)


def _clean_slate(s: Settings, embedded: bool) -> None:
    """``--fresh``: the broker's log, node stores and checkpoints go. Only with the
    embedded broker: beside an external Kafka's topics, fresh checkpoints would read
    every input again into changelogs that already hold it."""
    if not embedded:
        _fail("--fresh removes the embedded broker's log with the local state; with "
              "--bootstrap-servers, delete the topics and the local state yourself")
    for d in (Path(s.broker_dir), Path(s.state_dir), Path(s.checkpoint_dir)):
        if d.exists():
            say(f"--fresh: removing {d}")
            shutil.rmtree(d)


def run_broker(settings: Settings, install: bool = False) -> None:
    """Run the embedded broker in the foreground until Ctrl-C or SIGTERM (``install``:
    resolve its jars, make its class-data archive and exit)."""
    if install:
        from streamiq.kafka.install import install as install_broker
        from streamiq.kafka.jars import JarsError

        try:
            libs, jsa = install_broker()  # the archive: a faster start for every broker after
        except JarsError as exc:
            _fail(str(exc))
        print(f"streamiq: Apache Kafka's jars are in {libs}", flush=True)
        print(f"streamiq: the broker's class-data archive is {jsa}" if jsa else
              "streamiq: no class-data archive for the broker (it starts without one)",
              flush=True)
        return
    stop = stop_on_signals()
    try:
        broker = _embedded_broker(settings).start()
    except BrokerError as exc:
        _fail(str(exc))
    print(f"streamiq broker listening on {broker.bootstrap_servers} "
          f"(log in {settings.broker_dir})", flush=True)
    try:
        while not stop.wait(0.5):
            if broker.proc is None or broker.proc.poll() is not None:
                _fail("embedded broker exited")
    finally:
        broker.stop()
