r"""The element-wise attention study (Baco China et al. 2023) as data: its
parts, per-run values, and the tables, plots and facts ``RESULTS.md.tmpl``
names (checkpoint probes: ``probes.py``).

  python experiments/elementwise/report.py --workdir=workdirs/elementwise   # export + report
  python experiments/elementwise/report.py --from-csv experiments/elementwise/runs.csv
"""

from __future__ import annotations

import os
import sys

import numpy as np

import softattn_studies as studies
from softattn_studies.claims import ACCURACY, Claim, Metric, pairs
from softattn_studies.plotspec import Curves, Paired, Plot, Points
from softattn_studies.render import (Cell, ClaimEstimate, Contrast, Events,
                                     Span, Table)
from softattn.sweep import declaration

HERE = os.path.dirname(os.path.abspath(__file__))
SPEC = os.path.relpath(os.path.join(HERE, "sweep.py"))
_probes = studies.load_module(os.path.join(HERE, "probes.py"))
claims = studies.load_module(os.path.join(HERE, "claims.py"))
sel, NOATTN, TEN_EPOCHS = claims.sel, claims.NOATTN, claims.TEN_EPOCHS
CHANCE = 0.15
# A part of A-H (or ``none``) and extras at the paper's 10 epochs.
TEN = "part=models,epochs=10,variants={},extras={},seeds=3".format
BASE = {"models": "part=models,noskip_seeds=3", "separate": "part=separate",
        "models_10ep": TEN("ABC", "false"),
        "separate_10ep": "part=separate,epochs=10,skips=noskip,seeds=3",
        # The attention-free baseline: B's recipe with layers=0.
        "noattn": "part=models,variants=B,extras=false,layers=0",
        "noattn_10ep": "part=models,epochs=10,variants=B,extras=false,"
                       "layers=0,seeds=3"}
FOCUS = {claims.LR01: "part=models,variants=B,extras=false,lr=0.1,seeds=3",
         "df_10ep": TEN("DF", "false"), "e_10ep": TEN("E", "false"),
         # G and H at 10 epochs: declared, with the claims that read them
         # (claims.TEN_EPOCHS), before any of their runs was read.
         "gh_10ep": TEN("GH", "false"),
         "single_10ep": TEN("none", "single"),
         "separate_skip_10ep": "part=separate,epochs=10,skips=skip,seeds=3",
         # The control's cost per train step (0.05 epochs = 1 step x 3
         # seeds): what time.faster_than_control reads.
         claims.CONTROL_STEP: "part=control,control_epochs=0.05,"
                              "control_seeds=3"}


# "Collapsed" (the paper's "NaN" rows): diverged, or at chance at the end.
collapsed = studies.diverged_or_below("final/accuracy", CHANCE)


def collapse_step(run) -> float | None:
  """The divergence step, or the first evaluation at chance."""
  if run.diverged:
    return float(run.step)
  if not collapsed(run):
    return None
  steps, acc = run.curve("accuracy", "eval")
  at = steps[acc < CHANCE]
  return float(at[0]) if at.size else None


def layer_grads_zero(run) -> float | None:
  """1 when every logged attention-layer gradient norm is exactly 0."""
  keys = [k for k in run.keys("grad_norm/layer") if k.count("/") == 1]
  if not run.done or not keys:
    return None
  vals = np.concatenate([run.curve(k)[1] for k in keys])
  return float(vals.size > 0 and np.all(vals == 0))


def _params_row(label):
  """Paper, ours (from the runs; CIFAR-10 rows from the declared configs,
  not run) and ours - paper."""
  cifar = claims.PAPER_CIFAR_PARAMS.get(label)
  paper = cifar[0] if cifar else claims.PAPER_PARAMS[label]

  def ours(runs, diff=False) -> str:
    if cifar:
      p = studies.model_params(
          declaration.load(f"{SPEC}:{cifar[1]}").runs[0].config)
    else:
      p = next((int(v) for r in studies.select(runs, sel(label))
                if (v := r.value("value/params"))), None)
    if not p:
      return "-"
    if not diff:
      return f"{p:,}"
    return "exact" if p == paper else f"{p - paper:+,}"
  return (label, [f"{paper:,}", ours, lambda runs: ours(runs, True)])


def _paper_t1(lab, i):
  t1 = claims.PAPER_T1
  return "-" if lab not in t1 else "NaN" if t1[lab][i] is None else t1[lab][i]


def _accuracies(lab) -> list:
  """Accuracy and collapses of ``lab`` at 1 epoch and (where it has a
  10-epoch part) at 10 epochs."""
  both = lambda where: [Cell(where, ACCURACY), Events(
      where, claims.COLLAPSED, "value/collapse_step",
      ("diverged at step", "at chance from the eval at step"))]
  return both(sel(lab)) + (both(sel(lab, TEN_EPOCHS[lab]))
                           if lab in TEN_EPOCHS else ["-", "-"])


