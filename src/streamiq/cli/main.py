"""The streamiq command line.

``up`` runs everything; each part (broker, ingest, pipeline, node) also runs on its
own; ``status``, ``query`` and ``load`` talk to a running cluster, ``token`` mints a
token for a running ``up``. Every setting flag
mirrors a :class:`~streamiq.config.Settings` field and its env var
``STREAMIQ_<NAME>``; a flag given on the command line wins over the environment. The
help texts are plain text (no markup): argparse prints them as written.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

from pydantic import ValidationError

from streamiq.cli import load, query, status, tokens
from streamiq.cli.common import CliError
from streamiq.cli.configfile import ENV as CONFIG_ENV
from streamiq.cli.configfile import ConfigFileError, client_settings, file_settings
from streamiq.config import WILDCARD_HOSTS, Settings

__all__ = ["main"]

_KAFKA = ("bootstrap_servers", "kafka_config", "cluster", "topic_prefix", "app", "views_module",
          "partitions",
          "log_level", "log_format", "metrics")
_BROKER = ("broker_host", "broker_port", "broker_dir", "broker_heap_mb")
_AUTH = ("auth", "jwt_secret", "api_keys")
_TLS = ("tls_cert_file", "tls_key_file", "tls_ca_file")  # parts run on their own only
_INGEST = ("ingest_host", "ingest_port", *_AUTH)
_HTTP = ("request_read_timeout_s",)  # parts run on their own only, as _TLS
_SQL = ("sql_port", "sql_max_connections", "sql_max_per_address", "sql_max_startups",
        "sql_startup_timeout_s", "sql_idle_timeout_s", "sql_max_rows", "sql_max_gather",
        "sql_statement_timeout_s", "sql_max_statement_bytes", "sql_max_in_list", "sql_workers",
        "sql_max_queued", "sql_memory_mb", "sql_spill_mb")
_NODE = ("host", "port", "advertised", "state_dir", "store", "store_memory_mb", "peer_copy",
         "restore_processes", "standby_replicas", "heartbeat_ms",
         "member_timeout_ms", "membership_period_s", "max_view_partitions", "max_views",
         "max_lag", "wait_timeout_ms",
         "max_waiters", "changes_buffer", "changes_keepalive_s", "changes_replay_max",
         "changes_max_subscriptions", "changes_max_per_token",
         "internal_concurrency", "snapshot_send_mb_s", "redirect", "cluster_secret", *_AUTH,
         *_TLS, *_HTTP, *_SQL)
_PIPELINE = ("master", "checkpoint_dir", "trigger", "realtime_batch_s", "trigger_ms",
             "max_offsets_per_trigger",
             "metrics_host", "metrics_port", "spark_config", "warmup")

COMMANDS: dict[str, tuple[str, tuple[str, ...]]] = {
    "up": ("run and supervise broker (unless --bootstrap-servers is given), ingest, "
           "pipeline and 3 nodes, restarting a part that dies",
           _KAFKA + _BROKER + _INGEST + _PIPELINE
           + ("host", "state_dir", "standby_replicas", "max_lag", "redirect",
              "cluster_secret", "restart_max_s", "store", "store_memory_mb")),
    "broker": ("run the embedded Apache Kafka broker (KRaft, one node; --install resolves "
               "its jars)", _BROKER),
    "install": ("resolve what the parts need beyond pip (Apache Kafka's jars, Spark's Kafka "
                "connector; Java and network once, no Maven), then exit; up does it when "
                "something is missing", ()),
    "ingest": ("run the ingest HTTP service", _KAFKA + _INGEST + _TLS + _HTTP),
    "pipeline": ("run the PySpark pipeline", _KAFKA + _PIPELINE),
    "node": ("run one serving node", _KAFKA + _NODE),
}


#: commands that talk to a running cluster: module with add_parser(sub) and run(args)
CLIENTS: dict[str, ModuleType] = {"status": status, "query": query, "load": load,
                                  "token": tokens}

DESCRIPTION = ("streamiq: queryable state for PySpark Structured Streaming. 'streamiq up' "
               "runs the whole demo (broker, ingest, pipeline, 3 nodes); each part also runs "
               "on its own; status, query and load talk to a running cluster; token mints a token "
               "for it.")
EPILOG = ("Every setting flag also reads its environment variable STREAMIQ_<NAME> (shown "
          "in each command's help); a flag given on the command line wins. "
          "'streamiq COMMAND --help' lists a command's flags.")


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _shown(default: Any) -> str:
    """A default as a person would type it: no Python reprs."""
    if default is None:
        return "unset"
    if isinstance(default, bool):
        return "on" if default else "off"
    if isinstance(default, dict):
        return json.dumps(default)
    if isinstance(default, Path):
        return str(default)
    return str(default) if default != "" else "empty"


def _add_fields(p: argparse.ArgumentParser, fields: Sequence[str]) -> None:
    for name in fields:
        info = Settings.model_fields[name]
        env = f"STREAMIQ_{name.upper()}"
        default = _shown(info.get_default(call_default_factory=True))
        help_ = f"{info.description} [env {env}; default {default}]"
        if info.annotation is bool:
            p.add_argument(_flag(name), dest=name, action=argparse.BooleanOptionalAction,
                           default=None, help=help_)
        else:
            p.add_argument(_flag(name), dest=name, default=None, metavar=name.upper(), help=help_)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="streamiq", description=DESCRIPTION, epilog=EPILOG)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for cmd, (help_, fields) in COMMANDS.items():
        sp = sub.add_parser(cmd, help=help_, description=help_ + ".")
        sp.add_argument("--config", metavar="FILE",
                        help=f"TOML file of settings (keys as the flags, with _; a [{cmd}] "
                        f"table overrides the top level); flags and the environment win "
                        f"[env {CONFIG_ENV}]")
        _add_fields(sp, fields)
        if cmd == "up":
            sp.add_argument("--nodes", type=int, default=3, metavar="N",
                            help="serving nodes, on ports --node-port and up [default 3]")
            sp.add_argument("--node-port", type=int, default=9001, metavar="PORT",
                            help="first node's port [default 9001]")
            sp.add_argument("--sql-port", type=int, default=5433, metavar="PORT",
                            help="first node's SQL (PostgreSQL wire) port; 0: no SQL "
                                 "[default 5433]")
            sp.add_argument("--fresh", action="store_true",
                            help="start from a clean slate: remove the embedded broker's log, "
                                 "the node stores and the Spark checkpoints first")
        if cmd == "broker":
            sp.add_argument("--install", action="store_true",
                            help="resolve Apache Kafka's jars and make the broker's "
                                 "class-data archive (once; streamiq install does it and "
                                 "Spark's connector), then exit")
    for name, module in CLIENTS.items():
        module.add_parser(sub)
        sub.choices[name].add_argument(
            "--config", metavar="FILE",
            help=f"TOML file whose [client] table gives node, ingest and token; flags and "
                 f"the environment win [env {CONFIG_ENV}]")
    return parser


class FlagError(SystemExit):
    """A bad flag or env value: ``streamiq: error: --port: ...`` and exit status 2, like
    argparse's own usage errors (``str()`` is the message)."""

    def __init__(self, message: str) -> None:
        super().__init__(2)
        self.message = message

    def __str__(self) -> str:
        return self.message


