"""Command lines: a bad path or count is one line on stderr and exit status 2, and a bench whose methods fail
exits non-zero naming them, after writing the others' results."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from specrepro.run.commands import main
from specrepro.run.bench_types import BenchResult
from specrepro.training import distillspec, ppd_ablations

ROOT = Path(__file__).resolve().parents[1]
MISSING = "/nonexistent/p.jsonl"


def one_error_line(capsys, run) -> str:
    """stderr of ``run()``, which must exit with status 2 after one line and no traceback."""
    with pytest.raises(SystemExit) as exit_:
        run()
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    return err


@pytest.mark.parametrize("argv, message", [
    (["generate", "--method", "ar", "--max-new-tokens", "2", "--prompts", MISSING], f"--prompts: no such file: {MISSING}"),
    (["generate", "--method", "ar", "--max-new-tokens", "2", "--threads", "0", "--prompt", "hi"],
     "--threads: expected an integer from 1 to"),
    (["generate", "--method", "bigram", "--prompt", "hi", "--ngram-table", "/nonexistent/t.npz"],
     "--ngram-table: no such file"),
    (["generate", "--method", "ar", "--prompts", "/"], "--prompts: is a folder, not a file: /"),
    (["bench", "--methods", "ar", "--prompts", MISSING, "--out", "/tmp/never-written"], "--prompts: no such file"),
    (["bench", "--methods", "ar", "--suite", "mixed", "--threads", "0", "--out", "/tmp/never-written"],
     "--threads: expected an integer from 1 to"),
    (["bench", "--methods", "bigram", "--suite", "mixed", "--ngram-table", MISSING, "--out", "/tmp/never-written"],
     "--ngram-table: no such file"),
    (["calibrate", "--threads", "-1"], "--threads: expected an integer from 1 to"),
])
def test_a_bad_path_or_count_is_one_line(capsys, argv, message):
    assert message in one_error_line(capsys, lambda: main(argv))
    assert not Path("/tmp/never-written").exists()


def test_training_commands_check_their_inputs_too(capsys):
    err = one_error_line(capsys, lambda: ppd_ablations.main(["--out", "/tmp/never-written", "--data", "/nonexistent"]))
    assert "--data: no such folder: /nonexistent" in err
    err = one_error_line(capsys, lambda: distillspec.main(["--out", "/tmp/never-written", "--threads", "0"]))
    assert "--threads: expected an integer from 1 to" in err


def test_a_missing_prompts_file_is_no_traceback():
    """The issue's command, as a user runs it."""
    res = subprocess.run([sys.executable, "-m", "specrepro", "generate", "--method", "ar", "--max-new-tokens", "2",
                          "--prompts", MISSING], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert res.returncode == 2 and res.stdout == ""
    assert res.stderr.strip() == (f"python -m specrepro generate: error: argument --prompts: no such file: {MISSING} "
                                  f"(--help for usage)")


def test_bench_exits_non_zero_naming_the_failed_methods(capsys, monkeypatch, tmp_path):
    """The summary of the methods that ran is printed; then one line per failure and the exit status 1."""
    row = {"method": "ar", "dtype": "fp32", "n": 1}
    failed = {"spectr": {"error": "ValueError", "message": "K-SEQ needs i.i.d. candidates", "where": "warm-up"},
              "ppd": {"error": "RuntimeError", "message": "boom", "where": "prompt a, repeat 0"}}
    monkeypatch.setattr("specrepro.run.bench.run_bench",
                        lambda config, out, progress, executor=None: BenchResult(Path(out), [], [row], {}, failed))
    code = main(["bench", "--methods", "ar,spectr,ppd", "--suite", "mixed", "--out", str(tmp_path), "--no-progress"])
    out, err = capsys.readouterr()
    assert code == 1 and "ar" in out and f"in {tmp_path}" in out
    assert "spectr failed (warm-up): ValueError: K-SEQ needs i.i.d. candidates" in err
    assert "ppd failed (prompt a, repeat 0): RuntimeError: boom" in err
    assert err.strip().splitlines()[-1] == "specrepro: error: 2 method(s) failed: spectr, ppd"
