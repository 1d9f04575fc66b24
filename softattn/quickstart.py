r"""Quickstart: softmax vs NormSoftmax in a small ViT on Fashion-MNIST, on a CPU.

  sudo apt-get install dataset-fashion-mnist     # offline copy of the data
  python -m softattn.quickstart                  # ~a few minutes on 2 cores

Prepares TFDS's ``fashion_mnist`` if needed (offline from the Debian package,
checksums verified; with network TFDS downloads it), trains
``configs/quickstart.py`` once per normalizer, prints progress and a final
table, and leaves in ``--workdir``: one run directory per normalizer
(TensorBoard events, ``metrics.jsonl``, checkpoints, ``status.json``) and
``curves.png`` (train loss and eval accuracy against steps).

  tensorboard --logdir /tmp/softattn_quickstart

Rerunning resumes (or just re-reports) finished runs.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time

DEFAULT_NORMALIZERS = ("softmax", "normsoftmax(gamma=inf)")


def _load_config_module():
  from softattn import config_files  # pylint: disable=g-import-not-at-top
  path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                      "configs", "quickstart.py")
  if not os.path.exists(path):
    raise FileNotFoundError(f"{path} not found; run the quickstart from a "
                            "checkout of the repository (pip install -e .).")
  return config_files.config_module(path)


def ensure_fashion_mnist(data_dir: str | None) -> None:
  """Prepares TFDS ``fashion_mnist`` unless it is already there."""
  import ml_collections  # pylint: disable=g-import-not-at-top
  from softattn import data  # pylint: disable=g-import-not-at-top
  cfg = ml_collections.ConfigDict(dict(
      name="fashion_mnist", data_dir=data_dir, train_split="train",
      eval_split="test", pp_train="", pp_eval="", shuffle_buffer=1, cache=False))
  try:
    data.dataset_info(cfg)
    return
  except Exception:  # pylint: disable=broad-except
    pass
  print("Preparing fashion_mnist (python -m softattn.data prepare fashion_mnist)...",
        flush=True)
  cmd = [sys.executable, "-m", "softattn.data", "prepare", "fashion_mnist"]
  if data_dir:
    cmd += ["--data_dir", data_dir]
  if subprocess.call(cmd) != 0:
    raise SystemExit(
        "Could not prepare fashion_mnist. Offline: `sudo apt-get install "
        "dataset-fashion-mnist` then rerun; with network TFDS downloads it.")


def _slug(spec: str) -> str:
  return re.sub(r"[^A-Za-z0-9]+", "_", spec).strip("_")


def plot_curves(runs: dict[str, str], path: str) -> None:
  """Train loss and eval accuracy against steps for every run, one PNG."""
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  from softattn import paths  # pylint: disable=g-import-not-at-top
  fig, (ax_loss, ax_acc) = plt.subplots(1, 2, figsize=(10, 4))
  for name, workdir in runs.items():
    recs, bad = paths.scan_json_lines(os.path.join(workdir, "metrics.jsonl"))
    if bad:  # one line, not a warning's two (file:line and source)
      print(f"{name}: {paths.describe_unparsable(bad)}", file=sys.stderr)
    tr = [(r["step"], r["loss"]) for r in recs
          if r["split"] == "train" and isinstance(r.get("loss"), float)]
    ev = [(r["step"], r["accuracy"]) for r in recs
          if r["split"] == "eval" and "accuracy" in r]
    if tr:
      ax_loss.plot(*zip(*sorted(dict(tr).items())), label=name)
    if ev:
      ax_acc.plot(*zip(*sorted(dict(ev).items())), marker="o", label=name)
  ax_loss.set(xlabel="step", ylabel="train loss", title="Training loss")
  ax_acc.set(xlabel="step", ylabel="test accuracy", title="Fashion-MNIST test accuracy")
  for ax in (ax_loss, ax_acc):
    ax.grid(alpha=0.3)
    ax.legend()
  fig.tight_layout()
  fig.savefig(path, dpi=120)
  plt.close(fig)


def main(argv=None) -> int:
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  p.add_argument("--workdir", default="/tmp/softattn_quickstart")
  p.add_argument("--steps", type=int, default=300)
  p.add_argument("--normalizers", default=";".join(DEFAULT_NORMALIZERS),
                 help="';'-separated normalizer specs")
  p.add_argument("--data_dir", default=None)
  p.add_argument("--config_arg", default="",
                 help="extra configs/quickstart.py args, e.g. 'width=32,depth=2'")
  args = p.parse_args(argv)

  ensure_fashion_mnist(args.data_dir)
  from softattn import train  # pylint: disable=g-import-not-at-top
  cfg_mod = _load_config_module()
  runs, rows = {}, []
  for spec in [s.strip() for s in args.normalizers.split(";") if s.strip()]:
    arg = f"normalizer={spec},steps={args.steps}"
    if args.config_arg:
      arg += "," + args.config_arg
    config = cfg_mod.get_config(arg)
    config.data.data_dir = args.data_dir
    workdir = os.path.join(args.workdir, _slug(spec))
    runs[spec] = workdir
    print(f"\n=== {spec}: {workdir}", flush=True)
    t0 = time.time()
    try:
      final = train.train_and_evaluate(config, workdir)
      status = "done"
    except train.NonFiniteError as e:
      final, status = {}, "diverged"
      print(f"{spec}: {e}", flush=True)
    rows.append((spec, status, final, time.time() - t0))

  plot = os.path.join(args.workdir, "curves.png")
  plot_curves(runs, plot)
  print("\n| normalizer | status | train loss | test loss | test accuracy | wall s |")
  print("|---|---|---|---|---|---|")
  for spec, status, final, secs in rows:
    def fmt(k):
      v = final.get(k)
      return f"{v:.4f}" if isinstance(v, float) else "-"
    print(f"| {spec} | {status} | {fmt('train_loss')} | {fmt('eval_loss')} | "
          f"{fmt('eval_accuracy')} | {secs:.0f} |")
  print(f"\nCurves: {plot}\nTensorBoard: tensorboard --logdir {args.workdir}")
  return 0


if __name__ == "__main__":
  sys.exit(main())
