#!/usr/bin/python
"""Ansible module: build the venv (the flavour's full lock, local packages, patch series) into the stage."""
from __future__ import annotations

DOCUMENTATION = r"""
module: venv_build
short_description: Build a patched venv into the staging directory, unless the live venv already matches
description:
  - Checks the lock first (module_utils/venv/lock.py) - every line one exact C(name==version) with
    C(--hash=sha256:) hashes, no include, editable, URL or option but the index ones - and fails naming the first
    line that is not, before anything is made. Local packages and the clone route's checkout must find their build
    backend and dependencies in the lock (read from their pyproject.toml where the host's python has tomllib).
  - Computes the recipe hash (flavour, python version, the lock's canonical form, the install mode, local package
    trees, patch series, pip arguments, flag schema module). When the provenance fact records the same recipe and the live venv
    still has the content hash recorded with it, nothing happens (C(changed=false)).
  - Otherwise builds in C(.<name>.stage), bind-mounted over the live path in a private mount namespace so
    that shebangs carry the live path; installs the lock with C(pip install --require-hashes --no-deps --only-binary
    :all:) (a file whose sha256 is not in the lock fails the build, naming the package), then the local packages and
    the checkout with C(--no-deps --no-build-isolation), runs C(pip check); writes no byte-code (venv_commit compiles
    the stage before the swap); applies the patch series to site-packages; checks the imports; writes
    the venv's flag schema (C(<venv>/sglang-flag-schema.json)), extracted from the venv's own argparse parser
    after the patches by module_utils/sglang/schema_extract.py run with the venv's python, so the schema is part
    of the venv's content. The live venv is untouched; venv_commit swaps the stage in.
  - Clone route (C(clone_repo) given) - build from a fork at a pinned commit instead of a patch series on the
    pinned base. Only when a build is needed, the host fetches exactly C(clone_commit) into C(clone_dir) (git init,
    C(git fetch --depth 1 <url> <sha>), checkout of FETCH_HEAD; a full fetch of the branches and tags when the
    server refuses a fetch by sha, as git's dumb HTTP protocol does), requires C(git rev-parse HEAD) to be the
    pin, and pip installs C(<clone_dir>/<clone_subdir>) after the lock and local packages. No patch series
    applies (a non-empty series fails). The commit, subdir and URL (credentials stripped) are part of the recipe.
    Check mode reports what would be fetched and fetches nothing.
options:
  path: {description: Absolute live venv path., type: path, required: true}
  python: {description: Base interpreter for python -m venv., type: path, default: /usr/bin/python3}
  flavour: {description: Flavour name (recorded in the recipe)., type: str, required: true}
  lock: {description: "The flavour's full lock on the target (every package, exact version, sha256 hashes).", type: path, required: true}
  local_packages: {description: Local package source trees on the target to pip install., type: list, elements: path, default: []}
  patch_dir: {description: Patch series directory on the target., type: path, required: true}
  require_patches: {description: Fail when the patch directory is missing or empty., type: bool, default: false}
  patch_packages:
    description:
      - Top-level names in site-packages the patch series may touch (C([sglang])); [] = any. The series' form is
        read from its paths - site-packages-relative C(a/sglang/...) (patch -p1) or SGLang's repository
        C(a/python/sglang/...) (git format-patch, patch -p2) - and a series mixing them or touching a file outside
        these packages fails before anything is made (module_utils/venv/patch.py series_form).
    type: list
    elements: str
    default: []
  pip_args: {description: Extra pip install arguments., type: list, elements: str, default: []}
  import_names: {description: Modules that must import after the build., type: list, elements: str, default: []}
  fact_path: {description: Provenance fact file holding the recipe and content hash of the live venv., type: path, required: true}
  timeout: {description: Seconds allowed for each pip step., type: int, default: 3600}
  schema_module:
    description:
      - Module of the venv whose parser the flag schema is extracted from (the lab stand-in's is
        C(sglang_standin.server_args)). Empty = no schema (a venv without SGLang). Part of the recipe.
    type: str
    default: sglang.srt.server_args
  clone_repo:
    description:
      - Git URL of the fork (https/http/git/ssh/file URL, absolute path or user@host:path). Empty = the pypi route
        (lock + local packages + patch series), exactly as without the clone options.
    type: str
    default: ""
  clone_commit: {description: "Full 40-hex commit sha to build (a branch or tag name is refused: it moves).", type: str, default: ""}
  clone_subdir: {description: "Directory of the checkout with pyproject.toml (real SGLang: python); empty = the root.", type: str, default: ""}
  clone_dir: {description: Host directory the commit is checked out into (recreated on every fetch)., type: path, default: ""}
  clone_timeout: {description: Seconds allowed for each git step., type: int, default: 1800}
  adopted_pin:
    description:
      - C(dist==version) the flavour pins for SGLang. A live venv whose fact says method C(adopted) (an operator's venv
        adopted by roles/takeover, library/venv_adopt.py) is kept, not rebuilt, while its content hash is the one
        recorded at adoption and its fact records this pin, the flavour, the patch series hash and the schema module
        (it is then returned as C(adopted)). Empty = an adopted venv is rebuilt from the lock.
    type: str
    default: ""
  wheelhouse:
    description:
      - "Host directory of wheels (an offline wheelhouse). Set - every pip step gets C(--no-index --find-links
        <dir>), no index is contacted; the lock's hashes still apply. Not part of the recipe (the hashes decide the
        bytes, not where they came from). Empty = the index (the lock's index lines, the host's pip configuration)."
    type: path
    default: ""
  system_site_packages: {description: "python -m venv --system-site-packages (the base interpreter's packages are visible; part of the recipe).", type: bool, default: false}
  site_dirs:
    description:
      - Absolute site directories of the host's image (e.g. a GPU image's C(/opt/torch/.venv/lib/python3.12/site-packages))
        written into a C(.pth) of the venv, after its own site-packages. Part of the recipe.
    type: list
    elements: path
    default: []
  pip_check_exempt:
    description:
      - Requirement names whose C(pip check) lines (not installed, or another version) are tolerated and returned
        as C(pip_check_tolerated); any other line fails the build. Part of the recipe.
    type: list
    elements: str
    default: []
author: [sglang-deploy]
"""

