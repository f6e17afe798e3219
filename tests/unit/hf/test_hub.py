"""ansible.module_utils.hf.hub: revision/tree over both clients, hostile entries refused, patterns."""
from __future__ import annotations

import pytest

from lab.testhub import TestHub
from ansible.module_utils.hf.hub import (HubError, api_url, file_url, filter_files, list_tree, parse_tree_entries,
                                 resolve_revision, safe_relpath, validate_repo_id, validate_repo_type)

SHA1 = "a" * 40
SHA256 = "b" * 64


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    repos = {"test/tiny": {}, "test/hostile-dotdot": {"hostile": "dotdot", "shards": 1},
             "test/hostile-abs": {"hostile": "absolute", "shards": 1}, "test/data": {"type": "dataset", "shards": 1}}
    with TestHub(seed=5, page_size=2, token="s3cret", repos=repos, cache_dir=tmp_path_factory.mktemp("c")) as h:
        yield h


@pytest.mark.parametrize("use_hf_hub", [False, True], ids=["stdlib", "huggingface_hub"])
def test_both_clients_resolve_and_list_the_same_tree(hub, use_hf_hub):
    sha = resolve_revision(hub.endpoint, "test/tiny", "main", token="s3cret", use_hf_hub=use_hf_hub)
    assert sha == hub.repos["test/tiny"].sha
    files = {f.path: f for f in list_tree(hub.endpoint, "test/tiny", sha, token="s3cret", use_hf_hub=use_hf_hub)}
    truth = {f.path: f for f in hub.repos["test/tiny"].files}
    assert set(files) == set(truth)
    for path, f in files.items():
        assert f.size == truth[path].size
        assert f.lfs == truth[path].lfs
        assert f.expected == (("sha256", truth[path].sha256) if f.lfs else ("git-sha1", truth[path].blob_sha1))


@pytest.mark.parametrize("use_hf_hub", [False, True], ids=["stdlib", "huggingface_hub"])
def test_errors_carry_the_hub_error_code(hub, use_hf_hub):
    with pytest.raises(HubError) as e:
        resolve_revision(hub.endpoint, "test/tiny", "nope", token="s3cret", use_hf_hub=use_hf_hub)
    assert e.value.code == "RevisionNotFound"
    with pytest.raises(HubError) as e:
        resolve_revision(hub.endpoint, "test/absent", "main", token="s3cret", use_hf_hub=use_hf_hub)
    assert e.value.code == "RepoNotFound"
    with pytest.raises(HubError):  # no token: the private hub refuses
        resolve_revision(hub.endpoint, "test/tiny", "main", token=None, use_hf_hub=use_hf_hub)


def test_pinned_sha_must_come_back_unchanged(hub):
    sha = hub.repos["test/tiny"].sha
    assert resolve_revision(hub.endpoint, "test/tiny", sha, token="s3cret", use_hf_hub=False) == sha


@pytest.mark.parametrize("repo", ["test/hostile-dotdot", "test/hostile-abs"])
@pytest.mark.parametrize("use_hf_hub", [False, True], ids=["stdlib", "huggingface_hub"])
def test_hostile_trees_are_refused(hub, repo, use_hf_hub):
    with pytest.raises(HubError) as e:
        list_tree(hub.endpoint, repo, "main", token="s3cret", use_hf_hub=use_hf_hub)
    assert e.value.code == "HostileEntry" and "refused" in str(e.value)


@pytest.mark.parametrize("path", ["../x", "a/../../x", "/etc/passwd", "a//b", "./a", "a/.", "C:evil", "a\\b",
                                  "a\nb", "", ".hf_model/manifest.json"])
def test_safe_relpath_refuses(path):
    with pytest.raises(HubError):
        safe_relpath(path)


def test_safe_relpath_accepts_nested_and_dotfiles():
    assert safe_relpath("a/b/c.safetensors") == "a/b/c.safetensors"
    assert safe_relpath(".gitattributes") == ".gitattributes"


def _f(path, size=1, lfs=None, oid=SHA1):
    e = {"type": "file", "path": path, "size": size, "oid": oid}
    if lfs is not None:
        e["lfs"] = lfs
    return e


@pytest.mark.parametrize("entries,needle", [
    ([_f("a", size=-1)], "non-negative"),
    ([_f("a", size=True)], "non-negative"),
    ([_f("a", size="12")], "non-negative"),
    ([_f("a", size=10, lfs={"oid": SHA256, "size": 11})], "disagrees"),
    ([_f("a", lfs={"oid": "zz", "size": 1})], "not a sha256"),
    ([_f("a", oid="nope")], "git blob sha1"),
    ([_f("a"), _f("a")], "twice"),
    ([_f("a"), _f("a/b")], "both a file and a directory"),
    ([{"type": "symlink", "path": "a"}], "unknown tree entry type"),
    (["junk"], "malformed"),
])
def test_lying_or_malformed_entries_are_refused(entries, needle):
    with pytest.raises(HubError) as e:
        parse_tree_entries(entries)
    assert needle in str(e.value)


