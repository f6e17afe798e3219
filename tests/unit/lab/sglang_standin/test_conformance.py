"""The stand-in held to recordings of real SGLang (tests/fixtures/real_sglang/<version>/, recorded on the H200 by
tests/fixtures/real_sglang/record.py).

Per committed version, the stand-in is launched locally (fast timings) and recorded with the SAME recorder code,
with the same runs (plain behind the project's launcher, DFLASH direct). Both recordings are reduced by the same
normalisers and compared: phase order, status codes per endpoint per phase (refused / listening / ready /
draining), the endpoint set (the right key's status per path: which answer 404), API-key behaviour per path
(no key, wrong key), JSON shapes (keys and value types, recursively; values are not compared) of every body,
answer, stream chunk and error, meta_info keys (plain vs DFLASH), whether the key reaches the output and which
body fields carry it, log markers, and the exit status after SIGTERM.

Each difference has a key (e.g. `status:plain:/ready:listening`, `shape:dflash:/server_info:$.foo:missing`).
Deliberate differences live in ONE file, tests/fixtures/real_sglang/differences.json: an entry's `match` globs
allow keys (optionally for some `versions` only); an entry that allows nothing is stale and fails too. Entries
with `standin_env` / `standin_drop_flags` are consulted to build the stand-in's recording instead.
"""
from __future__ import annotations

import copy
import fnmatch
import json
import os
import socket
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[4]
FIX = ROOT / "tests" / "fixtures" / "real_sglang"
STANDIN = ROOT / "lab" / "sglang_standin"
sys.path.insert(0, str(FIX))
import record as rec  # noqa: E402

DIFFS = json.loads((FIX / "differences.json").read_text())["differences"]
# Recordings: FIX/<version>/; SGLANG_CONFORMANCE_RECORDINGS=DIR points elsewhere (development against a recording
# made in a temporary directory; never commit a stand-in recording as if it were real).
RECORDINGS = Path(os.environ.get("SGLANG_CONFORMANCE_RECORDINGS") or FIX)
VERSIONS = sorted(d.name for d in RECORDINGS.iterdir() if d.is_dir() and (d / "summary.json").is_file())
MARGIN = 0.5  # seconds around a phase boundary in which a single poll may have raced the transition
LOG_MARKERS = ("server_args=ServerArgs(", "api_key='[REDACTED]'", "The server is fired up and ready to roll!",
               "Gracefully exiting", "Uvicorn running on")
# argv values the recorder sets per run (not flags common to both)
RUN_FLAGS = ("--model-path", "--port", "--api-key", "--speculative-algorithm", "--speculative-draft-model-path")


# ---------------------------------------------------------------------------------------------------------------
# loading and recording


def load_recording(d: Path) -> dict:
    summary = json.loads((d / "summary.json").read_text())
    runs = {name: json.loads((d / info["file"]).read_text()) for name, info in summary["runs"].items()}
    return {"summary": summary, "runs": runs}


def entries_for(version: str) -> list:
    return [e for e in DIFFS if not e.get("versions") or version in e["versions"]]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _argv_value(argv: list, flag: str):
    return argv[argv.index(flag) + 1] if flag in argv else None


def _common_flags(argv: list) -> list:
    """The flags of a recorded argv after the module, less the per-run ones."""
    mod = next(i for i, a in enumerate(argv) if a.endswith("launch_server"))
    rest, out, i = argv[mod + 1:], [], 0
    while i < len(rest):
        if rest[i] in RUN_FLAGS:
            i += 2
            continue
        out.append(rest[i])
        i += 1
    return out


