"""nvidia-smi's one home (module_utils/gpu/nvidia_smi.py): its parsers, on texts written from the documented formats
and on a real H200 capture, its GPU query on the recordings, and the rule that no other file builds its argv."""

import ast
import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from ansible.module_utils.evidence.error import EvidenceError
from ansible.module_utils.gpu.nvidia_smi import (
    COMPUTE_APPS_ARGS, GATE_FIELDS, HEALTH_FIELDS, METRICS_FIELDS, QUERY_ARGS, QUERY_FIELDS, READING_FIELDS,
    NvidiaSmiError, NvidiaSmiParseError,
    driver_major, gpu_identity, parse_compute_apps, parse_query_gpu, parse_topology, query_args, query_compute_apps,
    query_gpus, suggest_profile, summarize_links, unknown_field)

ROOT = Path(__file__).resolve().parents[3]
FIX = ROOT / "tests" / "fixtures" / "nvidia-smi"


def read(name):
    return (FIX / name).read_text()


def test_query_8_b300():
    gpus = parse_query_gpu(read("b300-8gpu-nvlink-query.txt"))
    assert [g["index"] for g in gpus] == list(range(8))
    assert {g["compute_capability"] for g in gpus} == {"10.3"}
    assert {g["name"] for g in gpus} == {"NVIDIA B300 SXM6 AC"}
    assert gpus[3]["memory_total_mib"] == 275040
    assert gpus[0]["pci_bus_id"] == "00000000:18:00.0"
    assert driver_major(gpus[0]["driver_version"]) == 580


def test_query_8_rtx_pro_6000():
    gpus = parse_query_gpu(read("ct200-8gpu-pcie-query.txt"))
    assert len(gpus) == 8
    assert gpus[7]["name"] == "NVIDIA RTX PRO 6000 Blackwell Server Edition"
    assert gpus[7]["compute_capability"] == "12.0"


def test_query_name_with_comma_and_na_values():
    gpus = parse_query_gpu("1, GPU-b, [N/A], [Not Supported], 575.51.03, [N/A], Odd, Name, Inc\n"
                           "0, GPU-a, 00000000:01:00.0, 81559, 575.51.03, 9.0, NVIDIA H100 80GB HBM3\n\n")
    assert [g["index"] for g in gpus] == [0, 1]          # sorted by index
    assert gpus[1]["name"] == "Odd, Name, Inc"
    assert gpus[1]["memory_total_mib"] is None and gpus[1]["compute_capability"] is None
    assert gpus[1]["pci_bus_id"] is None


@pytest.mark.parametrize("bad", ["0, GPU-a, 81559", "x, GPU-a, b, 1, 580.1, 9.0, N",
                                 "0, GPU-a, b, lots, 580.1, 9.0, N", "0, GPU-a, b, 1, 580.1, sm90, N"])
def test_query_rejects_other_formats(bad):
    with pytest.raises(NvidiaSmiParseError) as err:
        parse_query_gpu(bad)
    assert bad.split(",")[0] in str(err.value)   # the message quotes the line


def test_driver_major():
    assert driver_major("580.159.04") == 580
    assert driver_major("575.51.03") == 575
    assert driver_major(None) is None
    assert driver_major("[N/A]") is None


def test_topology_8_nvlink():
    topo = parse_topology(read("b300-8gpu-nvlink-topo.txt"))
    assert topo["gpus"] == ["GPU%d" % i for i in range(8)]
    assert topo["nics"] == ["NIC0", "NIC1"]
    assert topo["matrix"]["GPU0"]["GPU0"] == "X"
    assert topo["matrix"]["GPU3"]["GPU6"] == "NV18"
    links = summarize_links(topo)
    assert links["interconnect"] == "nvlink"
    assert links["pairs"] == 28 and links["nvlink_pairs"] == 28 and links["min_nvlinks"] == 18
    profile, reason = suggest_profile(links)
    assert profile == "nvlink" and "28" in reason


