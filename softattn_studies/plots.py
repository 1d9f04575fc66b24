"""Plot helpers every study's figures (``plotspec``) use: figures, seed
counts, markers and line styles that keep series apart.

Every panel gets labelled axes (``save`` refuses a figure with an unlabelled
axis that holds data); every series says how many seeds it averages
(``n=``).
"""

from __future__ import annotations

import io
import os
from typing import Sequence

from softattn import paths

MARKERS = "osD^vPX*<>"
LINESTYLES = ("-", "--", "-.", ":")


def pyplot():
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  return plt


def subplots(ncols: int = 1, nrows: int = 1, size=(5.0, 3.8), **kw):
  return pyplot().subplots(nrows, ncols, squeeze=False, figsize=(
      size[0] * ncols, size[1] * nrows), **kw)


def unlabelled(fig) -> list[str]:
  """Axes of ``fig`` that hold data but lack an x or y label."""
  bad = []
  for i, ax in enumerate(fig.axes):
    if not ax.get_visible() or not (ax.lines or ax.collections or
                                    ax.images or ax.patches):
      continue
    if getattr(ax, "_colorbar", None) is not None:   # labelled by its image
      continue
    if not ax.get_xlabel() or not ax.get_ylabel():
      bad.append(f"panel {i} ({ax.get_title() or 'untitled'})")
  return bad


def save(fig, path: str) -> str:
  """Saves ``fig`` after checking every data panel has both axis labels."""
  bad = unlabelled(fig)
  plt = pyplot()
  if bad:
    plt.close(fig)
    raise ValueError(f"{path}: label both axes of {', '.join(bad)}")
  fig.tight_layout()
  buf = io.BytesIO()
  fig.savefig(buf, dpi=110, format=os.path.splitext(path)[1][1:] or "png")
  plt.close(fig)
  paths.write_atomic(path, buf.getvalue())  # local (parents made) or gs://
  return path


def seeds_label(label: str, ns: Sequence[int]) -> str:
  ns = sorted(set(int(n) for n in ns if n))
  if not ns:
    return label
  return f"{label} (n={ns[0]})" if len(ns) == 1 else \
      f"{label} (n={ns[0]}-{ns[-1]})"
