"""Verdicts of the real SGLang parsers (0.5.11, 0.5.23) on a corpus of argvs, recorded with
module_utils/sglang/parser_verdicts.py (tests/fixtures/real_sglang/make_corpus.py says how), against what this
repository believes: the stand-in's parser built from each version's schema must give the same verdict word for word,
and the controller's static check (module_utils/sglang/schema.check_argv) must refuse exactly what the real parser
refuses, bar the differences listed in DELIBERATE with their reasons."""
import contextlib
import io
import json
import sys
from pathlib import Path

import pytest

from ansible.module_utils.sglang import schema as sglang_schema

ROOT = Path(__file__).resolve().parents[3]
FIXTURES = ROOT / "tests/fixtures/real_sglang"
sys.path.insert(0, str(ROOT / "lab" / "sglang_standin"))
from sglang_standin import server_args as standin  # noqa: E402

CORPUS = json.loads((FIXTURES / "corpus.json").read_text())
VERSIONS = ("0.5.11", "0.5.23")
# (version, corpus entry) -> why the static check and the real argparse stage disagree on purpose. None today: the
# static check is argparse's verdict computed from the schema, and the semantic checks are the preflight's.
DELIBERATE: dict = {}


def real(version):
    return json.loads((FIXTURES / f"verdicts-{version}.json").read_text())


def standin_verdict(schema, argv):
    parser = standin.make_parser(schema)
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            parser.parse_args(argv)
    except SystemExit as exc:
        lines = [ln for ln in err.getvalue().splitlines() if ": error: " in ln]
        return {"accepted": exc.code == 0, "rc": exc.code, "message": lines[-1].split(": error: ", 1)[1] if lines else ""}
    return {"accepted": True, "rc": 0, "message": ""}


@pytest.mark.parametrize("version", VERSIONS)
def test_recorded_from_the_real_parser_of_that_version(version):
    doc = real(version)
    assert doc["sglang_version"] == version and doc["module"] == "sglang.srt.server_args"
    assert set(doc["verdicts"]) == set(CORPUS)
    # both kinds are in the corpus: accepted argvs and refused ones
    assert {v["accepted"] for v in doc["verdicts"].values()} == {True, False}


@pytest.mark.parametrize("version", VERSIONS)
def test_standin_parser_built_from_the_schema_gives_the_real_verdicts(version):
    schema = json.loads((ROOT / f"schemas/sglang/{version}.json").read_text())
    want = real(version)["verdicts"]
    got = {name: standin_verdict(schema, argv) for name, argv in CORPUS.items()}
    assert {n: got[n] for n in want if got[n] != want[n]} == {}


@pytest.mark.parametrize("version", VERSIONS)
def test_static_check_refuses_what_the_real_parser_refuses(version):
    schema = sglang_schema.load(version)
    others = [sglang_schema.load(v) for v in VERSIONS if v != version]
    want = real(version)["verdicts"]
    differ = {}
    for name, argv in CORPUS.items():
        fatal = [p for p in sglang_schema.check_argv(schema, argv, others) if p["problem"] != "deprecated"]
        if bool(fatal) == want[name]["accepted"] and (version, name) not in DELIBERATE:
            differ[name] = {"real": want[name], "static": [p["detail"] for p in fatal]}
    assert differ == {}