def test_topology_8_pcie():
    topo = parse_topology(read("ct200-8gpu-pcie-topo.txt"))
    assert topo["matrix"]["GPU0"]["GPU1"] == "PIX"
    assert topo["matrix"]["GPU0"]["GPU2"] == "NODE"
    assert topo["matrix"]["GPU0"]["GPU7"] == "SYS"
    links = summarize_links(topo)
    assert links["interconnect"] == "pcie"
    assert links["pcie_pairs"] == {"PIX": 4, "NODE": 8, "SYS": 16}
    assert suggest_profile(links)[0] == "pcie"


def test_topology_partial_nvlink_is_pcie_profile():
    text = ("\tGPU0\tGPU1\tGPU2\tGPU3\tCPU Affinity\tNUMA Affinity\n"
            "GPU0\t X \tNV4\tPHB\tPHB\t0-31\t0\n"
            "GPU1\t NV4\t X \tPHB\tPHB\t0-31\t0\n"
            "GPU2\t PHB\tPHB\t X \tNV4\t0-31\t0\n"
            "GPU3\t PHB\tPHB\tNV4\t X \t0-31\t0\n")
    links = summarize_links(parse_topology(text))
    assert links["interconnect"] == "mixed"
    assert links["nvlink_pairs"] == 2 and links["pcie_pairs"] == {"PHB": 4}
    assert suggest_profile(links)[0] == "pcie"


def test_topology_real_h200_single_gpu():
    topo = parse_topology(read("h200-topo.txt"))       # has ANSI underline escapes in the header
    assert topo["gpus"] == ["GPU0"]
    links = summarize_links(topo)
    assert links["interconnect"] == "none" and links["pairs"] == 0
    assert suggest_profile(links)[0] == ""


def test_query_real_h200():
    gpus = parse_query_gpu(read("h200-query.txt"))
    assert len(gpus) == 1
    assert gpus[0]["name"] == "NVIDIA H200"
    assert gpus[0]["compute_capability"] == "9.0"
    assert gpus[0]["memory_total_mib"] == 143771
    assert driver_major(gpus[0]["driver_version"]) >= 580


def test_topology_rejects_garbage():
    with pytest.raises(NvidiaSmiParseError):
        parse_topology("No devices were found\n")
    with pytest.raises(NvidiaSmiParseError):
        parse_topology("\tGPU0\tGPU1\nGPU0\t X\n")


def test_captured_module_json_matches_parsers():
    """The module's result on the H200 equals what the parsers make of the raw text it captured."""
    result = json.loads(read("h200-gpu_facts.json"))["probe"]
    facts = result["gpu_facts"]
    assert facts["raw"]["query_fields"] == list(GATE_FIELDS)
    assert facts["gpus"] == parse_query_gpu(facts["raw"]["query"], facts["raw"]["query_fields"])
    assert facts["topology"] == parse_topology(facts["raw"]["topo"])
    assert facts["raw"]["query"] == read("h200-gate-query.txt")


def test_query_real_h200_gate_fields():
    """The one query gpu_facts makes, as the H200's driver 580.159.04 answered it."""
    gpus = parse_query_gpu(read("h200-gate-query.txt"), GATE_FIELDS)
    assert len(gpus) == 1 and gpus[0]["name"] == "NVIDIA H200" and gpus[0]["compute_capability"] == "9.0"
    assert gpus[0]["health"] == {
        "persistence_mode": "Enabled", "mig.mode.current": "Disabled", "mig.mode.pending": "Disabled",
        "ecc.mode.current": "Enabled", "ecc.errors.uncorrected.volatile.total": "0",
        "ecc.errors.uncorrected.aggregate.total": "0", "retired_pages.pending": "[N/A]",
        "remapped_rows.pending": "No", "remapped_rows.failure": "No", "fabric.state": "N/A", "fabric.status": "N/A"}
    # the base columns are what the base query answered on the same host
    base = parse_query_gpu(read("h200-query.txt"))
    assert [dict(g, health={}) for g in gpus] == base


