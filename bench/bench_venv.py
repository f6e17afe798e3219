"""Venv stream: a 1 GiB venv from ct200-lab to b300-lab, against baselines measured in the same run.

Every ssh connection that carries the venv, ours and the baselines' alike, uses the role's cipher preference
(roles/venv/defaults/main.yml venv_stream_ssh_ciphers, read from that file: AES-GCM first), so no method wins or loses
by its cipher.
Baselines (same lab, same hosts, same cold target, same page-cache-warm source, same ssh cipher):
  raw          ssh src 'tar c' | ssh dst 'tar x'         relayed by the controller, like our default path
  rsync        ssh src "rsync -a -e 'ssh -c C' V/ dst:V/"  host to host (first copy, then a no-op rerun)
  raw default  raw with ssh's own cipher choice          context only: how much of a difference is the cipher
Ours (engine = the modules' code over ssh without Ansible's per-task overhead: manifest on the source + stage
prepare on the target + venv_stream.stream + verify-and-swap; the module steps run over one persistent
connection per host, as the role's tasks run over the connection Ansible keeps for the play, while the stream
opens its own ssh connections, as in the role):
  engine        the role's defaults: zstd "auto" (plain tar on these 2-CPU hosts), via the controller, hash cache
                (the unchanged source venv is not re-read; every received file is hashed as it is written)
  engine zstd1  zstd -1 forced (what "auto" picks on a source with >= 8 CPUs, and what a slow link wants)
  engine h2h    the defaults, host to host (--via direct): compare with rsync, which is host to host too
  engine full   (run once) no hash cache: both sides read and hash everything (venv_hash_cache_dir: "")
  role          the whole `playbooks/venv.yml` run (venv_method=stream), Ansible overhead included
  no-op         a second engine run against an identical target (both manifests hashed, nothing moves) vs rsync
Ratios are baseline_seconds / our_seconds: >= 1.00 means ours is as fast or faster. Goals (median of the rounds):
engine >= 0.9x raw and >= 1.0x rsync; engine h2h >= 1.0x rsync.
The bench lab's ct200-lab gets the lab key so that it can reach b300-lab (host-to-host paths only).
"""
from __future__ import annotations

import json
import os
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
import yaml  # noqa: E402

from bench import goals  # noqa: E402
from lab.lab import Lab  # noqa: E402
import local_module_utils  # noqa: E402

local_module_utils.install()
from ansible.module_utils.venv import stream as venv_stream  # noqa: E402

LAB = "bench-venv"
V = "/opt/sglang/venv"
STAGE = "/opt/sglang/.venv.stage"
SIZE_MB = 1024
KEY_ON_SRC = "/root/.ssh/bench_key"
SSH_OPTS = "-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o LogLevel=ERROR -o BatchMode=yes"
CACHE = "/var/cache/sglang-venv"
CONTROL_DIR = "/tmp/bench-venv-ssh"
REPS = 1
ROUNDS = int(os.environ.get("BENCH_VENV_ROUNDS", "3"))
ROLE_DEFAULTS = ROOT / "roles" / "venv" / "defaults" / "main.yml"
VS_RAW = goals.Goal("bench_venv", "venv 1 GiB stream (role defaults, via controller) vs raw ssh|tar (same cipher), "
                    "median", ">=", 0.9)
VS_RSYNC = goals.Goal("bench_venv", "venv 1 GiB stream (role defaults, via controller) vs rsync (same cipher), "
                      "median", ">=", 1.0)
H2H_VS_RSYNC = goals.Goal("bench_venv", "venv 1 GiB stream host to host vs rsync (same cipher), median", ">=", 1.0)
GOALS = [VS_RAW, VS_RSYNC, H2H_VS_RSYNC]


