"""The lab's "operator fork" of SGLang: a git repository served on the bridge gateway (lab service `gitfork`).

Real deployments can build the patched venv from the operator's SGLang fork at a pinned commit (the venv role's
clone route, e.g. the branch of sgl-project/sglang PR #29907). The lab's fork is the SGLang stand-in
(lab/sglang_standin, from the working tree) with the lab's stand-in of the operator's DDTree series
(roles/venv/files/patches/lab/0003-standin-ddtree-flags.patch) committed on top:

    main    "base": the stand-in as it is (no DDTREE flags)
    ddtree  "fork": base + 0003 (the DDTREE algorithm and its --speculative-ddtree-* flags)

Both commits have a fixed identity, fixed dates and fixed messages and the tree is built the same way every time
(byte-code left out, symlinks stored as the files they point to), so their shas depend only on the working tree's
content: `build_repo()` gives the same commits on every `up` and in a test. The bare repository is served read-only
over HTTP with git's "dumb" protocol (static files after `git update-server-info`): `git fetch <url> <sha>` works,
a shallow fetch (`--depth 1`) does not (dumb HTTP has no shallow capability), which is what makes the venv role's
full-fetch fallback run in the lab.

`python -m lab.gitfork --bind ADDR --port N --dir DIR [--info FILE]`: build the repository into DIR, write
{"url", "commit", "base_commit", "branch", "repo"} to FILE (the lab merges it into lab_services.gitfork), then serve
until SIGTERM. Needs git on the controller.
"""
from __future__ import annotations

import argparse
import functools
import http.server
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STANDIN = ROOT / "lab" / "sglang_standin"
DDTREE_PATCH = ROOT / "roles" / "venv" / "files" / "patches" / "lab" / "0003-standin-ddtree-flags.patch"
REPO_NAME = "sglang-standin-fork.git"
BRANCH = "ddtree"
BASE_BRANCH = "main"
IDENTITY = ("SGLang lab fork", "lab-fork@sglang-lab.invalid")
BASE_DATE = "2025-01-01T00:00:00+00:00"
FORK_DATE = "2025-01-02T00:00:00+00:00"
SKIP = ("__pycache__", "build", "dist", ".pytest_cache", ".git")


class GitForkError(Exception):
    """The fork repository could not be built (git missing or failing)."""


def _env(home: str, date: str) -> dict:
    """git's environment: no user or system configuration, one identity, one date (deterministic commits)."""
    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": home, "LC_ALL": "C",
            "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull, "GIT_TERMINAL_PROMPT": "0",
            "GIT_AUTHOR_NAME": IDENTITY[0], "GIT_AUTHOR_EMAIL": IDENTITY[1], "GIT_AUTHOR_DATE": date,
            "GIT_COMMITTER_NAME": IDENTITY[0], "GIT_COMMITTER_EMAIL": IDENTITY[1], "GIT_COMMITTER_DATE": date}


