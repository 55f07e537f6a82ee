"""``dedup services up|down|status``."""

from __future__ import annotations

import argparse
from typing import Any

from dedup.cli import services


def add_parser(sub: Any, parent: argparse.ArgumentParser) -> None:
    parser = sub.add_parser(
        "services", parents=[parent], help="start, stop or show the local Redis and Kafka",
        description="Local Redis (AOF, fsync always) and a single-node Kafka broker that "
                    "outlive the command; addresses and pids are kept in "
                    f"{services.state_path()}.",
    )
    parser.add_argument("action", choices=["up", "down", "status"])
    parser.set_defaults(handler=services_command)


def services_command(args: argparse.Namespace) -> int:
    def say(message: str) -> None:
        if not args.quiet:
            print(message)

    if args.action == "up":
        services.services_up(say)
        return 0
    if args.action == "down":
        services.services_down(say)
        return 0
    rows = services.services_status()
    for name, address, pid, running in rows:
        print(f"{name:6} {'running' if running else 'stopped':8} {address} "
              f"(pid {pid if pid else '-'})")
    return 0 if all(running for *_, running in rows) else 3