def role_ciphers(path: Path = ROLE_DEFAULTS) -> str:
    """The role's ssh cipher preference (venv_stream_ssh_ciphers in its defaults), what every method here uses."""
    value = (yaml.safe_load(path.read_text()) or {}).get("venv_stream_ssh_ciphers")
    if not isinstance(value, str) or not value or "{" in value:
        raise ValueError(f"{path}: venv_stream_ssh_ciphers must be a literal, non-empty comma list of ciphers for "
                         f"the baselines to use the same cipher as ours; got {value!r}")
    return value


CIPHERS = role_ciphers()


def quiet(*_):
    pass


class Bench:
    def __init__(self, lab: Lab):
        self.lab = lab
        self.state = lab.state()
        self.addr = {h: v["address"] for h, v in self.state["hosts"].items()}

    def conn(self, host: str) -> dict:
        return {"name": host, "host": self.addr[host], "user": "root", "key": self.state["ssh_key"],
                "common_args": SSH_OPTS}

    def ssh(self, host: str, cmd: str, **kw) -> str:
        return self.lab.ssh(host, cmd, state=self.state, timeout=900, **kw).stdout

    def module_ssh(self, host: str) -> list[str]:
        """ssh for the module steps: over a persistent connection per host, like the role's tasks, which run over
        the connection Ansible keeps open for the play (ansible.cfg: ControlMaster=auto, ControlPersist=120s)."""
        return ["ssh", "-i", self.state["ssh_key"], *SSH_OPTS.split(), "-o", "ControlMaster=auto",
                "-o", f"ControlPath={CONTROL_DIR}/%h", "-o", "ControlPersist=300", f"root@{self.addr[host]}"]

    def open_connections(self):
        """The play's connections to both hosts (the role's earlier tasks opened them; not part of any timing)."""
        os.makedirs(CONTROL_DIR, mode=0o700, exist_ok=True)
        for h in self.addr:
            subprocess.run(self.module_ssh(h) + ["true"], check=True, timeout=60)

    def close_connections(self):
        for h in self.addr:
            subprocess.run(self.module_ssh(h)[:-1] + ["-O", "exit", f"root@{self.addr[h]}"], capture_output=True,
                           check=False, timeout=60)

    def py(self, host: str, code: str, data=None):
        """Run code with the repo's module_utils (copied to /tmp/vu) on host; JSON in on stdin, JSON out."""
        out = subprocess.run(self.module_ssh(host) + ["PYTHONPATH=/tmp/vu python3 -c " + shlex.quote(code)],
                             input=json.dumps(data) if data is not None else "", capture_output=True, text=True,
                             timeout=900, check=False)
        if out.returncode != 0:
            raise RuntimeError(f"{host}: module step failed ({out.returncode}): {out.stderr[-2000:]}")
        return json.loads(out.stdout.strip().splitlines()[-1])

    def setup(self) -> dict:
        for h in self.addr:
            self.ssh(h, "mkdir -p /tmp/vu/ansible/module_utils/venv && touch /tmp/vu/ansible/__init__.py "
                        "/tmp/vu/ansible/module_utils/__init__.py /tmp/vu/ansible/module_utils/venv/__init__.py")
            for f in ("manifest.py", "stage.py", "receive.py", "bytecode.py"):
                self.ssh(h, f"cat > /tmp/vu/ansible/module_utils/venv/{f}",
                         input=(ROOT / "module_utils" / "venv" / f).read_text())
        key = Path(self.state["ssh_key"]).read_text()
        self.ssh("ct200-lab", f"install -m 600 /dev/stdin {KEY_ON_SRC}", input=key)
        # a 1 GiB venv of real files: the stdlib (many small .py) and shared libraries (ELF, like torch's .so)
        make = f"""set -e
rm -rf {V}; python3 -m venv --without-pip {V}; SP={V}/lib/python3.11/site-packages; i=0
while [ "$(du -sm {V} | cut -f1)" -lt {SIZE_MB} ]; do
  cp -a /usr/lib/python3.11 $SP/stdlib$i; cp -a /usr/lib/x86_64-linux-gnu $SP/libs$i; i=$((i+1))
  find {V} -name __pycache__ -prune -exec rm -rf {{}} +; done
"""
        self.ssh("ct200-lab", make)
        return self.py("ct200-lab", "from ansible.module_utils.venv.manifest import scan, summary; import json; "
                       f"print(json.dumps(summary(scan({V!r}))))")

    def clean_target(self):
        self.ssh("b300-lab", f"rm -rf {V} {STAGE} /opt/sglang/.venv.old {CACHE}; mkdir -p /opt/sglang; sync")
        # This machine's ext4 has no journal, and ext4 without one does not hand out an inode deleted in the last
        # 60 s (360 s while its inode-table block is dirty) as long as that block is cached: right after the rm above,
        # each of the next run's 25k file creations scans past the inodes just deleted (tar -x of this venv: 18.9 s
        # instead of 2.7 s). Dropping the caches gives every method the same cold target; the source venv is then
        # read once so that every method starts from a page-cache-warm source.
        Path("/proc/sys/vm/drop_caches").write_text("3\n")
        self.ssh("ct200-lab", f"tar -C {V} -cf - . | wc -c")  # through a pipe: tar skips the reads for /dev/null

    def timed(self, fn) -> float:
        best = None
        for _ in range(REPS):
            self.clean_target()
            t0 = time.monotonic()
            fn()
            dt = time.monotonic() - t0
            best = dt if best is None else min(best, dt)
        return best

    # ---------------------------------------------------------------- baselines
    def raw(self, ciphers: str = CIPHERS):
        """ciphers: the role's preference (the baseline, the same as ours); "" = ssh's own choice (context)."""
        c = {"ciphers": ciphers} if ciphers else {}
        src = venv_stream.ssh_argv({**self.conn("ct200-lab"), **c}, f"tar -C {V} -cf - .")
        dst = venv_stream.ssh_argv({**self.conn("b300-lab"), **c}, f"mkdir -p {V} && tar -C {V} -xf -")
        s = subprocess.Popen(src, stdout=subprocess.PIPE)
        d = subprocess.Popen(dst, stdin=s.stdout)
        s.stdout.close()
        assert d.wait() == 0 and s.wait() == 0

    def raw_h2h(self):
        inner = (f"ssh -c {shlex.quote(CIPHERS)} -i {KEY_ON_SRC} {SSH_OPTS} root@{self.addr['b300-lab']} "
                 f"'mkdir -p {V} && tar -C {V} -xf -'")
        self.ssh("ct200-lab", f"tar -C {V} -cf - . | {inner}")

    def rsync(self):
        rsh = f"ssh -c {CIPHERS} -i {KEY_ON_SRC} {SSH_OPTS}"
        self.ssh("ct200-lab", f"rsync -a --delete -e {shlex.quote(rsh)} {V}/ root@{self.addr['b300-lab']}:{V}/")

    # ---------------------------------------------------------------- ours
    def prepare(self, manifest: str, cache=""):
        return self.py("b300-lab", "import json, sys; from ansible.module_utils.venv.stage import prepare; "
                       "from ansible.module_utils.venv.manifest import decode; "
                       f"print(json.dumps(prepare({V!r}, decode(json.load(sys.stdin)), cache_dir={cache!r})))",
                       manifest)

    def source_manifest(self, cache="") -> str:
        """The manifest as the venv_manifest module returns it to the play (its canonical text)."""
        return self.py("ct200-lab", "import json; from ansible.module_utils.venv.manifest import encode, scan; "
                       f"print(json.dumps(encode(scan({V!r}, cache_dir={cache!r}))))")

    def commit(self, digest, cache=""):
        return self.py("b300-lab", "import json; from ansible.module_utils.venv.stage import commit; "
                       f"print(json.dumps(commit({V!r}, {digest!r}, cache_dir={cache!r}, bytecode=False)))")

    def direct_dst(self) -> dict:
        return {"host": self.addr["b300-lab"], "user": "root", "key": KEY_ON_SRC, "common_args": SSH_OPTS}

    def engine(self, level="auto", cache=CACHE, via="controller") -> tuple[float, dict]:
        from ansible.module_utils.venv.manifest import decode, digest
        parts = {}
        t0 = time.monotonic()
        entries = self.source_manifest(cache)
        parts["manifest_src"] = time.monotonic() - t0
        t = time.monotonic()
        st = self.prepare(entries, cache)
        parts["prepare_dst"] = time.monotonic() - t
        if not st["in_sync"]:
            t = time.monotonic()
            rep = venv_stream.stream(self.conn("ct200-lab"),
                                     self.direct_dst() if via == "direct" else self.conn("b300-lab"),
                                     V, STAGE, None if st["full"] else st["send"], zstd_level=level, via=via,
                                     ciphers=CIPHERS)
            parts["transfer"] = time.monotonic() - t
            parts["zstd"] = rep.get("compressed")
            t = time.monotonic()
            c = self.commit(digest(decode(entries)), cache)
            parts["verify_swap"] = time.monotonic() - t
            parts["how"] = c["how"]
            parts["reread_at_commit"] = f"{c['hashed_at_commit_bytes'] / 1e6:.1f} MB"
        parts["in_sync"] = st["in_sync"]
        return time.monotonic() - t0, parts

    def role(self) -> float:
        self.clean_target()
        env = {**os.environ, "LAB_NAME": LAB, "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"), "PYTHONPATH": str(ROOT)}
        cmd = [str(Path(sys.executable).parent / "ansible-playbook"), "-i", "inventory/lab", "playbooks/venv.yml",
               "-l", "b300-lab", "-e", json.dumps({"venv_method": "stream", "venv_stream_source": "ct200-lab",
                                                   # a synthetic venv: nothing to import, no patch series,
                                                   # no parser to extract a flag schema from
                                                   "venv_flavour": "upstream", "venv_import_checks": [],
                                                   "venv_schema_module": ""})]
        t0 = time.monotonic()
        out = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
        dt = time.monotonic() - t0
        if out.returncode != 0:
            print(out.stdout[-3000:])
            raise RuntimeError("role run failed")
        return dt