def record_standin(real: dict, version: str, out: Path) -> dict:
    """Record the stand-in with the same runs as the real recording; returns {"summary", "runs"}."""
    env, drop = {}, []
    for e in entries_for(version):
        env.update(e.get("standin_env") or {})
        drop += e.get("standin_drop_flags") or []
    first = next(iter(real["runs"].values()))
    argv = first["argv"]
    draft = next((_argv_value(r["argv"], "--speculative-draft-model-path") for r in real["runs"].values()
                  if r["algorithm"] == "dflash"), None) or "/tmp/models/draft"
    args = ["--out", str(out), "--model", _argv_value(argv, "--model-path"), "--draft", draft,
            "--python", sys.executable, "--module", "sglang_standin.launch_server",
            "--flags", " ".join(_common_flags(argv)), "--deadline", "90", "--ready-timeout", "40",
            "--reserve", "30", "--shutdown-timeout", "20", "--linger", "3", "--no-files"]
    for name, r in real["runs"].items():
        args += ["--run", f"{name}:{_free_port()}:{r['mode']}"]
    for flag in drop:
        args.append(f"--drop-flag={flag}")
    saved = dict(os.environ)
    try:
        os.environ.update(env)
        os.environ["PYTHONPATH"] = os.pathsep.join([str(STANDIN)] + [p for p in [saved.get("PYTHONPATH")] if p])
        os.environ.pop("SGLANG_STANDIN_FAULT", None)
        rec.record(rec.parse_args(args))
    finally:
        os.environ.clear()
        os.environ.update(saved)
    return load_recording(out)


# ---------------------------------------------------------------------------------------------------------------
# comparison: a list of (key, detail)


def _norm_drain(statuses: list) -> list:
    return sorted({"refused" if s == "error" else s for s in statuses}, key=str)


def compare_statuses(name: str, real: dict, mine: dict) -> list:
    """Per endpoint and phase, each status seen on one side only: status:<run>:<ep>:<phase>:<status>:missing|extra.
    In the draining phase a reset connection counts as refused (the listener going away mid-request)."""
    diffs = []
    a, b = rec.phase_statuses(real, MARGIN), rec.phase_statuses(mine, MARGIN)
    for ep in sorted(set(a) | set(b)):
        for ph in rec.PHASES:
            sa, sb = (set(x.get(ep, {}).get(ph) or []) for x in (a, b))
            if ph == "draining":
                sa, sb = ({"refused" if st == "error" else st for st in x} for x in (sa, sb))
            for st in sorted(sa - sb, key=str):
                diffs.append((f"status:{name}:{ep}:{ph}:{st}:missing", f"real {sorted(sa, key=str)} stand-in "
                                                                        f"{sorted(sb, key=str)}"))
            for st in sorted(sb - sa, key=str):
                diffs.append((f"status:{name}:{ep}:{ph}:{st}:extra", f"real {sorted(sa, key=str)} stand-in "
                                                                      f"{sorted(sb, key=str)}"))
    return diffs


def diff_shapes(a, b, path: str = "$") -> list:
    """[(path, kind, detail)]; kind: missing (in the stand-in), extra, type, null (one side null)."""
    out = []
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b)):
            p = f"{path}.{k}"
            if k not in b:
                out.append((p, "missing", f"real {json.dumps(a[k])[:120]}"))
            elif k not in a:
                out.append((p, "extra", f"stand-in {json.dumps(b[k])[:120]}"))
            else:
                out += diff_shapes(a[k], b[k], p)
        return out
    if isinstance(a, list) and isinstance(b, list):
        if a and b:
            out += diff_shapes(a[0], b[0], path + "[]")
        return out
    if a != b:
        ta, tb = (set(x.split("|")) if isinstance(x, str) else {type(x).__name__} for x in (a, b))
        na, nb = ta - {"null"}, tb - {"null"}
        kind = "null" if na == nb or not na or not nb else "type"
        out.append((path, kind, f"real {json.dumps(a)[:120]} stand-in {json.dumps(b)[:120]}"))
    return out


def _chunks(stream: dict) -> list:
    return [c["json"] for c in (stream or {}).get("chunks", []) if isinstance(c.get("json"), (dict, list))]


