"""``dedup services up|down|status``."""

from __future__ import annotations

import argparse
from typing import Any

from dedup.exceptions import ConfigError
from dedup.local import lasting as services
from dedup.local.services import SERVICE_COMMANDS, process_identity, recorded_process


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


def _forget_reused_pids(say: Any) -> None:
    """Drop from the state file each pid that names another process than the one recorded.

    After a reboot (or a pid wrap-around) a recorded pid may belong to an
    unrelated process: ``down`` would signal it, ``up`` and ``status`` would take
    it for the service. A record carries the process's boot id and start time
    (:func:`~dedup.local.services.process_identity`); one written before it did
    is checked against the service's command line instead.
    """
    state = services.read_state()
    changed = False
    for name, command in SERVICE_COMMANDS.items():
        entry = state.get(name)
        if not isinstance(entry, dict) or "pid" not in entry:
            continue
        if recorded_process(entry["pid"], entry.get("identity"), command) == "reused":
            say(f"{name} already gone (pid reused by another process): pid {entry['pid']} "
                f"left alone, removed from {services.state_path()}")
            del entry["pid"]
            entry.pop("identity", None)
            changed = True
    if changed:
        services._write_state(state)


def _record_identities() -> None:
    """Record the identity of each recorded pid that has none yet; drop those without a pid."""
    state = services.read_state()
    changed = False
    for name, command in SERVICE_COMMANDS.items():
        entry = state.get(name)
        if not isinstance(entry, dict):
            continue
        if "pid" not in entry:
            changed |= entry.pop("identity", None) is not None
        elif "identity" not in entry and recorded_process(entry["pid"], None, command) == "running":
            identity = process_identity(entry["pid"])
            if identity is not None:
                entry["identity"] = identity
                changed = True
    if changed:
        services._write_state(state)


def services_command(args: argparse.Namespace) -> int:
    def say(message: str) -> None:
        if not args.quiet:
            print(message)

    if args.purge and args.action != "down":
        raise ConfigError(f"--purge goes with `dedup services down`, not {args.action}")
    # Every action first forgets the pids that no longer name the recorded process:
    # down must not signal them, up must start the service they stood for.
    _forget_reused_pids(say)
    if args.action == "up":
        try:
            services.services_up(say)
        finally:
            # Also after a failed up: a service it started and left running is recorded.
            _record_identities()
        return 0
    if args.action == "down":
        try:
            services.services_down(say, purge=args.purge)
        finally:
            _record_identities()
        return 0
    rows = services.services_status()
    for name, address, pid, running in rows:
        print(f"{name:6} {'running' if running else 'stopped':8} {address} "
              f"(pid {pid if pid else '-'})")
    return 0 if all(running for *_, running in rows) else 3
