"""A bench tells other processes' load apart from its own (``core.provenance.busy_cores``)."""
import os

from specrepro.core.provenance import busy_cores
from specrepro.run import bench_session


def write_stat(path, total_busy, idle):
    path.write_text(f"cpu  {total_busy} 0 0 {idle} 0 0 0 0 0 0\ncpu0 1 0 0 1 0 0 0 0 0 0\n")


def test_busy_cores_reads_the_share_of_non_idle_ticks(tmp_path, monkeypatch):
    stat = tmp_path / "stat"
    samples = iter([(100, 1000), (150, 1050)])  # 50 busy and 50 idle ticks over the window: half of every core

    def sleep(_):
        write_stat(stat, *next(samples))

    write_stat(stat, *next(samples))
    monkeypatch.setattr("time.sleep", sleep)
    assert busy_cores(0.1, stat) == (os.cpu_count() or 1) * 0.5
    assert busy_cores(0.1, tmp_path / "missing") is None


def test_the_warning_follows_other_processes_not_the_load_average(capsys):
    quiet = {"busy_cores": 0.1, "load_average": [9.0, 9.0, 9.0]}  # a high load of our own making
    bench_session.warn_if_busy(quiet)
    assert "busy" not in capsys.readouterr().err
    bench_session.warn_if_busy({"busy_cores": 1.2, "load_average": [0.1, 0.1, 0.1]})
    assert "kept 1.2 of" in capsys.readouterr().err
    bench_session.warn_if_busy({"busy_cores": None, "load_average": [99.0, 9.0, 9.0]})  # no /proc/stat: the load
    assert "load 99.0" in capsys.readouterr().err
