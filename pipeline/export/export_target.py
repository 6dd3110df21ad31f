"""Where an export writes, and how it replaces what was there, so that no export loses data.

Every export (LeRobot, Minari, any later one) goes through these helpers:

- :func:`refuse_output_over_inputs`: the output path may not be, contain, or lie inside a
  store the export reads (resolved paths), checked before anything is deleted or written;
- :func:`rmtl.outputs.check_replaceable`: what is already at the output may be replaced
  (``--overwrite``) only if it is an export of the same kind that this project wrote and holds
  exactly what its manifest, ``.rmtl-output.json``, lists (:func:`rmtl.outputs.write_manifest`,
  written into the staged dataset before it is swapped in); a store, a cache, a run, a model, a
  file, a folder of other files, or an export holding anything its manifest does not list (at any
  depth) or a listed file that changed, is refused in one line naming it. The check runs again just
  before the swap, so what was put there while the export was written is not deleted either;
- :class:`StagedDirectory`: the dataset is written into a staging folder beside the target
  (same parent, ``.<name>.staging-<pid>``) and swapped in only once it is whole: the old
  dataset is renamed aside (``.<name>.old-<pid>``), the new one renamed in, the old one
  deleted. A kill at any moment leaves the old dataset or the new whole one under the
  target's name, never half of one; the next export removes the staging folders of dead
  processes and puts back an old dataset that a kill left renamed aside.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from rmtl.errors import ConfigError
from storage.lock import pid_alive


def _local_path(location: Any) -> Path | None:
    """The resolved local path of a store location (a path, a ``file://`` URL, an open store); None
    for an object-store URL (s3://...), which no local output can overlap."""
    location = getattr(location, "path", location)
    text = os.fspath(location) if isinstance(location, (str, os.PathLike)) else str(location)
    if "://" in text:
        if not text.startswith("file://"):
            return None
        text = text.removeprefix("file://")
    return Path(text).expanduser().resolve()


def refuse_output_over_inputs(out: str | os.PathLike[str], inputs: Iterable[Any], what: str = "--out",
                              fix: str = "choose an output path outside {store}") -> None:
    """One-line ConfigError if the output ``out`` is, contains, or lies inside any of the input stores:
    replacing it (``--overwrite``) would delete what the export reads. ``fix`` (with ``{store}``) says
    how to choose another output."""
    target = Path(out).expanduser().resolve()
    for store in inputs:
        source = _local_path(store)
        if source is None:
            continue
        if target == source:
            how = "is the input store"
        elif source in target.parents:
            how = f"lies inside the input store {source}"
        elif target in source.parents:
            how = f"contains the input store {source}"
        else:
            continue
        raise ConfigError(f"{what} {target} {how}; writing the export there would delete or damage the store it "
                          f"reads; {fix.format(store=source)}")


class StagedDirectory:
    """A directory written beside ``target`` and swapped in whole (module docstring)::

        StagedDirectory.recover(target)    # what killed exports left beside it
        staged = StagedDirectory(target)   # creates nothing yet
        try:
            staged.create()
            write(staged.path)
            staged.commit()                # the old one (if any) replaced by the new one
        finally:
            staged.discard()               # a failed or interrupted export: the staging folder goes
    """

    def __init__(self, target: str | os.PathLike[str], check: Callable[[], Any] | None = None):
        self.target = Path(target).absolute()
        self.check = check
        """Run again just before the swap (the export's output check): it raises if what is at the
        target may no longer be replaced."""
        self.parent = self.target.parent
        self.path = self.parent / f".{self.target.name}.staging-{os.getpid()}"
        self.committed = False

    def create(self) -> Path:
        """Make the (empty) staging folder, inside the ``try`` whose ``finally`` discards it: a Ctrl-C
        right after it appears still removes it."""
        self.parent.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(self.path, ignore_errors=True)
        self.path.mkdir()
        return self.path

    @staticmethod
    def _leftovers(target: Path) -> list[tuple[str, int, Path]]:
        """(kind, pid, path) of every staging or aside folder of ``target`` in its parent."""
        pattern = re.compile(rf"\.{re.escape(target.name)}\.(staging|old)-(\d+)")
        if not target.parent.is_dir():
            return []
        found = []
        for p in target.parent.iterdir():
            m = pattern.fullmatch(p.name)
            if m:
                found.append((m.group(1), int(m.group(2)), p))
        return found

    @classmethod
    def recover(cls, target: str | os.PathLike[str]) -> list[Path]:
        """Clean up after exports of ``target`` that were killed: an old dataset left renamed aside
        (killed between the two renames of a swap) goes back under the target's name if nothing is
        there; staging folders of dead processes are deleted. Returns the folders deleted."""
        target = Path(target).absolute()
        removed = []
        for kind, pid, p in cls._leftovers(target):
            if pid_alive(pid):
                continue  # another export of the same target is running: its folders are its own
            if kind == "old" and not target.exists():
                p.rename(target)
            else:
                shutil.rmtree(p, ignore_errors=True)
                removed.append(p)
        return removed

    def commit(self, content: Path | None = None) -> None:
        """Put the staged directory (or ``content``, a directory inside it, for writers that add their own
        sub-folders) under the target's name: rename the old one aside, the new one in, then delete the old
        one and what is left of the staging folder."""
        from rmtl.interrupts import deferred_sigint

        if self.check is not None:
            self.check()
        aside = self.parent / f".{self.target.name}.old-{os.getpid()}"
        with deferred_sigint():  # Ctrl-C between the renames would leave no dataset under the target's name
            if self.target.exists():
                shutil.rmtree(aside, ignore_errors=True)
                self.target.rename(aside)
            (content or self.path).rename(self.target)
            self.committed = True
            shutil.rmtree(aside, ignore_errors=True)
            shutil.rmtree(self.path, ignore_errors=True)

    def discard(self) -> None:
        """Delete the staging folder unless it was committed (an export that failed or was stopped)."""
        from rmtl.interrupts import deferred_sigint

        if not self.committed:
            with deferred_sigint():  # a second Ctrl-C must not leave half a staging folder
                shutil.rmtree(self.path, ignore_errors=True)


def interrupted_export(target: str | os.PathLike[str], existed: bool, committed: bool = False) -> KeyboardInterrupt:
    """The Ctrl-C of an export, saying what is true afterwards (rmtl.console prints its line)."""
    from rmtl.interrupts import Interrupted

    if committed:  # the signal came while the new dataset was swapped in: it is there, whole
        return Interrupted(f"interrupted (Ctrl-C) as the export finished; the new dataset at {target} is complete")
    kept = f"the earlier dataset at {target} is kept unchanged" if existed else f"nothing was written at {target}"
    return Interrupted(f"interrupted (Ctrl-C) before the export was complete; {kept}; run the same command again "
                       f"to export from the start")
