"""Every file a run reads or writes, local or ``gs://``: one path layer.

A TPU job's workdir is a bucket (every host must reach it, and a preempted VM
loses its disk); a laptop's is a folder. Everything under a workdir, a sweep
directory, a study export or a ``data_dir`` goes through this module, which is
``etils.epath`` (the library Orbax already writes checkpoints with) plus the
two things an object store lacks:

* **No atomic rename.** Locally a whole file is written to ``<name>.tmp`` and
  ``os.replace``d, so a reader never sees half of it. On GCS a single object
  upload is atomic by itself (readers see the old object or the new one, never
  a torn one), so ``write_atomic`` writes the object directly: a
  ``.tmp`` + copy + delete would be three requests and not atomic at all.
* **No append.** A GCS object is immutable; "appending" re-uploads the whole
  object. ``AppendLog`` (``metrics.jsonl``, the sweep's ``sweep.log``,
  TensorBoard events) therefore appends to the file locally, as before, and on
  a bucket rolls *parts*: ``<name>.part-000000``, ``-000001``, ... Each flush
  rewrites the current part whole (one atomic upload, at most ``ROLL_BYTES``),
  then a part that has grown past ``ROLL_BYTES`` is closed and the next one
  starts, so a long run neither re-uploads its whole log per flush nor makes
  an object per line. A resumed run starts a new part after the last one
  (never rewrites what an earlier process wrote). ``read_log`` returns the
  file followed by its parts in order: the concatenation is the log. A local
  log that a crash left mid-line gets its newline before the next process
  appends; ``scan_json_lines`` names each line it cannot parse.

Remote bytes go through fsspec's ``gcsfs``, the client etils' fsspec backend
wraps: ``EPATH_USE_TF=false`` is set as this process's default on import, so
Orbax, TFDS' metadata reads and this module share that one GCS client, the
one the emulator tests exercise (``tf.io.gfile``'s GCS client cannot be
pointed at an emulator). This module calls fsspec directly rather than
through ``epath.Path``'s methods because ``tfds.testing.mock_data`` swaps
epath's backends process-wide while a dataset is opened, and the metric
writer's thread flushes meanwhile.
"""

from __future__ import annotations

import json
import os
import re
import threading
import warnings
from typing import Any, NamedTuple

# Before etils decides a backend for its first gs:// path (it caches that).
os.environ.setdefault("EPATH_USE_TF", "false")

from etils import epath  # pylint: disable=g-import-not-at-top,wrong-import-position

Path = epath.Path
PathLike = str | os.PathLike
ROLL_BYTES = 1 << 20
PART = ".part-"


class PathError(ValueError):
  """A workdir (or data_dir) that cannot be used: one line naming the fix."""


def is_remote(p: PathLike) -> bool:
  """``gs://...`` (any ``scheme://``), as opposed to a local path."""
  return "://" in os.fspath(p)


def path(p: PathLike) -> Path:
  """``p`` as an ``epath.Path``; a local one made absolute (Orbax needs it).

  Relative local paths resolve against the current directory exactly as
  ``os.path.abspath`` did (no symlink resolution).
  """
  if isinstance(p, Path) and is_remote(p):
    return p
  s = os.fspath(p)
  return Path(s if is_remote(s) else os.path.abspath(s))


def join(p: PathLike, *names: str) -> str:
  """``p/names...`` as a string (local or remote; a relative one stays so)."""
  return os.fspath(Path(p).joinpath(*names))


def makedirs(p: PathLike) -> Path:
  """Creates local folder ``p`` and its parents; returns ``path(p)``.

  A no-op on a bucket: GCS has no folders (an object's name holds its
  prefix), and gcsfs' ``mkdir`` of a bare ``gs://name`` would *create the
  bucket*, turning a typo into a new bucket.
  """
  out = path(p)
  if not is_remote(out):
    out.mkdir(parents=True, exist_ok=True)
  return out


def _fs(p: PathLike):
  """``(fsspec filesystem, path in it)`` of a remote ``p``."""
  import fsspec  # pylint: disable=g-import-not-at-top
  try:
    return fsspec.core.url_to_fs(os.fspath(p))
  except ImportError as e:
    raise PathError(f"{p}: {e} (gs:// paths need gcsfs: pip install "
                    "gcsfs)") from None


def exists(p: PathLike) -> bool:
  if is_remote(p):
    fs, rp = _fs(p)
    fs.invalidate_cache(rp)  # other processes (hosts, runs) write too
    return fs.exists(rp)
  return path(p).exists()


def isdir(p: PathLike) -> bool:
  if is_remote(p):
    fs, rp = _fs(p)
    fs.invalidate_cache(rp)
    return fs.isdir(rp)
  return path(p).is_dir()


def listdir(p: PathLike) -> list[str]:
  """Sorted names in ``p`` (empty when it does not exist)."""
  if is_remote(p):
    fs, rp = _fs(p)
    try:
      return sorted({e.rstrip("/").rsplit("/", 1)[-1]
                     for e in fs.ls(rp, detail=False, refresh=True)})
    except FileNotFoundError:
      return []
  d = path(p)
  return sorted(c.name for c in d.iterdir()) if d.is_dir() else []


