"""The served model's chat template on the host, and the switch it has (if any) to answer without thinking (stdlib).

A reasoning model's template may take a variable that turns its thinking off (Kimi K2's and DeepSeek V3's
`thinking`, Qwen3's and GLM-4.5's `enable_thinking`); SGLang passes a request's `chat_template_kwargs` to the template
(srt/entrypoints/openai/serving_chat.py `_apply_jinja_template`: extra_template_kwargs.update(chat_template_kwargs))
and its reasoning parser then expects no thinking (`_get_reasoning_from_request`: kimi_k2 thinks unless
chat_template_kwargs["thinking"] is False). Which variable a template takes is read from its text, never assumed
per model: a bare (not attribute, not quoted) name with "thinking" in it that a `{% if %}` / `{% elif %}` tests and
the template does not `{% set %}` itself.

Where the template is: the server's --chat-template when that is a Jinja file (a path ending .jinja: SGLang reads
any other value as a built-in template name or a JSON conversation template, TemplateManager
._load_explicit_chat_template); else the model directory's chat_template.jinja, else tokenizer_config.json's
"chat_template" (a string, or a list of {name, template}: the "default" one), the order transformers loads them in
(SGLang's TemplateManager.load_chat_template reads the tokenizer's; no built-in template matches a Kimi model path).
"""
from __future__ import annotations

import json
import os
import re

_STATEMENT = re.compile(r"\{%-?\s*(?:if|elif)\b(.*?)-?%\}", re.DOTALL)
_SET = re.compile(r"\{%-?\s*set\s+(\w+)")
_QUOTED = re.compile(r"'[^']*'|\"[^\"]*\"")
_NAME = re.compile(r"(?<![\w.])([A-Za-z_]\w*)(?![\w(])")


def thinking_switch(template: str | None) -> list[str]:
    """Sorted names of the template's thinking switches (variables with "thinking" in their name that a condition
    tests, that the template does not set itself); [] when none."""
    if not template:
        return []
    local = set(_SET.findall(template))
    names = set()
    for condition in _STATEMENT.findall(template):
        for name in _NAME.findall(_QUOTED.sub("", condition)):
            if "thinking" in name.lower() and name not in local:
                names.add(name)
    return sorted(names)


def switch_off_kwargs(template: str | None) -> dict:
    """chat_template_kwargs that turn the template's thinking off: {name: False} for each switch."""
    return {name: False for name in thinking_switch(template)}


def _from_tokenizer_config(path: str) -> str | None:
    with open(path, encoding="utf-8") as fh:
        value = json.load(fh).get("chat_template")
    if isinstance(value, list):
        value = next((t.get("template") for t in value if isinstance(t, dict) and t.get("name") == "default"), None)
    return value if isinstance(value, str) else None


def find_template(model_path: str | None, chat_template: str | None = None) -> tuple:
    """(template text or None, where it came from or why there is none)."""
    if chat_template:
        if os.path.isfile(chat_template) and chat_template.endswith(".jinja"):
            with open(chat_template, encoding="utf-8") as fh:
                return fh.read(), chat_template
        return None, f"the server's --chat-template {chat_template!r} is not a Jinja file here"
    if not model_path:
        return None, "no model directory given"
    jinja_file = os.path.join(model_path, "chat_template.jinja")
    config = os.path.join(model_path, "tokenizer_config.json")
    try:
        if os.path.isfile(jinja_file):
            with open(jinja_file, encoding="utf-8") as fh:
                return fh.read(), jinja_file
        if os.path.isfile(config):
            text = _from_tokenizer_config(config)
            return (text, config + " chat_template") if text else (None, f"{config} has no chat_template")
    except (OSError, ValueError) as exc:
        return None, f"the chat template in {model_path} cannot be read: {exc}"
    return None, f"no chat template in {model_path}"
