"""Fixtures shared by unit test files: the lab's git fork (the clone route's tests in test_venv_clone.py and the
clone route's build in test_venv_build.py)."""
import shutil

import pytest


@pytest.fixture(scope="module")
def fork(tmp_path_factory):
    """The lab's stand-in fork (lab/gitfork.py: base on main, + the 0003 DDTree patch on ddtree), a local bare repo."""
    if shutil.which("git") is None:
        pytest.skip("needs git")
    from lab import gitfork
    return gitfork.build_repo(tmp_path_factory.mktemp("fork"))
