"""How one request decodes in the stand-in: the speculative decoding shape of the flags, the plan of token groups
per forward (one per verify step with speculative decoding), the spec_* figures of a finished request and the fake
vocabulary ids of output_ids."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from sglang_standin import engine


def token_id(tok: str) -> int:
    """A stable fake vocabulary id for a stand-in token (output_ids)."""
    return int.from_bytes(tok.encode()[:8].ljust(8, b"\0"), "little") % 49152


def spec_shape(args) -> Optional[engine.SpecShape]:
    """The speculative decoding shape of the parsed flags (None without): draft tokens per step from
    --speculative-num-draft-tokens or the DFLASH block size (else the engine's default), DDTREE's budget and topk cap
    (flags of the lab patch series)."""
    if not args.speculative_enabled:
        return None
    return engine.SpecShape.resolve(args.speculative_algorithm,
                                    args.speculative_num_draft_tokens or args.speculative_dflash_block_size,
                                    getattr(args, "speculative_ddtree_budget", None),
                                    getattr(args, "speculative_ddtree_topk_cap", None))


@dataclass
class Decode:
    """How one request decodes: the visible tokens per forward (the prefill token, then one group per verify step)
    and the speculative verify steps (tokens each, bonus included; empty without speculative decoding)."""
    groups: list
    steps: list


def plan_decode(spec: Optional[engine.SpecShape], text: str, toks: list, stopped: bool) -> Decode:
    """The decode of toks for a prompt. A request that stopped by itself also decoded its EOS token (real SGLang
    counts it; the stand-in's answers leave it out): the schedule covers it, hidden at the end of the last step."""
    if spec is None:
        return Decode([[t] for t in toks], [])
    steps = spec.schedule(len(toks) + int(stopped), engine.text_class(text))
    sizes = [1] + steps
    if stopped:
        sizes[-1] -= 1
    groups, at = [], 0
    for size in sizes:
        if size:
            groups.append(toks[at:at + size])
            at += size
    return Decode(groups, steps)


def spec_figures(spec: Optional[engine.SpecShape], completion_tokens: int, steps: list) -> dict:
    """meta_info spec_* of a finished request (real: only when it had a verify step and drafts were proposed)."""
    proposed = len(steps) * spec.drafts_per_step if spec else 0
    if not steps or not proposed:
        return {}
    accepted = sum(steps) - len(steps)
    return {"spec_accept_rate": accepted / proposed, "spec_accept_length": completion_tokens / len(steps),
            "spec_accepted_drafts": accepted, "spec_proposed_drafts": proposed, "spec_verify_ct": len(steps)}
