"""The scaling plot: error against compute, one curve per group, log x."""

from __future__ import annotations

import io
from typing import Sequence

import matplotlib

matplotlib.use("Agg")  # files only; no display on CI or TPU VMs
import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
import numpy as np  # pylint: disable=g-import-not-at-top

from softattn import paths  # pylint: disable=g-import-not-at-top
from softattn.sweep import records  # pylint: disable=g-import-not-at-top


def plot_scaling(runs: Sequence[records.RunRecord], fits: dict, path: str, *,
                 group_by: str, compute_key: str, xlabel: str, ylabel: str,
                 title: str = "") -> None:
  """Draws finished runs as points (error: their ``value/error``) and each
  group's (``group_by`` setting's) fit as a line.

  Failed runs have no error to plot; the table lists them with reasons and the
  legend counts them so a reader sees that something is missing.
  """
  fig, ax = plt.subplots(figsize=(6.4, 4.4), dpi=120)
  colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
  groups = list(dict.fromkeys(r.label(group_by) for r in runs))
  for i, group in enumerate(groups):
    color = colors[i % len(colors)]
    mine = [r for r in runs if r.label(group_by) == group]
    ok = [r for r in mine if r.done and r.value("value/error") is not None
          and r.value(compute_key)]
    not_ok = len(mine) - len(ok)
    xs = np.array([r.value(compute_key) for r in ok], np.float64)
    ys = np.array([r.value("value/error") for r in ok], np.float64)
    label = group + (f" ({not_ok} failed or unfinished)" if not_ok else "")
    res = fits.get(group) or {}
    f = res.get("fit")
    if f is not None:
      label += f": a={f.a:.3f}±{f.a_std:.3f}, c={f.c:.2f}±{f.c_std:.2f}"
    else:
      label += f": no fit ({len(ok)} points)"
    ax.scatter(xs, ys, color=color, label=label, zorder=3)
    if f is not None and len(xs):
      grid = np.geomspace(xs.min() / 1.5, xs.max() * 1.5, 200)
      ax.plot(grid, f(grid), color=color, lw=1.5)
    elif len(xs) > 1:  # no fit: join the points so the trend is still visible
      order = np.argsort(xs)
      ax.plot(xs[order], ys[order], color=color, lw=1, ls=":")
  ax.set_xscale("log")
  ax.set_xlabel(xlabel)
  ax.set_ylabel(ylabel)
  if title:
    ax.set_title(f"error vs compute, one curve per {title}")
  ax.grid(True, which="both", alpha=0.3)
  ax.legend(fontsize=7)
  fig.tight_layout()
  buf = io.BytesIO()
  fig.savefig(buf, format="png")
  plt.close(fig)
  paths.write_atomic(path, buf.getvalue())  # local or gs://
