"""tf.data input pipelines that yield global, sharded ``jax.Array`` batches.

Train (``make_train_iter``): each process reads its own slice of the split
(``tfds.even_splits`` by ``jax.process_index()``), so processes never share an
example. All examples are kept: slices may differ by one, which only shifts
that process's epoch boundaries, since every process's example sequence is
endless. The process-local example sequence is an endless run of epochs, and
batches run on across epoch boundaries like ``repeat()``. Example ``i`` of
the sequence is preprocessed with the stateless seed ``(seed, process, i)``,
so the batch at step ``k`` is a pure function of ``(seed, k)``:
``start_step=k`` yields exactly the batches an uninterrupted run would have
seen from step ``k`` on. Epoch ``e`` is ordered by a seed derived from
``(seed, e)``, in one of two ways:

* In memory (``cache=True``, fixed-size images: Fashion-MNIST, CIFAR): the
  split is decoded once; epoch ``e`` is a full random permutation drawn by
  ``tf.random.experimental.index_shuffle`` (random access, so resuming costs
  nothing). When ``pp_train`` has no per-example op left after moving its
  trailing ``value_range``/``standardize``/``to_rgb`` to the batch, a batch
  is one gather.
* Streamed (otherwise, e.g. ImageNet): records are read in their stored order
  (TFDS wrote them in a hashed, random order, so they are shuffled on disk
  already) through a shuffle buffer seeded per epoch; a full permutation
  when the buffer covers the slice, weaker when it is much smaller. A resume
  skips the records before step ``k`` (read, not decoded).

Eval (``make_eval_iter``): one deterministic pass; every process pads its
slice to the same number of batches with examples whose ``mask`` is False, so
no example is dropped or counted twice.

Batches become global ``jax.Array``s sharded ``NamedSharding(mesh, P('data'))``
with ``jax.make_array_from_process_local_data``.
"""

from __future__ import annotations

import collections
import math
from typing import Iterator

import jax
import numpy as np
import tensorflow as tf
import tensorflow_datasets as tfds
from jax.experimental import multihost_utils
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from softattn.data import datasets as datasets_lib
from softattn.data import preprocess

# tf.data only prepares host arrays: keep TensorFlow off any accelerator so it
# never reserves memory JAX needs.
try:
  tf.config.set_visible_devices([], "GPU")
  tf.config.set_visible_devices([], "TPU")
except (RuntimeError, ValueError):  # already initialised, or no such device.
  pass

_DEFAULT_SHUFFLE_BUFFER = 50_000
_PREFETCH_DEVICE = 2
# Salts: mixing constants keep seeds of different purposes and processes apart.
_AUG_SALT = 0x5EED_A11
_SHUFFLE_SALT = 1_000_003


def _get(config, key, default=None):
  value = config.get(key, default) if hasattr(config, "get") else default
  return default if value is None else value


def pp_string(data_config, key: str) -> str:
  """The preprocessing string ``data_config.<key>`` (``pp_train``,
  ``pp_eval``) as the pipeline runs it: with ``data_config.image_size``
  (an int, or ``(h, w)``) set, ``resize(<image_size>)`` is its last op, so
  every image is that size (evaluating or fine-tuning a model at another
  resolution: ``configs/transfer.py``)."""
  spec = _get(data_config, key, "")
  size = _get(data_config, "image_size")
  if size is None:
    return spec
  size = tuple(size) if isinstance(size, (list, tuple)) else int(size)
  return f"{spec}|resize({size})" if spec.strip() else f"resize({size})"


def _splits(data_config):
  name = _get(data_config, "name")
  known = datasets_lib.KNOWN.get(name)
  train = _get(data_config, "train_split", known and known.train_split)
  evals = _get(data_config, "eval_split", known and known.eval_split)
  return train, evals


def _input_shard(shard: tuple[int, int] | None) -> tuple[int, int]:
  """``(index, count)`` of the slice this process reads: its process by default."""
  return (jax.process_index(), jax.process_count()) if shard is None else shard


def _process_split(split: str, drop_remainder: bool,
                   shard: tuple[int, int] | None = None) -> str:
  index, count = _input_shard(shard)
  if count == 1:
    return split
  return tfds.even_splits(split, n=count, drop_remainder=drop_remainder)[index]


