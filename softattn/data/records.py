"""TFDS datasets in a ``gs://`` data_dir, read through ``softattn.paths``.

TFDS reads record files with ``tf.data.TFRecordDataset``, i.e. through TF's
own GCS client (``tf.io.gfile``), which has no endpoint override: the one
client of a run that could not be pointed at a GCS emulator, hence never
tested. For a remote ``data_dir`` this module reads the same files through
``softattn.paths`` (gcsfs, streamed) and rebuilds what ``builder.as_dataset``
builds, in the same order:

* the split (``"train"``, ``"train[:50%]"``, ``tfds.even_splits`` parts) is
  TFDS' own ``file_instructions`` (file, skip, take), from the metadata TFDS
  read (``dataset_info.json``, through etils' fsspec backend);
* files are interleaved as TFDS' reader does without ``shuffle_files``:
  ``cycle_length`` 16 (1 for datasets stored with shuffling disabled),
  ``block_length`` 16, deterministic;
* each record is a TFRecord (little-endian uint64 length, its masked
  CRC-32C, the data, the data's masked CRC-32C), parsed and decoded by the
  dataset's own ``features.deserialize_example``;
* the cardinality is the instructions' sum, as TFDS asserts it.

Only what the pipeline asks for is supported (no ``shuffle_files``, no
``tfds_id``); anything else is a ``ValueError``.
"""

from __future__ import annotations

import struct
from typing import Iterator

import tensorflow as tf

from softattn import paths

CYCLE_LENGTH, BLOCK_LENGTH = 16, 16  # TFDS ReadConfig's defaults


def tfrecords(path: str, skip: int = 0, take: int = -1) -> Iterator[bytes]:
  """The records of the TFRecord file at ``path`` (local or ``gs://``).

  Streamed (``paths.open_read``), ``skip`` records passed over, then at most
  ``take`` (-1: all) yielded. Checksums are not verified (the object store
  checks its own transfers; TF's reader does not verify them by default).
  """
  with paths.open_read(path) as f:
    index = 0
    while take != 0:
      header = f.read(12)
      if not header:
        return
      if len(header) < 12:
        raise ValueError(f"{path}: truncated header of record {index}")
      (length,) = struct.unpack("<Q", header[:8])
      body = f.read(length + 4)
      if len(body) < length + 4:
        raise ValueError(f"{path}: truncated record {index}")
      if index >= skip:
        yield body[:length]
        take -= 1
      index += 1


def _file_dataset(path, skip, take) -> tf.data.Dataset:
  return tf.data.Dataset.from_generator(
      lambda p, s, t: tfrecords(p.decode(), int(s), int(t)),
      args=(path, skip, take),
      output_signature=tf.TensorSpec((), tf.string))


def as_dataset(builder, split, *, decoders=None, shuffle_files: bool = False,
               read_config=None) -> tf.data.Dataset:
  """``builder.as_dataset(split=split, decoders=decoders)`` for a remote builder."""
  if shuffle_files or (read_config is not None and read_config.add_tfds_id):
    raise ValueError("a gs:// data_dir is read in TFDS' file order only "
                     "(shuffle_files=False, add_tfds_id=False)")
  fmt = str(getattr(builder.info, "file_format", "tfrecord") or "tfrecord")
  if "tfrecord" not in fmt.lower():
    raise ValueError(f"{builder.name} in {builder.data_dir} is stored as "
                     f"{fmt}; a gs:// data_dir needs tfrecord files")
  instructions = builder.info.splits[split].file_instructions
  files = tf.data.Dataset.from_tensor_slices((
      [str(i.filename) for i in instructions],
      [int(i.skip) for i in instructions],
      [int(i.take) for i in instructions]))
  cycle = 1 if builder.info.disable_shuffling else CYCLE_LENGTH
  ds = files.interleave(_file_dataset, cycle_length=cycle,
                        block_length=BLOCK_LENGTH,
                        num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
  features = builder.info.features
  ds = ds.map(lambda s: features.deserialize_example(s, decoders=decoders),
              num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
  return ds.apply(tf.data.experimental.assert_cardinality(
      sum(int(i.take) for i in instructions)))
