# -*- coding: utf-8 -*-
"""Hub metadata for the models role: resolve a revision to its commit sha, list the repository tree, refuse
hostile entries, filter with allow/ignore patterns.

Runs on the target. When huggingface_hub is importable (the role's tool venv) its HfApi does the listing
(endpoint=HF_ENDPOINT); otherwise (check mode / preflight on the system python3) a stdlib client speaks the same
protocol: GET /api/models/{repo}/revision/{rev} and GET /api/models/{repo}/tree/{sha}?recursive=true, paged by a
`Link: <...>; rel="next"` header.

Repository types (huggingface_hub's repo_type): "model" (the default) and "dataset". A dataset lives under
/api/datasets/{repo}/... and its files under {endpoint}/datasets/{repo}/resolve/{sha}/{path} (huggingface_hub
constants.REPO_TYPES_URL_PREFIXES); everything else (tree entries, LFS sha256, redirects) is the same protocol.
Any other type is refused before a request is made.
"""
from __future__ import absolute_import, division, print_function

import fnmatch
import json
import re
import time
import urllib.error
import urllib.parse
import urllib.request

from ansible.module_utils.evidence.error import EvidenceError


SHA1_RE = re.compile(r"^[0-9a-f]{40}$")
SHA256_RE = re.compile(r"^[0-9a-f]{64}$")
REPO_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$")
USER_AGENT = "sglang-deploy-hf_model/1"
REPO_TYPES = ("model", "dataset")
# API collection and file URL prefix of each repo type (huggingface_hub: f"/api/{repo_type}s/", REPO_TYPES_URL_PREFIXES)
_API_COLLECTION = {"model": "models", "dataset": "datasets"}
_URL_PREFIX = {"model": "", "dataset": "datasets/"}


class HubError(EvidenceError):
    """A Hub answer we cannot use. `code` is the X-Error-Code (RepoNotFound, RevisionNotFound, ...) or a local
    reason (HostileEntry, SizeMismatch, HTTP status)."""

    def __init__(self, msg, code=None, status=None):
        super(HubError, self).__init__(msg, kind="hub", evidence={"code": code, "status": status})
        self.code = code
        self.status = status


class RemoteFile:
    """One file of the tree at a pinned commit."""

    __slots__ = ("path", "size", "sha256", "blob_sha1")

    def __init__(self, path, size, sha256=None, blob_sha1=None):
        self.path = path
        self.size = size
        self.sha256 = sha256
        self.blob_sha1 = blob_sha1

    @property
    def lfs(self):
        return self.sha256 is not None

    @property
    def expected(self):
        """(algorithm, hex digest) the file must hash to: sha256 for LFS, git blob sha1 otherwise."""
        return ("sha256", self.sha256) if self.lfs else ("git-sha1", self.blob_sha1)

    def as_dict(self):
        return {"path": self.path, "size": self.size, "sha256": self.sha256, "blob_sha1": self.blob_sha1}

    def __repr__(self):
        return "RemoteFile(%r, %d, lfs=%s)" % (self.path, self.size, self.lfs)


def validate_repo_id(repo_id):
    if not isinstance(repo_id, str) or not REPO_RE.match(repo_id) or ".." in repo_id:
        raise HubError("invalid repo id %r: expected 'namespace/name'" % (repo_id,), code="BadInput")
    return repo_id


def validate_repo_type(repo_type):
    """'model' or 'dataset' (None means 'model'); anything else raises HubError(code='BadInput')."""
    if repo_type is None:
        return "model"
    if not isinstance(repo_type, str) or repo_type not in REPO_TYPES:
        raise HubError("invalid repo_type %r: expected one of %s" % (repo_type, ", ".join(REPO_TYPES)),
                       code="BadInput")
    return repo_type


def api_url(endpoint, repo_type, repo_id):
    """{endpoint}/api/models/{repo_id} or {endpoint}/api/datasets/{repo_id}."""
    return "%s/api/%s/%s" % (endpoint.rstrip("/"), _API_COLLECTION[validate_repo_type(repo_type)], repo_id)


