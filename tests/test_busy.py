"""A bench tells other processes' load apart from its own (``core.provenance.busy_cores``)."""
import os

from specrepro.core.provenance import busy_cores, host_speed
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


def write_proc(proc, total, idle, ticks: dict[int, tuple[int, int]]):
    """A fake /proc: the machine's ticks, and per pid (ppid, utime + stime + cutime + cstime spread over them)."""
    write_stat(proc / "stat", total - idle, idle)
    for pid, (ppid, spent) in ticks.items():
        (proc / str(pid)).mkdir(exist_ok=True)
        fields = ["S", str(ppid)] + ["0"] * 9 + [str(spent), "0", "0", "0"] + ["0"] * 30
        (proc / str(pid) / "stat").write_text(f"{pid} (a (b) c) " + " ".join(fields) + "\n")


def test_the_load_watch_counts_other_processes_and_not_this_process_or_its_children(tmp_path):
    from specrepro.core.provenance import LoadWatch
    me, cores = os.getpid(), os.cpu_count() or 1
    write_proc(tmp_path, 1000, 800, {me: (1, 10), 4242: (me, 0), 777: (1, 5)})
    watch = LoadWatch(period=3600, proc=tmp_path)  # the thread would sample in an hour: this test samples by hand
    # 200 ticks pass, 150 of them busy: this process 50, its child 30, so other processes 70
    write_proc(tmp_path, 1200, 850, {me: (1, 60), 4242: (me, 30), 777: (1, 75)})
    load = watch.summary()
    assert load["mean"] == round(cores * 70 / 200, 3) and load["max"] == load["mean"]
    # the child exits and is reaped: its ticks move to this process's cutime, and are still ours
    (tmp_path / "4242" / "stat").unlink()
    (tmp_path / "4242").rmdir()
    write_proc(tmp_path, 1400, 1050, {me: (1, 90), 777: (1, 75)})  # 200 ticks, none busy but ours
    assert watch.summary()["mean"] == round(cores * 70 / 400, 3)
    assert LoadWatch(proc=tmp_path / "missing").summary() is None  # no /proc: nothing recorded


def test_the_load_watch_stops_its_thread():
    import threading
    from specrepro.core.provenance import LoadWatch
    before = set(threading.enumerate())
    watch = LoadWatch(period=0.01)
    [thread] = [t for t in threading.enumerate() if t not in before and t.name == "specrepro-load-watch"]
    watch.stop()
    thread.join(timeout=5)
    assert not thread.is_alive()


def test_the_host_speed_is_a_fixed_workload_timed_now():
    speed = host_speed(repeats=2, mib=4, loop=10_000)
    assert speed["read_gb_s"] > 0 and speed["python_loop_ms"] > 0 and speed["utc"].endswith("Z")
