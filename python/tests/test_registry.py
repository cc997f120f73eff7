"""spmd_check.registry (SPEC.md §22): DTensor's registered pointwise
strategies checked against the recorded kernel, from Python."""

import gzip
import json
import pathlib
from fractions import Fraction

import pytest

import spmd_check
from spmd_check import BadInput

ROOT = pathlib.Path(__file__).resolve().parents[2]
RECORDING = ROOT / "tests" / "fixtures" / "registry" / "dtensor.json.gz"


def test_threshold_claims_are_classified_with_counterexamples():
    doc = spmd_check.registry("dtensor", op="aten.threshold.default", show_repro=True)
    assert doc["command"] == "registry"
    assert doc["totals"]["incorrect"] == 6
    bad = [r for r in doc["rows"] if r["class"] == "incorrect"]
    assert all(r["verdict"]["counterexample"]["ranks"] == 2 for r in bad)
    assert all(r["reproduced"] is True for r in bad)
    assert all("torch.ops.aten.threshold.default" in r["repro"]["script"] for r in bad)
    only = spmd_check.registry("dtensor", op="aten.threshold.default", incorrect_only=True)
    assert len(only["rows"]) == 6


def test_a_tampered_claim_is_incorrect(tmp_path):
    doc = json.loads(gzip.decompress(RECORDING.read_bytes()))
    doc["entries"] = [e for e in doc["entries"] if e["op"] == "aten.abs.default"]
    for e in doc["entries"]:
        if e["op"] == "aten.abs.default":
            e["claims"].append(["P(sum)", "P(sum)"])
    f = tmp_path / "tampered.json"
    f.write_text(json.dumps(doc))
    out = spmd_check.registry("dtensor", op="aten.abs.default", file=f)
    row = [r for r in out["rows"] if r["inputs"] == ["P(sum)"] and r["output"] == "P(sum)"]
    assert [r["class"] for r in row] == ["incorrect"]
    clean = spmd_check.registry("dtensor", op="aten.abs.default")
    assert clean["totals"]["incorrect"] == 0


def test_bad_arguments_are_plain_errors(tmp_path):
    with pytest.raises(BadInput, match="did you mean `dtensor`"):
        spmd_check.registry("dtensr")
    with pytest.raises(BadInput, match="missing=1"):
        spmd_check.registry("dtensor", missing=1)
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    with pytest.raises(BadInput, match="not a registry file"):
        spmd_check.registry("dtensor", file=bad)
    with pytest.raises(BadInput, match="either file= or live=True"):
        spmd_check.registry("dtensor", file=bad, live=True)


def doubled(t):
    """A registry tensor text (`2x2:1,-1/2,...`) with every value doubled."""
    shape, values = t.split(":", 1)
    return shape + ":" + ",".join(str(2 * Fraction(v)) for v in values.split(","))


def test_the_backward_rows_come_apart_and_a_doubled_gradient_is_incorrect(tmp_path):
    doc = spmd_check.registry("dtensor", op="DTensor.redistribute")
    assert doc["rows"] == []
    assert doc["backward"]["totals"] == {"correct": 34, "incorrect": 0, "undetermined": 0}
    raw = json.loads(gzip.decompress(RECORDING.read_bytes()))
    raw["entries"] = [e for e in raw["entries"] if e["op"] == "aten.mul.Tensor"]
    for e in raw["entries"]:
        for c in e.get("backward", []):
            for g in c.get("grads") or []:
                if g is not None:
                    g["per_rank"] = [None if t is None else doubled(t) for t in g["per_rank"]]
    f = tmp_path / "doubled.json"
    f.write_text(json.dumps(raw))
    out = spmd_check.registry("dtensor", op="aten.mul.Tensor", file=f)
    assert out["backward"]["totals"]["incorrect"] > 0
    assert all(r["detail"].startswith("B3") for r in out["backward"]["rows"] if r["class"] == "incorrect")
