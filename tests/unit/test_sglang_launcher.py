"""roles/sglang_service/files/.../launch.py: runs a module like `python -m`, adds --api-key from the environment,
keeps the key out of /proc/<pid>/cmdline and the environment of children, and redacts it from stdout/stderr."""
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LAUNCHER = ROOT / "roles/sglang_service/files/usr/local/libexec/sglang-service/launch.py"
PROBE = '''
import os, sys
print("argv", sys.argv[1:])
print("key-in-env", "SGLANG_SERVICE_API_KEY" in os.environ)
print("cmdline", open("/proc/self/cmdline", "rb").read().replace(b"\\0", b" ").decode())
sys.stderr.write("stderr sees %s\\n" % sys.argv[-1])
raise SystemExit(3)
'''


def run(tmp_path, env_key=None):
    (tmp_path / "probe_mod.py").write_text(PROBE)
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    env.pop("SGLANG_SERVICE_API_KEY", None)
    if env_key:
        env["SGLANG_SERVICE_API_KEY"] = env_key
    return subprocess.run([sys.executable, str(LAUNCHER), "probe_mod", "--port", "1"], capture_output=True, text=True,
                          env=env, timeout=30)


def test_key_appended_but_never_visible(tmp_path):
    proc = run(tmp_path, "k-very-secret")
    assert proc.returncode == 3  # the module's own exit status
    assert "k-very-secret" not in proc.stdout + proc.stderr
    assert "argv ['--port', '1', '--api-key', '[REDACTED]']" in proc.stdout
    assert "key-in-env False" in proc.stdout
    assert "cmdline" in proc.stdout and "--api-key" not in proc.stdout.split("cmdline", 1)[1]
    assert "stderr sees [REDACTED]" in proc.stderr


def test_without_key_argv_untouched(tmp_path):
    proc = run(tmp_path)
    assert "argv ['--port', '1']" in proc.stdout


def test_usage_without_module():
    proc = subprocess.run([sys.executable, str(LAUNCHER)], capture_output=True, text=True, timeout=30)
    assert proc.returncode != 0 and "usage" in proc.stderr
