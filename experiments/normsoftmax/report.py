r"""The NormSoftmax study (Jiang et al. 2023): the per-run values, tables,
plots and facts its hand-written ``RESULTS.md.tmpl`` names, as data.

  python experiments/normsoftmax/report.py --workdir=workdirs/normsoftmax   # export + report
  python experiments/normsoftmax/report.py --from-csv experiments/normsoftmax/runs.csv
"""

from __future__ import annotations

import os
import sys

import numpy as np

import softattn_studies as studies
from softattn.data import datasets
from softattn_studies.claims import ACCURACY, Metric
from softattn_studies.plotspec import Curves, Paired, Plot, Points
from softattn_studies.render import Cell, Table
from softattn.sweep import declaration

HERE = os.path.dirname(os.path.abspath(__file__))
claims = studies.load_module(os.path.join(HERE, "claims.py"))
# Nearly every cell and curve is a selection: short names keep them one line.
sel, long, SM, INF = claims.sel, claims.long, claims.SM, claims.INF
MAIN = claims.study.MAIN    # softmax, nsm-sqrtd, nsm-inf
FOCUS, FOCUS_STEPS = claims.FOCUS, claims.FOCUS_STEPS
SHORT = {SM: "sm", claims.SQ: "nsm-sqrtd", INF: "nsm-inf",
         "normsoftmax_learnable": "f1 (learnable w)",
         "normsoftmax_inverse(gamma=sqrt_d)": "f2, gamma=sqrt(d)",
         "normsoftmax(gamma=1)": "nsm-1",
         "normsoftmax(gamma=0.5*sqrt_d)": "nsm-sqrt(d)/2",
         "normsoftmax(gamma=2*sqrt_d)": "nsm-2sqrt(d)",
         "logitnorm": "logitnorm (tau=n^-1/2)"}
