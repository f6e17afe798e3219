"""ansible.module_utils.venv.clone: the clone route's inputs (one check, shared by venv_build and the role's preflight
through filter_plugins/venv.py), the URL as recorded (credentials stripped), and the fetch of a pinned commit from the
lab's git fork (file URL, dumb HTTP)."""
import subprocess
from pathlib import Path

import pytest
import yaml

from ansible.module_utils.venv import clone as vc
from ansible.module_utils.venv.build_error import BuildError
from filter_plugins.venv import FilterModule, venv_clone_input_problems

ROOT = Path(__file__).resolve().parents[3]
PREFLIGHT = ROOT / "roles/venv/tasks/preflight.yml"
REPO = "https://github.com/o/sglang.git"
SHA = "0" * 40


def _git_out(*args) -> str:
    return subprocess.run(["git", *args], capture_output=True, text=True, check=True).stdout.strip()


# ---------------------------------------------------------------- the inputs: one rule for the module and the role
@pytest.mark.parametrize("repo, commit, subdir, good", [
    (REPO, SHA, "", True),                 # the checkout's root
    (REPO, SHA, "a/b", True),
    (REPO, SHA, "python", True),
    (REPO, SHA, "sub/", False),            # one spelling per directory: the subdir is part of the recipe
    (REPO, SHA, "/abs", False),
    (REPO, SHA, "a/../b", False),
    (REPO, SHA, "../python", False),
    (REPO, SHA, "./python", False),
    (REPO, SHA, "a//b", False),
    (REPO, "A" * 40, "", False),           # the role lowercases the commit before the module sees it
    (REPO, "main", "", False),
    ("relative/fork.git", SHA, "", False),
    ("git@github.com:o/sglang.git", SHA, "python", True),
    ("file:///srv/fork.git", SHA, "", True),
])
def test_the_filter_and_the_module_give_the_same_verdicts(repo, commit, subdir, good):
    problems = venv_clone_input_problems(repo, commit, subdir)
    if good:
        assert problems == []
        vc.check_clone_inputs(repo, commit, subdir)
    else:
        assert problems and all(p.startswith("venv_clone_") for p in problems)
        with pytest.raises(BuildError) as err:
            vc.check_clone_inputs(repo, commit, subdir)
        # the same sentences, named as the module's options instead of the role's variables
        assert str(err.value) == "; ".join(p[len("venv_"):] for p in problems)


def test_every_bad_input_is_named_and_no_credential_is_shown():
    problems = venv_clone_input_problems("https://u:secret@github.com/o/s.git x", "main", "sub/")
    assert [p.split(" ", 1)[0] for p in problems] == ["venv_clone_repo", "venv_clone_commit", "venv_clone_subdir"]
    assert "secret" not in "; ".join(problems)
    assert venv_clone_input_problems(None, None, None)[2].startswith("venv_clone_subdir None")  # not a string
    assert FilterModule().filters()["venv_clone_input_problems"] is venv_clone_input_problems


def _clone_task():
    tasks = yaml.safe_load(PREFLIGHT.read_text())
    return next(t for t in tasks if t["name"].startswith("Check the build source (clone"))


def test_preflight_checks_the_clone_inputs_with_the_modules_own_rule_only():
    """The clone inputs are judged by venv_clone_input_problems, given the commit as install.yml sends it (lowered);
    no Jinja copy of the rule comes back (it drifted once: "sub/" passed the module and failed the role)."""
    task = _clone_task()
    text = yaml.safe_dump(task)
    expr = task["vars"]["venv_clone_problems"]
    assert "venv_clone_repo | venv_clone_input_problems(venv_clone_commit | lower, venv_clone_subdir)" in expr
    for copy in ("normpath", "'..'", "venv_clone_subdir.split", "venv_clone_subdir is", "venv_clone_commit is",
                 "venv_clone_repo is", "[0-9a-f"):
        assert copy not in text, f"preflight.yml checks the clone inputs in Jinja again ({copy!r})"
    install = (ROOT / "roles/venv/tasks/install.yml").read_text()
    assert "clone_commit: \"{{ venv_clone_commit | lower if venv_source == 'clone' else omit }}\"" in install
    assert "clone_subdir: \"{{ venv_clone_subdir if venv_source == 'clone' else omit }}\"" in install