def test_every_queried_field_is_one_the_driver_documents():
    """Each field name is listed by `nvidia-smi --help-query-gpu` of the H200's driver (580.159.04)."""
    help_text = read("h200-help-query-gpu.txt")
    assert help_text.startswith('List of valid properties to query for the switch "--query-gpu":')
    for field in GATE_FIELDS + METRICS_FIELDS:
        assert '"%s"' % field in help_text, field
    assert set(QUERY_FIELDS) < set(GATE_FIELDS) and set(HEALTH_FIELDS) < set(GATE_FIELDS)
    assert GATE_FIELDS[-1] == "name"                   # the one value that may contain a comma comes last
    assert set(METRICS_FIELDS) == set(GATE_FIELDS) | set(READING_FIELDS) and METRICS_FIELDS[-1] == "name"


def test_metrics_query_on_the_real_h200_recording_keeps_the_readings_as_text():
    """tests/fixtures/nvidia-smi/h200-metrics-query.txt: METRICS_FIELDS asked of the H200 (driver 580.159.04)."""
    (gpu,) = parse_query_gpu(read("h200-metrics-query.txt"), METRICS_FIELDS)
    assert gpu["readings"] == {"power.draw": "80.11", "memory.used": "0", "utilization.gpu": "0",
                               "temperature.gpu": "41"}
    assert gpu["health"]["remapped_rows.failure"] == "No" and gpu["health"]["fabric.state"] == "N/A"
    assert gpu["memory_total_mib"] == 143771 and gpu["name"] == "NVIDIA H200"
    assert "readings" not in parse_query_gpu(read("h200-gate-query.txt"), GATE_FIELDS)[0]


def test_unknown_field_message_as_the_driver_writes_it():
    recorded = read("h200-unknown-field.txt")
    assert recorded.startswith("rc=2\n--- stdout\n")
    assert unknown_field(recorded) == "no.such.field"
    assert unknown_field("Failed to initialize NVML: Driver/library version mismatch") is None
    assert unknown_field("") is None and unknown_field(None) is None


def test_query_args_and_field_lists():
    assert QUERY_ARGS == query_args(QUERY_FIELDS)
    assert query_args(GATE_FIELDS) == ("--query-gpu=" + ",".join(GATE_FIELDS), "--format=csv,noheader,nounits")
    with pytest.raises(ValueError):
        query_args(("index", "name", "uuid"))
    with pytest.raises(ValueError):
        parse_query_gpu("", ("index", "uuid", "name"))          # base fields missing
    with pytest.raises(ValueError):
        parse_query_gpu("", QUERY_FIELDS[:-1] + ("no.such", "name"))


def test_gate_query_needs_every_column():
    line = read("b300-8gpu-nvlink-gate-query.txt").splitlines()[0]
    with pytest.raises(NvidiaSmiParseError) as err:
        parse_query_gpu(line.rsplit(", ", 2)[0], GATE_FIELDS)
    assert "expected %d comma-separated fields" % len(GATE_FIELDS) in str(err.value)
    gpus = parse_query_gpu(read("b300-8gpu-nvlink-gate-query.txt"), GATE_FIELDS)
    assert [dict(g, health={}) for g in gpus] == parse_query_gpu(read("b300-8gpu-nvlink-query.txt"))
    assert {g["health"]["fabric.state"] for g in gpus} == {"Completed"}


# ---------------------------------------------------------------------------------------------------------------
# query_gpus and gpu_identity, on the recordings


def _recorded(name, returncode=0, asked=None):
    """A subprocess.run stand-in that answers with a recording (a *-query.txt, or an `rc= / --- stdout / ---
    stderr` capture such as h200-unknown-field.txt)."""
    text = read(name)
    stdout, stderr = text, ""
    if text.startswith("rc="):
        head, _, rest = text.partition("\n--- stdout\n")
        stdout, _, stderr = rest.partition("--- stderr\n")
        returncode = int(head[3:])

    def run(argv, **kw):
        if asked is not None:
            asked.append((argv, kw))
        return SimpleNamespace(returncode=returncode, stdout=stdout, stderr=stderr)
    return run


