"""``python -m softattn.data prepare fashion_mnist [--data_dir D] [--source_dir S]``.

Prepares TFDS's ``fashion_mnist`` offline from the Debian package's files (see
``softattn.data.prepare``); prints the split sizes, or one line naming the fix.
"""

from __future__ import annotations

import argparse
import sys

PREPARERS = ("fashion_mnist",)


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
  args = parser.parse_args(argv)

  from softattn.data import prepare  # pylint: disable=g-import-not-at-top
  import tensorflow_datasets as tfds  # pylint: disable=g-import-not-at-top
  tfds.disable_progress_bar()
  try:
    counts = prepare.prepare_fashion_mnist(args.data_dir, args.source_dir)
  except prepare.PrepareError as e:
    print(f"error: {e}", file=sys.stderr)
    return 1
  print(f"fashion_mnist ready in {args.data_dir or 'the TFDS default dir'}: "
        + ", ".join(f"{k}={v}" for k, v in counts.items()))
  return 0


if __name__ == "__main__":
  sys.exit(main())
