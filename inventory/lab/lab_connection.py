#!/usr/bin/env python3
"""Dynamic inventory part: connection variables of the running lab.

Reads .lab/<LAB_NAME or "default">/state.json written by `python -m lab up` and returns, for each lab host,
ansible_host (its bridge address), ansible_user, the lab's own SSH key and the lab's known_hosts (host keys checked). Groups come from hosts.yml.
Prints an empty inventory when the lab is down, so parsing never fails and never names an outside address.
"""
import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--host":
        print("{}")
        return 0
    name = os.environ.get("LAB_NAME", "default")
    state_dir = Path(os.environ.get("LAB_STATE_DIR", ROOT / ".lab")) / name
    hostvars = {}
    try:
        state = json.loads((state_dir / "state.json").read_text())
    except (OSError, ValueError):
        state = {}
    known_hosts = state.get("known_hosts") or str(state_dir / "known_hosts")
    for host in state.get("hosts", {}).values():
        hostvars[host["name"]] = {
            "ansible_host": host["address"],
            "ansible_user": "root",
            "ansible_ssh_private_key_file": state["ssh_key"],
            # the lab's own known_hosts (every host's keys, read from its rootfs at creation): keys are checked
            "ansible_ssh_common_args": f"-o StrictHostKeyChecking=yes -o UserKnownHostsFile={known_hosts} -o LogLevel=ERROR",
            "lab_name": name,
            "lab_gateway": state["gateway"],
            "lab_proxy_url": state["proxy_url"],
            # Test doubles on the gateway: lab_services.testhub.url is the Hub endpoint (HF_ENDPOINT) in the lab.
            "lab_services": state.get("services", {}),
        }
    print(json.dumps({"_meta": {"hostvars": hostvars}, "lab": {"hosts": sorted(hostvars)}}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