@pytest.mark.parametrize("name,identity", [
    ("h200-query.txt", ("NVIDIA H200", "9.0", "580.159.04")),
    ("b300-8gpu-nvlink-query.txt", ("NVIDIA B300 SXM6 AC", "10.3", "580.95.05")),
    ("ct200-8gpu-pcie-query.txt", ("NVIDIA RTX PRO 6000 Blackwell Server Edition", "12.0", "580.95.05")),
])
def test_query_gpus_and_their_identity_from_the_recordings(tmp_path, name, identity):
    smi = tmp_path / "nvidia-smi"
    smi.write_text("")
    asked = []
    gpus = query_gpus(str(smi), _recorded(name, asked=asked), timeout=7)
    assert asked == [([str(smi), *QUERY_ARGS], {"capture_output": True, "text": True, "timeout": 7, "check": False})]
    assert gpus == parse_query_gpu(read(name))
    assert gpu_identity(gpus) == dict(zip(("gpu_name", "compute_capability", "driver_version"), identity))


def test_gpu_identity_of_mixed_unknown_and_no_gpus():
    gpus = parse_query_gpu(read("h200-query.txt")) + parse_query_gpu(read("ct200-8gpu-pcie-query.txt"))
    assert gpu_identity(gpus) == {"gpu_name": "NVIDIA H200+NVIDIA RTX PRO 6000 Blackwell Server Edition",
                                  "compute_capability": "12.0+9.0", "driver_version": "580.159.04+580.95.05"}
    odd = parse_query_gpu("0, GPU-a, [N/A], [N/A], 575.51.03, [N/A], NVIDIA H100 80GB HBM3\n")
    assert gpu_identity(odd)["compute_capability"] == "[N/A]"
    assert gpu_identity([]) == {"gpu_name": "", "compute_capability": "", "driver_version": ""}


def test_query_gpus_without_nvidia_smi_or_with_one_that_fails(tmp_path):
    assert query_gpus(str(tmp_path / "no-such-smi"), _recorded("h200-query.txt")) is None
    assert query_gpus("no-such-nvidia-smi-on-path", _recorded("h200-query.txt")) is None
    smi = tmp_path / "nvidia-smi"
    smi.write_text("")
    with pytest.raises(NvidiaSmiError, match='exited 2: Field "no.such.field" is not a valid field') as err:
        query_gpus(str(smi), _recorded("h200-unknown-field.txt"))
    assert isinstance(err.value, EvidenceError) and err.value.evidence["rc"] == 2
    assert err.value.evidence["argv"] == [str(smi), *QUERY_ARGS]

    def broken(argv, **kw):
        raise OSError(8, "Exec format error")
    with pytest.raises(NvidiaSmiError, match="Exec format error"):
        query_gpus(str(smi), broken)
    old_shape = SimpleNamespace(returncode=0, stdout="NVIDIA H200, 9.0, 580.159.04\n", stderr="")
    with pytest.raises(NvidiaSmiParseError, match="expected 7") as bad:  # another query's answer: 3 columns, not 7
        query_gpus(str(smi), lambda argv, **kw: old_shape)
    assert isinstance(bad.value, EvidenceError) and isinstance(bad.value, ValueError)