def shapes_of(run: dict) -> dict:
    """{name: shape} of everything JSON a run recorded."""
    out = {}
    for ep, r in (run.get("bodies") or {}).items():
        out[f"body{ep}"] = rec.json_shape(r.get("body"))
    for name, r in (run.get("answers") or {}).items():
        if "chunks" in r:
            ch = _chunks(r)
            if ch:
                out[f"{name}.first"] = rec.json_shape(ch[0])
                out[f"{name}.last"] = rec.json_shape(ch[-1])
                out[f"{name}.all"] = rec.json_shape(ch)
        else:
            out[name] = rec.json_shape(r.get("body"))
    for r in ((run.get("batch") or {}).get("requests") or []):
        out["batch.meta_info"] = rec.merge_shapes(out.get("batch.meta_info"), rec.json_shape(r.get("meta_info")))
    for ep, by in (run.get("auth") or {}).items():
        for who, r in by.items():
            if r.get("status") != 200:
                k = f"error_body.{r.get('status')}"
                out[k] = rec.merge_shapes(out.get(k), rec.json_shape(r.get("body")))
    return out


def compare_shapes(name: str, real: dict, mine: dict) -> list:
    diffs = []
    a, b = shapes_of(real), shapes_of(mine)
    for what in sorted(set(a) | set(b)):
        if what not in b or what not in a:
            diffs.append((f"shape:{name}:{what}:$:{'missing' if what not in b else 'extra'}", "not recorded"))
            continue
        for path, kind, detail in diff_shapes(a[what], b[what]):
            prefix = "meta" if ".meta_info" in path else "shape"
            diffs.append((f"{prefix}:{name}:{what}:{path}:{kind}", detail))
    return diffs


def compare_run(name: str, real: dict, mine: dict) -> list:
    diffs = []
    if rec.phase_order(real) != rec.phase_order(mine):
        diffs.append((f"phase_order:{name}", f"real {rec.phase_order(real)} stand-in {rec.phase_order(mine)}"))
    diffs += compare_statuses(name, real, mine)
    am, bm = rec.auth_matrix(real), rec.auth_matrix(mine)
    for ep in sorted(set(am) | set(bm)):
        ra, rb = am.get(ep, {}), bm.get(ep, {})
        if ra.get("right") != rb.get("right"):
            diffs.append((f"endpoint:{name}:{ep}", f"with the key: real {ra.get('right')} stand-in {rb.get('right')}"))
        for who in ("none", "wrong"):
            if ra.get(who) != rb.get(who):
                diffs.append((f"auth:{name}:{ep}:{who}", f"real {ra.get(who)} stand-in {rb.get(who)}"))
    for ep in sorted(set(real.get("bodies") or {}) | set(mine.get("bodies") or {})):
        ra, rb = (real.get("bodies") or {}).get(ep, {}), (mine.get("bodies") or {}).get(ep, {})
        if ra.get("status") != rb.get("status"):
            diffs.append((f"endpoint:{name}:GET {ep}", f"body status: real {ra.get('status')} stand-in "
                                                       f"{rb.get('status')}"))
        if sorted(ra.get("key_in_body_fields") or []) != sorted(rb.get("key_in_body_fields") or []):
            diffs.append((f"key_in_body:{name}:{ep}", f"real {ra.get('key_in_body_fields')} stand-in "
                                                      f"{rb.get('key_in_body_fields')}"))
    for what in sorted(set(real.get("answers") or {}) | set(mine.get("answers") or {})):
        ra, rb = (real.get("answers") or {}).get(what, {}), (mine.get("answers") or {}).get(what, {})
        if ra.get("status") != rb.get("status"):
            diffs.append((f"answer:{name}:{what}", f"status: real {ra.get('status')} stand-in {rb.get('status')}"))
        if "chunks" in ra or "chunks" in rb:
            ends = [((r.get("chunks") or [{}])[-1]).get("raw") for r in (ra, rb)]
            if ends[0] != ends[1]:
                diffs.append((f"answer:{name}:{what}:last_line", f"real {ends[0]!r} stand-in {ends[1]!r}"))
    diffs += compare_shapes(name, real, mine)
    ma, mb = rec.meta_info_keys(real), rec.meta_info_keys(mine)
    for what in sorted(set(ma) | set(mb)):
        for k in sorted(set(ma.get(what, [])) ^ set(mb.get(what, []))):
            kind = "missing" if k in ma.get(what, []) else "extra"
            diffs.append((f"meta:{name}:{what}:$.meta_info.{k}:{kind}", "meta_info key"))
    for stream in ("stdout", "stderr"):
        ka, kb = (real.get("key_in_output") or {}).get(stream), (mine.get("key_in_output") or {}).get(stream)
        if ka != kb:
            diffs.append((f"key_in_output:{name}:{stream}", f"real {ka} stand-in {kb}"))
    la = "\n".join(ln["line"] for ln in real.get("log") or [])
    lb = "\n".join(ln["line"] for ln in mine.get("log") or [])
    for marker in LOG_MARKERS:
        if (marker in la) != (marker in lb):
            diffs.append((f"log:{name}:{marker}", f"real {marker in la} stand-in {marker in lb}"))
    if real.get("exit_status") != mine.get("exit_status"):
        diffs.append((f"exit:{name}", f"real {real.get('exit_status')} stand-in {mine.get('exit_status')}"))
    ka = (real.get("shutdown") or {}).get("killed_by_recorder")
    kb = (mine.get("shutdown") or {}).get("killed_by_recorder")
    if ka != kb:
        diffs.append((f"exit:{name}:killed_by_recorder", f"real {ka} stand-in {kb}"))
    return diffs


