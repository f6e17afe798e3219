"""module_utils/sglang/chat_template.py: where the model's chat template is, and its switch to answer without thinking."""
import json

import pytest

from ansible.module_utils.sglang import chat_template as ct

# The shape of Kimi K2's and Qwen3's thinking switches (not their whole templates).
KIMI_LIKE = ("{%- for m in messages -%}<|im_{{ m.role }}|>{{ m.content }}<|im_end|>{%- endfor -%}"
             "{%- if add_generation_prompt -%}<|im_assistant|>assistant<|im_middle|>"
             "{%- if thinking is defined and thinking is false -%}<think></think>{%- endif -%}{%- endif -%}")
QWEN_LIKE = ("{%- if enable_thinking is defined and enable_thinking is false %}{{- '<think>\\n\\n</think>\\n\\n' }}"
             "{%- endif %}")


@pytest.mark.parametrize("template,names", [
    (KIMI_LIKE, ["thinking"]),
    (QWEN_LIKE, ["enable_thinking"]),
    ("{% if not thinking %}x{% elif enable_thinking %}y{% endif %}", ["enable_thinking", "thinking"]),
    # not a switch: an attribute, a string, a variable the template sets itself, a plain template
    ("{% if message.thinking %}{{ message.thinking }}{% endif %}", []),
    ("{% if '<think>' in content or 'thinking' == mode %}x{% endif %}", []),
    ("{% set thinking_done = true %}{% if thinking_done %}x{% endif %}", []),
    ("{% for m in messages %}{{ m.content }}{% endfor %}", []),
    ("", []),
    (None, []),
])
def test_thinking_switch(template, names):
    assert ct.thinking_switch(template) == names
    assert ct.switch_off_kwargs(template) == {n: False for n in names}


def test_template_file_order(tmp_path):
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"chat_template": QWEN_LIKE}))
    assert ct.find_template(str(tmp_path)) == (QWEN_LIKE, str(tmp_path / "tokenizer_config.json") + " chat_template")
    (tmp_path / "chat_template.jinja").write_text(KIMI_LIKE)
    assert ct.find_template(str(tmp_path)) == (KIMI_LIKE, str(tmp_path / "chat_template.jinja"))


def test_named_templates_take_the_default(tmp_path):
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"chat_template": [
        {"name": "tool_use", "template": "x"}, {"name": "default", "template": KIMI_LIKE}]}))
    assert ct.find_template(str(tmp_path))[0] == KIMI_LIKE


def test_the_servers_chat_template_wins_when_it_is_a_jinja_file(tmp_path):
    own = tmp_path / "own.jinja"
    own.write_text(QWEN_LIKE)
    (tmp_path / "chat_template.jinja").write_text(KIMI_LIKE)
    assert ct.find_template(str(tmp_path), str(own)) == (QWEN_LIKE, str(own))
    text, why = ct.find_template(str(tmp_path), "chatml")
    assert text is None and "'chatml' is not a Jinja file" in why


def test_no_template(tmp_path):
    (tmp_path / "tokenizer_config.json").write_text("{}")
    assert ct.find_template(str(tmp_path)) == (None, f"{tmp_path}/tokenizer_config.json has no chat_template")
    assert ct.find_template(str(tmp_path / "missing"))[0] is None
    assert ct.find_template("") == (None, "no model directory given")
    (tmp_path / "tokenizer_config.json").write_text("{not json")
    assert "cannot be read" in ct.find_template(str(tmp_path))[1]
