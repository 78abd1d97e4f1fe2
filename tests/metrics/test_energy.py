"""Energy meters (specrepro.metrics.energy): RAPL on a fake powercap tree, NVML through a fake pynvml."""
import sys
import types
from pathlib import Path

import pytest
import torch

from specrepro.metrics import energy
from specrepro.metrics.energy import RaplMeter, UnavailableMeter, nvml_meter, open_meter, rapl_meter

MAX_UJ = 262_143_328_850  # a real package's max_energy_range_uj


def _domain(root: Path, folder: str, name: str, energy_uj: int, max_uj: int = MAX_UJ) -> Path:
    d = root / folder
    d.mkdir(parents=True)
    (d / "name").write_text(f"{name}\n")
    (d / "energy_uj").write_text(f"{energy_uj}\n")
    (d / "max_energy_range_uj").write_text(f"{max_uj}\n")
    return d


@pytest.fixture
def powercap(tmp_path):
    """Two packages, a core sub-domain, the MMIO copy of package 0 and a psys domain (the last three
    must not be counted)."""
    root = tmp_path / "powercap"
    _domain(root, "intel-rapl:0", "package-0", 1_000)
    _domain(root, "intel-rapl:0/intel-rapl:0:0", "core", 500)
    _domain(root, "intel-rapl:1", "package-1", 7_000)
    _domain(root, "intel-rapl-mmio:0", "package-0", 1_000)
    _domain(root, "intel-rapl:2", "psys", 9_000)
    return root


def _set(root: Path, folder: str, energy_uj: int) -> None:
    (root / folder / "energy_uj").write_text(f"{energy_uj}\n")


def test_rapl_sums_the_package_domains_only(powercap):
    meter = open_meter("cpu", powercap_root=powercap)
    assert isinstance(meter, RaplMeter)
    assert meter.available and meter.reason is None and meter.source == "rapl"
    assert meter.scope == "package-0 + package-1"
    assert meter.read_j() == 0.0
    _set(powercap, "intel-rapl:0", 1_000 + 1_000_000)
    _set(powercap, "intel-rapl:1", 7_000 + 2_500_000)
    for other in ("intel-rapl:0/intel-rapl:0:0", "intel-rapl-mmio:0", "intel-rapl:2"):
        _set(powercap, other, 10**9)
    assert meter.read_j() == pytest.approx(3.5)
    assert meter.read_j() == pytest.approx(3.5)  # no change, no energy


def test_rapl_undoes_a_wrap_around(powercap):
    _set(powercap, "intel-rapl:0", MAX_UJ - 100)
    meter = rapl_meter(powercap)
    _set(powercap, "intel-rapl:0", 400)  # wrapped: 100 uJ up to the range, then 400 after it
    assert meter.read_j() == pytest.approx(500e-6)
    _set(powercap, "intel-rapl:0", 1_400)
    assert meter.read_j() == pytest.approx(1_500e-6)


def test_measure_gives_the_energy_and_the_wall_time_of_the_block(powercap):
    meter = rapl_meter(powercap)
    ticks = iter([10.0, 12.5])  # the meter's clock at the block's start and end
    meter.clock = type("FakeClock", (), {"now": lambda self: next(ticks)})()
    _set(powercap, "intel-rapl:1", 8_000)  # before the block: not counted
    with meter.measure() as m:
        assert m.joules is None
        _set(powercap, "intel-rapl:0", 2_001_000)
        _set(powercap, "intel-rapl:1", 1_008_000)
    assert m.source == "rapl" and m.reason is None
    assert m.joules == pytest.approx(3.0)
    assert m.seconds == pytest.approx(2.5)  # the block's time on the meter's (device-synchronised) clock


def test_no_powercap_tree_is_unavailable_with_a_reason(tmp_path):
    meter = open_meter("cpu", powercap_root=tmp_path / "absent")
    assert isinstance(meter, UnavailableMeter)
    assert not meter.available and meter.source == "none"
    assert "no powercap tree" in meter.reason
    with pytest.raises(RuntimeError, match="no powercap tree"):
        meter.read_j()
    with meter.measure() as m:
        pass
    assert m.joules is None and "no powercap tree" in m.reason and m.seconds >= 0.0


def test_no_package_domain_is_unavailable(tmp_path):
    _domain(tmp_path, "intel-rapl:0", "psys", 1)
    meter = rapl_meter(tmp_path)
    assert not meter.available and "no RAPL package domain" in meter.reason


def test_an_unreadable_counter_makes_the_meter_unavailable(powercap, monkeypatch):
    # Linux >= 5.10 makes energy_uj readable by root only; this test may run as root, so the denial is faked
    # at the read itself.
    locked = powercap / "intel-rapl:1" / "energy_uj"
    read_text = Path.read_text

    def deny(self, *args, **kwargs):
        if self == locked:
            raise PermissionError(13, "Permission denied", str(self))
        return read_text(self, *args, **kwargs)

    monkeypatch.setattr(Path, "read_text", deny)
    meter = rapl_meter(powercap)
    assert not meter.available
    assert "permission denied" in meter.reason and str(locked) in meter.reason and "root" in meter.reason


def test_a_counter_that_is_not_a_file_or_not_a_number_makes_the_meter_unavailable(powercap):
    energy_file = powercap / "intel-rapl:1" / "energy_uj"
    energy_file.unlink()
    energy_file.mkdir()  # reading a directory fails with a real OSError, root or not
    assert not rapl_meter(powercap).available
    energy_file.rmdir()
    energy_file.write_text("n/a\n")
    meter = rapl_meter(powercap)
    assert not meter.available and "unreadable" in meter.reason