def compare(real: dict, mine: dict) -> list:
    diffs = []
    for name in sorted(set(real["runs"]) | set(mine["runs"])):
        if name not in mine["runs"] or name not in real["runs"]:
            diffs.append((f"run:{name}", "recorded on one side only"))
            continue
        diffs += compare_run(name, real["runs"][name], mine["runs"][name])
    return diffs


def allowed_by(key: str, version: str) -> list:
    return [i for i, e in enumerate(DIFFS) if (not e.get("versions") or version in e["versions"])
            and any(fnmatch.fnmatchcase(key, pat) for pat in e.get("match") or [])]


# ---------------------------------------------------------------------------------------------------------------
# tests


@pytest.fixture(scope="module")
def recordings(tmp_path_factory):
    out = {}
    for version in VERSIONS:
        real = load_recording(RECORDINGS / version)
        mine = record_standin(real, version, tmp_path_factory.mktemp(f"standin-{version}"))
        out[version] = (real, mine, compare(real, mine))
    return out


def test_differences_file_is_well_formed():
    for e in DIFFS:
        assert e.get("what") and e.get("why"), e
        assert e.get("match") or e.get("standin_env") or e.get("standin_drop_flags"), e
        assert set(e) <= {"what", "why", "match", "versions", "standin_env", "standin_drop_flags"}, e


@pytest.mark.parametrize("version", VERSIONS or [pytest.param("none", marks=pytest.mark.skip(
    reason="no recording of real SGLang committed under tests/fixtures/real_sglang/<version>/"))])
def test_standin_conforms_to_the_real_recording(recordings, version):
    real, mine, diffs = recordings[version]
    for name, run in real["runs"].items():  # the fixture itself must be a complete recording
        assert run["events"].get("startup_outcome") == "ready", f"{version}/{name}: real run never got ready"
    for name, run in mine["runs"].items():
        assert run["events"].get("startup_outcome") == "ready", (name, run.get("errors"), run.get("log", [])[-5:])
    unlisted = [f"{k}  ({d})" for k, d in diffs if not allowed_by(k, version)]
    assert not unlisted, ("differences from real SGLang " + version + " not listed in differences.json:\n  "
                          + "\n  ".join(unlisted))


