"""Reading ImageNet-21k in the forms people have it, one synset at a time.

Three source forms give the same synsets and the same images:

* the official release tar (``fall11_whole.tar``): a tar of per-synset tars
  ``nXXXXXXXX.tar``. Its index (one header per synset tar) is read once; each
  synset tar is then streamed straight out of the big file from its offset,
  so nothing is extracted to disk and workers read different synsets in
  parallel. A gzipped release (``winter21_whole.tar.gz``) has no random
  access: it is decompressed once to list it, then once more in one process
  that hands each synset tar, in memory, to the workers;
* a folder of per-synset tars (the release tar extracted one level);
* a folder of per-class image folders ``nXXXXXXXX/*.JPEG``.

Every tar, release or synset, must end with its end-of-archive block: Python's
``tarfile`` takes a tar cut at a member boundary for a complete smaller one,
which would build a dataset of the synsets (or images) before the cut.

Labels are the sorted WordNet ids of the synsets the source holds (21,841 in
``fall11_whole.tar``, 19,167 in winter21; ``imagenet21k.label_space`` adds
fall11's two image-less synsets). An image is named by ``<wnid>/<file
name>`` in every form, so the three forms build byte-identical datasets.

``clean_image`` decodes every image fully with Pillow: a file Pillow cannot
decode is skipped (and counted); CMYK/YCCK JPEGs and images that are not JPEG
at all (ImageNet has PNGs named ``.JPEG``) are re-encoded as RGB JPEG; every
other JPEG (RGB or grayscale, both of which the training pipeline's
``tf.image.decode_image(channels=3)`` reads) is kept byte for byte.
"""

from __future__ import annotations

import dataclasses
import io
import os
import re
import tarfile
from typing import Iterator

WNID = re.compile(r"n\d{8}")
REENCODE_QUALITY = 95  # JPEG quality of re-encoded CMYK / non-JPEG images


class SourceError(ValueError):
  """The source is not one of the accepted ImageNet-21k forms."""


class TruncatedTarError(tarfile.ReadError):
  """A tar that ends without its end-of-archive block: it was cut short."""


class _EndNotingTarInfo(tarfile.TarInfo):
  """Notes on its archive whether the member loop met the end-of-archive
  (all-zero) block: tarfile ends the loop the same way when the data just
  stops, so a tar cut at a member boundary reads as a complete, smaller one."""

  @classmethod
  def fromtarfile(cls, archive):
    try:
      return super().fromtarfile(archive)
    except tarfile.EOFHeaderError:  # a zero block, not missing data
      archive.end_marked = True
      raise


class _CheckedTarFile(tarfile.TarFile):
  """A ``TarFile`` (any mode, streamed too) that knows whether it ended at
  the end-of-archive block; its ``open`` is ``tarfile.open``."""
  tarinfo = _EndNotingTarInfo
  end_marked = False


def _to_the_end(archive: tarfile.TarFile):
  """Every member of ``archive`` (a ``_CheckedTarFile``), in order; then
  ``TruncatedTarError`` if no end-of-archive block followed the last one.

  One zero block is asked for, not the two the format writes: a tar cut
  between them has lost nothing.
  """
  last = None
  for member in archive:
    last = member.name
    yield member
  if not archive.end_marked:
    raise TruncatedTarError(
        f"it ends after member {last} with no end-of-archive block")


@dataclasses.dataclass(frozen=True)
class Synset:
  """Where one synset's images are: ``kind`` is release / gzip_release (in a
  ``.tar.gz``, read in archive order) / tar / folder."""
  wnid: str
  kind: str
  path: str
  offset: int = 0   # release: where its tar starts; gzip_release: its order
  size: int = 0     # bytes (tar member, tar file, or the folder's images)


def _is_gzip(path: str) -> bool:
  return path.endswith((".gz", ".tgz"))


def _synset_members(outer: tarfile.TarFile, path: str):
  """``(wnid, member)`` of the ``nXXXXXXXX.tar`` members of the release tar
  at ``path``, in archive order; ``SourceError`` if it is cut short."""
  try:
    for member in _to_the_end(outer):
      name = os.path.basename(member.name)
      if member.isfile() and name.endswith(".tar") and WNID.fullmatch(
          name[:-4]):
        yield name[:-4], member
  except TruncatedTarError as e:
    raise SourceError(f"{path} is truncated: {e}; copy or download it "
                      "again") from None


def _release_synsets(path: str) -> list[Synset]:
  """The synset tars of a release tar; a ``.tar.gz`` is read through once
  (``gzip_release``: gzip has no random access, ``offset`` is the archive
  order)."""
  if _is_gzip(path):
    with _CheckedTarFile.open(path, "r|gz") as outer:
      return [Synset(wnid, "gzip_release", path, i, m.size)
              for i, (wnid, m) in enumerate(_synset_members(outer, path))]
  with _CheckedTarFile.open(path, "r:") as outer:  # headers; seeks past data
    return [Synset(wnid, "release", path, m.offset_data, m.size)
            for wnid, m in _synset_members(outer, path)]