def safe_relpath(path):
    """Return `path` if it is a clean relative POSIX path inside the model directory, else raise HubError.

    Refused: empty, absolute, backslashes, NUL/control characters, '.' or '..' components, empty components,
    and the state directory name used by the role (.hf_model)."""
    if not isinstance(path, str) or not path:
        raise HubError("hostile tree entry %r refused: empty path" % (path,), code="HostileEntry")
    bad = None
    if path.startswith("/") or re.match(r"^[A-Za-z]:", path):
        bad = "absolute path"
    elif "\\" in path:
        bad = "backslash in path"
    elif any(ord(c) < 32 or ord(c) == 127 for c in path):
        bad = "control character in path"
    else:
        parts = path.split("/")
        if any(p in ("", ".", "..") for p in parts):
            bad = "'.', '..' or empty path component"
        elif parts[0] == ".hf_model":
            bad = "path inside the state directory .hf_model"
    if bad:
        raise HubError("hostile tree entry %r refused: %s" % (path, bad), code="HostileEntry")
    return path


def parse_tree_entries(entries):
    """Turn raw tree entries (dicts as the Hub sends them) into RemoteFile objects, refusing hostile ones."""
    files = []
    seen = set()
    for e in entries:
        if not isinstance(e, dict):
            raise HubError("malformed tree entry %r" % (e,), code="HostileEntry")
        if e.get("type") != "file":
            if e.get("type") == "directory":
                safe_relpath(e.get("path"))
                continue
            raise HubError("unknown tree entry type %r for %r" % (e.get("type"), e.get("path")), code="HostileEntry")
        path = safe_relpath(e.get("path"))
        size = e.get("size")
        if isinstance(size, bool) or not isinstance(size, int) or size < 0:
            raise HubError("hostile tree entry %r: size %r is not a non-negative integer" % (path, size),
                           code="HostileEntry")
        if path in seen or path.lower() in seen:
            raise HubError("hostile tree entry %r: listed twice" % path, code="HostileEntry")
        seen.add(path)
        lfs = e.get("lfs")
        sha256 = None
        oid = e.get("oid")
        if lfs:
            sha256 = lfs.get("oid") or lfs.get("sha256")
            if not isinstance(sha256, str) or not SHA256_RE.match(sha256):
                raise HubError("tree entry %r: LFS oid %r is not a sha256" % (path, sha256), code="HostileEntry")
            if lfs.get("size", size) != size:
                raise HubError("tree entry %r: size %r disagrees with LFS size %r" % (path, size, lfs.get("size")),
                               code="HostileEntry")
        elif not isinstance(oid, str) or not SHA1_RE.match(oid):
            raise HubError("tree entry %r: oid %r is not a git blob sha1" % (path, oid), code="HostileEntry")
        if e.get("xetHash") and not lfs:
            raise HubError("tree entry %r: Xet-only file without LFS sha256" % path, code="HostileEntry")
        files.append(RemoteFile(path, size, sha256=sha256, blob_sha1=oid))
    # A file and a directory of the same name, or a file under another file, cannot both land on disk.
    names = set(f.path for f in files)
    for f in files:
        parts = f.path.split("/")
        for i in range(1, len(parts)):
            if "/".join(parts[:i]) in names:
                raise HubError("hostile tree: %r is both a file and a directory" % "/".join(parts[:i]),
                               code="HostileEntry")
    return files


def filter_files(files, allow_patterns=None, ignore_patterns=None):
    """Keep files matching any allow pattern (all when none) and no ignore pattern (fnmatch, as huggingface_hub's
    filter_repo_objects; a pattern ending in '/' matches everything below that directory)."""

    def norm(p):
        return p + "*" if p.endswith("/") else p

    allow = [norm(p) for p in allow_patterns or []]
    ignore = [norm(p) for p in ignore_patterns or []]
    out = []
    for f in files:
        if allow and not any(fnmatch.fnmatch(f.path, p) for p in allow):
            continue
        if any(fnmatch.fnmatch(f.path, p) for p in ignore):
            continue
        out.append(f)
    return out


def _opener():
    # Environment proxies (http_proxy/https_proxy/no_proxy) as every other client on the host.
    return urllib.request.build_opener(urllib.request.ProxyHandler(), _NoRedirect())


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, req, fp, code, msg, headers, newurl):
        return None


def _headers(token):
    h = {"User-Agent": USER_AGENT}
    if token:
        h["Authorization"] = "Bearer %s" % token
    return h


def _raise_for(err, what):
    code = err.headers.get("X-Error-Code") if err.headers else None
    msg = err.headers.get("X-Error-Message") if err.headers else None
    raise HubError("%s: HTTP %d%s%s" % (what, err.code, " %s" % code if code else "", ": %s" % msg if msg else ""),
                   code=code or "HTTP%d" % err.code, status=err.code)