def test_compute_apps_parsed_from_the_documented_format():
    # what `--query-compute-apps=pid,gpu_uuid,used_memory,process_name --format=csv,noheader,nounits` prints for a
    # hand-made TP8 server (one scheduler process per GPU) and a process whose path holds a comma
    text = ("812345, GPU-1a2b, 125321, /root/venv_sglang211/bin/python3\n"
            "812346, GPU-3c4d, [N/A], sglang::scheduler_TP1\n"
            "900001, GPU-1a2b, 512, /opt/odd, name/python\n\n")
    assert parse_compute_apps(text) == [
        {"pid": 812345, "gpu_uuid": "GPU-1a2b", "used_memory_mib": 125321,
         "process_name": "/root/venv_sglang211/bin/python3"},
        {"pid": 812346, "gpu_uuid": "GPU-3c4d", "used_memory_mib": None, "process_name": "sglang::scheduler_TP1"},
        {"pid": 900001, "gpu_uuid": "GPU-1a2b", "used_memory_mib": 512, "process_name": "/opt/odd, name/python"}]
    assert parse_compute_apps("") == [] and parse_compute_apps("No running processes found\n") == []
    with pytest.raises(NvidiaSmiParseError, match="expected 4"):
        parse_compute_apps("812345, 125321\n")
    with pytest.raises(NvidiaSmiParseError, match="not a number"):
        parse_compute_apps("pid, GPU-1, 5, x\n")


def test_query_compute_apps_runs_its_one_argv_and_says_none_without_nvidia_smi(tmp_path):
    assert query_compute_apps(str(tmp_path / "no-such-smi")) is None
    smi = tmp_path / "nvidia-smi"
    smi.write_text("")
    asked = []

    def run(argv, **kw):
        asked.append(argv)
        return SimpleNamespace(returncode=0, stdout="7, GPU-x, 100, python\n", stderr="")
    assert query_compute_apps(str(smi), run) == [{"pid": 7, "gpu_uuid": "GPU-x", "used_memory_mib": 100,
                                                  "process_name": "python"}]
    assert asked == [[str(smi), *COMPUTE_APPS_ARGS]]
    failing = SimpleNamespace(returncode=9, stdout="", stderr="NVIDIA-SMI has failed")
    with pytest.raises(NvidiaSmiError, match="exited 9: NVIDIA-SMI has failed"):
        query_compute_apps(str(smi), lambda argv, **kw: failing)


# ---------------------------------------------------------------------------------------------------------------
# nvidia-smi's argv is built here and nowhere else

# Files of module_utils/ (besides gpu/nvidia_smi.py) that still build an nvidia-smi command line, and why. Shrink
# it, never grow it: whoever needs the GPU list calls query_gpus (compile_cache/host.py does).
ARGV_BUILDERS = {
    "gpu/probe.py": "the driver gate's GATE_FIELDS query, asked again without a field the driver does not know, and "
                    "topo -m, through the probe's runner (its tests feed recordings); every argument is "
                    "nvidia_smi.py's "
                    "(query_args, TOPO_ARGS)",
}
ARGV_PIECES = {"QUERY_ARGS", "query_args", "TOPO_ARGS", "CSV_FORMAT"}


def _docstrings(tree):
    return {id(n.body[0].value) for n in ast.walk(tree)
            if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and n.body
            and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}


def nvidia_smi_argv_in(path):
    """Where the file builds an nvidia-smi command line: a list/tuple literal naming nvidia-smi, a string that is one
    of its query flags, or nvidia_smi.py's argument pieces taken to run them itself."""
    tree = ast.parse(path.read_text(), str(path))
    docs = _docstrings(tree)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.List, ast.Tuple)) and any(
                isinstance(e, ast.Constant) and isinstance(e.value, str)
                and (e.value == "nvidia-smi" or e.value.endswith("/nvidia-smi")) for e in node.elts):
            found.append("line %d: an argv naming nvidia-smi" % node.lineno)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs \
                and node.value.startswith(("--query-", "--format=csv", "--help-query")):
            found.append("line %d: the flag %r" % (node.lineno, node.value[:40]))
        elif isinstance(node, ast.ImportFrom) and node.module == "ansible.module_utils.gpu.nvidia_smi":
            pieces = sorted(a.name for a in node.names if a.name in ARGV_PIECES)
            if pieces:
                found.append("line %d: imports %s" % (node.lineno, ", ".join(pieces)))
        elif isinstance(node, ast.Attribute) and node.attr in ARGV_PIECES:
            found.append("line %d: uses .%s" % (node.lineno, node.attr))
    return found