@pytest.mark.skipif(not VERSIONS, reason="no recording of real SGLang committed")
def test_no_stale_deliberate_difference(recordings):
    used = set()
    for version, (_real, _mine, diffs) in recordings.items():
        for k, _d in diffs:
            used.update(allowed_by(k, version))
    stale = [e["what"] for i, e in enumerate(DIFFS) if e.get("match") and i not in used]
    assert not stale, f"differences.json entries that no longer match any difference: {stale}"


@pytest.mark.skipif(not VERSIONS, reason="no recording of real SGLang committed")
def test_the_comparison_sees_a_changed_behaviour(recordings):
    """Mutations of the stand-in's recording (as if the stand-in changed) are reported, each under its key."""
    version = VERSIONS[0]
    real, mine, _ = recordings[version]
    name = next(n for n, r in mine["runs"].items() if r.get("auth"))
    cases = []
    m = copy.deepcopy(mine)
    m["runs"][name]["exit_status"] = 3
    cases.append((m, f"exit:{name}"))
    m = copy.deepcopy(mine)
    auth = m["runs"][name]["auth"]["GET /v1/models"]
    auth["none"]["status"] = 200
    cases.append((m, f"auth:{name}:GET /v1/models:none"))
    m = copy.deepcopy(mine)
    for seg in m["runs"][name]["timeline"]["/health"]:
        if seg["status"] == 503:
            seg["status"] = 200
    cases.append((m, f"status:{name}:/health:listening:200:extra"))
    m = copy.deepcopy(mine)
    m["runs"][name]["bodies"]["/v1/models"]["body"]["data"][0]["surprise"] = 1
    cases.append((m, f"shape:{name}:body/v1/models:$.data[].surprise:extra"))
    m = copy.deepcopy(mine)
    m["runs"][name]["answers"]["generate"]["body"]["meta_info"].pop("e2e_latency", None)
    cases.append((m, f"meta:{name}:generate:$.meta_info.e2e_latency:missing"))
    for mutated, key in cases:
        keys = {k for k, _ in compare(real, mutated)}
        assert key in keys, (key, sorted(keys)[:20])


def test_normalisers():
    assert rec.json_shape({"a": [1, 2.5], "b": None, "c": {"d": "x"}}) == {
        "a": ["number"], "b": "null", "c": {"d": "string"}}
    assert rec.redact({"api_key": "k1", "k1x": ["a k1 b"]}, "k1") == {
        "api_key": "[REDACTED]", "[REDACTED]x": ["a [REDACTED] b"]}
    run = {"events": {"t_listening": 1.0, "t_ready": 2.0, "t_sigterm": 5.0},
           "timeline": {"/health": [{"t_first": 0.0, "t_last": 0.9, "status": "refused", "n": 4},
                                    {"t_first": 1.0, "t_last": 1.9, "status": 503, "n": 4},
                                    {"t_first": 2.1, "t_last": 2.1, "status": 503, "n": 1},
                                    {"t_first": 2.3, "t_last": 4.0, "status": 200, "n": 5}]},
           "shutdown_timeline": {"/health": [{"t_first": 5.0, "t_last": 5.1, "status": 503, "n": 2},
                                             {"t_first": 5.2, "t_last": 5.4, "status": "refused", "n": 3}]}}
    assert rec.phase_statuses(run, 0.5)["/health"] == {
        "refused": ["refused"], "listening": [503], "ready": [200], "draining": [503, "refused"]}
    assert rec.phase_statuses(run)["/health"]["ready"] == [200, 503]
    assert diff_shapes({"a": "string", "b": "null"}, {"a": "number", "c": "bool", "b": "string"}) == [
        ("$.a", "type", 'real "string" stand-in "number"'), ("$.b", "null", 'real "null" stand-in "string"'),
        ("$.c", "extra", 'stand-in "bool"')]