def mtime(p: PathLike) -> float:
  """Modification time in seconds since the epoch."""
  if is_remote(p):
    fs, rp = _fs(p)
    return fs.modified(rp).timestamp()
  return os.stat(path(p)).st_mtime


def read_bytes(p: PathLike) -> bytes:
  """The bytes of ``p`` (``FileNotFoundError`` when missing)."""
  if is_remote(p):
    fs, rp = _fs(p)
    return fs.cat_file(rp)
  with open(os.fspath(path(p)), "rb") as f:
    return f.read()


def open_read(p: PathLike, block_size: int = 8 << 20):
  """``p`` opened for streaming reads (binary); a context manager."""
  if is_remote(p):
    fs, rp = _fs(p)
    return fs.open(rp, "rb", block_size=block_size)
  return open(os.fspath(path(p)), "rb")  # pylint: disable=consider-using-with


def write_bytes(p: PathLike, data: bytes) -> None:
  """Writes ``p`` whole (on a bucket: one object upload)."""
  if is_remote(p):
    fs, rp = _fs(p)
    fs.pipe_file(rp, data)
  else:
    with open(os.fspath(path(p)), "wb") as f:
      f.write(data)


def read_text(p: PathLike) -> str | None:
  """The text in ``p``; ``None`` when it does not exist."""
  try:
    return read_bytes(p).decode("utf-8")
  except FileNotFoundError:
    return None


def read_json(p: PathLike) -> Any:
  """The JSON in ``p``; ``None`` when missing (``JSONDecodeError`` if torn)."""
  text = read_text(p)
  return None if text is None else json.loads(text)


def write_atomic(p: PathLike, data: str | bytes) -> None:
  """Writes ``p`` whole so that readers see the old or the new content.

  Local: a temporary file renamed over ``p``. Remote: one object upload,
  atomic on GCS (see the module docstring). Creates ``p``'s parent.
  """
  target = path(p)
  raw = data.encode("utf-8") if isinstance(data, str) else data
  if is_remote(target):
    write_bytes(target, raw)
    return
  makedirs(target.parent)
  tmp = os.fspath(target) + ".tmp"
  try:
    write_bytes(tmp, raw)
    os.replace(tmp, os.fspath(target))
  except BaseException:
    # A full disk leaves a torn temporary file; the old ``p`` stays whole.
    try:
      os.remove(tmp)
    except OSError:
      pass
    raise


def write_json(p: PathLike, obj: Any, **dump_kw) -> None:
  """``write_atomic`` of ``json.dumps(obj, indent=1, **dump_kw)``."""
  write_atomic(p, json.dumps(obj, indent=1, **dump_kw))


# ----------------------------------------------------------------------------
# Append-only logs: a local file, or rolled whole-object parts on a bucket.


def _parts(p: Path) -> list[Path]:
  """``p``'s rolled parts in order (``name.part-NNNNNN``)."""
  pat = re.compile(re.escape(p.name + PART) + r"\d+$")
  return [p.parent / n for n in listdir(p.parent) if pat.match(n)]


def _log_chunks(p: PathLike) -> list[tuple[str, bytes]]:
  """``(name, bytes)`` of the file at ``p`` (if any), then of each part."""
  target = path(p)
  chunks = []
  try:
    chunks.append((os.fspath(target), read_bytes(target)))
  except FileNotFoundError:
    pass
  chunks.extend((os.fspath(part), read_bytes(part)) for part in _parts(target))
  return chunks


def read_log(p: PathLike) -> bytes:
  """The whole log at ``p``: the file (if any), then its parts, concatenated.

  Empty when neither exists. Reads what ``AppendLog`` writes, locally or on a
  bucket (a sweep run locally and copied to a bucket, or back, reads the same).
  """
  return b"".join(chunk for _, chunk in _log_chunks(p))


def remove(p: PathLike) -> None:
  """Deletes the file (object) ``p``."""
  if is_remote(p):
    fs, rp = _fs(p)
    fs.rm_file(rp)
  else:
    os.remove(path(p))


def remove_log(p: PathLike) -> None:
  """Deletes the log at ``p``: the file and every part (if there are any)."""
  target = path(p)
  for f in [target, *_parts(target)]:
    if exists(f):
      remove(f)


class Unparsable(NamedTuple):
  """A line of a JSON-lines log that did not parse: which file, which line."""
  path: str   # the file or part that holds it
  line: int   # 1-based, within that file
  text: str   # its first 80 characters


class UnparsableLinesWarning(UserWarning):
  """Lines of a JSON-lines log were skipped (``describe_unparsable``)."""


class JsonLines(NamedTuple):
  """What ``scan_json_lines`` read: the values, and the lines that were not."""
  records: list[Any]
  unparsable: list[Unparsable]


