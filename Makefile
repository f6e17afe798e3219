# Two commands on a fresh Debian 12 machine (as root):
#   make demo   installs the controller environment, brings the lab up, runs site.yml then the demo sweep on b300-lab
#               (playbooks/vars/demo-sweep.yml: the autoregressive baseline and two speculative configs)
#   make test   lint, unit tests, then the lab integration tests and every role's molecule scenario (two workers)
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
export PATH := $(CURDIR)/$(BIN):$(PATH)
export ANSIBLE_CONFIG := $(CURDIR)/ansible.cfg
export ANSIBLE_ROLES_PATH := $(CURDIR)/roles
export PYTHONPATH := $(CURDIR)
export LAB_NAME ?= default
# Roles with a molecule scenario, run in this order by `make test`.
MOLECULE_ROLES ?= $(patsubst roles/%/molecule/default/molecule.yml,%,$(wildcard roles/*/molecule/default/molecule.yml))
# prometheus: Debian's package is the one that ships promtool (check and unit-test the alert rules in `make unit`).
APT_PACKAGES := debootstrap systemd-container tinyproxy iproute2 iptables openssh-client zstd rsync aria2 curl git \
	patch python3-venv dpkg-dev gnupg prometheus

.PHONY: deps venv lint unit integration molecule test demo bench lock lab-up lab-down lab-status clean

deps: .stamps/apt
.stamps/apt:
	@mkdir -p .stamps
	@missing=""; for p in $(APT_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then echo "apt: installing$$missing"; apt-get update -qq && \
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing >/dev/null; fi
	@touch $@

venv: $(BIN)/.installed
$(BIN)/.installed: requirements.txt constraints.txt
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --disable-pip-version-check -r requirements.txt -c constraints.txt
	@touch $@

lab-up: deps venv
	$(BIN)/python -m lab up
lab-down: venv
	$(BIN)/python -m lab down
lab-status: venv
	$(BIN)/python -m lab status

lint: venv
	$(BIN)/yamllint -s .
	$(BIN)/ansible-lint -q --profile production

unit: venv
	$(BIN)/pytest -q -n 2 tests/unit

# The lab suite, molecule scenarios included (tests/integration/test_molecule.py), on ITEST_WORKERS workers: each
# lab's tests stay together in one worker (tests/integration/conftest.py), the costliest labs are handed out first.
ITEST_WORKERS ?= 2
integration: deps venv
	$(BIN)/pytest -q -n $(ITEST_WORKERS) --durations=40 tests/integration

molecule: deps venv
	@for r in $(MOLECULE_ROLES); do echo "=== molecule test: $$r"; (cd roles/$$r && LAB_NAME=mol-$$r molecule test) || exit 1; done

test: deps venv lint unit integration

demo: deps venv
	$(BIN)/python -m lab up
	$(BIN)/ansible-playbook site.yml -l b300
	$(BIN)/ansible-playbook playbooks/sweep.yml -l b300 -e @playbooks/vars/demo-sweep.yml
	@echo "demo done: the lab stays up (make lab-down removes it); report: results/<run>/report.md (named by the sweep verdict above)"

bench: deps venv
	$(BIN)/python -m bench

# Regenerate the venv flavours' full hashed locks from their pins (FLAVOURS="ddtree" for one; needs PyPI).
lock:
	roles/venv/files/locks/lock.sh $(FLAVOURS)

clean: lab-down
	rm -rf .stamps $(VENV)
