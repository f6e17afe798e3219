"""`python -m lab.aptrepo serve --bind ADDR [--port N] [--dir DIR]`: build the repository and serve it until ^C.
`python -m lab.aptrepo build --url URL --dir DIR`: only build it."""
import argparse
import json
import tempfile
import threading

from .repo import AptRepo, build_repo


def main() -> int:
    ap = argparse.ArgumentParser(prog="python -m lab.aptrepo")
    ap.add_argument("verb", choices=["build", "serve"])
    ap.add_argument("--dir", default=None)
    ap.add_argument("--url", help="build: the URL clients will use (ends in /)")
    ap.add_argument("--bind", default="127.0.0.1", help="serve: address to listen on (the lab gateway)")
    ap.add_argument("--port", type=int, default=0)
    args = ap.parse_args()
    directory = args.dir or tempfile.mkdtemp(prefix="aptrepo-")
    if args.verb == "build":
        if not args.url:
            ap.error("build needs --url")
        print(json.dumps(build_repo(directory, args.url), indent=2))
        return 0
    repo = AptRepo(directory, args.bind, args.port)
    print(json.dumps(repo.start(), indent=2), flush=True)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        pass
    finally:
        repo.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