def _is_json(name: str) -> bool:
    """A setting given as a JSON object (kafka_config, api_keys, spark_config...)."""
    return isinstance(Settings.model_fields[name].get_default(call_default_factory=True), dict)


def settings_from_args(args: argparse.Namespace, fields: Sequence[str]) -> Settings:
    """Settings from the environment, overridden by the flags given; errors name the flag
    (or the environment variable) and raise :class:`FlagError`."""
    given: dict[str, Any] = {}
    path = getattr(args, "config", None) or os.environ.get(CONFIG_ENV)
    from_file: dict[str, Any] = {}
    if path:
        try:
            from_file = file_settings(path, args.command, fields, COMMANDS)
        except ConfigFileError as exc:
            raise FlagError(f"--config: {exc}") from None
    for f in fields:
        v = getattr(args, f, None)
        if v is None:
            continue
        if _is_json(f) and isinstance(v, str):
            try:
                v = json.loads(v)
            except json.JSONDecodeError as exc:
                raise FlagError(f"{_flag(f)}: not a JSON object: {exc}") from None
        given[f] = v
    file_only = {k: v for k, v in from_file.items() if k not in given}
    try:
        settings = Settings(**file_only, **given)
    except ValidationError as exc:
        msgs = []
        for err in exc.errors():
            msg = err["msg"].removeprefix("Value error, ")
            if not err["loc"]:  # a check across settings names its flags itself
                msgs.append(msg)
                continue
            name = str(err["loc"][0])
            where = (_flag(name) if name in given else f"{path}: {name}"
                     if name in file_only else f"STREAMIQ_{name.upper()}")
            msgs.append(f"{where}: {msg}")
        raise FlagError("; ".join(msgs)) from None
    if "advertised" in fields and settings.advertised is None and settings.host in WILDCARD_HOSTS:
        raise FlagError(f"--host {settings.host or 'empty'} binds every interface, which is no "
                        f"address peers can reach: give --advertised HOST:PORT (where the "
                        f"other nodes reach this one)")
    if "auth" in fields and "broker_host" not in fields:  # a node or ingest, not up
        try:
            settings.check_auth(node="cluster_secret" in fields)
        except ValueError as exc:
            raise FlagError(str(exc)) from None
    return settings


