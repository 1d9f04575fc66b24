"""Shards in hash order, written by many processes: the two stages of a build.

What TFDS's own writer does in one process (hash every key, bucket by hash,
sort each bucket, one bucket per output shard), cut into files that separate
processes write and that survive an interruption:

1. a task sorts its examples by ``key_hash`` and writes them to one file
   (``write_sorted``), noting where each shard's hash range begins;
2. shard ``j`` reads range ``j`` of every task file (``read_range``), sorts the
   lot and writes it as a TFRecord file through TFDS's file adapter, each
   example serialised by the TFDS features (``write_shard``).

Shard ``j`` holds the hashes in ``[j, j+1) * 2**128 / num_shards``, so the
shards in order are one sequence sorted by hash: a fixed pseudo-random order
that depends only on the keys, not on how the work was split or run.

A task file is a sequence of records ``<16-byte hash><label: u32><key
length: u32><data length: u32><key><data>``.
"""

from __future__ import annotations

import concurrent.futures
import hashlib
import multiprocessing
import os
import struct
from typing import Callable, Iterable, Iterator

from etils import epath

from softattn.data import orphans

_RECORD = struct.Struct("<16sIII")  # hash, label, key length, data length

Record = tuple[bytes, str, int, bytes]  # (hash, key, label, data)


def key_hash(key: str) -> bytes:
  """The 16-byte md5 that orders the records (and picks their shard)."""
  return hashlib.md5(key.encode("utf-8")).digest()


def shard_of(digest: bytes, num_shards: int) -> int:
  """Shard ``j`` holds the hashes in ``[j, j+1) * 2**128 / num_shards``."""
  return (int.from_bytes(digest, "big") * num_shards) >> 128


def write_sorted(records: list[Record], num_shards: int, out: str) -> list[int]:
  """Writes ``records`` sorted by hash to ``out``; returns ``num_shards + 1``
  offsets, ``offsets[j]`` being where shard ``j``'s records start."""
  offsets, position, shard = [], 0, 0
  with epath.Path(out).open("wb") as f:
    for digest, key, label, data in sorted(records):
      while shard <= shard_of(digest, num_shards):
        offsets.append(position)
        shard += 1
      name = key.encode("utf-8")
      f.write(_RECORD.pack(digest, label, len(name), len(data)) + name + data)
      position += _RECORD.size + len(name) + len(data)
  return offsets + [position] * (num_shards + 1 - len(offsets))


def read_range(path: str, start: int, end: int) -> Iterator[Record]:
  """The records in bytes ``[start, end)`` of a ``write_sorted`` file."""
  with epath.Path(path).open("rb") as f:
    f.seek(start)
    buffer = f.read(end - start)
  position = 0
  while position < len(buffer):
    digest, label, key_len, data_len = _RECORD.unpack_from(buffer, position)
    position += _RECORD.size
    key = buffer[position:position + key_len].decode("utf-8")
    position += key_len
    yield digest, key, label, buffer[position:position + data_len]
    position += data_len


_FEATURES = {}


def write_shard(parts: list[tuple[str, int, int]], make_features: Callable,
                labels: list[str], out: str) -> dict:
  """One output shard from ``(task file, start, end)`` ranges, sorted, as a
  TFRecord file of ``{"image": data, "label", "file_name": key}`` examples.

  ``make_features(labels)`` gives the TFDS features (built once per worker).
  Returns the shard's example count and bytes, for the split info.
  """
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  import tensorflow_datasets as tfds  # pylint: disable=g-import-not-at-top
  cache_key = (make_features, tuple(labels))
  if cache_key not in _FEATURES:
    _FEATURES.clear()
    _FEATURES[cache_key] = make_features(labels)
  features = _FEATURES[cache_key]
  records = sorted(r for part in parts for r in read_range(*part))

  def serialized():
    for digest, key, label, data in records:
      example = features.serialize_example(
          {"image": data, "label": label, "file_name": key})
      # The proto's feature map is written in an order that varies between
      # processes; deterministic bytes make every build of a source identical.
      yield digest, tf.train.Example.FromString(example).SerializeToString(
          deterministic=True)
  adapter = tfds.core.file_adapters.ADAPTER_FOR_FORMAT[
      tfds.core.FileFormat.TFRECORD]
  adapter.write_examples(out, serialized())
  return dict(count=len(records), num_bytes=epath.Path(out).stat().length)


def run_jobs(jobs: Iterable[tuple[int, Callable, tuple]], processes: int,
             done: Callable[[int, dict], None]) -> None:
  """Runs ``fn(*args)`` for each ``(key, fn, args)`` (in ``processes``
  workers), calling ``done(key, result)`` in the parent as each finishes.

  ``jobs`` is consumed lazily, at most two jobs per worker ahead: its
  arguments may be large (a gzipped release's synset tars, in memory).
  The workers end with this process, even if it is SIGKILLed
  (``softattn.data.orphans``).
  """
  if processes <= 1:
    for key, fn, args in jobs:
      done(key, fn(*args))
    return
  # spawn: the parent has TensorFlow's threads running; forking it is unsafe.
  # exit_with_parent: workers killed with a SIGKILLed parent, not left behind.
  with concurrent.futures.ProcessPoolExecutor(
      processes, mp_context=multiprocessing.get_context("spawn"),
      initializer=orphans.exit_with_parent,
      initargs=(os.getpid(),)) as pool:
    pending = {}

    def finish(futures):
      for future in futures:
        done(pending.pop(future), future.result())

    for key, fn, args in jobs:
      pending[pool.submit(fn, *args)] = key
      if len(pending) >= 2 * processes:
        finish(concurrent.futures.wait(
            pending, return_when=concurrent.futures.FIRST_COMPLETED).done)
    finish(concurrent.futures.as_completed(list(pending)))
