"""Parsers of nvidia-smi output, on texts written from the documented formats and on a real H200 capture."""

import json
from pathlib import Path

import pytest

from module_utils.nvidia_smi import (
    NvidiaSmiParseError, driver_major, parse_query_gpu, parse_topology, suggest_profile, summarize_links)

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "nvidia-smi"


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
    assert facts["gpus"] == parse_query_gpu(facts["raw"]["query"])
    assert facts["topology"] == parse_topology(facts["raw"]["topo"])
    assert facts["raw"]["query"] == read("h200-query.txt")
