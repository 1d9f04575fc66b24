"""``python -m softattn.data prepare {fashion_mnist,imagenet21k} [--data_dir D] ...``.

``fashion_mnist [--source_dir S]``: TFDS's ``fashion_mnist`` offline from the
Debian package's files (``softattn.data.prepare``). ``imagenet21k
--source=<fall11_whole.tar | winter21_whole.tar.gz | folder> [--processes N]``:
ImageNet-21k as a TFDS dataset (``softattn.data.imagenet21k``), resumable.
Prints what it built, or one line naming the fix.
"""

from __future__ import annotations

import argparse
import sys

PREPARERS = ("fashion_mnist", "imagenet21k")


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(prog="python -m softattn.data")
  commands = parser.add_subparsers(dest="command", required=True)
  prep = commands.add_parser(
      "prepare", help="prepare a dataset offline (TFDS format, checksums on)")
  prep.add_argument("dataset", choices=PREPARERS)
  prep.add_argument("--data_dir", default=None,
                    help="TFDS data dir (default: $TFDS_DATA_DIR or "
                         "~/tensorflow_datasets)")
  prep.add_argument("--source_dir", default=None,
                    help="folder holding the four *-ubyte.gz files (default: "
                         "/usr/share/datasets/fashion-mnist)")
  prep.add_argument("--source", default=None,
                    help="imagenet21k: fall11_whole.tar / winter21_whole.tar.gz, "
                         "a folder of nXXXXXXXX.tar, or a folder of "
                         "nXXXXXXXX/ image folders")
  prep.add_argument("--processes", type=int, default=None,
                    help="imagenet21k: worker processes, ~1 GiB each "
                         "(default: the cores, at most 32)")
  prep.add_argument("--num_shards", type=int, default=None,
                    help="imagenet21k: output shards (default: ~512 MiB each)")
  prep.add_argument("--build_dir", default=None,
                    help="imagenet21k: work folder, kept until the end for "
                         "resuming (default: <data_dir>/imagenet21k.build; "
                         "use a local disk when data_dir is gs://)")
  args = parser.parse_args(argv)
  if args.dataset == "imagenet21k":
    return _imagenet21k(args)

  from softattn.data import prepare  # pylint: disable=g-import-not-at-top
  import tensorflow_datasets as tfds  # pylint: disable=g-import-not-at-top
  tfds.disable_progress_bar()
  try:
    counts = prepare.prepare_fashion_mnist(args.data_dir, args.source_dir)
  except prepare.FashionMnistPrepareError as e:
    print(f"error: {e}", file=sys.stderr)
    return 1
  print(f"fashion_mnist ready in {args.data_dir or 'the TFDS default dir'}: "
        + ", ".join(f"{k}={v}" for k, v in counts.items()))
  return 0


def _imagenet21k(args) -> int:
  from softattn.data import imagenet21k  # pylint: disable=g-import-not-at-top
  if not args.source:
    print("error: imagenet21k needs --source=<fall11_whole.tar, "
          "winter21_whole.tar.gz or a folder of synset tars / folders>",
          file=sys.stderr)
    return 2
  try:
    report = imagenet21k.prepare(args.source, args.data_dir,
                                 processes=args.processes,
                                 num_shards=args.num_shards,
                                 build_dir=args.build_dir)
  except imagenet21k.ImageNet21kPrepareError as e:
    print(f"error: {e}", file=sys.stderr)
    return 1
  for line in imagenet21k.summary(report):
    print(line)
  return 0


if __name__ == "__main__":
  sys.exit(main())
