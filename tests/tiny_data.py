"""Small shared pieces of the end-to-end tests: a TFDS dataset whose examples
name themselves, and a persistent XLA compile cache for a test module."""

import contextlib
import os

import jax
import numpy as np


def store_id_dataset(name: str, data_dir: str, train_ids, test_ids,
                     **store_kw) -> None:
  """Stores TFDS dataset ``name`` of 8x8x1 images with pixel ``[0, 0, 0] = id``
  (label ``id % 4``), so a test can tell exactly which examples a batch holds.
  ``store_kw`` go to ``tfds.dataset_builders.store_as_tfds_dataset`` (shards,
  shuffling)."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  import tensorflow_datasets as tfds  # pylint: disable=g-import-not-at-top

  def split(ids):
    ids = list(ids)
    images = np.random.RandomState(0).randint(0, 256, (len(ids), 8, 8, 1))
    images[:, 0, 0, 0] = ids
    return tf.data.Dataset.from_tensor_slices(
        {"image": images.astype(np.uint8), "label": np.asarray(ids) % 4})
  features = tfds.features.FeaturesDict({
      "image": tfds.features.Image(shape=(8, 8, 1)),
      "label": tfds.features.ClassLabel(num_classes=4)})
  tfds.dataset_builders.store_as_tfds_dataset(
      name, "1.0.0", features,
      {"train": split(train_ids), "test": split(test_ids)},
      data_dir=data_dir, **store_kw)


@contextlib.contextmanager
def compile_cache(directory: str, min_compile_s: float):
  """jax's persistent compile cache in ``directory`` for the block (and for
  subprocesses handed it), restoring the previous settings after."""
  old = (jax.config.jax_compilation_cache_dir,
         jax.config.jax_persistent_cache_min_compile_time_secs)
  jax.config.update("jax_compilation_cache_dir", directory)
  jax.config.update("jax_persistent_cache_min_compile_time_secs", min_compile_s)
  try:
    yield directory
  finally:
    jax.config.update("jax_compilation_cache_dir", old[0])
    jax.config.update("jax_persistent_cache_min_compile_time_secs", old[1])


def xla_flags(*, devices: int) -> str:
  """``XLA_FLAGS`` for a child process with ``devices`` fake CPU devices,
  keeping the suite's own flags (tests/conftest.py)."""
  return " ".join([*os.environ.get("XLA_FLAGS", "").split(),
                   f"--xla_force_host_platform_device_count={devices}"])
