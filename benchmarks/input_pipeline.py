r"""Can one host feed its chips? i21k preparation and training input, per core.

  python benchmarks/input_pipeline.py            # ~1 minute; prints a table
  python benchmarks/input_pipeline.py --out=benchmarks/results/input_pipeline.json

On generated ImageNet-like JPEGs (about 400x350 pixels, quality 90, ~95 KB:
smooth colour fields plus texture and grain, so that they compress like
photos), it measures:

1. **preparation**: ``python -m softattn.data prepare imagenet21k`` on a
   folder of class folders, in one process: CPU seconds per 1,000 images
   (read, full decode check, hash, sort, serialise, write), and the
   resulting estimate for the 14.2M images of fall11 per core;
2. **training input**: the real training pipeline
   (``softattn.data.pipeline.train_dataset``) on the prepared dataset with
   ``configs/i21k_vit.py``'s ``pp_train`` (TFDS read, JPEG decode,
   ``inception_crop(224)``, ``flip_lr``, batching, ``value_range`` on the
   batch), first confined to one thread (tf.data's private thread pool of
   size 1, no intra-op parallelism), then with tf.data's defaults (every
   core). Images per CPU second is the rate per core; it does not depend on
   other jobs sharing the machine the way wall time does.

``python -m softattn.aot hostfeed`` turns the per-core rate into the host-feed
column of docs/scale.md. The machine's load average is recorded with the
result: a loaded machine gives lower rates, so rerun on an idle host.
"""

from __future__ import annotations

import argparse
import datetime
import io
import json
import os
import platform
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

FALL11_IMAGES = 14_197_122  # image-net.org's count for fall11 (21,841 synsets)


def photo_jpeg(rng, width: int, height: int, quality: int = 90) -> bytes:
  """A photo-like JPEG: smooth colour field + texture + grain."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  from PIL import Image  # pylint: disable=g-import-not-at-top

  def field(h, w):
    small = Image.fromarray(rng.integers(0, 256, (h, w, 3), np.uint8))
    return np.asarray(small.resize((width, height), Image.BICUBIC), np.float32)
  pixels = (0.5 * field(6, 8) + 0.5 * field(height // 4, width // 4)
            + rng.normal(0, 24, (height, width, 1)))
  out = io.BytesIO()
  Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8)).save(
      out, "JPEG", quality=quality)
  return out.getvalue()


def write_source(root: str, images: int, classes: int = 8) -> float:
  """``root/nXXXXXXXX/*.JPEG``; returns the mean file size in bytes."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  rng = np.random.default_rng(0)
  total = 0
  for i in range(images):
    wnid = f"n{i % classes:08d}"
    os.makedirs(os.path.join(root, wnid), exist_ok=True)
    data = photo_jpeg(rng, int(rng.integers(320, 481)),
                      int(rng.integers(280, 421)))
    with open(os.path.join(root, wnid, f"{wnid}_{i}.JPEG"), "wb") as f:
      f.write(data)
    total += len(data)
  return total / images


def time_prepare(source: str, data_dir: str) -> dict:
  from softattn.data import imagenet21k  # pylint: disable=g-import-not-at-top
  wall, cpu = time.perf_counter(), time.process_time()
  report = imagenet21k.prepare(source, data_dir, processes=1,
                               log=lambda _: None)
  wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
  return dict(images=report.num_examples, wall_s=wall, cpu_s=cpu)


def time_pipeline(data_dir: str, seconds: float, threads: int | None,
                  batch: int = 64) -> dict:
  """Batches of the real i21k train pipeline for ``seconds`` after warm-up."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from softattn.data import pipeline  # pylint: disable=g-import-not-at-top
  from tests import train_runner  # pylint: disable=g-import-not-at-top
  data = train_runner.load_config("configs/i21k_vit.py").data
  with data.unlocked():
    data.data_dir, data.train_split = data_dir, "full"
  ds = pipeline.train_dataset(data, local_batch_size=batch, seed=0)
  if threads:
    options = tf.data.Options()
    options.threading.private_threadpool_size = threads
    options.threading.max_intra_op_parallelism = 1
    ds = ds.with_options(options)
  it = ds.as_numpy_iterator()
  for _ in range(2):  # warm-up: tracing, file opening, first shuffle fill
    first = next(it)
  assert first["image"].shape == (batch, 224, 224, 3), first["image"].shape
  images, wall, cpu = 0, time.perf_counter(), time.process_time()
  while time.perf_counter() - wall < seconds:
    images += next(it)["image"].shape[0]
  return dict(threads=threads or "tf.data default", images=images,
              wall_s=time.perf_counter() - wall,
              cpu_s=time.process_time() - cpu)


def main(argv=None) -> dict:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--images", type=int, default=600)
  parser.add_argument("--seconds", type=float, default=12.0,
                      help="measuring time of each pipeline run")
  parser.add_argument("--out", default=None, help="write the result as JSON")
  args = parser.parse_args(argv)

  load_before = os.getloadavg()
  with tempfile.TemporaryDirectory() as tmp:
    mean_bytes = write_source(os.path.join(tmp, "src"), args.images)
    prep = time_prepare(os.path.join(tmp, "src"), os.path.join(tmp, "tfds"))
    runs = [time_pipeline(os.path.join(tmp, "tfds"), args.seconds, threads)
            for threads in (1, None)]
  cores = os.cpu_count()
  per_1000 = 1000 * prep["cpu_s"] / prep["images"]
  per_core = runs[0]["images"] / runs[0]["cpu_s"]
  result = dict(
      date=datetime.datetime.now(datetime.timezone.utc).isoformat(
          timespec="seconds"),
      machine=f"{platform.machine()}, {cores} cores ({platform.processor()})",
      loadavg_before=load_before, loadavg_after=os.getloadavg(),
      jpeg=dict(count=args.images, mean_bytes=mean_bytes, quality=90,
                size="320-480 x 280-420"),
      prepare=dict(**prep, cpu_s_per_1000=per_1000,
                   fall11_core_hours=per_1000 * FALL11_IMAGES / 1000 / 3600),
      pipeline=runs, images_per_s_per_core=per_core)

  print(f"machine: {result['machine']}; load average {load_before[0]:.2f} "
        f"before, {result['loadavg_after'][0]:.2f} after (shared: rerun idle)")
  print(f"{args.images} generated JPEGs, mean {mean_bytes / 1e3:.0f} KB\n")
  print("| measurement | images | wall s | CPU s | images/s (wall) | "
        "images per CPU s |\n|---|---|---|---|---|---|")
  rows = [("prepare imagenet21k, 1 process", prep)] + [
      (f"i21k train input, {r['threads']} thread(s)" if r["threads"] == 1
       else "i21k train input, tf.data default threads", r) for r in runs]
  for name, r in rows:
    print(f"| {name} | {r['images']} | {r['wall_s']:.1f} | {r['cpu_s']:.1f} | "
          f"{r['images'] / r['wall_s']:.0f} | {r['images'] / r['cpu_s']:.0f} |")
  print(f"\npreparation: {per_1000:.1f} CPU s per 1,000 images; fall11 "
        f"({FALL11_IMAGES:,} images): {result['prepare']['fall11_core_hours']:.0f}"
        f" core-hours, {result['prepare']['fall11_core_hours'] / cores:.1f} h on "
        f"these {cores} cores")
  print(f"training input: {per_core:.0f} images/s per core")
  if args.out:
    with open(args.out, "w", encoding="utf-8") as f:
      json.dump(result, f, indent=1)
    print(f"wrote {args.out}")
  return result


if __name__ == "__main__":
  main()
