"""``streamiq`` command line: ``up`` runs everything; each part also runs on its own.

Every flag mirrors a :class:`~streamiq.config.Settings` field and its env var
``STREAMIQ_<NAME>``; a flag given on the command line wins over the environment.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from typing import Any

from pydantic import ValidationError

from streamiq.config import Settings

__all__ = ["main"]

_KAFKA = ("bootstrap_servers", "kafka_config", "cluster", "topic_prefix", "app", "views_module",
          "partitions",
          "log_level")
_BROKER = ("broker_host", "broker_port")
_INGEST = ("ingest_host", "ingest_port")
_NODE = ("host", "port", "advertised", "state_dir", "standby_replicas", "heartbeat_ms",
         "member_timeout_ms", "membership_period_s", "max_lag", "wait_timeout_ms",
         "internal_concurrency", "redirect")
_PIPELINE = ("master", "checkpoint_dir", "trigger_ms", "max_offsets_per_trigger")

COMMANDS: dict[str, tuple[str, tuple[str, ...]]] = {
    "up": ("run and supervise broker (unless --bootstrap-servers is given), ingest, "
           "pipeline and 3 nodes, restarting a part that dies",
           _KAFKA + _BROKER + _INGEST + _PIPELINE
           + ("host", "state_dir", "standby_replicas", "max_lag", "redirect")),
    "broker": ("run the embedded Kafka-protocol broker (Tansu)", _BROKER),
    "ingest": ("run the ingest HTTP service", _KAFKA + _INGEST),
    "pipeline": ("run the PySpark pipeline", _KAFKA + _PIPELINE),
    "node": ("run one serving node", _KAFKA + _NODE),
}


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _add_fields(p: argparse.ArgumentParser, fields: Sequence[str]) -> None:
    for name in fields:
        info = Settings.model_fields[name]
        env = f"STREAMIQ_{name.upper()}"
        default = info.get_default(call_default_factory=True)
        help_ = f"{info.description} [env {env}; default {default!r}]"
        if info.annotation is bool:
            p.add_argument(_flag(name), dest=name, action=argparse.BooleanOptionalAction,
                           default=None, help=help_)
        else:
            p.add_argument(_flag(name), dest=name, default=None, metavar=name.upper(), help=help_)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="streamiq", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for cmd, (help_, fields) in COMMANDS.items():
        sp = sub.add_parser(cmd, help=help_, description=help_)
        _add_fields(sp, fields)
        if cmd == "up":
            sp.add_argument("--nodes", type=int, default=3, help="serving nodes (ports 9001..)")
            sp.add_argument("--node-port", type=int, default=9001, help="first node port")
    return parser


def settings_from_args(args: argparse.Namespace, fields: Sequence[str]) -> Settings:
    """Settings from the environment, overridden by the flags given; errors name the flag."""
    given: dict[str, Any] = {}
    for f in fields:
        v = getattr(args, f, None)
        if v is None:
            continue
        if f == "kafka_config" and isinstance(v, str):
            try:
                v = json.loads(v)
            except json.JSONDecodeError as exc:
                raise SystemExit(f"streamiq: error: {_flag(f)}: not a JSON object: {exc}") from None
        given[f] = v
    try:
        return Settings(**given)
    except ValidationError as exc:
        msgs = []
        for err in exc.errors():
            name = str(err["loc"][0]) if err["loc"] else "?"
            where = _flag(name) if name in given else f"STREAMIQ_{name.upper()}"
            msgs.append(f"{where}: {err['msg']}")
        raise SystemExit("streamiq: error: " + "; ".join(msgs)) from None


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
    from streamiq.serving.main import run_node
    return run_node


def main(argv: Sequence[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    settings = settings_from_args(args, COMMANDS[args.command][1])
    run = _runner(args.command)
    try:
        if args.command == "up":
            run(settings, nodes=args.nodes, node_port=args.node_port)
        else:
            run(settings)
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main(sys.argv[1:])
