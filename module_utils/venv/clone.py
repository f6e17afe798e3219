"""The clone route's source: the operator's SGLang fork at a pinned commit, checked and fetched onto the host.

The clone route (venv_build's ``clone_repo`` given) builds from the fork at a pinned commit instead of a patch series
on the pinned base: the host fetches exactly that commit into ``clone_dir`` (``git fetch --depth 1 <url> <sha>``;
when the server refuses a fetch by sha, e.g. git's dumb HTTP protocol, a full fetch of its branches and tags), checks
``git rev-parse HEAD`` is the pin, and module_utils/venv/build.py pip installs ``<checkout>/<clone_subdir>`` after
the flavour's lock (and local packages). The fork carries its own patches: no patch series applies in this route.
The commit, the subdir and the repository URL without credentials are part of the recipe (clone_part), so another
commit rebuilds and the same one is a no-op that fetches nothing.

The inputs have one check, clone_input_problems: the module runs it before anything is made (check_clone_inputs) and
the role's preflight runs the same function on the controller (filter_plugins/venv.py, venv_clone_input_problems).
"""
from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
from urllib.parse import urlsplit, urlunsplit

from ansible.module_utils.venv.build_error import BuildError

# The clone route's pin: a full commit sha (a branch or tag name moves, a short sha may become ambiguous).
CLONE_COMMIT_RE = re.compile(r"^[0-9a-f]{40}$")
# Transports a clone URL may use: https/http/git/ssh URLs, file:// URLs, absolute paths, scp-like user@host:path.
CLONE_URL_RE = re.compile(r"^((https?|git|ssh|file)://[^\s]+|/[^\s]*|[A-Za-z0-9._-]+@[A-Za-z0-9.-]+:[^\s]+)$")
GIT_PROTOCOLS = "file:git:http:https:ssh"  # GIT_ALLOW_PROTOCOL: never ext:: or fd:: (not even through redirects)
CLONE_TIMEOUT = 1800  # seconds per git step: a full fetch of SGLang's history moves a few hundred MB


def strip_credentials(url: str) -> str:
    """The repository URL as recorded (recipe, provenance fact, messages): no password, and for http(s) no user
    either (a token is often passed as the user name). ssh and scp-like users are kept (not secrets)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return url
    if not parts.scheme or "@" not in parts.netloc:
        return url
    userinfo, host = parts.netloc.rsplit("@", 1)
    user = userinfo.split(":", 1)[0]
    netloc = host if parts.scheme in ("http", "https") or not user else f"{user}@{host}"
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))


def clone_input_problems(repo, commit, subdir, prefix: str = "") -> list[str]:
    """The one check of the clone route's inputs: [] when they are good, else one sentence per bad input.

    repo: a URL git may fetch from (https/http/git/ssh/file URL, an absolute path, user@host:path); commit: a pinned
    commit (the full 40-hex sha, lower case, never a branch or tag name); subdir: "" (the checkout's root) or a
    normalised relative path inside the checkout. Normalised means it is its own os.path.normpath (no "./", no
    doubled or trailing "/") and has no ".." component. So "sub/" is refused, not tidied: the subdir is part of the
    recipe, and "sub" and "sub/" would be two recipes of one build (a needless rebuild when a slash is added).
    prefix names the inputs as the caller's user knows them ("venv_" in the role's preflight).
    """
    problems = []
    if not (isinstance(repo, str) and CLONE_URL_RE.match(repo)):
        problems.append(f"{prefix}clone_repo {strip_credentials(str(repo))!r} is not a git URL (https/http/git/ssh/"
                        "file URL, an absolute path or user@host:path)")
    if not (isinstance(commit, str) and CLONE_COMMIT_RE.match(commit)):
        problems.append(f"{prefix}clone_commit {commit!r} is not a pinned commit: give the full 40-hex sha (a branch "
                        "or tag name moves, so it pins nothing)")
    if not isinstance(subdir, str) or (subdir and (os.path.isabs(subdir) or ".." in subdir.split("/")
                                                   or os.path.normpath(subdir) != subdir)):
        problems.append(f"{prefix}clone_subdir {subdir!r} must be a normalised path inside the checkout (relative, "
                        "no '..', no trailing '/'; \"\" = its root)")
    return problems


def check_clone_inputs(repo: str, commit: str, subdir: str) -> None:
    """The clone route's inputs, checked before anything is made (clone_input_problems); BuildError naming every
    bad one."""
    problems = clone_input_problems(repo, commit, subdir)
    if problems:
        raise BuildError("; ".join(problems))


def clone_part(repo: str, commit: str, subdir: str) -> dict:
    """The recipe's record of a clone route build (credentials stripped from the URL)."""
    return {"repo": strip_credentials(repo), "commit": commit, "subdir": subdir}


