"""make gpu-check's runner (specrepro.run.gpu_check) as its CPU dry run: the parts run on a tiny stand-in target, a part
that fails is one FAIL row and the next part still runs, and the table is written where it is asked."""
from __future__ import annotations

import json

import pytest

from specrepro.run import gpu_check
from specrepro.run.gpu_check import CheckConfig, run_check


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    return tmp_path_factory.mktemp("gpu-check-work")  # the stand-in is saved once for the module


def config(tmp_path, work, **kw) -> CheckConfig:
    base = dict(device="cpu", quick=True, stand_in="tiny", methods=("ar", "prompt-lookup"), dtypes=("fp32",),
                out=tmp_path / "out", work=work)
    return CheckConfig(**{**base, **kw})


@pytest.mark.usefixtures("one_thread")
def test_the_dry_run_checks_methods_against_ar_and_batches_against_batch_1(tmp_path, work):
    report = run_check(config(tmp_path, work, parts=("env", "methods", "batch", "syncs")))
    rows = {(p, i): (r, d) for p, i, r, d in report.rows}
    assert rows["methods", "prompt-lookup fp32 T=0"][0] == "PASS" and "= ar" in rows["methods", "prompt-lookup fp32 T=0"][1]
    assert rows["methods", "ar fp32 T=1"][0] == "PASS"
    assert rows["batch", "ar fp32 B=4"] == ("PASS", "4/4 prompts equal to batch 1")
    assert rows["syncs", "speculative"][0] == "SKIP"  # the sync debug mode needs CUDA
    table = (tmp_path / "out" / "gpu-check.md").read_text()
    assert "| methods | prompt-lookup fp32 T=0 | PASS |" in table and "STAND-IN: tiny" in table
    assert json.loads((tmp_path / "out" / "gpu-check.json").read_text())["rows"][0][0] == "env"


def test_a_failing_part_is_one_row_with_its_error_and_the_next_part_runs(tmp_path, work, monkeypatch):
    def broken(ctx):
        raise RuntimeError("first line\nCUDA error: an illegal memory access was encountered")

    monkeypatch.setitem(gpu_check.PART_FUNCTIONS, "methods", broken)
    report = run_check(config(tmp_path, work, parts=("methods", "env")))
    assert report.rows[0] == ("methods", "(part)", "FAIL", "CUDA error: an illegal memory access was encountered")
    assert [r[0] for r in report.rows[1:]] == ["env"] * len(report.rows[1:]) and len(report.rows) > 1


def test_past_the_budget_the_parts_left_are_skipped(tmp_path, work):
    report = run_check(config(tmp_path, work, parts=("env", "clock"), budget_s=-1.0))
    assert [r[2] for r in report.rows] == ["SKIP", "SKIP"]


@pytest.mark.parametrize("kw, match", [({"parts": ("env", "gpu")}, "--parts"), ({"stand_in": "big"}, "--stand-in"),
                                       ({"device": "tpu"}, "--device"), ({"methods": ("ar", "hf-ar")}, "--methods"),
                                       ({"dtypes": ("bf17",)}, "--dtypes")])
def test_a_bad_setting_is_one_clear_error(tmp_path, work, kw, match):
    with pytest.raises(ValueError, match=match):
        config(tmp_path, work, **kw)


def test_a_transformers_older_than_pyproject_requires_is_named():
    """A GPU image's own transformers (5.17 on 2026-11-28) is older than the package needs: the check says so in a
    row of its own, where otherwise MJSD and DistillSpec fail with an AttributeError that names no version."""
    from specrepro.run.gpu_check import unmet_requirement
    assert "outside the >=" in unmet_requirement("transformers", "5.17.0")
    assert unmet_requirement("transformers", "99.0") is None
    assert unmet_requirement("not-a-dependency", "0.1") is None