def test_an_unknown_device_type_has_no_meter():
    meter = open_meter("meta")
    assert not meter.available and "'meta'" in meter.reason


# --- NVML ----------------------------------------------------------------------------------------------


def _fake_pynvml(readings_mj=(), init_error=None, energy_error=None):
    """A stand-in for nvidia-ml-py's pynvml: the calls the meter makes, nothing else."""
    fake = types.ModuleType("pynvml")

    class NVMLError(Exception):
        pass

    readings = iter(readings_mj)
    fake.NVMLError = NVMLError
    fake.calls = []

    def nvmlInit():
        fake.calls.append("init")
        if init_error:
            raise NVMLError(init_error)

    def nvmlDeviceGetHandleByUUID(uuid):
        fake.calls.append(("handle", uuid))
        return f"handle:{uuid}"

    def nvmlDeviceGetDeviceHandleFromMigDeviceHandle(handle):
        fake.calls.append(("parent", handle))
        return f"parent-of:{handle}"

    def nvmlDeviceGetTotalEnergyConsumption(handle):
        if energy_error:
            raise NVMLError(energy_error)
        return next(readings)

    fake.nvmlInit = nvmlInit
    fake.nvmlDeviceGetHandleByUUID = nvmlDeviceGetHandleByUUID
    fake.nvmlDeviceGetDeviceHandleFromMigDeviceHandle = nvmlDeviceGetDeviceHandleFromMigDeviceHandle
    fake.nvmlDeviceGetTotalEnergyConsumption = nvmlDeviceGetTotalEnergyConsumption
    return fake


def test_nvml_meter_reads_the_total_energy_counter_in_millijoules(monkeypatch):
    fake = _fake_pynvml(readings_mj=[5_000_000, 5_000_250, 5_012_250])  # the first is read at opening
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    meter = nvml_meter("GPU-0000")
    assert meter.available and meter.source == "nvml" and meter.scope == "GPU GPU-0000"
    assert fake.calls == ["init", ("handle", "GPU-0000")]
    assert meter.read_j() == pytest.approx(0.25)
    assert meter.read_j() == pytest.approx(12.25)  # joules since the meter was opened


def test_nvml_measure_takes_the_difference_of_two_reads(monkeypatch):
    fake = _fake_pynvml(readings_mj=[1_000, 1_000, 3_500])  # origin, block start, block end
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    meter = nvml_meter("GPU-abcd")
    meter.clock = fake_clock(0.0, 0.5)
    with meter.measure() as m:
        pass
    assert m.joules == pytest.approx(2.5) and m.source == "nvml" and m.reason is None


def fake_clock(*ticks: float):
    it = iter(ticks)
    return type("FakeClock", (), {"now": lambda self: next(it)})()


@pytest.mark.parametrize("readings, seconds", [([1_000, 1_000, 1_000], 0.5),  # no update inside the block
                                               ([1_000, 1_000, 1_900], 0.004)])  # a whole period in 4 ms
def test_a_block_below_nvmls_update_period_reads_none_not_zero(monkeypatch, readings, seconds):
    monkeypatch.setitem(sys.modules, "pynvml", _fake_pynvml(readings_mj=readings))
    meter = nvml_meter("GPU-abcd")
    meter.clock = fake_clock(0.0, seconds)
    with meter.measure() as m:
        pass
    assert m.joules is None and "below nvml resolution" in m.reason and m.seconds == pytest.approx(seconds)


def test_a_mig_slice_is_named_mig_and_metered_by_its_whole_gpu(monkeypatch):
    fake = _fake_pynvml(readings_mj=[7, 7])
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    props = types.SimpleNamespace(uuid="1234-abcd", name="NVIDIA A100-SXM4-40GB MIG 1g.5gb")
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda index: props)
    assert energy._cuda_uuid(torch.device("cuda:0")) == "MIG-1234-abcd"
    props.name = "NVIDIA H100 80GB HBM3"
    assert energy._cuda_uuid(torch.device("cuda:0")) == "GPU-1234-abcd"
    meter = nvml_meter("MIG-1234-abcd")
    assert meter.available and "whole GPU" in meter.scope
    assert fake.calls[1:] == [("handle", "MIG-1234-abcd"), ("parent", "handle:MIG-1234-abcd")]


@pytest.mark.parametrize("kwargs, message", [
    ({"init_error": "Driver Not Loaded"}, "Driver Not Loaded"),
    ({"energy_error": "Not Supported"}, "Not Supported"),  # GPUs before Volta have no energy counter
])
def test_nvml_errors_make_the_meter_unavailable(monkeypatch, kwargs, message):
    monkeypatch.setitem(sys.modules, "pynvml", _fake_pynvml(**kwargs))
    meter = nvml_meter("GPU-abcd")
    assert not meter.available and message in meter.reason and "GPU-abcd" in meter.reason


def test_nvml_without_the_package_is_unavailable(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # makes `import pynvml` raise ImportError
    meter = nvml_meter("GPU-abcd")
    assert not meter.available and "nvidia-ml-py" in meter.reason


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-CUDA path")
def test_cuda_without_cuda_is_unavailable():
    meter = open_meter("cuda")
    assert not meter.available and "CUDA is not available" in meter.reason


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_nvml_on_a_real_gpu_counts_the_energy_of_a_matmul_loop():
    meter = open_meter("cuda")
    if not meter.available:
        pytest.skip(f"NVML energy counter not readable here: {meter.reason}")
    x = torch.randn(4096, 4096, device="cuda")
    with meter.measure() as m:
        for _ in range(200):
            x = torch.tanh(x @ x)
    assert m.joules > 0.0 and m.seconds > 0.0
    assert 1.0 < m.joules / m.seconds < 2000.0  # an average power in watts a single GPU can draw