def _mesh(mesh: Mesh | None) -> Mesh:
  if mesh is None:
    return Mesh(np.asarray(jax.devices()), ("data",))
  if "data" not in mesh.axis_names:
    raise ValueError(f"the mesh has axes {mesh.axis_names}; the input "
                     "pipeline shards batches over an axis named 'data'")
  return mesh


def _local_batch(global_batch_size: int, mesh: Mesh) -> int:
  data_size = mesh.shape["data"]
  if global_batch_size < 1:  # not "not divisible": every size divides 0 or -8
    raise ValueError(f"batch_size {global_batch_size} is invalid; it must be "
                     f">= 1: set batch_size to a multiple of {data_size}")
  if global_batch_size % data_size:
    raise ValueError(
        f"batch_size {global_batch_size} is not divisible by the mesh's data "
        f"axis ({data_size} devices): set batch_size to a multiple of "
        f"{data_size}")
  count = jax.process_count()
  if global_batch_size % count:
    raise ValueError(f"batch_size {global_batch_size} is not divisible by the "
                     f"{count} processes: use a multiple of {count}")
  return global_batch_size // count


def _raw(data_config, split):
  """Undecoded ``{'image': bytes, 'label'}`` records of ``split``, in order."""
  builder = datasets_lib.get_builder(_get(data_config, "name"),
                                     _get(data_config, "data_dir"))
  ds = datasets_lib.as_dataset(
      builder, split, shuffle_files=False,
      decoders={"image": tfds.decode.SkipDecoding()},
      read_config=tfds.ReadConfig(add_tfds_id=False))
  ds = ds.map(lambda ex: {"image": ex["image"], "label": ex["label"]})
  return ds, builder


def _count(ds) -> int:
  n = int(ds.cardinality())
  if n < 0:  # unknown: count once (only slices TFDS cannot size up front).
    n = int(ds.reduce(np.int64(0), lambda c, _: c + 1))
  return n


def _decoder(builder):
  image_feature = builder.info.features["image"]

  def decode(raw):
    if raw["image"].dtype != tf.string:  # decoded already (cached)
      return raw
    return {"image": image_feature.decode_example(raw["image"]),
            "label": raw["label"]}
  return decode


def _cached_decoded(raw, builder):
  """Decodes once and keeps the decoded examples in memory (``cache=True``).

  Meant for datasets that fit in host memory (Fashion-MNIST, CIFAR): the
  per-epoch cost is then only the shuffle and the augmentation.
  """
  return raw.map(_decoder(builder), num_parallel_calls=tf.data.AUTOTUNE).cache()


def _example_fn(builder, pp, seed_base: int):
  """``(index, raw example) -> {'image', 'label': int32}`` through ``pp``.

  Example ``index`` of the sequence is preprocessed with the stateless seed
  ``(seed_base, index)``.
  """
  decode = _decoder(builder) if builder is not None else (lambda x: x)

  def fn(index, raw):
    example = decode(raw)
    seed = tf.stack([tf.constant(seed_base, tf.int64),
                     tf.cast(index, tf.int64)])
    example = pp(example, seed)
    return {"image": example["image"],
            "label": tf.cast(example["label"], tf.int32)}
  return fn


def _finish_fn(pp=None):
  """Runs the seedless ``pp`` (if any), then makes images float32."""
  def fn(example):
    if pp is not None:
      example = pp(example, tf.zeros([2], tf.int64))
    return {**example, "image": tf.cast(example["image"], tf.float32)}
  return fn


def _check_shape(ds, what: str, pp_spec: str):
  shape = ds.element_spec["image"].shape
  if not shape.is_fully_defined():
    raise ValueError(
        f"{what} {pp_spec!r} gives images of shape {shape}; end it with a "
        "fixed size, e.g. resize(224) or central_crop(224)")
  return ds


def _options(ds):
  options = tf.data.Options()
  options.deterministic = True  # order is part of the (seed, step) contract.
  return ds.with_options(options)


