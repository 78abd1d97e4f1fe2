"""The run cache: a folder per (config, code) key outside the repository; a changed config never resumes an old one."""

import json
from dataclasses import dataclass

import pytest

from specrepro.run.cache import config_text, run_dir, run_key


@dataclass(frozen=True)
class Config:
    methods: tuple = ("ar", "speculative")
    gamma: int = 4


def test_same_config_same_folder(tmp_path):
    a = run_dir("bench", Config(), ["p1", "p2"], root=tmp_path)
    b = run_dir("bench", Config(), ["p1", "p2"], root=tmp_path)
    assert a == b and a.parent == tmp_path / "runs" and (a / "key.json").exists()


@pytest.mark.parametrize("other", [(Config(gamma=5), ["p1", "p2"]), (Config(), ["p1"]), (Config(), ["p2", "p1"])])
def test_any_change_is_a_new_folder(tmp_path, other):
    assert run_dir("bench", Config(), ["p1", "p2"], root=tmp_path) != run_dir("bench", *other, root=tmp_path)


def test_code_files_enter_the_key(tmp_path):
    script = tmp_path / "notebook.ipynb"
    script.write_text("one")
    before = run_key(Config(), code=[script])
    script.write_text("two")
    assert run_key(Config(), code=[script]) != before


def test_a_field_added_to_a_config_changes_the_key():
    @dataclass(frozen=True)
    class Grown(Config):
        threads: int = 1

    assert config_text(Config()) != config_text(Grown())  # the class name and the field both enter


def test_bad_name(tmp_path):
    with pytest.raises(ValueError, match="plain folder name"):
        run_dir("a/b", Config(), root=tmp_path)


def test_fresh_empties_the_folder(tmp_path):
    folder = run_dir("bench", Config(), root=tmp_path)
    (folder / "records.jsonl").write_text("{}\n")
    assert (run_dir("bench", Config(), root=tmp_path) / "records.jsonl").exists()  # a matching key resumes
    again = run_dir("bench", Config(), root=tmp_path, fresh=True)
    assert again == folder and not (again / "records.jsonl").exists() and (again / "key.json").exists()


def test_another_machine_never_reads_this_ones_cells(tmp_path, monkeypatch):
    """A shared cache (one home folder, two CPUs whose model names both read "AMD EPYC") keeps each machine's cells
    apart: the key covers the CPU's family, model and stepping."""
    from specrepro.core import machine as machine_module
    from specrepro.run import cache

    here = run_dir("bench", Config(), root=tmp_path)
    assert json.loads((here / "key.json").read_text())["machine"] == machine_module.machine()
    other = {**machine_module.machine(), "cpu_model": "AuthenticAMD family 23 model 1 stepping 2"}
    monkeypatch.setattr(machine_module, "machine", lambda: other)
    monkeypatch.setattr(cache, "fingerprint", machine_module.fingerprint)
    assert run_dir("bench", Config(), root=tmp_path) != here


def test_cpu_model_reads_family_model_and_stepping(tmp_path):
    from specrepro.core.machine import cpu_model

    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 25\nmodel\t\t: 1\n"
                       "model name\t: AMD EPYC\nstepping\t: 1\nflags\t\t: fpu avx2\n\nprocessor\t: 1\n")
    assert cpu_model(cpuinfo) == "AuthenticAMD family 25 model 1 stepping 1"
    assert cpu_model(tmp_path / "absent") is None


def test_a_device_profile_of_one_cpu_generation_is_never_read_on_another(monkeypatch):
    """Two CPUs whose model names both read "AMD EPYC" (a Zen 3 and a Zen 4): the device key, which names the
    profile cache's file, tells them apart by family, model and stepping; the footer's name says which it was."""
    import torch

    from specrepro.metrics import profile

    def on(model: str):
        fields = {"vendor_id": "AuthenticAMD", "cpu family": "25", "model": model, "model name": "AMD EPYC",
                  "stepping": "1", "flags": "fpu avx2 avx512f avx512_bf16"}
        monkeypatch.setattr(profile, "cpu_fields", lambda: fields)
        monkeypatch.setattr(profile, "cpu_model", lambda: f"AuthenticAMD family 25 model {model} stepping 1")
        return profile.device_key(torch.device("cpu")), profile.device_name("cpu")

    (zen3, zen3_name), (zen4, zen4_name) = on("1"), on("17")
    assert zen3 != zen4 and "avx512_bf16" in zen4
    assert zen4_name == "CPU AMD EPYC (AuthenticAMD family 25 model 17 stepping 1)"
