"""kit/make_dummy_llama.py: the weightless Llama-3.1-8B shape the next bench_serving comparison serves with real
SGLang's --load-format dummy (issue 27). Its dimensions must be the 8B's and its vocabulary the tokenizer's."""
import importlib.util
import json
from pathlib import Path

FIX = Path(__file__).resolve().parents[2] / "fixtures/real_sglang"
spec = importlib.util.spec_from_file_location("make_dummy_llama", FIX / "kit" / "make_dummy_llama.py")
mdl = importlib.util.module_from_spec(spec)
spec.loader.exec_module(mdl)


def test_the_shape_is_llama_3_1_8b():
    # with Llama-3.1's own vocabulary the count is the published 8.03B (8,030,261,248)
    assert mdl.parameters(dict(mdl.SHAPE, vocab_size=128256)) == 8_030_261_248


def test_vocabulary_and_tokenizer_come_from_the_small_model(tmp_path):
    src = tmp_path / "smollm2"
    src.mkdir()
    (src / "config.json").write_text(json.dumps({"vocab_size": 49152, "bos_token_id": 1, "eos_token_id": 2}))
    (src / "tokenizer.json").write_text("{}")
    (src / "model.safetensors").write_text("weights")
    config = mdl.make(src, tmp_path / "out")
    written = json.loads((tmp_path / "out" / "config.json").read_text())
    assert written == config and written["vocab_size"] == 49152 and written["eos_token_id"] == 2
    assert written["architectures"] == ["LlamaForCausalLM"] and written["num_hidden_layers"] == 32
    # the tokenizer is copied, no weights: real SGLang's DummyModelLoader makes them on the GPU
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["config.json", "tokenizer.json"]
    assert mdl.parameters(written) == 8_030_261_248 - (128256 - 49152) * 4096 * 2   # 7.38B: two vocab matrices less
