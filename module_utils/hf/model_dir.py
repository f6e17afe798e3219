"""The one home of the rule "a model directory names the repository it holds".

A Hub repository `namespace/name` lives in `<models root>/<name>`: the directory's name is the repository's name part,
exactly (same case, no suffix; the revision is the manifest's, not the name's). The models role refuses a
`models_list` entry whose `name` says otherwise (hf_model_dir_problems, before anything is fetched), and the service
role derives the directories it loads from the repositories (hf_model_dir), so the two can never disagree and a
directory never claims to hold something it does not (the public z-lab/Kimi-K2.6-DFlash once sat in a directory
named after an operator's own "Kimi-K2.6-DFlash-tmp-long" drafter).

    model_dir("z-lab/Kimi-K2.6-DFlash")                       -> "Kimi-K2.6-DFlash"
    dir_problems([{"name": "X", "repo_id": "org/Y"}, ...])    -> ["models_list entry 'X' holds org/Y: ...", ...]
"""
from __future__ import annotations

import re

from ansible.module_utils.evidence.error import EvidenceError

# namespace/name as the Hub spells repository ids (the models role's preflight accepts the same)
REPO_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*/([A-Za-z0-9][A-Za-z0-9._-]*)$")


class ModelDirError(EvidenceError, ValueError):
    default_kind = "bad_input"


def model_dir(repo_id) -> str:
    """The directory name of a repository: its name part. A repo id that is not namespace/name is refused."""
    match = REPO_ID.match(str(repo_id or ""))
    if not match:
        raise ModelDirError(f"{repo_id!r} is not a Hub repository id (namespace/name): no model directory can be "
                            "named after it", repo_id=str(repo_id))
    return match.group(1)


def dir_problems(entries, what: str = "models_list entry") -> list:
    """One line per entry whose `name` is not its `repo_id`'s directory (both named); [] when every entry is."""
    problems = []
    for entry in entries or []:
        name, repo_id = str(entry.get("name", "")), str(entry.get("repo_id", ""))
        try:
            expected = model_dir(repo_id)
        except ModelDirError as exc:
            problems.append(f"{what} {name!r}: {exc.message}")
            continue
        if name != expected:
            problems.append(f"{what} {name!r} holds {repo_id}, so its directory must be named {expected!r} (a model "
                            f"directory names the repository it holds: the repository's name part, exactly)")
    return problems