def test_strip_credentials():
    assert vc.strip_credentials("https://user:tok@github.com/o/sglang.git") == "https://github.com/o/sglang.git"
    assert vc.strip_credentials("https://ghp_token@github.com/o/sglang.git") == "https://github.com/o/sglang.git"
    assert vc.strip_credentials("ssh://git:pw@host:2222/o/s.git") == "ssh://git@host:2222/o/s.git"
    for same in ("ssh://git@host/o/s.git", "git@github.com:o/sglang.git", "file:///srv/fork.git", "/srv/fork.git",
                 "http://10.213.0.1:8092/fork.git"):
        assert vc.strip_credentials(same) == same


# ---------------------------------------------------------------- the fetch of a pinned commit
def test_fetch_commit_depth1_from_a_file_url(fork, tmp_path):
    url = f"file://{fork['path']}"
    got = vc.fetch_commit(url, fork["commit"], str(tmp_path / "co"))
    assert got == {"commit": fork["commit"], "fetch": "depth1", "dir": str(tmp_path / "co")}
    assert (tmp_path / "co/sglang_standin/server_args_patch.py").is_file()  # the fork's DDTree patch
    assert _git_out("-C", str(tmp_path / "co"), "rev-list", "--count", "HEAD") == "1"  # shallow: one commit
    assert url not in (tmp_path / "co/.git/config").read_text()  # the URL is not stored in the checkout
    # a fresh checkout every time: what the previous fetch or a build left there goes
    (tmp_path / "co/stray").write_text("x")
    base = vc.fetch_commit(fork["path"], fork["base_commit"], str(tmp_path / "co"))
    assert base["commit"] == fork["base_commit"] and not (tmp_path / "co/stray").exists()
    assert not (tmp_path / "co/sglang_standin/server_args_patch.py").exists()


def test_fetch_commit_falls_back_to_a_full_fetch_over_dumb_http(fork, tmp_path):
    """git's dumb HTTP protocol (a static server of the bare repo, as the lab serves it) has no shallow fetch."""
    import threading
    from lab import gitfork
    server = gitfork.serve(str(Path(fork["path"]).parent), "127.0.0.1", 0)
    server.server_activate()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/{gitfork.REPO_NAME}"
        got = vc.fetch_commit(url, fork["commit"], str(tmp_path / "co"))
        assert got["fetch"] == "full" and got["commit"] == fork["commit"]
        # a commit that is not a branch tip: found in the full history
        assert vc.fetch_commit(url, fork["base_commit"], str(tmp_path / "co2"))["commit"] == fork["base_commit"]
        with pytest.raises(BuildError, match="shallow.* no branch or tag there contains it") as err:
            vc.fetch_commit(url.replace("http://", "http://user:s3cret@"), "1" * 40, str(tmp_path / "co3"))
        assert "1" * 40 in str(err.value) and "s3cret" not in str(err.value)
    finally:
        server.shutdown()
        server.server_close()


def test_fetch_commit_refuses_a_wrong_sha(fork, tmp_path):
    with pytest.raises(BuildError, match=f"commit {'2' * 40} is not in") as err:
        vc.fetch_commit(fork["path"], "2" * 40, str(tmp_path / "co"))
    assert fork["path"] in str(err.value)


def test_fetch_commit_fails_when_head_is_not_the_pin(fork, tmp_path, monkeypatch):
    monkeypatch.setattr(vc, "_git_head", lambda dest, env: fork["base_commit"])
    with pytest.raises(BuildError) as err:
        vc.fetch_commit(fork["path"], fork["commit"], str(tmp_path / "co"))
    assert f"is at {fork['base_commit']}, not the pinned commit {fork['commit']}" in str(err.value)


def test_the_lab_fork_has_stable_commits(fork, tmp_path):
    from lab import gitfork
    again = gitfork.build_repo(tmp_path)
    assert (again["commit"], again["base_commit"]) == (fork["commit"], fork["base_commit"])
    assert _git_out("--git-dir", again["path"], "rev-parse", "ddtree", "main") == \
        f"{fork['commit']}\n{fork['base_commit']}"
    assert (Path(again["path"]) / "info/refs").is_file()  # ready for dumb HTTP