def _seed_base(seed: int, salt: int, index: int | None = None) -> int:
  # Keep within int64 and apart per process (input shard) and purpose (salt).
  index = jax.process_index() if index is None else index
  return (int(seed) * 1_000_033 + salt * 7919 + index) % 2**62


def _to_global(batch: dict[str, np.ndarray], sharding) -> dict[str, jax.Array]:
  return {k: jax.make_array_from_process_local_data(sharding, v)
          for k, v in batch.items()}


def _device_prefetch(batches, sharding, size=_PREFETCH_DEVICE):
  """Keeps ``size`` batches in flight to the devices ahead of the consumer."""
  queue = collections.deque()
  for batch in batches:
    queue.append(_to_global(batch, sharding))
    if len(queue) > size - 1:
      yield queue.popleft()
  while queue:
    yield queue.popleft()


def _load_in_memory(raw, builder, n: int):
  """All ``n`` examples decoded into two tensors, or None for ragged images."""
  if any(d is None for d in builder.info.features["image"].shape):
    return None
  whole = next(iter(raw.map(_decoder(builder),
                            num_parallel_calls=tf.data.AUTOTUNE).batch(n)))
  return whole["image"], tf.cast(whole["label"], tf.int32)


def _permuted(positions, n: int, seed_base: int, max_epochs: int = 1):
  """Dataset index of example-sequence position(s) ``positions`` (int64).

  Position ``i`` is element ``i % n`` of epoch ``i // n``; epoch ``e`` is the
  permutation ``tf.random.experimental.index_shuffle`` draws from the seed
  ``(seed_base, e)`` (random access: no state, no buffer). ``index_shuffle``
  takes one seed per call, so a vector spanning ``max_epochs`` epochs is
  shuffled once per epoch it may touch and the matching result kept.
  """
  epoch, position = positions // n, positions % n
  first = tf.reduce_min(epoch)
  out = tf.zeros_like(positions)
  for j in range(max_epochs):
    seed = tf.stack([tf.constant(seed_base, tf.int64), first + j])
    shuffled = tf.random.experimental.index_shuffle(
        position, seed, tf.constant(n - 1, tf.int64))
    out = tf.where(epoch == first + j, shuffled, out)
  return out


def _in_memory_batches(images, labels, *, n, local_batch_size, start_step,
                       shuffle_seed, aug_seed, per_example, per_batch):
  """Batches of an in-memory split, each a pure function of its step.

  With no per-example op the whole batch is one gather (cheap: no per-example
  tf.data work); otherwise examples are looked up one by one, augmented with
  the seed of their position in the sequence, and batched.
  """
  b = local_batch_size
  if per_example is None:
    spans = b // n + 2  # epochs one batch can touch

    def batch_at(step):
      idx = _permuted(step * b + tf.range(b, dtype=tf.int64), n,
                      shuffle_seed, spans)
      return {"image": tf.gather(images, idx), "label": tf.gather(labels, idx)}
    ds = tf.data.Dataset.counter(start=start_step).map(
        batch_at, num_parallel_calls=tf.data.AUTOTUNE)
  else:
    augment = _example_fn(None, per_example, aug_seed)

    def example_at(i):
      idx = _permuted(i, n, shuffle_seed)
      return augment(i, {"image": tf.gather(images, idx),
                         "label": tf.gather(labels, idx)})
    ds = tf.data.Dataset.counter(start=start_step * b).map(
        example_at, num_parallel_calls=tf.data.AUTOTUNE)
    ds = ds.batch(b, drop_remainder=True)
  return ds.map(_finish_fn(per_batch), num_parallel_calls=tf.data.AUTOTUNE)


