"""CLI: python -m lab.testhub --bind ADDR --port N --seed S [--file-port M] [--repo SPEC ...] [--faults JSON]

Prints one JSON line {"endpoint", "file_port", "pid", "repos", "repo_types"} once both servers listen (and writes it to
--ready-file when given), then serves until SIGTERM/SIGINT.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
from pathlib import Path

from .repos import DEFAULT_REPOS, parse_repo_arg
from .hub import TestHub


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m lab.testhub", description=__doc__)
    ap.add_argument("--bind", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--file-port", type=int, default=0, help="port of the LFS file server (0 = any free port)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--repo", action="append", default=[],
                    help='"org/name[:type=model|dataset,shards=N,shard_size=1GiB,small=false,'
                         'hostile=dotdot|absolute|size_lie,block_size=N]"; repeatable (block_size: a DFlash drafter\'s '
                         'config.json); default: the built-in small set (with the '
                         "dataset lab/sharegpt-mini). A dataset (type=dataset) holds README.md and sharegpt_mini.json "
                         "(ShareGPT format) unless small=false, plus N seeded data/shard-*.bin (default 0)")
    ap.add_argument("--page-size", type=int, default=50, help="tree entries per page (Link rel=next paging)")
    ap.add_argument("--token", default=os.environ.get("TESTHUB_TOKEN"), help="require Authorization: Bearer TOKEN")
    ap.add_argument("--faults", default="[]", help="JSON list of fault rules (see lab/testhub/faults.py)")
    ap.add_argument("--cache-dir", default=os.environ.get("TESTHUB_CACHE", str(Path(".cache") / "testhub")))
    ap.add_argument("--ready-file")
    args = ap.parse_args(argv)
    repos = dict(DEFAULT_REPOS)
    if args.repo:
        repos = dict(parse_repo_arg(r) for r in args.repo)
    hub = TestHub(bind=args.bind, port=args.port, file_port=args.file_port, seed=args.seed, repos=repos,
                  page_size=args.page_size, token=args.token, cache_dir=args.cache_dir,
                  faults=json.loads(args.faults))
    hub.start()
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    signal.signal(signal.SIGINT, lambda *_: done.set())
    ready = {"endpoint": f"http://{args.bind}:{hub.port}", "file_port": hub.file_port, "pid": os.getpid(),
             "repos": {k: v.sha for k, v in hub.repos.items()},
             "repo_types": {k: v.repo_type for k, v in hub.repos.items()}}
    line = json.dumps(ready)
    if args.ready_file:
        tmp = args.ready_file + ".tmp"
        Path(tmp).write_text(line + "\n")
        os.replace(tmp, args.ready_file)
    print(line, flush=True)
    done.wait()
    hub.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
