"""Damage in a dataset store: :class:`Damage` and :class:`VerifyReport`, ``DatasetStore.verify``
(decode every committed chunk) and the one-line error of a read that fails."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from itertools import product
from typing import Any
from collections.abc import Iterator

from zarr.codecs import BloscCodec, Crc32cCodec

from storage.errors import StoreError
from storage.schema import COORDINATES, EMBEDDINGS_GROUP, FRAMES, PROMPT_SETS_GROUP, TEXT_GROUP

VERIFY_HINT = "run `rmtl store verify {store}` to list every damaged chunk"


@dataclass(frozen=True)
class Damage:
    """One damaged part of a store found by `DatasetStore.verify` or a failing read."""

    array: str
    """Node path of the array ('frames', 'embeddings/<node>', ...)."""
    problem: str
    chunk: tuple[int, ...] | None = None
    """Chunk grid coordinates (None: the array's metadata)."""
    rows: tuple[int, int] | None = None
    """Store rows [start, stop) the chunk holds (text embeddings: prompt rows)."""
    view: str | None = None

    def describe(self) -> str:
        where = "metadata" if self.chunk is None else f"chunk {'.'.join(map(str, self.chunk))}"
        unit = ("prompts" if self.array.startswith((TEXT_GROUP + "/", PROMPT_SETS_GROUP + "/"))
                else "names" if self.array.rsplit("/", 1)[-1] in COORDINATES else "rows")
        rows = f" {unit} {self.rows[0]}-{self.rows[1] - 1}" if self.rows else ""
        view = f" view {self.view}" if self.view else ""
        return f"{self.array} {where}{rows}{view}: {self.problem}"


@dataclass
class VerifyReport:
    """What `DatasetStore.verify` checked and the damage it found."""

    store: str
    arrays: int = 0
    chunks: int = 0
    checksums: bool = False
    """Whether the store was created with checksums and all chunks written (see INTEGRITY)."""
    damage: list[Damage] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.damage


def reason(err: BaseException) -> str:
    """An exception as a short reason for a one-line message."""
    text = " ".join(str(err).split())
    if "checksum do not match" in text:
        return "checksum mismatch (the chunk's bytes changed or it was truncated)"
    return f"{type(err).__name__}: {text[:160]}" if text else type(err).__name__


def _blosc_truncated(raw: bytes) -> str | None:
    """For a chunk ending in blosc (no checksum): a problem if its size disagrees with the
    compressed size in its blosc header (bytes 12-15), else None."""
    if len(raw) < 16:
        return f"chunk file is truncated ({len(raw)} bytes, shorter than a blosc header)"
    cbytes = int.from_bytes(raw[12:16], "little")
    if cbytes != len(raw):
        return f"chunk file has {len(raw)} bytes but its blosc header says {cbytes} (truncated or overwritten)"
    return None


class StoreVerify:
    """The verification part of :class:`storage.dataset.DatasetStore` (a mixin over its
    state: location, group, arrays, commit counts, views)."""

    def _row_limit(self, node: str, stop: int) -> int:
        """The committed rows of array `node` (text tables: their prompts), at least `stop`."""
        if node.startswith((TEXT_GROUP + "/", PROMPT_SETS_GROUP + "/")):
            limit = int(self._group[node].shape[0])
        elif node.startswith(EMBEDDINGS_GROUP + "/"):
            limit = max((n for m, n in self._emb_rows.items() if self._emb_node(m) == node), default=stop)
        else:
            limit = self._rows
        return max(limit, stop)

    def _check_chunks(self, node: str, a: Any, start: int, stop: int, limit: int, missing: bool,
                      report: VerifyReport | None = None) -> Iterator[Damage]:
        """Read and decode every chunk of array `node` holding rows [start, stop); yield the
        damaged ones (rows reported up to `limit`). missing: a missing chunk file is damage
        (stores that write every chunk); else it reads as fill values, as zarr means it."""
        if stop <= start:
            return
        c0 = int(a.chunks[0])
        rest = [range(-(-int(n) // int(c))) for n, c in zip(a.shape[1:], a.chunks[1:])]
        crc = any(isinstance(c, Crc32cCodec) for c in a.compressors)
        blosc = bool(a.compressors) and isinstance(a.compressors[-1], BloscCodec)
        fs = self._loc.fs
        for i in range(start // c0, -(-stop // c0)):
            rows = (i * c0, min((i + 1) * c0, limit))
            for tail in product(*rest):
                coords = (i, *tail)
                view = self.views[tail[0]] if node == FRAMES and tail and tail[0] < len(self.views) else None
                key = f"{self._loc.path}/{node}/{a.metadata.encode_chunk_key(coords)}"
                if report is not None:
                    report.chunks += 1
                if crc:
                    if missing and not fs.exists(key):
                        yield Damage(node, "chunk file is missing", coords, rows, view)
                        continue
                else:  # no checksum: at least catch a truncated blosc chunk before decoding it
                    try:
                        raw = fs.cat_file(key)
                    except FileNotFoundError:
                        if missing:
                            yield Damage(node, "chunk file is missing", coords, rows, view)
                        continue
                    problem = _blosc_truncated(raw) if blosc else None
                    if problem:
                        yield Damage(node, problem, coords, rows, view)
                        continue
                try:
                    a.get_block_selection(coords)
                except Exception as e:
                    yield Damage(node, reason(e), coords, rows, view)

    def verify(self) -> VerifyReport:
        """Read and decode every chunk of the committed rows of every array (frames, per-row
        fields, each model's embeddings, text embeddings) and check each array's metadata;
        returns a report naming each damaged chunk (array, chunk, rows). Stores made with
        `INTEGRITY` (checksums) detect any changed or truncated chunk and missing chunk
        files; older stores detect what fails to decode and truncated blosc chunks."""
        integrity = self._info.get("integrity") or {}
        report = VerifyReport(str(self._loc), checksums=bool(integrity.get("checksum")))
        missing = bool(integrity.get("all_chunks_written"))
        targets = [(n, a, self._rows) for n, a in self._arrays.items() if not n.startswith(EMBEDDINGS_GROUP + "/")]
        targets += [(self._emb_node(m), self._arrays[self._emb_node(m)], n) for m, n in sorted(self._emb_rows.items())]
        for node in [*COORDINATES, f"{EMBEDDINGS_GROUP}/view"]:
            if node in self._group:
                a = self._group[node]
                targets.append((node, a, int(a.shape[0])))
        for name, a in sorted(self._group[TEXT_GROUP].arrays()):
            targets.append((f"{TEXT_GROUP}/{name}", a, int(a.shape[0])))
        if PROMPT_SETS_GROUP in self._group:
            for model, group in sorted(self._group[PROMPT_SETS_GROUP].groups()):
                for name, a in sorted(group.arrays()):
                    targets.append((f"{PROMPT_SETS_GROUP}/{model}/{name}", a, int(a.shape[0])))
        for node, a, n in targets:
            report.arrays += 1
            meta = f"{self._loc.path}/{node}/zarr.json"
            try:
                own = json.loads(self._loc.fs.cat_file(meta))
                shape = own["shape"]
            except FileNotFoundError:
                report.damage.append(Damage(node, f"metadata file {meta} is missing"))
                continue
            except (ValueError, KeyError, TypeError, UnicodeDecodeError) as e:
                report.damage.append(Damage(node, f"metadata file {meta} is corrupt ({reason(e)})"))
                continue
            if not shape or int(shape[0]) < n:
                report.damage.append(Damage(node, f"metadata file {meta} lists shape {shape} but {n} rows are committed"))
            report.damage.extend(self._check_chunks(node, a, 0, n, n, missing, report))
        return report

    def _damaged(self, node: str, a: Any, span: tuple[int, int], err: BaseException) -> StoreError:
        """The one-line error for a failed read of rows [span) of `node`: names the first
        damaged chunk found among those rows (or the rows, if every chunk reads alone)."""
        bad = next(iter(self._check_chunks(node, a, span[0], span[1], self._row_limit(node, span[1]), missing=False)),
                   None)
        what = bad.describe() if bad else f"{node} rows {span[0]}-{span[1] - 1}: {reason(err)}"
        return StoreError(f"store {self._loc} is damaged: cannot read {what}; "
                          f"{VERIFY_HINT.format(store=self._loc)}, then restore the store from a copy or re-create it")
