"""``dedup services up|down|status``."""

from __future__ import annotations

import argparse
from typing import Any

from dedup.exceptions import ConfigError
from dedup.local import lasting as services


def add_parser(sub: Any, parent: argparse.ArgumentParser) -> None:
    parser = sub.add_parser(
        "services", parents=[parent], help="start, stop or show the local Redis and Kafka",
        description="Local Redis (AOF, fsync always) and a single-node Kafka broker that "
                    "outlive the command; addresses and pids are kept in "
                    f"{services.state_path()}. `up` starts them, or restarts them after a "
                    "crash on their recorded ports with their data (waiting up to "
                    f"{services.PORT_WAIT_SECONDS:.0f} s for the ports; it refuses rather than "
                    "move to new ports); `down` stops them and keeps their data and ports; "
                    "`down --purge` also deletes their data (every topic, key and offset).",
    )
    parser.add_argument("action", choices=["up", "down", "status"])
    parser.add_argument("--purge", action="store_true",
                        help="with down: also delete the Redis and Kafka data folders and "
                             "forget their ports, so the next up starts afresh")
    parser.set_defaults(handler=services_command)


def services_command(args: argparse.Namespace) -> int:
    def say(message: str) -> None:
        if not args.quiet:
            print(message)

    if args.purge and args.action != "down":
        raise ConfigError(f"--purge goes with `dedup services down`, not {args.action}")
    if args.action == "up":
        services.services_up(say)
        return 0
    if args.action == "down":
        services.services_down(say, purge=args.purge)
        return 0
    rows = services.services_status(say)
    for name, address, pid, running in rows:
        print(f"{name:6} {'running' if running else 'stopped':8} {address} "
              f"(pid {pid if pid else '-'})")
    return 0 if all(running for *_, running in rows) else 3
