"""A small venv-shaped tree (sources, byte-code, a symlink, an executable) for the venv manifest, stage, stream and
hash-cache tests."""
import os


def make_tree(root):
    os.makedirs(root / "bin")
    os.makedirs(root / "lib/python3.11/site-packages/pkg/__pycache__")
    (root / "pyvenv.cfg").write_text("home = /usr/bin\n")
    (root / "bin/python").symlink_to("/usr/bin/python3")
    (root / "lib/python3.11/site-packages/pkg/__init__.py").write_text("X = 1\n")
    (root / "lib/python3.11/site-packages/pkg/__pycache__/__init__.cpython-311.pyc").write_bytes(b"junk")
    (root / "bin/tool").write_text("#!/opt/sglang/venv/bin/python\n")
    os.chmod(root / "bin/tool", 0o755)
    (root / "lib64").symlink_to("lib")
    return root
