"""The job schema: one declaration per key, and a job reference generated from them."""

from __future__ import annotations

import re

import numpy as np
import pytest

import flegel.data as data
from flegel import sync as sync_models
from flegel import validation
from flegel.job.overrides import apply_overrides
from flegel.job.reference import REFERENCE_PATH, job_reference
from flegel.job.sections import OUTPUT, RUNTIME, STOP, TOP, straggler_keys, sync_keys
from flegel.job.validate import load_job
from flegel.runtime.stragglers import COMMON_KEYS, DEFAULTS, PATTERN_KEYS, PATTERNS
from flegel.validation import SchemaError, check_section
from tests.conftest import ROOT, write_job

REGENERATE = "python -m flegel.job.reference > docs/job-reference.md"


def _tables(text: str) -> dict[str, dict[str, str]]:
    """Heading -> {key as written in the table: description} of the reference."""
    out: dict[str, dict[str, str]] = {}
    heading = ""
    for line in text.splitlines():
        if line.startswith("#"):
            heading = line.lstrip("#").strip()
            out[heading] = {}
        m = re.match(r"\| `([^`]+)` \|.*\| ([^|]*) \|$", line)
        if m:
            out[heading][m.group(1)] = m.group(2).strip()
    return out


# --------------------------------------------------------------------------- the reference
def test_reference_is_up_to_date():
    written = (ROOT / REFERENCE_PATH).read_text()
    assert written == job_reference(), f"{REFERENCE_PATH} is stale: run `{REGENERATE}`"


def _accepted() -> dict[str, set[str]]:
    """Heading of the reference -> every key validation accepts in that part of a job."""
    acc = {
        "Top level": set(TOP),
        "`stop`": {f"stop.{k}" for k in STOP},
        "`output`": {f"output.{k}" for k in OUTPUT},
        "`runtime`": {f"runtime.{k}" for k in RUNTIME},
        "`sync`": {"sync.model"},
        "`stragglers`": {f"stragglers[].{k}" for k in COMMON_KEYS},
    }
    for model in sync_models.MODELS:
        keys = sync_keys(sync_models.policy_class(model))
        acc[f"`sync` with `model: {model}`"] = {f"sync.{k}" for k in keys if k != "model"}
    for pattern in PATTERNS:
        acc[f"`stragglers` with `pattern: {pattern}`"] = {
            f"stragglers[].{k}" for k in straggler_keys(pattern) if k not in COMMON_KEYS}
    acc["`data`: a file"] = {f"data.{k}" for k in data.FILE_KEYS}
    acc["`data`: synthetic"] = {f"data.{k}" for k in data.SYNTHETIC_KEYS}
    return acc


def test_every_accepted_key_is_in_the_reference():
    tables = _tables(job_reference())
    for heading, keys in _accepted().items():
        assert heading in tables, f"no section {heading!r} in the reference"
        missing = keys - set(tables[heading])
        assert not missing, f"{heading}: not documented: {sorted(missing)}"


def test_every_key_has_a_doc_line():
    tables = _tables(job_reference())
    for heading in _accepted():
        bare = [k for k, doc in tables[heading].items() if doc in ("", "(undocumented)")]
        assert not bare, f"{heading}: keys without a doc line: {bare}"


def test_every_data_key_has_a_doc_line():
    assert set(data.FILE_SPEC) >= set(data.FILE_KEYS)
    assert set(data.SYNTHETIC_SPEC) >= set(data.SYNTHETIC_KEYS)
    for spec in (data.FILE_SPEC, data.SYNTHETIC_SPEC):
        assert all(key.doc for key in spec.values())


def test_every_default_passes_its_own_check():
    sections = [TOP, STOP, OUTPUT, RUNTIME, COMMON_KEYS, *PATTERN_KEYS.values()]
    sections += [sync_keys(sync_models.policy_class(m)) for m in sync_models.MODELS]
    for keys in sections:
        for name, key in keys.items():
            assert key.required or key.check(key.default), (name, key.default)