EXAMPLES = r"""
- name: Build the lab flavour
  venv_build:
    path: /opt/sglang/venv
    flavour: lab
    lock: /var/lib/sglang-venv/lab/lock.txt
    patch_dir: /var/lib/sglang-venv/lab/patches
    fact_path: /etc/ansible/facts.d/sglang_venv.fact

- name: Build the ddtree flavour from the operator's fork at a pinned commit (clone route)
  venv_build:
    path: /opt/sglang/venv
    flavour: ddtree
    lock: /var/lib/sglang-venv/ddtree/lock.txt
    patch_dir: /var/lib/sglang-venv/ddtree/patches
    fact_path: /etc/ansible/facts.d/sglang_venv.fact
    clone_repo: https://github.com/example-operator/sglang.git
    clone_commit: 0123456789abcdef0123456789abcdef01234567
    clone_subdir: python
    clone_dir: /var/lib/sglang-venv/ddtree/clone
"""

RETURN = r"""
built: {description: A new venv is waiting in the stage., type: bool, returned: always}
reason: {description: Why a build was or was not needed., type: str, returned: always}
recipe: {description: "The recipe parts (lock = sha256 of the lock's canonical form, lock_packages, install) and recipe_hash.", type: dict, returned: always}
steps: {description: "Build steps run (fetch, venv, lock, local_packages, clone, pip_check, patches, imports, flag_schema).", type: list, returned: always}
stage: {description: Staging directory., type: str, returned: when built}
recovered: {description: "What an earlier run left and this one removed (a failed build's stage), when no build was needed.", type: list, returned: when the live venv is up to date}
patches_applied: {description: Patches applied in the stage., type: list, returned: when built}
patch_form: {description: "The series' form - site (patch -p1), repository (python/... paths, patch -p2), or empty with no patches.", type: str, returned: when the build inputs are on the host}
clone: {description: "Clone route only: repo (credentials stripped), commit, subdir, fetched (bool), fetch (depth1|full|'')", type: dict, returned: when clone_repo is given}
adopted: {description: "The adoption's fact keys kept (method, source, adopted_from, ...) when an adopted venv is kept.", type: dict, returned: when an adopted venv is kept}
pip_check_tolerated: {description: "pip check's lines about pip_check_exempt requirements (tolerated).", type: list, returned: when built}
flag_schema: {description: "The stage's flag schema: sha256, sglang_version, options (count), module, path; {} when none was extracted.", type: dict, returned: always}
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.venv.build import build_if_needed
from ansible.module_utils.venv.build_error import BuildError


def main():
    module = AnsibleModule(
        argument_spec=dict(
            path=dict(type="path", required=True),
            python=dict(type="path", default="/usr/bin/python3"),
            flavour=dict(type="str", required=True),
            lock=dict(type="path", required=True),
            local_packages=dict(type="list", elements="path", default=[]),
            patch_dir=dict(type="path", required=True),
            require_patches=dict(type="bool", default=False),
            patch_packages=dict(type="list", elements="str", default=[]),
            pip_args=dict(type="list", elements="str", default=[]),
            import_names=dict(type="list", elements="str", default=[]),
            fact_path=dict(type="path", required=True),
            timeout=dict(type="int", default=3600),
            schema_module=dict(type="str", default="sglang.srt.server_args"),
            clone_repo=dict(type="str", default=""),
            clone_commit=dict(type="str", default=""),
            clone_subdir=dict(type="str", default=""),
            clone_dir=dict(type="path", default=""),
            clone_timeout=dict(type="int", default=1800),
            adopted_pin=dict(type="str", default=""),
            wheelhouse=dict(type="path", default=""),
            system_site_packages=dict(type="bool", default=False),
            site_dirs=dict(type="list", elements="path", default=[]),
            pip_check_exempt=dict(type="list", elements="str", default=[]),
        ),
        supports_check_mode=True,
    )
    p = dict(module.params)
    try:
        result = build_if_needed(check_mode=module.check_mode, **p)
    except BuildError as exc:
        module.fail_json(msg=f"venv build: {exc}", path=p["path"])
    module.exit_json(changed=result["built"] or bool(result.get("recovered")), **result)


if __name__ == "__main__":
    main()