def train_dataset(data_config, *, local_batch_size: int, seed: int,
                  start_step: int = 0,
                  shard: tuple[int, int] | None = None) -> tf.data.Dataset:
  """The process-local training batches from ``start_step`` on (numpy-ready).

  Two ways to the same contract (batch ``k`` a pure function of seed and k):

  * ``cache=True`` and fixed-size images (Fashion-MNIST, CIFAR): the split is
    decoded once into memory, every epoch is a full random permutation with
    random access (``shuffle_buffer`` is not used), a resume costs nothing.
  * otherwise (ImageNet): records stream from disk through a seeded shuffle
    buffer per epoch; a resume skips the records before ``start_step``.

  ``shard=(index, count)`` reads what process ``index`` of ``count`` reads
  (default: this process of ``jax.process_count()``), so one process can
  replay a multi-process run's global batches (tests/test_multihost.py).

  Exposed for tests and benchmarks; ``make_train_iter`` adds the device side.
  """
  train_split, _ = _splits(data_config)
  index, count = _input_shard(shard)
  raw, builder = _raw(data_config,
                      _process_split(train_split, False, (index, count)))
  n = _count(raw)
  if n == 0:
    raise ValueError(f"train split {train_split!r} of "
                     f"{_get(data_config, 'name')!r} is empty for process "
                     f"{index}")
  pp_spec = pp_string(data_config, "pp_train")
  per_example, per_batch = preprocess.parse_split(pp_spec)
  shuffle_seed = _seed_base(seed, _SHUFFLE_SALT, index) % 2**31
  aug_seed = _seed_base(seed, _AUG_SALT, index)
  cache = bool(_get(data_config, "cache", False))

  in_memory = _load_in_memory(raw, builder, n) if cache else None
  if in_memory is not None:
    ds = _in_memory_batches(
        *in_memory, n=n, local_batch_size=local_batch_size,
        start_step=start_step, shuffle_seed=shuffle_seed, aug_seed=aug_seed,
        per_example=per_example, per_batch=per_batch)
    return _options(_check_shape(ds, "pp_train", pp_spec)
                    .prefetch(tf.data.AUTOTUNE))

  if cache:  # ragged images: keep the decoded records, stream them.
    raw = _cached_decoded(raw, builder)
  buffer = min(int(_get(data_config, "shuffle_buffer",
                        _DEFAULT_SHUFFLE_BUFFER)), n)

  def epoch(e):
    if buffer <= 1:
      return raw
    return raw.shuffle(buffer, seed=shuffle_seed * 1_000_003 + e,
                       reshuffle_each_iteration=False)

  first = start_step * local_batch_size
  ds = tf.data.Dataset.counter(start=first // n).flat_map(epoch)
  ds = ds.skip(first % n).enumerate(start=first)
  if per_example is not None:
    fn = _example_fn(builder, per_example, aug_seed)
  else:
    decode = _decoder(builder)
    fn = lambda i, r: {**decode(r), "label": tf.cast(r["label"], tf.int32)}
  ds = ds.map(fn, num_parallel_calls=tf.data.AUTOTUNE)
  ds = _check_shape(ds, "pp_train", pp_spec)
  ds = ds.batch(local_batch_size, drop_remainder=True)
  ds = ds.map(_finish_fn(per_batch), num_parallel_calls=tf.data.AUTOTUNE)
  return _options(ds.prefetch(tf.data.AUTOTUNE))


def make_train_iter(data_config, *, global_batch_size: int, seed: int,
                    start_step: int = 0,
                    mesh: Mesh | None = None) -> Iterator[dict[str, jax.Array]]:
  """Endless training batches ``{'image': f32[B,H,W,C], 'label': i32[B]}``.

  Args:
    data_config: ``config.data`` (``name``, ``data_dir``, ``train_split``,
      ``pp_train``, ``shuffle_buffer``, ``cache``).
    global_batch_size: ``B``, summed over processes; divisible by the mesh's
      ``data`` axis.
    seed: the run's seed; with ``start_step`` it fixes every batch.
    start_step: the step whose batch comes first (resume).
    mesh: device mesh with a ``data`` axis (None: all devices on ``data``).

  Returns:
    an iterator of global ``jax.Array`` batches sharded ``P('data')``.
  """
  mesh = _mesh(mesh)
  local = _local_batch(global_batch_size, mesh)
  ds = train_dataset(data_config, local_batch_size=local, seed=seed,
                     start_step=start_step)
  return _device_prefetch(ds.as_numpy_iterator(),
                          NamedSharding(mesh, P("data")))


def eval_dataset(data_config, split: str, *,
                 local_batch_size: int) -> tf.data.Dataset:
  """Process-local eval batches with ``mask``, padded to a common count.

  Built afresh at every call (no cache across calls: a dataset kept in a
  module would outlive a change of data, e.g. between tests); TFDS keeps small
  splits' records in memory by itself.
  """
  raw, builder = _raw(data_config, _process_split(split, False))
  n = _count(raw)
  pp_spec = pp_string(data_config, "pp_eval")
  fn = _example_fn(builder, preprocess.parse(pp_spec),
                   _seed_base(0, _AUG_SALT))
  finish = _finish_fn()
  ds = raw.enumerate().map(lambda i, r: {**finish(fn(i, r)), "mask": True},
                           num_parallel_calls=tf.data.AUTOTUNE)
  ds = _check_shape(ds, "pp_eval", pp_spec)

  if jax.process_count() > 1:
    most = int(np.max(multihost_utils.process_allgather(np.int64(n))))
  else:
    most = n
  total = math.ceil(most / local_batch_size) * local_batch_size
  if total > n:
    spec = ds.element_spec
    pad = tf.data.Dataset.from_tensors(
        {"image": tf.zeros(spec["image"].shape, tf.float32),
         "label": tf.zeros([], tf.int32), "mask": False})
    ds = ds.concatenate(pad.repeat(total - n))
  ds = ds.batch(local_batch_size, drop_remainder=True)
  return _options(ds.prefetch(tf.data.AUTOTUNE))


def make_eval_iter(data_config, split: str | None = None, *,
                   global_batch_size: int,
                   mesh: Mesh | None = None) -> Iterator[dict[str, jax.Array]]:
  """One pass over ``split``: ``{'image', 'label', 'mask'}`` global batches.

  The last batch is padded; ``mask`` is False on padding, so metrics summed
  with the mask count every example exactly once. ``split`` None means
  ``data_config.eval_split``.
  """
  mesh = _mesh(mesh)
  local = _local_batch(global_batch_size, mesh)
  split = split or _splits(data_config)[1]
  ds = eval_dataset(data_config, split, local_batch_size=local)
  return _device_prefetch(ds.as_numpy_iterator(),
                          NamedSharding(mesh, P("data")))


def dataset_info(data_config) -> dict:
  """``num_classes``, ``image_shape`` (after ``pp_eval``), ``num_train``, ``num_eval``.

  ``image_shape`` is what the model sees, so it can be initialised without
  reading data; the counts are whole splits (all processes).
  """
  train_split, eval_split = _splits(data_config)
  builder = datasets_lib.get_builder(_get(data_config, "name"),
                                     _get(data_config, "data_dir"))
  label = builder.info.features["label"]
  if not hasattr(label, "num_classes"):
    raise ValueError(f"dataset {builder.name!r} has no class label feature "
                     "'label'; the pipeline trains classifiers")
  # tf_dtype: TFDS logs a deprecation warning line for every ``.dtype`` read,
  # which would stand before a config error's one line on stderr.
  image = builder.info.features["image"]
  counts = [_count(datasets_lib.as_dataset(builder, s)) for s in
            (train_split, eval_split)]
  return dict(num_classes=int(label.num_classes),
              image_shape=preprocessed_shape(
                  pp_string(data_config, "pp_eval"), image.shape,
                  image.tf_dtype),
              num_train=counts[0], num_eval=counts[1])


def preprocessed_shape(pp_spec: str, raw_shape, raw_dtype=tf.uint8
                       ) -> tuple[int, ...]:
  """The image shape ``pp_spec`` makes of stored images of ``raw_shape``.

  Traced, not run: ``raw_shape`` may have ``None`` sides (ImageNet), and the
  ops must end in a fixed size (``resize``, ``central_crop``).
  """
  pp = preprocess.parse(pp_spec)
  traced = tf.function(
      lambda img: tf.cast(pp({"image": img, "label": tf.constant(0, tf.int64)},
                             tf.constant([0, 0], tf.int64))["image"],
                          tf.float32)
  ).get_concrete_function(tf.TensorSpec(raw_shape, raw_dtype))
  shape = traced.output_shapes
  if not shape.is_fully_defined():
    raise ValueError(
        f"pp_eval {pp_spec!r} gives images of shape {shape}; end it with a "
        "fixed size, e.g. resize(224)")
  return tuple(int(d) for d in shape)