def http_json(url, token=None, timeout=30.0, retries=4, sleep=time.sleep):
    """GET url -> (parsed JSON, response headers). Retries 429/5xx/connection errors with backoff (Retry-After)."""
    attempt = 0
    while True:
        req = urllib.request.Request(url, headers=_headers(token))
        try:
            with _opener().open(req, timeout=timeout) as r:
                return json.loads(r.read().decode("utf-8")), r.headers
        except urllib.error.HTTPError as err:
            if (err.code == 429 or err.code >= 500) and attempt < retries:
                attempt += 1
                sleep(_retry_after(err.headers, attempt))
                continue
            _raise_for(err, "GET %s" % url.split("?")[0])
        except (urllib.error.URLError, OSError, ValueError) as err:
            if attempt < retries:
                attempt += 1
                sleep(min(30.0, 0.5 * 2 ** attempt))
                continue
            raise HubError("GET %s: %s" % (url.split("?")[0], err), code="Network")


def _retry_after(headers, attempt):
    try:
        return max(0.0, min(120.0, float(headers.get("Retry-After"))))
    except (TypeError, ValueError, AttributeError):
        return min(30.0, 0.5 * 2 ** attempt)


def _next_link(headers):
    link = headers.get("Link") if headers else None
    if not link:
        return None
    for part in link.split(","):
        m = re.match(r'\s*<([^>]+)>\s*;\s*rel="?next"?', part)
        if m:
            return m.group(1)
    return None


def quote_rev(revision):
    return urllib.parse.quote(revision, safe="")


def file_url(endpoint, repo_id, sha, path, repo_type="model"):
    """{endpoint}/{repo_id}/resolve/{sha}/{path} for a model, {endpoint}/datasets/{repo_id}/resolve/... for a
    dataset (huggingface_hub's hf_hub_url)."""
    return "%s/%s%s/resolve/%s/%s" % (endpoint.rstrip("/"), _URL_PREFIX[validate_repo_type(repo_type)], repo_id, sha,
                                      urllib.parse.quote(path))


def _have_hf_hub():
    try:
        import huggingface_hub  # noqa: F401  pylint: disable=unused-import
        return True
    except ImportError:
        return False


def resolve_revision(endpoint, repo_id, revision, token=None, use_hf_hub=None, repo_type="model"):
    """Branch, tag or sha -> commit sha (40 hex). A repository that is not there as `repo_type` (e.g. a dataset
    asked for as a model) raises HubError(code='RepoNotFound') naming the type."""
    validate_repo_id(repo_id)
    repo_type = validate_repo_type(repo_type)
    if use_hf_hub is None:
        use_hf_hub = _have_hf_hub()
    try:
        if use_hf_hub:
            if repo_type == "model":
                sha = _hfapi_call(endpoint, token, lambda api: api.model_info(repo_id, revision=revision).sha)
            else:
                sha = _hfapi_call(endpoint, token,
                                  lambda api: api.repo_info(repo_id, revision=revision, repo_type=repo_type).sha)
        else:
            data, _ = http_json("%s/revision/%s" % (api_url(endpoint, repo_type, repo_id), quote_rev(revision)),
                                token=token)
            sha = data.get("sha") if isinstance(data, dict) else None
    except HubError as err:
        if err.code != "RepoNotFound":
            raise
        hint = "; ".join("a %s repository needs repo_type: %s" % (t, t) for t in REPO_TYPES if t != repo_type)
        raise HubError("%s repository %s not found on %s (%s; a private or gated repository also answers so "
                       "without a valid token): %s" % (repo_type, repo_id, endpoint.rstrip("/"), hint, err),
                       code=err.code, status=err.status)
    if not isinstance(sha, str) or not SHA1_RE.match(sha):
        raise HubError("revision %r of %s resolved to %r, not a commit sha" % (revision, repo_id, sha),
                       code="BadRevision")
    if SHA1_RE.match(revision or "") and revision != sha:
        raise HubError("pinned revision %s of %s answered as %s" % (revision, repo_id, sha), code="BadRevision")
    return sha