def _git(args: list[str], cwd: str, env: dict) -> str:
    if shutil.which("git") is None:
        raise GitForkError("git is not installed on the controller: run `apt-get install git` (the lab's gitfork "
                           "service builds the stand-in fork with it)")
    proc = subprocess.run(["git", "-c", "core.autocrlf=false", "-c", "core.fileMode=true", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, check=False, timeout=120)
    if proc.returncode != 0:
        raise GitForkError(f"git {' '.join(args)} failed ({proc.returncode}): {(proc.stderr or proc.stdout).strip()[-600:]}")
    return proc.stdout.strip()


def _copy_tree(src: Path, dest: Path) -> None:
    """The stand-in's source tree without byte-code or build output; symlinks become the files they point to
    (schema.json links to schemas/sglang/ in this repository, outside the fork)."""
    for dirpath, dirnames, filenames in os.walk(src):
        dirnames[:] = sorted(d for d in dirnames if d not in SKIP and not d.endswith(".egg-info"))
        rel = Path(dirpath).relative_to(src)
        (dest / rel).mkdir(parents=True, exist_ok=True)
        for name in sorted(filenames):
            if name.endswith((".pyc", ".pyo")):
                continue
            target = dest / rel / name
            shutil.copyfile(Path(dirpath) / name, target)  # follows links; content only
            os.chmod(target, 0o755 if os.access(Path(dirpath) / name, os.X_OK) else 0o644)


def build_repo(dest: str | Path, standin: Path = STANDIN, patch: Path = DDTREE_PATCH) -> dict:
    """Build <dest>/sglang-standin-fork.git (bare, ready for dumb HTTP); returns commit (the fork, branch
    `ddtree`), base_commit (branch `main`), branch, repo (its directory name) and path."""
    dest = Path(dest)
    bare = dest / REPO_NAME
    with tempfile.TemporaryDirectory(prefix="gitfork-") as tmp:
        work = Path(tmp) / "work"
        _copy_tree(Path(standin), work)
        env = _env(tmp, BASE_DATE)
        _git(["init", "-q", "-b", BASE_BRANCH], str(work), env)
        _git(["add", "-A"], str(work), env)
        _git(["commit", "-q", "--no-gpg-sign", "-m", "sglang stand-in: the base the fork starts from"], str(work), env)
        base = _git(["rev-parse", "HEAD"], str(work), env)
        env = _env(tmp, FORK_DATE)
        _git(["checkout", "-q", "-b", BRANCH], str(work), env)
        _git(["apply", "--whitespace=nowarn", str(patch)], str(work), env)
        _git(["add", "-A"], str(work), env)
        _git(["commit", "-q", "--no-gpg-sign", "-m",
              "DDTREE: the speculative algorithm and its --speculative-ddtree-* flags\n\n"
              f"The lab's stand-in of the operator's DDTree series ({Path(patch).name}), carried by the fork."],
             str(work), env)
        fork = _git(["rev-parse", "HEAD"], str(work), env)
        _git(["checkout", "-q", BASE_BRANCH], str(work), env)
        staging = dest / f".{REPO_NAME}.new"
        shutil.rmtree(staging, ignore_errors=True)
        dest.mkdir(parents=True, exist_ok=True)
        _git(["clone", "-q", "--bare", "--no-local", str(work), str(staging)], tmp, env)
        _git(["repack", "-a", "-d", "-q"], str(staging), env)
        _git(["update-server-info"], str(staging), env)  # info/refs, objects/info/packs: what dumb HTTP clients read
        shutil.rmtree(bare, ignore_errors=True)
        staging.rename(bare)
    return {"commit": fork, "base_commit": base, "branch": BRANCH, "repo": REPO_NAME, "path": str(bare)}


class _Handler(http.server.SimpleHTTPRequestHandler):
    """Static, read-only files of the served directory (GET/HEAD only: what a dumb HTTP git client needs)."""

    def log_message(self, fmt, *args):  # into the service log, one line per request
        sys.stderr.write("%s %s\n" % (self.address_string(), fmt % args))


def serve(directory: str, bind: str, port: int) -> http.server.ThreadingHTTPServer:
    """A server bound to (bind, port) but not listening yet: call server_activate() (then a client can connect)."""
    handler = functools.partial(_Handler, directory=directory)
    server = http.server.ThreadingHTTPServer((bind, port), handler, bind_and_activate=False)
    server.daemon_threads = True
    server.allow_reuse_address = True
    server.server_bind()
    return server


def _interrupt(*_):
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m lab.gitfork", description=__doc__.split("\n\n")[0])
    ap.add_argument("--bind", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--dir", required=True, help="directory the bare repository is built in and served from")
    ap.add_argument("--info", help="file the repository's URL and commits are written to (JSON) before it listens")
    args = ap.parse_args(argv)
    if args.info:
        Path(args.info).unlink(missing_ok=True)  # never a stale description of an older build
    try:
        info = build_repo(args.dir)
    except GitForkError as exc:
        print(f"gitfork: {exc}", file=sys.stderr)
        return 1
    server = serve(args.dir, args.bind, args.port)
    info["url"] = f"http://{args.bind}:{server.server_address[1]}/{REPO_NAME}"
    if args.info:  # written before the socket listens: whoever sees the port open finds the file complete
        tmp = Path(args.info + ".tmp")
        tmp.write_text(json.dumps(info, indent=2, sort_keys=True) + "\n")
        tmp.replace(args.info)
    server.server_activate()
    print(json.dumps(info), flush=True)
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
