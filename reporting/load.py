"""Read a run directory: every *.jsonl below it, rows sorted into benchmark (matrix) cells, shrinking-batch soak
cells, sweep configs and the lossless gate's outputs."""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Run:
    name: str
    cells: list = field(default_factory=list)      # kind == "cell": one benchmark cell each
    configs: list = field(default_factory=list)    # kind == "config": one sweep config outcome each
    problems: list = field(default_factory=list)   # unreadable lines, named with file:line
    soak: list = field(default_factory=list)       # kind == "cell", phase == "soak": shrinking-batch soak cells
    gate: list = field(default_factory=list)       # kind == "gate": the lossless gate's greedy outputs
    lossless_min_agreement: float | None = None        # the lossless gate's tolerance given to the report (else recorded)

    def config_names(self):
        """Config names in first-seen order (sweep order), from outcomes first, then cells."""
        names = []
        for row in [r for r in self.configs if not r.get("phase")] + self.cells:
            name = row.get("config") or "default"
            if name not in names:
                names.append(name)
        return names

    def cells_of(self, config, host=None):
        return [c for c in self.cells if (c.get("config") or "default") == config
                and (host is None or c.get("host") == host)]

    def outcome_of(self, config, host=None):
        """The config's sweep outcome row (last one wins), or None for a plain bench run."""
        found = None
        for row in self.configs:
            if row.get("phase"):
                continue
            if row.get("config") == config and (host is None or row.get("host") == host):
                found = row
        return found

    def for_host(self, host):
        """The same run restricted to one host's rows (a sweep on several hosts is reported host by host)."""
        return Run(name=self.name, cells=[c for c in self.cells if c.get("host") == host],
                   configs=[c for c in self.configs if c.get("host") == host], problems=list(self.problems),
                   soak=[c for c in self.soak if c.get("host") == host],
                   gate=[g for g in self.gate if g.get("host") == host], lossless_min_agreement=self.lossless_min_agreement)

    def soak_of(self, config, host=None):
        return [c for c in self.soak if (c.get("config") or "default") == config
                and (host is None or c.get("host") == host)]

    def hosts(self):
        hosts = []
        for row in self.configs + self.cells + self.soak:
            host = row.get("host")
            if host and host not in hosts:
                hosts.append(host)
        return hosts


def load_run(run_dir) -> Run:
    run_dir = Path(run_dir)
    run = Run(name=run_dir.name)
    for path in sorted(run_dir.rglob("*.jsonl")):
        for number, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except ValueError as exc:
                run.problems.append(f"{path.relative_to(run_dir)}:{number}: not JSON ({exc})")
                continue
            if not isinstance(row, dict):
                run.problems.append(f"{path.relative_to(run_dir)}:{number}: not an object")
                continue
            kind = row.get("kind")
            if kind == "cell" and row.get("phase") == "soak":
                run.soak.append(row)        # never a matrix cell: no speedup, no winner, only the soak section
            elif kind == "cell":
                run.cells.append(row)
            elif kind == "config":
                run.configs.append(row)
            elif kind == "gate":
                run.gate.append(row)
            else:
                run.problems.append(f"{path.relative_to(run_dir)}:{number}: unknown kind {kind!r}")
    return run