def _layer(lab, column, digits=3, **fmt):
  return "-" if lab == NOATTN else Cell(
      sel(lab), Metric("", column, digits=digits), fmt)


MINUTES = Metric("", "core_seconds", 1 / 60, digits=1)
PAPER_MINUTES = claims.PAPER_MINUTES
CLAIM = {c.id: c for c in claims.CLAIMS}

TABLES = {
    "params": Table(["model", "paper", "ours", "ours - paper"], [
        _params_row(lab) for lab in ["control", *"ABCDEFGH", "single head",
                                     *claims.PAPER_CIFAR_PARAMS]]),
    "t1": Table(
        ["model", "paper acc %", "paper grad avg", "ours 1 epoch",
         "collapsed (1 epoch)", "ours 10 epochs", "collapsed (10 epochs)",
         "grad avg (1 epoch)", "moved (1 epoch)"],
        [(lab, [_paper_t1(lab, 1), _paper_t1(lab, 2), *_accuracies(lab),
                _layer(lab, "value/grad_avg", digits=2, sci=True),
                _layer(lab, "value/attn_moved")]) for lab in claims.LABELS]),
    "app": Table(
        ["setting", "paper", "ours 1 epoch", "collapsed", "ours 10 epochs",
         "collapsed (10 epochs)"],
        [(lab, [paper, *_accuracies(lab)])
         for lab, paper in claims.PAPER_APPENDIX.items()]),
    "time": Table(
        ["model", "paper min", "paper / B", "ours 10 epochs",
         "ours / B (10 epochs)", "ours 1 epoch"],
        [(lab, [PAPER_MINUTES[lab],
                f"{PAPER_MINUTES[lab] / PAPER_MINUTES['B']:.3g}",
                Cell(sel(lab, TEN_EPOCHS[lab]), MINUTES),
                # Our per-seed core-seconds ratio to B's (a description).
                Contrast(CLAIM[f"time.{lab}_over_B"]) if lab != "B" else "-",
                Cell(sel(lab, "models"), MINUTES)])
         for lab in PAPER_MINUTES]),
}


def _curves_plot(title, parts, metric, split, ylabel, finals, logy=False,
                 ends_without=()):
  """Each setting's mean training curve, and its final value per seed
  (where curves that end close overlap); ``ends_without``: settings left
  out of the end panel (at chance: they would squash the trained ones'
  scale; the appendix table counts them)."""
  ends = [(lab, part) for lab, part in parts.items()
          if lab not in ends_without]
  return Plot(title, [
      Curves(title, ylabel, {lab: (sel(lab, part), metric)
                             for lab, part in parts.items()},
             split=split, scale=100.0 if metric == "accuracy" else 1.0,
             logy=logy),
      Points("at the end" + "".join(f"; not shown (at chance): {lab}"
                                    for lab in ends_without),
             finals, "setting", {lab: [(float(i), sel(lab, part))]
                                 for i, (lab, part) in enumerate(ends)},
             dodge=0.0, xticks=tuple(float(i) for i in range(len(ends))))],
              size=(6.6, 4.2))


ONE_EPOCH = dict.fromkeys([*"ABCDEFGH", NOATTN], "models")
PLOTS = {
    "accuracy": _curves_plot(
        "train accuracy, 1 epoch", ONE_EPOCH, "accuracy", "train",
        "train accuracy % (mean, 95 % band)", ACCURACY),
    "loss": _curves_plot(
        "train loss, 1 epoch", ONE_EPOCH, "loss", "train", "train loss",
        Metric("final train loss", "final/train_loss", digits=3), logy=True),
    "accuracy_10ep": _curves_plot(
        "test accuracy, 10 epochs", TEN_EPOCHS, "accuracy", "eval",
        "test accuracy % (mean, 95 % band)", ACCURACY,
        ends_without=("B, no skip, separate optimizers",)),
    # Table 1's BN claims at 10 epochs: each BN model minus its no-BN twin,
    # paired by seed (the paper: BN hurts, or collapses at 2 layers).
    "bn_paired": Plot("BN against no BN, paired by seed (10 epochs)", [
        Paired("BN model - its no-BN twin", {
            "A - B (2 layers, 8 heads)": "t1.bn_hurts_2layers",
            "C - D (2 layers, 16 heads)": "t1.bn_hurts_2layers.CD",
            "E - F (4 layers)": "t1.bn_hurts_4layers.EF",
            "G - H (4 layers)": "t1.bn_hurts_4layers.GH"},
               "test accuracy points")], size=(5.0, 4.0)),
}


