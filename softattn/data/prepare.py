"""Prepares TFDS's own ``fashion_mnist`` offline, from the Debian package.

Debian's ``dataset-fashion-mnist`` ships the four original files in
``/usr/share/datasets/fashion-mnist/``, but with rewritten gzip headers (file
name field dropped, mtime set to the packaging date); the compressed payload is
untouched. Their sha256 therefore differ from the checksums TFDS registers for
``fashion_mnist``, and TFDS rightly refuses them. We restore the original
header bytes (RFC 1952: set the FNAME flag, the original mtime, and the
original name followed by NUL) into a temporary ``manual_dir``, check the
sha256 against TFDS's registered values ourselves (clear error first), and let
TFDS's own builder prepare the dataset from there with its own checksum
verification still on. With network and no Debian files, TFDS downloads as
usual.
"""

from __future__ import annotations

import hashlib
import os
import struct
import tempfile

import tensorflow_datasets as tfds

from softattn import paths
from softattn.data import datasets

DEBIAN_DIR = "/usr/share/datasets/fashion-mnist"

# The upstream files' gzip mtimes (seconds since epoch), as published on
# fashion-mnist's S3 bucket in 2017; Debian replaced them.
_ORIGINAL_MTIME = {
    "train-images-idx3-ubyte.gz": 1504176606,
    "train-labels-idx1-ubyte.gz": 1504176606,
    "t10k-images-idx3-ubyte.gz": 1504176627,
    "t10k-labels-idx1-ubyte.gz": 1504176627,
}
_EXPECTED_COUNTS = dict(datasets.KNOWN["fashion_mnist"].split_sizes)
_GZIP_MAGIC = b"\x1f\x8b\x08"
_FNAME = 0x08


class FashionMnistPrepareError(RuntimeError):
  """The source files cannot become the genuine dataset."""


def restore_gzip_header(data: bytes, filename: str, mtime: int) -> bytes:
  """Returns ``data`` with the header the upstream gzip tool had written.

  Only the header changes: ``FLG`` gains FNAME, ``MTIME`` becomes ``mtime``
  and the NUL-terminated original name (``filename`` without ``.gz``) follows
  ``XFL``/``OS``; the compressed stream and trailer are kept byte for byte.
  A file whose header already carries a name is returned unchanged.
  """
  if len(data) < 10 or data[:3] != _GZIP_MAGIC:
    raise FashionMnistPrepareError(f"{filename} is not a gzip (deflate) file")
  flags = data[3]
  if flags & _FNAME:
    return data
  if flags != 0:
    raise FashionMnistPrepareError(
        f"{filename}: unexpected gzip header flags {flags:#x}; not the file "
        "Debian's dataset-fashion-mnist ships")
  name = filename[:-3] if filename.endswith(".gz") else filename
  return (data[:3] + bytes([_FNAME]) + struct.pack("<I", mtime) + data[8:10]
          + name.encode("latin-1") + b"\0" + data[10:])


def _registered_checksums(builder) -> dict[str, tuple[int, str]]:
  """``{file name: (size, sha256)}`` from TFDS's registered url checksums."""
  return {info.filename or os.path.basename(url): (info.size, info.checksum)
          for url, info in type(builder).url_infos.items()}


def restore_files(source_dir: str, manual_dir: str, builder) -> None:
  """Writes the four files with restored headers; checks size and sha256."""
  expected = _registered_checksums(builder)
  for filename, mtime in _ORIGINAL_MTIME.items():
    path = paths.join(source_dir, filename)  # local or gs://
    if not paths.exists(path):
      raise FashionMnistPrepareError(
          f"{path} is missing; install it with `apt-get install -y "
          f"dataset-fashion-mnist` or pass --source_dir")
    data = restore_gzip_header(paths.read_bytes(path), filename, mtime)
    size, checksum = expected[filename]
    digest = hashlib.sha256(data).hexdigest()
    if len(data) != size or digest != checksum:
      raise FashionMnistPrepareError(
          f"{filename}: after restoring the gzip header, size {len(data)} / "
          f"sha256 {digest} do not match TFDS's registered {size} / "
          f"{checksum}; the file is not the genuine Fashion-MNIST")
    with open(os.path.join(manual_dir, filename), "wb") as f:
      f.write(data)


def prepare_fashion_mnist(data_dir: str | None = None,
                          source_dir: str | None = None) -> dict[str, int]:
  """Prepares ``fashion_mnist`` in ``data_dir``; returns split sizes.

  Args:
    data_dir: TFDS data dir (None: TFDS's default, ``$TFDS_DATA_DIR`` or
      ``~/tensorflow_datasets``).
    source_dir: folder with the four ``*-ubyte.gz`` files (default: the Debian
      package's). When neither it nor the default exists, TFDS downloads them
      (needs network).

  Raises:
    FashionMnistPrepareError: files missing or not genuine, or wrong example
      counts.
  """
  if data_dir and paths.is_remote(data_dir):
    # TFDS writes records with TF's own GCS client (untested offline, and it
    # stages files on local disk anyway): prepare locally, then copy.
    raise FashionMnistPrepareError(
        f"--data_dir={data_dir}: prepare into a local folder, then copy it, "
        f"e.g. `gcloud storage cp -r /tmp/tfds/fashion_mnist {data_dir}/`")
  builder = tfds.builder("fashion_mnist", data_dir=data_dir)
  if source_dir is None and not os.path.isdir(DEBIAN_DIR):
    try:
      builder.download_and_prepare()
    except Exception as e:  # network errors come in many types.
      raise FashionMnistPrepareError(
          f"no {DEBIAN_DIR} and the download failed ({type(e).__name__}); "
          "install the files with `apt-get install -y dataset-fashion-mnist` "
          "or pass --source_dir") from e
  else:
    with tempfile.TemporaryDirectory(prefix="fashion_mnist_") as tmp:
      manual_dir = os.path.join(tmp, "manual")
      os.makedirs(manual_dir)
      restore_files(source_dir or DEBIAN_DIR, manual_dir, builder)
      # Downloads/extractions go to tmp and vanish; only tfrecords remain.
      builder.download_and_prepare(
          download_dir=os.path.join(tmp, "downloads"),
          download_config=tfds.download.DownloadConfig(
              manual_dir=manual_dir, try_download_gcs=False))
  counts = {split: builder.info.splits[split].num_examples
            for split in _EXPECTED_COUNTS}
  if counts != _EXPECTED_COUNTS:
    raise FashionMnistPrepareError(
        f"prepared fashion_mnist has {counts} examples, expected "
        f"{_EXPECTED_COUNTS}")
  return counts
