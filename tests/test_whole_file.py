"""A file written whole is either the old one or the new one, never half of either, and leaves no
staged file behind (storage.whole_file, used by store sidecars, normalizers and reports)."""

from __future__ import annotations

import os

import pytest

from storage.whole_file import write_file_whole


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