def test_filter_patterns():
    files = parse_tree_entries([_f("model-1.safetensors"), _f("model-2.safetensors"), _f("config.json"),
                                _f("original/x.pth"), _f("README.md")])
    assert [f.path for f in filter_files(files, ["*.safetensors", "*.json"])] == [
        "model-1.safetensors", "model-2.safetensors", "config.json"]
    assert [f.path for f in filter_files(files, None, ["original/", "*.md"])] == [
        "model-1.safetensors", "model-2.safetensors", "config.json"]


@pytest.mark.parametrize("repo", ["x", "a/b/c", "../b", "a/..", "", "a b/c"])
def test_repo_id_validation(repo):
    with pytest.raises(HubError):
        validate_repo_id(repo)


@pytest.mark.parametrize("use_hf_hub", [False, True], ids=["stdlib", "huggingface_hub"])
def test_both_clients_resolve_and_list_a_dataset(hub, use_hf_hub):
    sha = resolve_revision(hub.endpoint, "test/data", "main", token="s3cret", use_hf_hub=use_hf_hub,
                           repo_type="dataset")
    assert sha == hub.repos["test/data"].sha
    files = {f.path: f for f in list_tree(hub.endpoint, "test/data", sha, token="s3cret", use_hf_hub=use_hf_hub,
                                          repo_type="dataset")}
    truth = {f.path: f for f in hub.repos["test/data"].files}
    assert set(files) == set(truth) == {"README.md", "sharegpt_mini.json", "data/shard-00001-of-00001.bin"}
    for path, f in files.items():
        assert f.size == truth[path].size and f.lfs == truth[path].lfs
        assert f.expected == (("sha256", truth[path].sha256) if f.lfs else ("git-sha1", truth[path].blob_sha1))
    assert files["sharegpt_mini.json"].lfs and not files["README.md"].lfs


@pytest.mark.parametrize("use_hf_hub", [False, True], ids=["stdlib", "huggingface_hub"])
@pytest.mark.parametrize("repo,asked", [("test/data", "model"), ("test/tiny", "dataset")])
def test_a_repo_is_found_only_under_its_own_type(hub, repo, asked, use_hf_hub):
    with pytest.raises(HubError) as e:
        resolve_revision(hub.endpoint, repo, "main", token="s3cret", use_hf_hub=use_hf_hub, repo_type=asked)
    assert e.value.code == "RepoNotFound" and str(e.value).startswith(f"{asked} repository {repo} not found")
    with pytest.raises(HubError) as e:
        list_tree(hub.endpoint, repo, hub.repos[repo].sha, token="s3cret", use_hf_hub=use_hf_hub, repo_type=asked)
    assert e.value.code == "RepoNotFound"


@pytest.mark.parametrize("bad", ["space", "models", "DATASET", "", 0])
def test_invalid_repo_type_is_refused_without_a_request(bad):
    endpoint = "http://127.0.0.1:9"  # nothing listens: a request would fail differently (code Network)
    for call in (lambda: validate_repo_type(bad),
                 lambda: resolve_revision(endpoint, "a/b", "main", use_hf_hub=False, repo_type=bad),
                 lambda: list_tree(endpoint, "a/b", SHA1, use_hf_hub=False, repo_type=bad),
                 lambda: file_url(endpoint, "a/b", SHA1, "x.json", repo_type=bad)):
        with pytest.raises(HubError) as e:
            call()
        assert e.value.code == "BadInput" and "invalid repo_type" in str(e.value)
    assert validate_repo_type(None) == "model"


@pytest.mark.parametrize("repo_type", ["model", "dataset"])
def test_urls_match_huggingface_hub(repo_type):
    from huggingface_hub import hf_hub_url
    endpoint = "https://hub.example.org"
    for path in ("sharegpt_mini.json", "data/train 1.json", "sub/dir/a+b.bin"):
        assert file_url(endpoint + "/", "org/name", SHA1, path, repo_type=repo_type) == hf_hub_url(
            "org/name", path, repo_type=repo_type, revision=SHA1, endpoint=endpoint)
    assert api_url(endpoint, repo_type, "org/name") == f"{endpoint}/api/{repo_type}s/org/name"
    assert file_url(endpoint, "org/name", SHA1, "f") == f"{endpoint}/org/name/resolve/{SHA1}/f"  # default: a model