def _redact(text: str, repo: str) -> str:
    return text.replace(repo, strip_credentials(repo)) if repo else text


def _git(args: list[str], env: dict, timeout: int, repo: str = "") -> subprocess.CompletedProcess:
    argv = ["git", *args]
    try:
        return subprocess.run(argv, capture_output=True, text=True, check=False, env=env, timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        raise BuildError(_redact(f"git {' '.join(args)}: timed out after {timeout}s", repo)) from exc


def _git_head(dest: str, env: dict) -> str:
    out = _git(["-C", dest, "rev-parse", "HEAD"], env, 60)
    return out.stdout.strip() if out.returncode == 0 else ""


def fetch_commit(repo: str, commit: str, dest: str, env: dict | None = None, timeout: int = CLONE_TIMEOUT) -> dict:
    """Check out exactly `commit` of `repo` into a fresh `dest` (removed first): git init, a depth-1 fetch of
    the sha and a checkout of FETCH_HEAD; when the server refuses that (dumb HTTP has no shallow fetch, older or
    stricter servers refuse unadvertised shas) a full fetch of its branches and tags, then a checkout of the sha.
    The URL is given on the command line, never stored in the checkout's config. Returns
    {"commit", "fetch": "depth1"|"full", "dir"}; BuildError when the commit is not there or HEAD is not the pin."""
    if shutil.which("git", path=(env or os.environ).get("PATH")) is None:
        raise BuildError("git is not installed on the host (the clone route needs it: add git to venv_apt_packages)")
    shown = strip_credentials(repo)
    env = dict(os.environ if env is None else env, GIT_TERMINAL_PROMPT="0", GIT_ALLOW_PROTOCOL=GIT_PROTOCOLS,
               LC_ALL="C")
    env.pop("GIT_DIR", None)
    env.pop("GIT_WORK_TREE", None)
    if os.path.lexists(dest):
        shutil.rmtree(dest)
    os.makedirs(dest, mode=0o755)
    init = _git(["init", "-q", dest], env, 60)
    if init.returncode != 0:
        raise BuildError(f"git init {dest} failed: {init.stderr.strip()[-1000:]}")
    git = ["-C", dest, "-c", "advice.detachedHead=false"]
    shallow = _git([*git, "fetch", "--quiet", "--no-tags", "--depth", "1", repo, commit], env, timeout, repo)
    if shallow.returncode == 0:
        method, target = "depth1", "FETCH_HEAD"
    else:
        refused = _redact(shallow.stderr.strip()[-600:], repo)
        full = _git([*git, "fetch", "--quiet", "--no-tags", repo, "+refs/heads/*:refs/remotes/origin/*",
                     "+refs/tags/*:refs/tags/*"], env, timeout, repo)
        if full.returncode != 0:
            raise BuildError(f"cannot fetch from {shown}: fetch by sha: {refused}; full fetch: "
                             f"{_redact(full.stderr.strip()[-1000:], repo)}")
        if _git([*git, "cat-file", "-e", f"{commit}^{{commit}}"], env, 60).returncode != 0:
            raise BuildError(f"commit {commit} is not in {shown}: the server refused it by sha ({refused}) and no "
                             "branch or tag there contains it")
        method, target = "full", commit
    checkout = _git([*git, "checkout", "-q", "--detach", target], env, timeout)
    if checkout.returncode != 0:
        raise BuildError(f"git checkout {commit} in {dest} failed: {checkout.stderr.strip()[-1000:]}")
    head = _git_head(dest, env)
    if head != commit:
        raise BuildError(f"the checkout of {shown} is at {head or '(no HEAD)'}, not the pinned commit {commit}")
    with contextlib.suppress(OSError):
        os.unlink(os.path.join(dest, ".git", "FETCH_HEAD"))
    return {"commit": head, "fetch": method, "dir": dest}