MODEL = declaration.load(claims.SPEC).runs[0].config.model
D = int(MODEL.width // MODEL.num_heads)   # d, the attention head width
# The classes of the `loss` parts' data (runs.csv has no config).
K = datasets.known(declaration.load(f"{claims.SPEC}:part=loss").runs[0]
                   .config.data.name).num_classes


def decay_shrink(run) -> float | None:
  """Fraction by which decoupled weight decay alone shrinks a weight over
  the run's schedule: ``1 - prod(1 - lr_t * wd)``."""
  from softattn import optim  # pylint: disable=g-import-not-at-top
  cfg, steps = run.config, run.total_steps
  wd = float(cfg.optimizer.get("weight_decay") or 0.0)
  if not steps or cfg.optimizer.name != "adamw":
    return None
  sched = optim.make_schedule(cfg.schedule, steps)
  lrs = np.asarray([float(sched(t)) for t in range(int(steps))])
  return float(1.0 - np.prod(1.0 - lrs * wd))


def std_depth_order(run):
  """1 when the mean softmax-input std over the run falls with depth from
  the second layer on (Fig. 2a's "except L1"), else 0."""
  means = [v.mean() for v in studies.layer_curves(run, "score_std", 2)][1:]
  return float(np.all(np.diff(means) < 0)) if len(means) > 1 else None


def _top_cap(k: int) -> float:
  """The largest softmax probability of a unit-variance, zero-mean row of
  ``k`` logits (one at sqrt(k-1), the rest at -1/sqrt(k-1))."""
  a, b = np.sqrt(k - 1.0), -1.0 / np.sqrt(k - 1.0)
  return float(1.0 / (1.0 + (k - 1) * np.exp(b - a)))


def _mean_entropy(runs, where):
  """(steps, attention entropy averaged over every layer of the finished
  runs ``where`` selects: one model, so the mean over layers, then seeds)
  on the steps they all logged."""
  curves = [r.curve(k) for r in studies.select(runs, where) if r.done
            for k in r.keys("diag/", "/attn_entropy")]
  if not curves:
    return [], []
  common = sorted(set.intersection(*[set(s.tolist()) for s, _ in curves]))
  return common, [np.mean([v[s == t][0] for s, v in curves]) for t in common]


def entropy_cross(runs, _verdicts) -> str:
  """"step 170": the first logged step of the 1200-step runs from which
  NSM-inf's mean attention entropy stays above softmax's (Fig. 4's text
  against its caption, over one run's course)."""
  steps, sm = _mean_entropy(runs, long(SM))
  steps_inf, inf = _mean_entropy(runs, long(INF))
  if not steps or steps != steps_inf:
    return "no common logged step"
  above = np.asarray(inf) > np.asarray(sm)
  if not above[-1]:
    return "no step (NSM-inf's entropy ends below softmax's)"
  first = len(above) - int(np.argmin(above[::-1])) if not above.all() else 0
  return f"step {int(steps[first])}"


acc = lambda where: Cell(where, ACCURACY)
TABLES = {
    "accel": Table(["budget (steps)", "sm", "nsm-sqrtd", "nsm-inf"], [
        (str(b), [acc(sel(n, b)) for n in MAIN]) for b in claims.BUDGETS
    ] + [(str(FOCUS_STEPS), [acc(long(n)) for n in MAIN])]),
    "wd": Table(["", "paper with wd", "paper no wd", "ours wd 0.1",
                 "ours no wd", "ours no warmup", "ours SGDM"],
                [(SHORT[n], [claims.PAPER_T1[n], claims.PAPER_NO_WD[n],
                             acc(sel(n)), acc(sel(n, wd=0.0)),
                             acc(sel(n, part=claims.NO_WARMUP)),
                             acc(sel(n, part=claims.SGDM))])
                 for n in (SM, INF)]),
    "t1": Table(["variant", "paper (100 epochs)", "ours"],
                [(SHORT[n], [x, acc(sel(n))])
                 for n, x in claims.PAPER_T1.items()]),
    "t5": Table(["sm scaling factor", "sm", "nsm gamma", "nsm"],
                [(row[0] or "-", ["-" if x is None else x if isinstance(
                    x, str) else f"{x:.2f}" for x in row[1:]])
                 for row in claims.PAPER_T5]),
    "loss": Table(["loss", "paper R50 (20/45/90/180 ep)", "ours, `loss` parts",
                   "ours, 2-epoch parts"],
                  [(f"{lab} cross-entropy", [
                      " / ".join(f"{x:.2f}" for x in paper),
                      acc(claims.lsel(lab)), acc(claims.lsel(lab, True))])
                   for lab, paper in claims.PAPER_LOSS.items()]),
    "diag": Table(["", "steps", "std end / first", "std peak / end",
                   "entropy max - min", "entropy at end", "step ms"],
                  [(f"{SHORT[n]}, {where['part']}", [
                      str(where["total_steps"]),
                      *[Cell(where, m) for m in (
                          claims.STD_GROWTH, claims.STD_FALL,
                          claims.ENTROPY_RANGE, claims.ENTROPY_END,
                          studies.STEP_MS)]])
                   # Every budget: four diagnostics claims cover them all.
                   for n in MAIN for where in (
                       *[sel(n, b) for b in claims.BUDGETS], long(n))]),
}


def _diag_plot(title, metric, ylabel, qk):
  """Per layer, one panel per normalizer, on the focus runs; ``qk``:
  softmax's recorded std (after 1/sqrt(d)) times sqrt(d), so that every
  panel shows std(QK^T), with sqrt(d) drawn."""
  key = lambda i: (f"diag/Transformer/encoderblock_{i}/"
                   f"MultiHeadDotProductAttention_0/{metric}")
  return Plot(title, [Curves(
      f"{SHORT[n]} ({FOCUS}, {FOCUS_STEPS} steps)", ylabel,
      {f"encoderblock_{i}": (long(n), key(i)) for i in range(MODEL.depth)},
      scale=np.sqrt(D) if qk and n == SM else 1.0, logy=qk,
      hline=(f"sqrt(d) = {np.sqrt(D):g} (d = {D})", np.sqrt(D)) if qk
      else None) for n in MAIN], size=(4.4, 3.4))


# Table 4's rows (claims.lsel's labels) as the loss plot names them; the
# attention plots' "sm" and "nsm-inf" keep their colours.
LOSS_LABEL = {"sm": "sm", "nsm-inf": "nsm-inf", "nsm-1": "nsm-1",
              "lognorm": "LogitNorm"}
PLOTS = {
    "acceleration": Plot("accuracy vs budget", [
        Points("test accuracy by budget", ACCURACY,
               "training budget (steps of batch 128)",
               {SHORT[n]: [(b, sel(n, b)) for b in claims.BUDGETS] +
                [(FOCUS_STEPS, long(n))] for n in MAIN},
               logx=True, dodge=0.12, xticks=(*claims.BUDGETS, FOCUS_STEPS)),
        Paired("paired by seed at every budget, then each seed's mean over "
               "them (what the test reads): NSM - sm", {
                   "nsm-inf - sm": "accel.inf_gt_sm",
                   "nsm-sqrtd - sm": "accel.sqrt_gt_sm"},
               "accuracy points (NSM - sm)")], size=(5.5, 4.0)),
    # Table 4's rows at both lengths, and its claims' paired differences.
    "loss": Plot("cross-entropy losses (Table 4 analog)", [
        Points("test accuracy by loss and length", ACCURACY,
               "training length (steps)",
               {LOSS_LABEL[x]: [(claims.LOSS_STEPS, claims.lsel(x)),
                                (claims.LOSS_2EP_STEPS,
                                 claims.lsel(x, long_=True))]
                for x in LOSS_LABEL}, logx=True, dodge=0.1,
               xticks=(claims.LOSS_STEPS, claims.LOSS_2EP_STEPS)),
        Paired("paired by seed at each length, then each seed's mean", {
            "nsm-inf - sm": "loss.inf_gt_sm",
            "nsm-inf - nsm-1": "loss.inf_gt_nsm1",
            "nsm-inf - LogitNorm": "loss.gt_logitnorm"},
               "accuracy points")], size=(5.5, 4.0)),
    "score_std": _diag_plot("std of QK^T per layer", "score_std",
                            "std of QK^T (softmax: recorded x sqrt(d))", True),
    "entropy": _diag_plot("attention entropy per layer", "attn_entropy",
                          "attention entropy (nats)", False),
}

FACTS = {
    "shrink": Cell(sel(SM), Metric("decay", "value/decay_shrink", 100.0,
                                   digits=1)),
    "classes": str(K), "top_cap": f"{_top_cap(K):.2f}",
    "top_cap_1000": f"{1 - _top_cap(1000):.0e}",
    "entropy_cross": entropy_cross,
}

TWO_EPOCHS = f"subset=focus,steps={claims.LOSS_2EP_STEPS}"
STUDY = studies.Study(
    name="normsoftmax",
    title="NormSoftmax (Jiang et al. 2023): reproduction at reduced scale",
    paper="../shared/papers/normsoftmax-jiang2023.txt", spec=claims.SPEC,
    parts={p: f"part={p}" for p in claims.study.PARTS},
    focus={FOCUS: f"part=attention,subset=focus,steps={FOCUS_STEPS}",
           # Table 4's four rows at 2 epochs (claims.LOSS_LONG).
           "loss_2ep": f"part=loss,{TWO_EPOCHS}",
           "loss_softmax_2ep": f"part=loss_softmax,{TWO_EPOCHS}",
           "loss_nsm1_2ep": f"part=loss,{TWO_EPOCHS},gamma=1",
           "loss_logitnorm_2ep": f"part=loss_logitnorm,{TWO_EPOCHS}",
           **{p: f"part=attention,subset={p}"
              for p in (claims.NO_WARMUP, claims.SGDM)}},
    fields=("model.normalizer", "total_steps", "optimizer.weight_decay",
            "loss.gamma"),
    values={"decay_shrink": decay_shrink,
            # Per layer (curves of 2+ points), mean over layers.
            **{name: studies.per_layer(metric, fn, 2) for name, metric, fn in (
                ("entropy_range", "attn_entropy", lambda v: v.max() - v.min()),
                ("entropy_end", "attn_entropy", lambda v: v[-1]),
                ("std_growth", "score_std",
                 lambda v: v[-1] / v[0] if v[0] > 0 else None),
                ("std_fall", "score_std",
                 lambda v: v.max() / v[-1] if v[-1] > 0 else None))},
            "std_depth_order": std_depth_order, "step_ms": studies.step_ms},
    series=("train/diag/*score_std", "train/diag/*attn_entropy"),
    claims=claims.CLAIMS, tables=TABLES, plots=PLOTS, facts=FACTS)


if __name__ == "__main__":
  sys.exit(studies.main(STUDY))