def _client_config(args: argparse.Namespace) -> bool:
    """The config file's [client] table as the environment variables it stands for
    (those not set already); True when there was any, so the flags are parsed again."""
    path = args.config or os.environ.get(CONFIG_ENV)
    if not path:
        return False
    try:
        found = client_settings(path, COMMANDS)
    except ConfigFileError as exc:
        raise FlagError(f"--config: {exc}") from None
    os.environ.update(found)  # this process's only: defaults of --node, --ingest, --token
    return bool(found)


def _runner(cmd: str) -> Callable[..., None]:
    if cmd == "up":
        from streamiq.cli.up import run_up
        return run_up
    if cmd == "broker":
        from streamiq.cli.up import run_broker
        return run_broker
    if cmd == "ingest":
        from streamiq.ingest.app import run_ingest
        return run_ingest
    if cmd == "pipeline":
        from streamiq.pipeline.runner import run_pipeline
        return run_pipeline
    if cmd == "install":
        from streamiq.cli.install import run_install
        return run_install
    from streamiq.serving.main import run_node
    return run_node


def _run_client(args: argparse.Namespace) -> int:
    """status / query / load / token: one line and exit 1 on failure, never a traceback."""
    if args.check is not None:
        args.check(args)  # flags that do not go together: a usage error (exit 2)
    try:
        code: int = CLIENTS[args.command].run(args)
    except CliError as exc:
        print(f"streamiq: error: {exc}", file=sys.stderr, flush=True)
        return 1
    except KeyboardInterrupt:
        return 130
    return code


def main(argv: Sequence[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    if args.command in CLIENTS:
        try:
            if _client_config(args):
                args = build_parser().parse_args(argv)
        except FlagError as exc:
            print(f"streamiq: error: {exc}", file=sys.stderr, flush=True)
            raise
        raise SystemExit(_run_client(args))
    try:
        settings = settings_from_args(args, COMMANDS[args.command][1])
    except FlagError as exc:
        print(f"streamiq: error: {exc}", file=sys.stderr, flush=True)
        raise
    run = _runner(args.command)
    try:
        if args.command == "up":
            run(settings, nodes=args.nodes, node_port=args.node_port, sql_port=args.sql_port,
                fresh=args.fresh)
        elif args.command == "broker":
            run(settings, install=args.install)
        else:
            run(settings)
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main(sys.argv[1:])