def _vs_noattn(v, part, noattn) -> Claim:
  """``v`` against the attention-free baseline, paired by seed (for the
  prose; not a declared claim)."""
  return Claim("_", "", "", "", ACCURACY, sel(v, part), sel(NOATTN, noattn),
               ">")


def _gap(runs, _) -> str:
  """The largest |no-BN model - attention-free| of a seed pair at 1 epoch."""
  gaps = [abs(d) for v in "BDFH"
          for d in pairs(_vs_noattn(v, "models", "models"), runs)[0]]
  return f"{max(gaps):.2g}" if gaps else "?"


NOSKIP = sel("B, no skip, separate optimizers", "separate_10ep")


def _noskip_zero(runs, _) -> str:
  """"3 of 3": seeds of B without skip at 10 epochs whose attention
  layers' gradient norm is exactly 0 at every logged step."""
  rs = [r for r in studies.select(runs, NOSKIP) if r.done]
  return f"{sum(bool(r.value('value/layer_grads_zero')) for r in rs)} of " \
      f"{len(rs)}"


def _first_steps(runs, step, key) -> str:
  """The ``first_steps`` probe (runs.csv) at ``step`` (0: init): % of
  layer ``key``'s ReLU outputs > 0, or (``key=None``) the layers'
  gradient norm."""
  rows = next((r.probes["first_steps"] for r in studies.select(runs, NOSKIP)
               if "first_steps" in r.probes), None)
  if not rows:
    return "not probed"
  if key is None:
    return f"{rows[step]['grad_norm_layers']:.2g}"
  alive = rows[step]["alive"]
  return f"{100 * alive[key]:.1f}" if key in alive else "?"


FACTS = {
    "control_per_step": Span([sel("control", claims.CONTROL_STEP)],
                             claims.CPU_PER_STEP, ".0f"),
    # Every attention model, at 1 and 10 epochs.
    "attention_per_step": Span([sel(v, p) for v in "ABCDEFGH" for p in (
        "models", TEN_EPOCHS[v])], claims.CPU_PER_STEP, ".2g"),
    "gap": _gap, "noskip_zero": _noskip_zero,
    **{f"{v}_vs_noattn": ClaimEstimate(_vs_noattn(v, TEN_EPOCHS[v],
                                                  "noattn_10ep"))
       for v in "ACEG"},
    **{f"alive{s}_{k}": (lambda runs, _, s=s, k=k: _first_steps(runs, s, k))
       for s in (0, 1) for k in ("layer0", "layer1")},
    "first_step_grad": lambda runs, _: _first_steps(runs, 1, None),
    "branch_min": f"{claims.BRANCH_MIN:g}",
    # The single head against its covered BN twins A and C (10 epochs).
    **{f"single_vs_{label[0]}": ClaimEstimate(
        CLAIM["app.single_equal_D"].at(o))
       for label, o in CLAIM["app.single_equal_D"].covers[1:]},
    # What removing the attention branch costs (probes.branch_effect):
    # every 10-epoch setting runs.csv has it for (G and H: the BN / no-BN
    # pair at 4 layers, 16 heads; A, C, D, E and F were trained before the
    # probe was added, and only B was rerun for it).
    **{f"branch_{key}": Cell(sel(lab, TEN_EPOCHS[lab]), claims.BRANCH)
       for key, lab in (("B", "B"), ("separate", "B, separate optimizers"),
                        ("single", "single head"), ("G", "G"), ("H", "H"))},
}

STUDY = studies.Study(
    name="elementwise",
    title="Element-wise attention (Baco China et al. 2023): reproduction",
    paper="../shared/papers/elementwise-attention-bacochina2023.txt",
    spec=SPEC, parts=BASE, optional={"control": "part=control"}, focus=FOCUS,
    fields=("model.variant", "model.heads", "model.skip"),
    values={"collapsed": collapsed, "collapse_step": collapse_step,
            "layer_grads_zero": layer_grads_zero,
            "params": lambda run: float(studies.model_params(run.config))},
    series=("train/accuracy", "train/loss", "eval/accuracy"),
    probe=_probes.record, claims=claims.CLAIMS, tables=TABLES, plots=PLOTS,
    # Table 1's BN rows at 2 layers: one observation (our BN models train
    # and beat their no-BN twins) read by five claims.
    phenomena={"BN at 2 layers trains here (no collapse, no vanishing "
               "gradient, ahead of no-BN)": (
                   "t1.A_collapses", "t1.C_collapses", "t1.AC_grads_vanish",
                   "t1.bn_hurts_2layers", "t1.bn_hurts_2layers.CD")},
    facts=FACTS)


if __name__ == "__main__":
  sys.exit(studies.main(STUDY))