def test_straggler_defaults_come_from_the_keys():
    assert tuple(PATTERN_KEYS) == PATTERNS
    assert DEFAULTS["injected"] == {"tau_ms": 32.0, "every": 1000}
    assert DEFAULTS["transient"] == {"factor": 4.0, "on_s": 1.0, "off_s": 2.0}


# --------------------------------------------------------------------------- the engine
SECTION = {
    "n": validation.integer("a count", 3, lo=1),
    "rate": validation.number("a rate", REQUIRED := validation.REQUIRED, lo=0, hi=1, lo_open=True,
                          hi_open=True),
    "mode": validation.choice("a mode", ("a", "b"), "a"),
    "flag": validation.boolean("a flag", False),
}
assert REQUIRED is validation.REQUIRED


def test_check_section_fills_defaults_in_schema_order():
    assert check_section("s", {"rate": 0.5}, SECTION) == {"n": 3, "rate": 0.5, "mode": "a",
                                                          "flag": False}


@pytest.mark.parametrize("given, key, words", [
    ({"rate": 0.5, "nn": 1}, "s.nn", "did you mean 'n'"),
    ({}, "s.rate", "missing"),
    ({"rate": 1}, "s.rate", "between 0 and 1 (exclusive), found 1"),
    ({"rate": 0.5, "n": True}, "s.n", "positive integer, found True"),
    ({"rate": 0.5, "n": 0}, "s.n", "positive integer"),
    ({"rate": 0.5, "mode": "c"}, "s.mode", "'a' or 'b'"),
    ({"rate": 0.5, "flag": 1}, "s.flag", "true or false"),
    ({"rate": float("nan")}, "s.rate", "nan"),
])
def test_check_section_errors(given, key, words):
    with pytest.raises(SchemaError) as info:
        check_section("s", given, SECTION)
    assert info.value.key == key and words in str(info.value)


def test_section_must_be_a_mapping():
    with pytest.raises(SchemaError, match="expected a mapping, found"):
        check_section("stop", [1], STOP)


@pytest.mark.parametrize("key, text", [
    (validation.integer("", lo=0), "a non-negative integer"),
    (validation.integer("", lo=3), "an integer >= 3"),
    (validation.integer("", lo=1, null=True, unit="points"),
     "a positive integer of points or null"),
    (validation.number("", lo=0, lo_open=True, unit="seconds"), "a positive number of seconds"),
    (validation.number("", lo=1, lo_open=True), "a number > 1"),
    (validation.number("", lo=0, hi=1, hi_open=True), "a number >= 0 and < 1"),
    (validation.choice("", ("x", None, 2)), "'x', null or 2"),
])
def test_expected_text_follows_the_bounds(key, text):
    assert key.expected == text


# --------------------------------------------------------------------------- through config
def test_set_keeps_text_where_a_key_wants_text(tmp_path):
    doc = apply_overrides({"sync": {"model": "bsp"}}, ["name=2024", "output.dir=7",
                                                       "workers=3"], tmp_path / "j.yaml")
    assert doc["name"] == "2024" and doc["output"]["dir"] == "7" and doc["workers"] == 3


def test_sync_options_validated_from_their_keys(tmp_path):
    from tests.test_config import GOOD

    path = write_job(tmp_path / "job.yaml", **GOOD)
    job = load_job(path, ["sync.model=ssp", "sync.s=5"])
    assert job.sync.options == {"model": "ssp", "batch": "auto", "overhead": 0.1, "s": 5}
    job = load_job(path, ["sync.model=fspv"])
    assert job.sync.model == "fsp" and job.sync.options["interval"] == "multistage"


@pytest.mark.parametrize("params, key", [
    ({"n_clusters": 0}, "params.n_clusters"),
    ({"n_clusters": 3, "n_init": "many"}, "params.n_init"),
    ({"n_clusters": 3, "init": "nofile.npy"}, "params"),  # no parameter's declaration refused it
])
def test_a_bad_parameter_is_named_from_its_declaration(tmp_path, params, key):
    from flegel.job.errors import JobError
    from tests.test_config import GOOD

    path = write_job(tmp_path / "job.yaml", **{**GOOD, "params": params})
    with pytest.raises(JobError) as info:
        load_job(path)
    assert info.value.key == key


