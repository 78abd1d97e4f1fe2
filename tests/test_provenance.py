"""``provenance.git_revision``: the one home of the revision every result records (bench, profiles, trainers and the
notebooks' artifacts), and its one format."""
from __future__ import annotations

import subprocess

from specrepro.core.provenance import git_revision, git_state


def _git(root, *args):
    subprocess.run(["git", *args], cwd=root, check=True, capture_output=True)


def test_the_revision_names_the_commit_and_says_when_the_tree_differs(tmp_path):
    _git(tmp_path, "init", "-q")
    (tmp_path / "code.py").write_text("x = 1\n")
    (tmp_path / "figures").mkdir()
    (tmp_path / "figures" / "table.csv").write_text("a\n")
    _git(tmp_path, "add", ".")
    _git(tmp_path, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "one")
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=tmp_path, capture_output=True, text=True).stdout.strip()
    assert git_revision(root=tmp_path) == head
    (tmp_path / "figures" / "table.csv").write_text("b\n")  # a notebook's own output changed
    assert git_revision(root=tmp_path) == f"{head} (with uncommitted changes)"
    assert git_revision(ignore=("figures",), root=tmp_path) == head  # outputs are not changes to the code
    (tmp_path / "code.py").write_text("x = 2\n")
    assert git_revision(ignore=("figures",), root=tmp_path) == f"{head} (with uncommitted changes)"
    assert git_revision(root=tmp_path / "figures" / "nowhere") == "unknown"


def test_git_state_gives_the_same_facts_as_data():
    state = git_state()
    assert set(state) == {"revision", "dirty_files"} and isinstance(state["dirty_files"], list)
    assert git_revision().startswith(state["revision"] or "unknown")


# --- The pinned environment: requirements.lock, and what every result records of it ---------------------------------

def test_environment_records_the_locks_digest_and_what_differs_from_it(tmp_path):
    import hashlib
    from importlib import metadata

    from specrepro.core.provenance import environment, lock_pins

    numpy = metadata.version("numpy")
    lock = tmp_path / "requirements.lock"
    lock.write_text(f"# made by uv\nNumPy=={numpy}\n    # via specrepro\nscipy==0.0.1\nnot-installed-pkg==1.0\n"
                    "rouge_score==0.0.9 ; python_version >= '3'\n")
    assert lock_pins(lock) == {"numpy": numpy, "scipy": "0.0.1", "not-installed-pkg": "1.0", "rouge-score": "0.0.9"}
    env = environment(lock)
    assert env["lock_sha256"] == hashlib.sha256(lock.read_bytes()).hexdigest()
    assert env["not_as_locked"] == [f"rouge-score {metadata.version('rouge-score')}, locked 0.0.9",
                                    f"scipy {metadata.version('scipy')}, locked 0.0.1"]  # numpy agrees; extras skip
    assert environment(tmp_path / "none.lock")["lock_sha256"] is None


def test_the_lock_pins_every_dependency_and_the_environment_is_the_locks():
    """requirements.lock pins every package pyproject.toml names (its extras too), leaves torch (the machine's build)
    and CUDA libraries out, and this environment, made by `make venv` from it, has every package at its pin."""
    import re
    import tomllib

    from specrepro.core.provenance import LOCK_FILE, ROOT, environment, lock_pins

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    wanted = list(project["dependencies"]) + [d for extra in project["optional-dependencies"].values() for d in extra]
    names = {re.sub(r"[-_.]+", "-", re.match(r"[A-Za-z0-9._-]+", d).group()).lower() for d in wanted}
    pins = lock_pins(LOCK_FILE)
    assert names - {"torch"} <= set(pins), sorted(names - {"torch"} - set(pins))
    assert "torch" not in pins and not [p for p in pins if p.startswith("nvidia-") and p != "nvidia-ml-py"]
    assert environment()["not_as_locked"] == []
