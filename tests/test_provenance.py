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