# --------------------------------------------------------------------------- the vocabulary
@pytest.mark.parametrize("rule, good, bad, yaml, python", [
    (validation.Integer(lo=1), [1, 7, np.int64(3)], [0, True, 1.5, "2"],
     "a positive integer", "an integer >= 1"),
    (validation.Integer(lo=0), [0, 5], [-1, None], "a non-negative integer", "an integer >= 0"),
    (validation.Real(lo=0.0, lo_open=True, finite=True), [0.5, 2, np.float32(1)],
     [0.0, float("inf"), float("nan"), False], "a positive finite number",
     "a finite number > 0.0"),
    (validation.Real(lo=0.0, hi=1.0, hi_open=True, finite=True), [0.0, 0.99], [1.0, -0.1],
     "a finite number >= 0 and < 1", "a finite number >= 0.0 and < 1.0"),
    (validation.Real(lo=0), [float("inf")], [float("nan")], "a non-negative number",
     "a number >= 0"),
    (validation.Options(("a", "b")), ["a", "b"], ["c", 1, None], "'a' or 'b'",
     "one of 'a', 'b'"),
    (validation.Options((True, "auto")), [True, "auto"], [1, False], "true or 'auto'",
     "one of True, 'auto'"),
    (validation.Options(("npy",), also=("idx",)), ["npy", "idx"], ["csv", np.ones(2)],
     "'npy'", "one of 'npy'"),
    (validation.Boolean(), [True, np.bool_(False)], [1, "yes"], "true or false",
     "True or False"),
    (validation.Nullable(validation.Integer(lo=1)), [None, 2], [0], "a positive integer or null",
     "an integer >= 1 or None"),
    (validation.AnyOf(validation.Options(("auto",)), validation.Integer(lo=1)), ["auto", 4],
     ["full", 0], "'auto' or a positive integer", "one of 'auto' or an integer >= 1"),
    (validation.Items(validation.Integer(lo=1), sizes=(2, 3)), [(1, 2), [1, 2, 3]],
     [(1,), (1, 0), "ab", 5], "2/3-item list of: a positive integer",
     "2/3-item list of: an integer >= 1"),
    (validation.PlainName(), ["run-1"], ["a/b", "..", ""], "a name without '/', '\\' or '..'",
     "a name without '/', '\\' or '..'"),
])
def test_a_constraint_knows_its_check_and_its_words(rule, good, bad, yaml, python):
    assert all(rule.is_satisfied_by(v) and rule(v) for v in good), good
    assert not any(rule.is_satisfied_by(v) for v in bad), bad
    assert rule.describe() == yaml and rule.describe(python=True) == python


def test_key_holds_a_constraint_and_a_predicate_only_with_its_words():
    key = validation.Key(validation.Integer(lo=1), 3, "a count")
    assert (key.expected, key.default, key.doc, key.check(2), key.check(0)) == \
        ("a positive integer", 3, "a count", True, False)
    plain = validation.Key(validation.Described(lambda v: v % 2 == 0, "an even number"), 2,
                           "evens")
    assert isinstance(plain.constraint, validation.Described)
    assert (plain.expected, plain.default, plain.doc, plain.check(4), plain.check(3)) == \
        ("an even number", 2, "evens", True, False)


def test_check_params_names_the_parameter_and_converts():
    params = {"k": validation.Integer(lo=1), "rate": validation.Real(lo=0.0, finite=True),
              "shape": validation.Items(validation.Integer(lo=1))}
    assert validation.check_params(params, {"k": np.int64(3), "rate": 1, "shape": [2, 2],
                                            "other": "x"}) == \
        {"k": 3, "rate": 1.0, "shape": (2, 2)}
    with pytest.raises(validation.ParameterError) as info:
        validation.check_params(params, {"k": 2, "rate": -1})
    assert info.value.key == "rate"
    assert str(info.value) == "rate must be a finite number >= 0.0, got -1"
