"""The stand-in's /server_info (lab/sglang_standin introspection.py): its KV pool is capped by --max-total-tokens as
real SGLang caps the profiled pool (server_args max_total_tokens), so the lab can serve a ready server whose pool is
too small for the service role's capacity check (module_utils/sglang/capacity.py) to pass."""
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[4]
sys.path.insert(0, str(ROOT / "lab" / "sglang_standin"))

from sglang_standin.introspection import server_info_answer  # noqa: E402
from sglang_standin.server_args import prepare_server_args  # noqa: E402
from sglang_standin.serving_state import State  # noqa: E402

from ansible.module_utils.sglang.capacity import judge  # noqa: E402

BASE = ["--model-path", "/srv/models/m", "--host", "127.0.0.1"]


def test_the_pool_is_capped_at_max_total_tokens_and_the_capacity_check_sees_it():
    args = prepare_server_args(BASE + ["--max-total-tokens", "284"])
    info = server_info_answer(State(args), args)
    assert info["max_total_num_tokens"] == 284 and info["max_req_input_len"] == 8186
    assert not judge(info)["ok"]
    args = prepare_server_args(BASE)
    info = server_info_answer(State(args), args)
    assert info["max_total_num_tokens"] == 1281809 and judge(info)["ok"]