def list_tree(endpoint, repo_id, sha, token=None, use_hf_hub=None, max_pages=10000, repo_type="model"):
    """All files of the repository (of `repo_type`) at `sha` (recursive), validated."""
    validate_repo_id(repo_id)
    repo_type = validate_repo_type(repo_type)
    if use_hf_hub is None:
        use_hf_hub = _have_hf_hub()
    if use_hf_hub:
        def listing(api):
            raw = []
            kw = {"repo_type": repo_type} if repo_type != "model" else {}
            for item in api.list_repo_tree(repo_id, revision=sha, recursive=True, **kw):
                if hasattr(item, "blob_id"):
                    e = {"type": "file", "path": item.path, "size": item.size, "oid": item.blob_id}
                    if item.lfs is not None:
                        e["lfs"] = {"oid": item.lfs.sha256, "size": item.lfs.size}
                    if getattr(item, "xet_hash", None):
                        e["xetHash"] = item.xet_hash
                    raw.append(e)
                else:
                    raw.append({"type": "directory", "path": item.path})
            return raw
        entries = _hfapi_call(endpoint, token, listing)
    else:
        entries = []
        url = "%s/tree/%s?recursive=true&expand=false" % (api_url(endpoint, repo_type, repo_id), sha)
        pages = 0
        while url:
            pages += 1
            if pages > max_pages:
                raise HubError("tree of %s: more than %d pages" % (repo_id, max_pages), code="HostileEntry")
            data, headers = http_json(url, token=token)
            if not isinstance(data, list):
                raise HubError("tree of %s: expected a list, got %s" % (repo_id, type(data).__name__))
            entries.extend(data)
            url = _next_link(headers)
    return parse_tree_entries(entries)


def _hfapi_call(endpoint, token, fn):
    from huggingface_hub import HfApi  # pylint: disable=import-outside-toplevel
    from huggingface_hub import errors as hf_errors  # pylint: disable=import-outside-toplevel

    api = HfApi(endpoint=endpoint.rstrip("/"), token=token or False)
    try:
        return fn(api)
    except hf_errors.RevisionNotFoundError as err:
        raise HubError(str(err).splitlines()[0], code="RevisionNotFound", status=404)
    except hf_errors.RepositoryNotFoundError as err:
        raise HubError(str(err).splitlines()[0], code="RepoNotFound", status=404)
    except hf_errors.EntryNotFoundError as err:
        raise HubError(str(err).splitlines()[0], code="EntryNotFound", status=404)
    except hf_errors.HfHubHTTPError as err:
        status = getattr(getattr(err, "response", None), "status_code", None)
        raise HubError(str(err).splitlines()[0], code="HTTP%s" % status, status=status)
    except (KeyError, TypeError, ValueError) as err:
        raise HubError("malformed Hub answer: %s" % err, code="HostileEntry")


def hub_tree(endpoint, repo_id, revision, token=None, repo_type="model", allow_patterns=None, ignore_patterns=None,
             use_hf_hub=None):
    """(sha, [RemoteFile]) of `revision`: resolved, listed and filtered as a fetch would select them."""
    validate_repo_id(repo_id)
    repo_type = validate_repo_type(repo_type)
    sha = resolve_revision(endpoint, repo_id, revision, token=token, use_hf_hub=use_hf_hub, repo_type=repo_type)
    files = list_tree(endpoint, repo_id, sha, token=token, use_hf_hub=use_hf_hub, repo_type=repo_type)
    return sha, filter_files(files, allow_patterns, ignore_patterns)


def tree_from_dicts(tree):
    """A tree handed over by the controller ({"sha", "files": [RemoteFile.as_dict()...]}, from hf_tree) ->
    (sha, [RemoteFile]), with the same refusals as a tree read from the Hub itself."""
    if not isinstance(tree, dict) or not isinstance(tree.get("sha"), str) or not SHA1_RE.match(tree["sha"]):
        raise HubError("handed tree: expected {'sha': <40-hex commit>, 'files': [...]}, got keys %s"
                       % (sorted(tree) if isinstance(tree, dict) else type(tree).__name__), code="BadInput")
    entries = []
    for f in tree.get("files") or []:
        if not isinstance(f, dict):
            raise HubError("handed tree: malformed file entry %r" % (f,), code="HostileEntry")
        e = {"type": "file", "path": f.get("path"), "size": f.get("size"), "oid": f.get("blob_sha1")}
        if f.get("sha256") is not None:
            e["lfs"] = {"oid": f["sha256"], "size": f.get("size")}
        entries.append(e)
    files = parse_tree_entries(entries)
    if not files:
        raise HubError("handed tree of %s lists no file" % tree["sha"], code="BadInput")
    return tree["sha"], files


# The Ansible argument spec of a Hub repository selection, shared by library/hf_model.py and library/hf_tree.py.
REPO_ARGS = dict(
    repo_id=dict(type="str", required=True),
    repo_type=dict(type="str", choices=list(REPO_TYPES), default="model"),
    revision=dict(type="str", default="main"),
    endpoint=dict(type="str", default="https://huggingface.co"),
    token=dict(type="str", no_log=True),
    allow_patterns=dict(type="list", elements="str", default=[]),
    ignore_patterns=dict(type="list", elements="str", default=[]),
)