def test_no_file_but_gpu_nvidia_smi_builds_an_nvidia_smi_argv():
    mu = ROOT / "module_utils"
    builders = {}
    for path in sorted(mu.rglob("*.py")):
        rel = path.relative_to(mu).as_posix()
        if rel != "gpu/nvidia_smi.py" and "__pycache__" not in path.parts:
            found = nvidia_smi_argv_in(path)
            if found:
                builders[rel] = found
    assert not any(rel.startswith("compile_cache/") for rel in builders), builders
    unexplained = {rel: found for rel, found in builders.items() if rel not in ARGV_BUILDERS}
    assert not unexplained, "call gpu/nvidia_smi.py (query_gpus) instead: %r" % unexplained
    assert nvidia_smi_argv_in(mu / "gpu" / "nvidia_smi.py")  # the rule sees an argv where there is one


def test_the_rule_sees_an_argv_built_the_old_way(tmp_path):
    old = tmp_path / "old.py"
    old.write_text('argv = [binary, "--query-gpu=name,compute_cap,driver_version", "--format=csv,noheader"]\n'
                   'x = ["nvidia-smi", "-L"]\ny = ("/usr/bin/nvidia-smi", "topo", "-m")\n'
                   'message = ("none: nvidia-smi listed no GPU", "none")\n')
    assert len(nvidia_smi_argv_in(old)) == 4  # the message is no argv


# ---------------------------------------------------------------------------------------------------------------
# GPU power: the query the bench's power sampler runs (module_utils/loadgen/power.py)

def test_power_parsed_from_the_h200_recording_and_its_fields_documented():
    from ansible.module_utils.gpu.nvidia_smi import POWER_ARGS, POWER_FIELDS, parse_power
    assert POWER_ARGS == ("--query-gpu=index,power.draw,power.limit", "--format=csv,noheader,nounits")
    assert parse_power(read("h200-power-query.txt")) == [{"index": 0, "draw_w": 80.94, "limit_w": 700.0}]
    eight = parse_power(read("b300-8gpu-power-query.txt"))
    assert [g["index"] for g in eight] == list(range(8)) and {g["limit_w"] for g in eight} == {1100.0}
    assert parse_power("0, [N/A], [N/A]\n\n") == [{"index": 0, "draw_w": None, "limit_w": None}]
    helptext = read("h200-help-query-gpu.txt")
    for field in POWER_FIELDS:
        assert '"%s"' % field in helptext, field
    with pytest.raises(NvidiaSmiParseError, match="expected 3"):
        parse_power("0, 80.94\n")
    with pytest.raises(NvidiaSmiParseError, match="not a number"):
        parse_power("0, 80.94 W, 700.00 W\n")        # the units a query without nounits adds


def test_query_power_runs_its_one_argv_and_the_fake_host_answers_like_the_recording(tmp_path):
    import sys
    from ansible.module_utils.gpu.nvidia_smi import POWER_ARGS, parse_power, query_power
    assert query_power(str(tmp_path / "absent")) is None
    smi = tmp_path / "nvidia-smi"
    smi.write_text("")
    asked = []
    assert query_power(str(smi), _recorded("h200-power-query.txt", asked=asked)) == parse_power(
        read("h200-power-query.txt"))
    assert asked[0][0] == [str(smi), *POWER_ARGS]
    sys.path.insert(0, str(FIX))
    from fake_host import FakeHost
    host = FakeHost("h200-gate-query.txt", "h200-topo.txt", power="h200-power-query.txt")
    rc, out, _ = host([str(smi), *POWER_ARGS], 10)
    assert rc == 0 and out == read("h200-power-query.txt")