def gzip_release_tars(path: str, wanted: set[str]):
  """``(wnid, synset tar bytes)`` for the ``wanted`` synsets of a ``.tar.gz``,
  in archive order; the others are decompressed and passed over."""
  with _CheckedTarFile.open(path, "r|gz") as outer:
    for wnid, member in _synset_members(outer, path):
      if wnid in wanted:
        yield wnid, outer.extractfile(member).read()


def _folder_synsets(path: str) -> list[Synset]:
  tars, folders = [], []
  for entry in os.scandir(path):
    if entry.is_file() and entry.name.endswith(".tar") and WNID.fullmatch(
        entry.name[:-4]):
      tars.append(Synset(entry.name[:-4], "tar", entry.path,
                         size=entry.stat().st_size))
    elif entry.is_dir() and WNID.fullmatch(entry.name):
      size = sum(e.stat().st_size for e in os.scandir(entry.path)
                 if e.is_file())
      folders.append(Synset(entry.name, "folder", entry.path, size=size))
  if tars and folders:
    raise SourceError(f"{path} holds both synset tars and synset folders; "
                      "keep one form")
  return tars or folders


def list_synsets(source: str) -> list[Synset]:
  """The synsets of ``source``, sorted by WordNet id (= label order)."""
  if os.path.isfile(source):
    if not (_is_gzip(source) or tarfile.is_tarfile(source)):
      raise SourceError(f"{source} is not a tar file")
    try:
      synsets = _release_synsets(source)
    except (tarfile.TarError, OSError, EOFError) as e:
      raise SourceError(f"cannot read {source}: {e}") from None
  elif os.path.isdir(source):
    synsets = _folder_synsets(source)
  else:
    raise SourceError(f"--source {source} does not exist")
  if not synsets:
    raise SourceError(
        f"{source} holds no synsets: give fall11_whole.tar / "
        "winter21_whole.tar, a folder of nXXXXXXXX.tar, or a folder of "
        "nXXXXXXXX/ image folders")
  wnids = [s.wnid for s in synsets]
  if len(set(wnids)) != len(wnids):
    raise SourceError(f"{source} names a synset twice")
  return sorted(synsets, key=lambda s: s.wnid)


class _Window(io.RawIOBase):
  """Bytes ``[offset, offset + size)`` of an open file, read forward only."""

  def __init__(self, f, offset: int, size: int):
    super().__init__()
    self._f, self._left = f, size
    f.seek(offset)

  def readable(self):
    return True

  def readinto(self, buffer):
    n = min(len(buffer), self._left)
    data = self._f.read(n)
    buffer[:len(data)] = data
    self._left -= len(data)
    return len(data)


def _tar_images(fileobj) -> Iterator[tuple[str, bytes]]:
  """A synset tar's files; ``TruncatedTarError`` (a ``TarError``) if cut."""
  with _CheckedTarFile.open(fileobj=fileobj, mode="r|") as t:  # streamed
    for member in _to_the_end(t):
      if member.isfile():
        yield os.path.basename(member.name), t.extractfile(member).read()


def iter_images(synset: Synset, data: bytes | None = None
                ) -> Iterator[tuple[str, bytes]]:
  """``(file name, bytes)`` of every file of one synset, in source order
  (``data``: the synset tar itself, for a ``gzip_release`` synset)."""
  if synset.kind == "gzip_release":
    yield from _tar_images(io.BytesIO(data))
    return
  if synset.kind == "folder":
    for name in sorted(os.listdir(synset.path)):
      path = os.path.join(synset.path, name)
      if os.path.isfile(path):
        with open(path, "rb") as f:
          yield name, f.read()
    return
  with open(synset.path, "rb") as f:
    if synset.kind == "release":
      yield from _tar_images(io.BufferedReader(
          _Window(f, synset.offset, synset.size), 1 << 20))
    else:
      yield from _tar_images(f)


def clean_image(data: bytes) -> tuple[bytes | None, str]:
  """``(jpeg bytes or None, what was done)``: ``kept``, ``cmyk``, ``not_jpeg``
  (both re-encoded as RGB JPEG) or ``undecodable`` (None: skip it).

  The full decode (``load``) is what catches truncated files; ``verify``
  alone reads only the headers.
  """
  from PIL import Image  # pylint: disable=g-import-not-at-top
  Image.MAX_IMAGE_PIXELS = None  # a few ImageNet photos are very large
  try:
    with Image.open(io.BytesIO(data)) as image:
      image.load()
      if image.format == "JPEG" and image.mode in ("RGB", "L"):
        return data, "kept"
      kind = ("cmyk" if image.format == "JPEG" and image.mode == "CMYK"
              else "not_jpeg")
      rgb = image.convert("RGB")
  except (OSError, SyntaxError, ValueError, EOFError, Image.DecompressionBombError):
    return None, "undecodable"
  out = io.BytesIO()
  rgb.save(out, "JPEG", quality=REENCODE_QUALITY)
  return out.getvalue(), kind
