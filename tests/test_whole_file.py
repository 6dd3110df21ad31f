"""A file or folder written whole is either the old one or the new one, never half of either, and
leaves nothing staged behind (storage.whole_file, used by store sidecars, normalizers, reports and a
run's kept policies: best/, final/, resume/)."""

from __future__ import annotations

import os

import pytest

from storage.whole_file import dir_written_whole, write_file_whole


def test_a_write_replaces_the_file_and_leaves_nothing_beside_it(tmp_path):
    path = tmp_path / "sub" / "report.json"
    write_file_whole(path, "old")
    write_file_whole(path, b"new")
    assert path.read_text() == "new"
    assert sorted(p.name for p in path.parent.iterdir()) == ["report.json"]


def test_a_failed_swap_keeps_the_old_file_and_removes_the_staged_one(tmp_path, monkeypatch):
    path = tmp_path / "report.json"
    write_file_whole(path, "old")

    def refuse(src, dst):
        raise OSError("disk gone")

    monkeypatch.setattr(os, "replace", refuse)
    with pytest.raises(OSError, match="disk gone"):
        write_file_whole(path, "new")
    assert path.read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.json"]


def _fill(folder, **files):
    for name, text in files.items():
        (folder / name).write_text(text)


def test_a_folder_written_whole_replaces_the_old_one_and_leaves_nothing_beside_it(tmp_path):
    dest = tmp_path / "run" / "best"
    with dir_written_whole(dest) as into:
        _fill(into, **{"model.zip": "old", "curriculum.json": "old"})
    with dir_written_whole(dest) as into:
        assert into != dest and into.parent == dest.parent  # filled beside its place
        assert sorted(p.name for p in dest.iterdir()) == ["curriculum.json", "model.zip"]  # untouched while it fills
        _fill(into, **{"model.zip": "new"})
    assert {p.name: p.read_text() for p in dest.iterdir()} == {"model.zip": "new"}  # no file of the old one left
    assert [p.name for p in dest.parent.iterdir()] == ["best"]


def test_a_write_that_fails_leaves_the_old_folder_as_it_was(tmp_path, monkeypatch):
    dest = tmp_path / "best"
    with dir_written_whole(dest) as into:
        _fill(into, **{"model.zip": "old"})
    with pytest.raises(RuntimeError, match="killed"):
        with dir_written_whole(dest) as into:
            _fill(into, **{"model.zip": "half"})
            raise RuntimeError("killed mid-write")
    assert {p.name: p.read_text() for p in dest.iterdir()} == {"model.zip": "old"}
    assert [p.name for p in tmp_path.iterdir()] == ["best"]

    real_replace = os.replace

    def refuse_second(src, dst):  # the old folder moves aside, then the swap itself fails
        if str(src).endswith(".writing"):
            raise OSError("disk gone")
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", refuse_second)
    with pytest.raises(OSError, match="disk gone"):
        with dir_written_whole(dest) as into:
            _fill(into, **{"model.zip": "new"})
    assert {p.name: p.read_text() for p in dest.iterdir()} == {"model.zip": "old"}
    assert [p.name for p in tmp_path.iterdir()] == ["best"]


def test_the_leftovers_of_a_killed_write_are_cleared_by_the_next_one(tmp_path):
    dest = tmp_path / "resume"
    (tmp_path / ".resume.writing").mkdir()
    (tmp_path / ".resume.writing" / "model.zip").write_text("half")
    (tmp_path / ".resume.replaced").mkdir()
    with dir_written_whole(dest) as into:
        assert list(into.iterdir()) == []  # starts empty, not with the killed write's half file
        _fill(into, **{"model.zip": "new"})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["resume"]


def test_an_old_folder_a_kill_left_moved_aside_is_put_back_before_the_next_write(tmp_path):
    (tmp_path / ".final.replaced").mkdir()  # killed after moving the old final/ aside, before the rename in
    (tmp_path / ".final.replaced" / "manager.pt").write_text("old")
    with pytest.raises(RuntimeError):
        with dir_written_whole(tmp_path / "final"):
            raise RuntimeError("the next write fails too")
    assert (tmp_path / "final" / "manager.pt").read_text() == "old"  # not deleted as a leftover
    assert sorted(p.name for p in tmp_path.iterdir()) == ["final"]
