"""python -m lab up|down|status [--name NAME] [--hosts SET] [--subnet CIDR]"""
from __future__ import annotations

import argparse
import json
import sys

from lab.error import LabError
from lab.host_sets import host_set
from lab.lab import Lab


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lab", description="Local systemd-nspawn test hosts for this repo.")
    parser.add_argument("verb", choices=("up", "down", "status"))
    parser.add_argument("--name", help="lab name (default: $LAB_NAME or 'default'); labs with different names coexist")
    parser.add_argument("--subnet", help="IPv4 /24 to use (default: the first unused one in 10.213.0.0/16)")
    parser.add_argument("--hosts", help="host set (lab/host_sets.py HOST_SETS: default, fleet, router, multinode; default: "
                                         "$LAB_HOSTS or 'default')")
    args = parser.parse_args(argv)
    try:
        lab = Lab(args.name, hosts=host_set(args.hosts) if args.hosts else None, subnet=args.subnet)
        if args.verb == "up":
            lab.up()
        elif args.verb == "down":
            lab.down()
        else:
            report = lab.status()
            print(json.dumps(report, indent=2))
            return 0 if report["up"] and all(h["running"] and h["ssh"] for h in report["hosts"].values()) else 3
    except LabError as exc:
        print(f"lab: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
