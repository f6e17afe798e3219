"""ansible.module_utils.venv.manifest: the content manifest that decides whether a venv moves."""
import hashlib
import os

import pytest

from ansible.module_utils.venv import manifest as vm
from tests.helpers.venv_tree import make_tree


def test_scan_lists_files_dirs_links_and_skips_bytecode(tmp_path):
    root = make_tree(tmp_path / "v")
    entries = {e[0]: e for e in vm.scan(str(root))}
    assert entries["."][1] == "d"
    assert entries["bin/python"] == ("bin/python", "l", 0, 0, "/usr/bin/python3")
    assert entries["lib64"][1:] == ("l", 0, 0, "lib")
    tool = entries["bin/tool"]
    assert tool[1:4] == ("f", 0o755, len("#!/opt/sglang/venv/bin/python\n"))
    assert len(tool[4]) == 64
    assert not any("__pycache__" in p or p.endswith(".pyc") for p in entries)


def test_digest_changes_with_content_mode_and_new_files_but_not_bytecode(tmp_path):
    root = make_tree(tmp_path / "v")
    base = vm.digest(vm.scan(str(root)))
    (root / "lib/python3.11/site-packages/pkg/__pycache__/x.pyc").write_bytes(b"other")
    assert vm.digest(vm.scan(str(root))) == base
    f = root / "lib/python3.11/site-packages/pkg/__init__.py"
    f.write_text("X = 2\n")  # same size, other content
    changed = vm.digest(vm.scan(str(root)))
    assert changed != base
    f.write_text("X = 1\n")
    assert vm.digest(vm.scan(str(root))) == base
    os.chmod(f, 0o600)
    assert vm.digest(vm.scan(str(root))) != base
    os.chmod(f, 0o644)
    (root / "new.txt").write_text("")
    assert vm.digest(vm.scan(str(root))) != base


def test_diff_send_delete_same(tmp_path):
    a = make_tree(tmp_path / "a")
    b = make_tree(tmp_path / "b")
    os.chmod(a, 0o755)
    os.chmod(b, 0o755)
    assert vm.diff(vm.scan(str(a)), vm.scan(str(b)))["send"] == []
    (b / "bin/tool").write_text("corrupt")
    (b / "extra").write_text("x")
    (a / "lib/python3.11/site-packages/pkg/new.py").write_text("y = 1\n")
    d = vm.diff(vm.scan(str(a)), vm.scan(str(b)))
    assert d["send"] == ["bin/tool", "lib/python3.11/site-packages/pkg/new.py"]
    assert d["delete"] == ["extra"]
    assert d["send_bytes"] == (a / "bin/tool").stat().st_size + len("y = 1\n")
    ev = vm.first_differences(vm.scan(str(a)), vm.scan(str(b)))
    assert "differs (size, content): bin/tool" in ev and "unexpected: extra" in ev


def test_encode_decode_roundtrip_and_rejects_escapes(tmp_path):
    entries = vm.scan(str(make_tree(tmp_path / "v")))
    text = vm.encode(entries)
    assert isinstance(text, str) and vm.decode(text) == entries
    assert hashlib.sha256(text.encode()).hexdigest() == vm.digest(entries)  # the text is what the digest hashes
    for bad in (["../etc/passwd", "f", 420, 1, "x"], ["/etc/passwd", "f", 420, 1, "x"], ["a", "c", 0, 0, ""],
                ["a/../../x", "f", 420, 1, "x"], ["", "f", 420, 1, "x"]):
        with pytest.raises(vm.ManifestError, match="malformed manifest line"):
            vm.decode(vm.canonical([bad]).decode())
    for bad_text in ("a\tf\n", "a\tf\t644\t1\n", "a\tf\t9x9\t1\tr\n", "a\tf\t644\tbig\tr\n"):
        with pytest.raises(vm.ManifestError, match="malformed manifest line"):
            vm.decode(bad_text)
    with pytest.raises(vm.ManifestError, match="venv_manifest's text"):
        vm.decode([list(e) for e in entries])


def test_a_symlink_target_with_a_newline_is_refused(tmp_path):
    root = make_tree(tmp_path / "v")
    (root / "odd").symlink_to("x\ny")
    with pytest.raises(vm.ManifestError, match="tab or newline"):
        vm.scan(str(root))


def test_describe_missing_and_not_a_venv(tmp_path):
    with pytest.raises(vm.ManifestError, match="does not exist"):
        vm.describe(str(tmp_path / "nope"))
    (tmp_path / "plain").mkdir()
    with pytest.raises(vm.ManifestError, match="is not a venv"):
        vm.describe(str(tmp_path / "plain"))
    assert vm.describe(str(tmp_path / "nope"), must_exist=False)["exists"] is False
    root = make_tree(tmp_path / "v")
    fact = tmp_path / "f.fact"
    fact.write_text('{"content_hash": "abc"}')
    d = vm.describe(str(root), str(fact), with_entries=True)
    assert d["exists"] and d["files"] == 3 and d["provenance"] == {"content_hash": "abc"}
    assert d["digest"] == vm.digest(vm.decode(d["manifest"]))


def test_unsupported_file_type_is_an_error(tmp_path):
    root = make_tree(tmp_path / "v")
    os.mkfifo(root / "fifo")
    with pytest.raises(vm.ManifestError, match="unsupported file type"):
        vm.scan(str(root))


def test_runs_standalone_on_a_host_with_nothing_of_ours(tmp_path):
    """The lab tests and the venv bench send this file alone to a host's python3 (stdin): it imports nothing of ours."""
    import json
    import subprocess
    import sys
    from pathlib import Path
    make_tree(tmp_path)
    src = (Path(vm.__file__)).read_text() + f"\nimport json\nprint(json.dumps(summary(scan({str(tmp_path)!r}))))\n"
    out = subprocess.run([sys.executable, "-I", "-"], input=src, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == json.loads(json.dumps(vm.summary(vm.scan(str(tmp_path)))))