def stats(xs: list[float]) -> str:
    xs = sorted(xs)
    return f"best {xs[0]:.2f}s median {statistics.median(xs):.2f}s of {len(xs)}"


def load() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


def main() -> int:
    lab = Lab(LAB)
    lab.up(log=quiet)
    b = None
    try:
        b = Bench(lab)
        b.open_connections()
        info = b.setup()
        mb = info["bytes"] / 1e6
        print(f"venv: {info['files']} files, {mb:.0f} MB ({info['bytes'] / (1 << 30):.2f} GiB); load average {load()} "
              f"on {os.cpu_count()} cores (the lab hosts share them). {ROUNDS} rounds, methods interleaved (A B C, "
              "C B A, ...), every run onto a cold target (venv, stage and hash cache removed, then sync); ratios "
              "use the median of each (best in brackets).", flush=True)
        b.source_manifest(CACHE)  # primes the source's hash cache: the same state for every round
        res: dict[str, list[float]] = {"raw": [], "raw default": [], "engine": [], "engine zstd1": [], "rsync": [],
                                       "engine h2h": []}
        parts_seen: dict[str, list] = {k: [] for k in res}

        def engine(name, level="auto", **kw):
            def run():
                b.clean_target()
                t, parts = b.engine(level, **kw)
                parts_seen[name].append((t, parts))
                return t
            return run

        steps = [("raw", lambda: b.timed(b.raw)), ("raw default", lambda: b.timed(lambda: b.raw(""))),
                 ("engine", engine("engine")),
                 ("engine zstd1", engine("engine zstd1", level=1)), ("rsync", lambda: b.timed(b.rsync)),
                 ("engine h2h", engine("engine h2h", via="direct"))]
        for r in range(ROUNDS):  # order reversed every other round: write-back of the previous run hits both
            for name, fn in (steps if r % 2 == 0 else steps[::-1]):
                res[name].append(fn())
            print(f"  round {r + 1} (load {load()}): " + ", ".join(f"{k} {v[-1]:.2f}s" for k, v in res.items()),
                  flush=True)
        med = {k: statistics.median(v) for k, v in res.items()}
        best = {k: min(v) for k, v in res.items()}

        def ratio(base, ours):
            return f"{med[base] / med[ours]:.2f}x {base} [best {best[base] / best[ours]:.2f}x]"

        print(f"ssh cipher preference of ours and of every baseline ({ROLE_DEFAULTS.relative_to(ROOT)}): {CIPHERS}")
        print(f"baseline raw ssh src tar | ssh dst tar (via controller): {stats(res['raw'])} ({mb / med['raw']:.0f} MB/s)")
        print(f"baseline rsync -a host to host:                         {stats(res['rsync'])} "
              f"({mb / med['rsync']:.0f} MB/s)")
        print(f"context: raw with ssh's own cipher choice:              {stats(res['raw default'])} "
              f"({mb / med['raw default']:.0f} MB/s; ours vs it: {med['raw default'] / med['engine']:.2f}x)")
        parts_seen["engine full"] = []
        res["engine full"] = [engine("engine full", cache="")()]  # once: both sides read everything
        med["engine full"] = best["engine full"] = res["engine full"][0]
        for name, what in (("engine", "the role's defaults: zstd auto, via controller, hash cache"),
                           ("engine zstd1", "zstd -1 forced (for slow links), via controller, hash cache"),
                           ("engine h2h", "zstd auto, host to host, hash cache"),
                           ("engine full", "zstd auto, via controller, no hash cache: both sides read everything")):
            p = sorted(parts_seen[name], key=lambda x: x[0])[len(parts_seen[name]) // 2][1]
            detail = ", ".join(f"{k} {v:.2f}s" if isinstance(v, float) else f"{k} {v}" for k, v in p.items())
            print(f"ours {name} ({what}): {stats(res[name])} -> {ratio('raw', name)} (goal >= 0.9), "
                  f"{ratio('rsync', name)} (goal >= 1.0) [{detail}]", flush=True)
        for goal, base, ours in ((VS_RAW, "raw", "engine"), (VS_RSYNC, "rsync", "engine"),
                                 (H2H_VS_RSYNC, "rsync", "engine h2h")):
            goals.record(goal, med[base] / med[ours],
                         note=f"{ours} {med[ours]:.2f} s vs {base} {med[base]:.2f} s, median of {ROUNDS} "
                              f"(best {best[base] / best[ours]:.2f}x)")
        t0 = time.monotonic()
        b.rsync()  # target identical now (rsync made it): the rsync no-op
        rsync_noop = time.monotonic() - t0
        b.clean_target()
        b.engine()
        noops = {}
        for name, cache in (("hash cache", CACHE), ("full hashing", "")):
            noop, parts = b.engine(cache=cache)
            assert parts["in_sync"], parts
            noops[name] = noop
        print(f"no-op (identical target): rsync {rsync_noop:.2f}s (size+mtime quick check); ours with the hash cache "
              f"{noops['hash cache']:.2f}s -> {rsync_noop / noops['hash cache']:.2f}x rsync; ours hashing "
              f"{mb:.0f} MB on both sides {noops['full hashing']:.2f}s -> {rsync_noop / noops['full hashing']:.2f}x",
              flush=True)
        if os.environ.get("BENCH_VENV_ROLE", "1") == "1":
            role = b.role()
            print(f"whole role run (ansible-playbook, stream to a cold target): {role:.2f}s -> "
                  f"{med['raw'] / role:.2f}x raw, {med['rsync'] / role:.2f}x rsync (Ansible task overhead included)")
        print(f"load average at the end: {load()}")
        return 0
    finally:
        if b is not None:
            b.close_connections()
        lab.down(log=quiet)


if __name__ == "__main__":
    sys.exit(goals.standalone("bench_venv", main, GOALS))
