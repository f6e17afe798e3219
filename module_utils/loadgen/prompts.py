# -*- coding: utf-8 -*-
"""Real-text workloads of the benchmark: prompt sets and an operator dataset turned into request texts (stdlib only).

A prompt set is a list of conversations ({"id", "messages": [{"role", "content"}, ...]}), shipped with the role
(roles/sglang_bench/files/prompts/*.jsonl) and handed to the module as data. An operator dataset is a ShareGPT-format
JSON file on the target (fetched once by the models role as a Hub dataset repository): its first human turn of each
conversation becomes a one-message conversation.

Conversations become text through the served model's own chat template, rendered by the target venv's python
(transformers' apply_chat_template, which also runs a model's remote-code template; else jinja2 over the model's
tokenizer_config.json / chat_template.jinja). `plain` sends "role: content" lines, for servers whose model has no
template (the lab's stand-in). `auto` uses the template when it renders and says in every row which one was used.
"""
from __future__ import annotations

import json
import os
import subprocess

from ansible.module_utils.evidence.error import EvidenceError

FORMATS = ("auto", "chat-template", "plain")

# Runs in the target venv: {"tokenizer": dir, "conversations": [[{role, content}], ...]} on stdin,
# {"texts": [...], "how": "..."} on stdout; exit 3 when no template can be rendered (with the reason on stderr).
_RENDER = r"""
import json, os, sys
req = json.load(sys.stdin)
path, convs = req["tokenizer"], req["conversations"]
def out(texts, how):
    json.dump({"texts": texts, "how": how}, sys.stdout)
    sys.exit(0)
why = []
try:
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(path, trust_remote_code=True)
    if getattr(tok, "chat_template", None):
        out([tok.apply_chat_template(c, tokenize=False, add_generation_prompt=True) for c in convs],
            "chat template of %s (transformers)" % path)
    why.append("the tokenizer in %s has no chat_template" % path)
except ImportError as exc:
    why.append("transformers not importable: %s" % exc)
except Exception as exc:
    why.append("transformers could not load %s: %s: %s" % (path, type(exc).__name__, exc))
template = None
cfg = os.path.join(path, "tokenizer_config.json")
jinja_file = os.path.join(path, "chat_template.jinja")
if os.path.isfile(jinja_file):
    template = open(jinja_file, encoding="utf-8").read()
elif os.path.isfile(cfg):
    template = json.load(open(cfg, encoding="utf-8")).get("chat_template")
if isinstance(template, list):
    template = next((t.get("template") for t in template if t.get("name") == "default"), None)
if not template:
    why.append("no chat template in %s" % path)
else:
    try:
        import jinja2
        env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True)
        t = env.from_string(template)
        out([t.render(messages=c, add_generation_prompt=True, bos_token="", eos_token="") for c in convs],
            "chat template of %s (jinja2)" % path)
    except ImportError as exc:
        why.append("jinja2 not importable: %s" % exc)
    except Exception as exc:
        why.append("the chat template of %s does not render: %s: %s" % (path, type(exc).__name__, exc))
sys.stderr.write("; ".join(why))
sys.exit(3)
"""


class PromptError(EvidenceError):
    """A workload that cannot be built (empty set, missing dataset, unrenderable template when required)."""


def check_conversations(name, items):
    """Problems with one prompt set (empty list = valid)."""
    if not isinstance(items, list) or not items:
        return ["prompt set %r is empty: it needs at least one conversation" % name]
    problems = []
    for i, item in enumerate(items):
        messages = item.get("messages") if isinstance(item, dict) else None
        if not isinstance(messages, list) or not messages or not all(
                isinstance(m, dict) and m.get("role") in ("system", "user", "assistant")
                and isinstance(m.get("content"), str) and m["content"].strip() for m in messages):
            problems.append("prompt set %r item %d: needs messages = [{role: system|user|assistant, content: "
                            "non-empty text}, ...], got %r" % (name, i, item if len(repr(item)) < 200 else "..."))
    return problems


def load_sharegpt(path, limit=None):
    """Conversations from a ShareGPT JSON file: the first human turn of each record (records without one skipped)."""
    if not os.path.isfile(path):
        raise PromptError("dataset %s does not exist on this host (fetch it with the models role: a models_list "
                          "entry with repo_type: dataset)" % path)
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except ValueError as exc:
        raise PromptError("dataset %s is not JSON: %s" % (path, exc))
    convs = []
    for record in data if isinstance(data, list) else []:
        turns = record.get("conversations") if isinstance(record, dict) else None
        first = next((t.get("value") for t in turns or [] if isinstance(t, dict)
                      and t.get("from") in ("human", "user") and isinstance(t.get("value"), str)
                      and t["value"].strip()), None)
        if first:
            convs.append({"id": str(record.get("id", len(convs))), "messages": [{"role": "user", "content": first}]})
        if limit and len(convs) >= limit:
            break
    if not convs:
        raise PromptError("dataset %s has no ShareGPT conversation with a human turn "
                          "([{\"conversations\": [{\"from\": \"human\", \"value\": ...}]}])" % path)
    return convs


def plain_text(messages):
    """The template-free rendering: one 'role: content' line per message, then 'assistant:'."""
    return "".join("%s: %s\n" % (m["role"], m["content"]) for m in messages) + "assistant:"


def render(conversations, fmt, venv_python=None, tokenizer=None, timeout=300):
    """(texts, how) for the conversations. Raises PromptError when fmt is chat-template and no template renders."""
    if fmt not in FORMATS:
        raise PromptError("prompt_format must be one of %s, got %r" % (", ".join(FORMATS), fmt))
    messages = [c["messages"] for c in conversations]
    why = "prompt_format plain"
    if fmt != "plain":
        if not venv_python or not os.path.exists(venv_python):
            why = "no venv python at %r to render the chat template" % (venv_python,)
        elif not tokenizer or not os.path.isdir(tokenizer):
            why = "tokenizer directory %r does not exist on this host" % (tokenizer,)
        else:
            try:
                proc = subprocess.run([venv_python, "-c", _RENDER], input=json.dumps(
                    {"tokenizer": tokenizer, "conversations": messages}), capture_output=True, text=True,
                    timeout=timeout, check=False)
                if proc.returncode == 0:
                    done = json.loads(proc.stdout)
                    return done["texts"], done["how"]
                why = (proc.stderr or "").strip()[-600:] or "renderer exited %d" % proc.returncode
            except (OSError, ValueError, subprocess.SubprocessError) as exc:
                why = "renderer failed: %s" % exc
        if fmt == "chat-template":
            raise PromptError("prompt_format chat-template: %s" % why)
    return [plain_text(m) for m in messages], "plain role lines (%s)" % why