def scan_json_lines(p: PathLike) -> JsonLines:
  """The values of a JSON-lines ``read_log``, and the lines that did not parse.

  A line is unparsable when a write was torn (a kill or a full disk cut it
  short; ``AppendLog`` ends it before the next process appends, so the next
  record stays whole) or something else wrote to the file. Callers say so:
  ``read_json_lines`` warns, the sweep report names them in its table.
  """
  records, bad = [], []
  for name, chunk in _log_chunks(p):  # a torn line ends its chunk, not the next
    for i, line in enumerate(chunk.decode("utf-8", errors="replace")
                             .splitlines(), start=1):
      if not line.strip():
        continue
      try:
        records.append(json.loads(line))
      except json.JSONDecodeError:
        bad.append(Unparsable(name, i, line.strip()[:80]))
  return JsonLines(records, bad)


def describe_unparsable(bad: list[Unparsable]) -> str:
  """One line naming each file and its unparsable line numbers."""
  by_file: dict[str, list[int]] = {}
  for b in bad:
    by_file.setdefault(b.path, []).append(b.line)
  where = "; ".join(
      f"{name} line{'s' if len(lines) > 1 else ''} "
      + ", ".join(map(str, lines[:10])) + (", ..." if len(lines) > 10 else "")
      for name, lines in by_file.items())
  return (f"skipped {len(bad)} unparsable line{'s' if len(bad) > 1 else ''} "
          f"(a write torn by a crash or a full disk, or not JSON): {where}")


def read_json_lines(p: PathLike) -> list[Any]:
  """The JSON values of a JSON-lines ``read_log``.

  Unparsable lines (see ``scan_json_lines``) are skipped with one
  ``UnparsableLinesWarning`` naming their files and line numbers.
  """
  records, bad = scan_json_lines(p)
  if bad:
    warnings.warn(describe_unparsable(bad), UnparsableLinesWarning,
                  stacklevel=2)
  return records


def _ends_in_newline(p: Path) -> bool:
  """Whether local file ``p`` is empty, missing or ends in a newline."""
  try:
    with open(os.fspath(p), "rb") as f:
      if f.seek(0, os.SEEK_END) == 0:
        return True
      f.seek(-1, os.SEEK_END)
      return f.read(1) == b"\n"
  except FileNotFoundError:
    return True


class AppendLog:
  """Appends bytes to ``path``: a local file, or rolled parts on a bucket.

  ``write`` buffers; ``flush`` makes what was written visible (locally a file
  flush; remotely one whole-object upload of the current part, see the module
  docstring). Thread-safe. ``part_names``: a function ``k -> name`` of part
  ``k`` in ``path``'s folder, for logs whose parts need other names
  (TensorBoard's ``events.out.tfevents.*``); then numbering starts at 0.
  ``lines``: a log of lines (JSON lines, a process's output). A local file
  whose last line a crash left unterminated then gets its newline before
  anything is appended; binary logs pass ``False``. (On a bucket each
  process writes parts of its own, and readers never join two parts' lines.)
  """

  def __init__(self, p: PathLike, *, roll_bytes: int = ROLL_BYTES,
               part_names=None, lines: bool = True):
    self.path = path(p)
    self.remote = is_remote(self.path)
    self._lock = threading.Lock()
    self._roll = roll_bytes
    self._buf = bytearray()
    self._dirty = False
    if not self.remote:
      makedirs(self.path.parent)
      torn = lines and not _ends_in_newline(self.path)
      self._f = open(os.fspath(self.path), "ab")  # pylint: disable=consider-using-with
      if torn:
        # A crash (a full disk) cut the last line short: end it, so this
        # process's first line stays a line of its own. Flushed before a
        # child process is handed the file.
        self._f.write(b"\n")
        self._f.flush()
      return
    if part_names is None:
      existing = _parts(self.path)
      self._k = int(existing[-1].name.rsplit("-", 1)[1]) + 1 if existing else 0
      self._name = lambda k: f"{self.path.name}{PART}{k:06d}"
    else:
      self._k, self._name = 0, part_names

  @property
  def file(self):
    """The open local file (for a child process's stdout); local logs only."""
    if self.remote:
      raise ValueError(f"{self.path} is on a bucket: no file to hand out")
    return self._f

  @property
  def current(self) -> Path:
    """The file (local) or part (remote) being written."""
    return self.path if not self.remote else self.path.parent / self._name(self._k)

  def write(self, data: bytes | str) -> None:
    raw = data.encode("utf-8") if isinstance(data, str) else data
    with self._lock:
      if self.remote:
        self._buf += raw
        self._dirty = True
      else:
        self._f.write(raw)

  def flush(self) -> None:
    with self._lock:
      if not self.remote:
        self._f.flush()
        return
      if not self._dirty:
        return
      write_bytes(self.current, bytes(self._buf))
      self._dirty = False
      if len(self._buf) >= self._roll:
        self._k += 1
        self._buf = bytearray()

  def close(self) -> None:
    """Flushes and closes. The file is closed even when the flush fails (a
    full disk): left open, Python would flush it again at exit and print
    the error a second time, after the run's one line."""
    try:
      self.flush()
    finally:
      with self._lock:
        if not self.remote and not self._f.closed:
          try:
            self._f.close()
          except OSError:
            pass  # the same write the flush above failed (and raised)
