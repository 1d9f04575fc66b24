r"""The element-wise attention study (Baco China et al. 2023): probes,
per-run values, what RESULTS.md shows.

  python experiments/elementwise/report.py --workdir=workdirs/elementwise   # export + report
  python experiments/elementwise/report.py --from-csv experiments/elementwise/runs.csv

``STUDY`` declares the parts (``sweep.py``): ``models`` (1 epoch x 2
seeds; B without skip x 3, its collapse being an event claim) and
``separate`` (1 epoch x 2 seeds), ``models_10ep`` (A, B, C at the paper's
10 epochs x 3 seeds), ``separate_10ep`` (B without skip on separate
optimizers, 10 epochs x 3 seeds) and the attention-free baseline
``noattn`` / ``noattn_10ep`` (the same recipe with no attention layer: the
Dense head on the pixels, 1 epoch x 2 seeds / 10 epochs x 3 seeds); the
opt-in ``control`` (the VGG control: ``CONTROL=1``); the focus parts
``df_10ep`` (D and F at 10 epochs x 3 seeds, paired with ``models_10ep``'s
B), ``e_10ep`` (E at 10 epochs x 3 seeds, paired with F), ``single_10ep``
and ``separate_skip_10ep`` (the appendix's single head and B on separate
optimizers at 10 epochs x 3 seeds, paired with D and B) and
``control_step`` (the control for 1 step x 3 seeds: its cost per train
step, for the Conclusion's "faster training"; no accuracy claim reads it).
The claims (the paper's numbers, metrics, selections, ``CLAIMS``) are data in
``claims.py``; the prose is ``RESULTS.md.tmpl``, written by hand; this
module declares, as data, the tables, plots and facts it names.

A run "collapsed" when it diverged (``kind=nonfinite``) or its final test
accuracy is at chance (< 15 %): the paper's "NaN" rows.

Probes (at export, from each finished run's checkpoint; ``--no_probes``
skips them): the paper's "last gradients average" (``paper_grad_avg``), how
far the attention weights moved from the loop's own init
(``studies.moved_from_init``), the statistics the paper prints of the
first head's x and y weights (``first_head_weights``), the accuracy lost
when the attention branch is removed (``branch_effect``), and for the lowest
seed of B without skip at 10 epochs, what its first optimizer steps do to
the ReLUs (``first_steps``, stored in ``runs.csv``).
"""

from __future__ import annotations

import functools
import json
import os
import sys

import numpy as np

from softattn import studies
from softattn.studies import render, stats
from softattn.studies.claims import (ACCURACY, Claim, Metric, Verdict, judge,
                                     pairs)
from softattn.studies.plotspec import Curves, Plot, Points
from softattn.studies.render import Cell, Table

HERE = os.path.dirname(os.path.abspath(__file__))
SPEC = os.path.relpath(os.path.join(HERE, "sweep.py"))
_probes = studies.load_module(os.path.join(HERE, "probes.py"))
first_steps, paper_grad_avg = _probes.first_steps, _probes.paper_grad_avg
first_head_weights, branch_effect = (_probes.first_head_weights,
                                      _probes.branch_effect)
claims = studies.load_module(os.path.join(HERE, "claims.py"))
PAPER_T1, PAPER_PARAMS = claims.PAPER_T1, claims.PAPER_PARAMS
PAPER_CIFAR_PARAMS, PAPER_MINUTES = (claims.PAPER_CIFAR_PARAMS,
                                     claims.PAPER_MINUTES)
PAPER_APPENDIX, NOATTN, COLLAPSED = (claims.PAPER_APPENDIX, claims.NOATTN,
                                     claims.COLLAPSED)
sel, LABELS, TEN_EPOCHS = claims.sel, claims.LABELS, claims.TEN_EPOCHS
BRANCH_MIN = claims.BRANCH_MIN
CLAIMS = claims.CLAIMS
BASE = {"models": "part=models,noskip_seeds=3", "separate": "part=separate",
        "models_10ep": "part=models,epochs=10,variants=ABC,extras=false,"
                       "seeds=3",
        "separate_10ep": "part=separate,epochs=10,skips=noskip,seeds=3",
        # The attention-free baseline: B's recipe with layers=0.
        "noattn": "part=models,variants=B,extras=false,layers=0",
        "noattn_10ep": "part=models,epochs=10,variants=B,extras=false,"
                       "layers=0,seeds=3"}
OPTIONAL = {"control": "part=control"}
FOCUS = {claims.LR01: "part=models,variants=B,extras=false,lr=0.1,seeds=3",
         "df_10ep": "part=models,epochs=10,variants=DF,extras=false,"
                    "seeds=3",
         "e_10ep": "part=models,epochs=10,variants=E,extras=false,seeds=3",
         # The appendix's single head and B on separate optimizers, at its
         # 10 epochs (compared with D and B at 10 epochs).
         "single_10ep": "part=models,epochs=10,variants=none,extras=single,"
                        "seeds=3",
         "separate_skip_10ep": "part=separate,epochs=10,skips=skip,seeds=3",
         # The control's cost per train step (1 step x 3 seeds, 0.05 epochs
         # = ceil(0.73) steps): what time.faster_than_control reads.
         claims.CONTROL_STEP: "part=control,control_epochs=0.05,"
                              "control_seeds=3"}


def collapsed(run) -> float | None:
  if run.diverged:
    return 1.0
  acc = run.value("final/accuracy")
  return None if acc is None else float(acc < 0.15)


def collapse_step(run) -> float | None:
  """The divergence step, or the first evaluation at chance."""
  if run.diverged:
    return float(run.step)
  if not collapsed(run):
    return None
  steps, acc = run.curve("accuracy", "eval")
  at = steps[acc < 0.15]
  return float(at[0]) if at.size else None


def first_layer_grad(run) -> float | None:
  keys = run.keys("grad_norm/layer0") + run.keys("grad_norm/conv1")
  if not run.done or not keys:
    return None
  _, v = run.curve(sorted(keys)[0])
  return float(v[-1]) if v.size else None


def layer_grads_zero(run) -> float | None:
  """1 when every logged attention-layer gradient norm is exactly 0."""
  keys = [k for k in run.keys("grad_norm/layer") if k.count("/") == 1]
  if not run.done or not keys:
    return None
  vals = np.concatenate([run.curve(k)[1] for k in keys])
  return float(vals.size > 0 and np.all(vals == 0))


_PARAMS: dict[str, int] = {}


def params(run) -> float:
  """Parameter count of the run's model (``jax.eval_shape``, cached)."""
  key = json.dumps(run.config.model.to_dict(), sort_keys=True, default=repr)
  if key not in _PARAMS:
    _PARAMS[key] = studies.param_count(
        studies.build_abstract(run.config)[1])
  return float(_PARAMS[key])


def probe(runs, cache_dir):
  del cache_dir
  noskip = None
  # The control's timing runs stop after 1 step: no probe's quantity (the
  # paper's trained-model numbers) means anything there, and each would
  # cost another control step (~5 CPU-minutes).
  runs = [r for r in runs if r.part != claims.CONTROL_STEP]
  for r, state in studies.probed(runs):
    g = paper_grad_avg(r, state)
    if g is not None:
      r.metrics["value/grad_avg"] = g
      r.metrics["value/abs_grad_avg"] = abs(g)
      # An exact 0 (a dead first layer) reads as 1e-30: finite for the test.
      r.metrics["value/log10_abs_grad_avg"] = float(
          np.log10(max(abs(g), 1e-30)))
    w = first_head_weights(state["params"])
    if w is not None:
      r.metrics["value/x_w_std"] = w["x_std"]
      r.metrics["value/y_over_x_std"] = w["y_std"] / w["x_std"]
      r.metrics["value/w_within_band"] = w["within_band"]
    if r.config.model_name == "elementwise":
      moved = studies.moved_from_init(r.config, state, r"(x|y)_weights")
      if moved is not None:
        r.metrics["value/attn_moved"] = moved
      effect = branch_effect(r, state)
      if effect is not None:
        r.metrics["value/branch_effect"] = effect
    if (r.part == "separate_10ep" and noskip is None
        and not r.get("model.skip")):
      noskip = r
      x, y = studies.load_images(r.config, r.config.data.train_split, 4096)
      r.probes["first_steps"] = first_steps(r.config, x, y)


def collapse_cell(runs, where):
  rs = [r for r in studies.select(runs, where) if r.done or r.diverged]
  if not rs:
    return render.NOT_RUN
  k = [r for r in rs if COLLAPSED.of(r)]
  at = sorted(int(r.value("value/collapse_step")) for r in k
              if r.value("value/collapse_step") is not None)
  how = "diverged at step" if any(r.diverged for r in k) else \
      "at chance from the eval at step"
  return f"{len(k)}/{len(rs)}" + (f" ({how} {', '.join(map(str, at))})"
                                  if at else "")


@functools.cache
def cifar_count(label) -> int:
  """Our parameter count of the paper's CIFAR-10 model ``label``, from its
  declared config (``jax.eval_shape``; no data, no run)."""
  from softattn.sweep import declaration  # pylint: disable=g-import-not-at-top
  cfg = declaration.load(f"{SPEC}:{PAPER_CIFAR_PARAMS[label][1]}").runs[0]
  return studies.param_count(studies.build_abstract(cfg.config)[1])


def _our_count(runs, label) -> int | None:
  """From ``label``'s runs (Fashion-MNIST), or its declared config (the
  CIFAR-10 rows, not run)."""
  if label in PAPER_CIFAR_PARAMS:
    return cifar_count(label)
  p = next((r.value("value/params") for r in studies.select(runs, sel(label))
            if r.value("value/params")), None)
  return int(p) if p else None


def _params_row(label):
  paper = (PAPER_CIFAR_PARAMS[label][0] if label in PAPER_CIFAR_PARAMS
           else PAPER_PARAMS[label])

  def diff(runs):
    p = _our_count(runs, label)
    return "-" if not p else "exact" if p == paper else f"{p - paper:+,}"
  return (label, [f"{paper:,}", lambda runs: f"{p:,}" if (
      p := _our_count(runs, label)) else "-", diff])


def _time_ratio(runs, v) -> stats.Summary:
  """Our per-seed core-seconds ratio v / B at 10 epochs (description)."""
  claim = next(c for c in CLAIMS if c.id == f"time.{v}_over_B")
  return studies.summarize(pairs(claim, runs)[0])


def _ratio_cell(lab):
  if lab == "B" or lab not in TEN_EPOCHS:
    return "-"

  def text(runs):
    r = _time_ratio(runs, lab)
    return "-" if r.mean is None else (
        f"{r.mean:.3g}" + (f" ± {r.half:.2g}" if r.half else "") +
        f" (n={r.n})")
  return text


def _paper_t1(lab, i):
  return ("-" if lab not in PAPER_T1 else "NaN" if PAPER_T1[lab][i] is None
          else PAPER_T1[lab][i])


def _ten(lab, what):
  """A 10-epoch cell of ``lab`` ("-" where it has no 10-epoch part)."""
  if lab not in TEN_EPOCHS:
    return "-"
  where = sel(lab, TEN_EPOCHS[lab])
  return Cell(where, ACCURACY) if what == "acc" else \
      (lambda runs: collapse_cell(runs, where))


def _layer(lab, column, **fmt):
  return "-" if lab == NOATTN else Cell(
      sel(lab), Metric("", column, digits=fmt.pop("digits", 3)), fmt)


MINUTES = Metric("", "core_seconds", 1 / 60, digits=1)

TABLES = {
    "params": Table(["model", "paper", "ours", "ours - paper"], [
        _params_row(lab) for lab in [*LABELS, "single head",
                                     *PAPER_CIFAR_PARAMS]
        if lab in PAPER_PARAMS or lab in PAPER_CIFAR_PARAMS]),
    "t1": Table(
        ["model", "paper acc %", "paper grad avg", "ours 1 epoch",
         "collapsed (1 epoch)", "ours 10 epochs", "collapsed (10 epochs)",
         "grad avg (1 epoch)", "moved (1 epoch)"],
        [(lab, [_paper_t1(lab, 1), _paper_t1(lab, 2),
                Cell(sel(lab), ACCURACY),
                lambda runs, w=sel(lab): collapse_cell(runs, w),
                _ten(lab, "acc"), _ten(lab, "collapsed"),
                _layer(lab, "value/grad_avg", digits=2, sci=True),
                _layer(lab, "value/attn_moved")]) for lab in LABELS]),
    "app": Table(
        ["setting", "paper", "ours 1 epoch", "collapsed", "ours 10 epochs",
         "collapsed (10 epochs)"],
        [(lab, [PAPER_APPENDIX[lab], Cell(sel(lab), ACCURACY),
                lambda runs, w=sel(lab): collapse_cell(runs, w),
                _ten(lab, "acc"), _ten(lab, "collapsed")])
         for lab in PAPER_APPENDIX]),
    "time": Table(
        ["model", "paper min", "paper / B", "ours 10 epochs",
         "ours / B (10 epochs)", "ours 1 epoch"],
        [(lab, [PAPER_MINUTES[lab],
                f"{PAPER_MINUTES[lab] / PAPER_MINUTES['B']:.3g}",
                Cell(sel(lab, TEN_EPOCHS[lab]), MINUTES)
                if lab in TEN_EPOCHS else "-", _ratio_cell(lab),
                Cell(sel(lab, "models"), MINUTES)])
         for lab in PAPER_MINUTES]),
}

TRAIN_LOSS = Metric("final train loss", "final/train_loss", digits=3)
ONE_EPOCH = [*"ABCDEFGH", NOATTN]


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


PLOTS = {
    "accuracy": _curves_plot(
        "train accuracy, 1 epoch", dict.fromkeys(ONE_EPOCH, "models"),
        "accuracy", "train", "train accuracy % (mean, 95 % band)", ACCURACY),
    "loss": _curves_plot(
        "train loss, 1 epoch", dict.fromkeys(ONE_EPOCH, "models"), "loss",
        "train", "train loss", TRAIN_LOSS, logy=True),
    "accuracy_10ep": _curves_plot(
        "test accuracy, 10 epochs", TEN_EPOCHS, "accuracy", "eval",
        "test accuracy % (mean, 95 % band)", ACCURACY,
        ends_without=("B, no skip, separate optimizers",)),
}


def _design(runs, part, where=None) -> str:
  """"1 epoch x 2 seeds": a part's (or its subset ``where``'s) budget."""
  return render.design(runs, {"part": part, **(where or {})}, length="epochs")


def _ten_epoch_design(runs, _=None) -> str:
  """"10 epochs x 3 seeds for A-C (`models_10ep`), D and F (`df_10ep`)":
  Table 1's 10-epoch models grouped by part, parts grouped by design."""
  parts: dict[str, list[str]] = {}
  for lab, part in TEN_EPOCHS.items():
    if lab in PAPER_T1:
      parts.setdefault(part, []).append(lab)
  designs: dict[str, list[str]] = {}
  for part, labs in parts.items():
    names = (f"{labs[0]}-{labs[-1]}" if len(labs) > 2 else
             " and ".join(labs))
    designs.setdefault(_design(runs, part), []).append(
        f"{names} (`{part}`)")
  return "; ".join(f"{d} for {', '.join(groups)}"
                   for d, groups in designs.items())


def _minutes(runs, _) -> str:
  """Measured CPU core-minutes of the control runs (runs.csv)."""
  got = [r.core_seconds for r in studies.select(runs, {"part": "control"})
         if r.done and r.core_seconds]
  return (f"{sum(got) / 60:.0f} CPU core-minutes for {len(got)} run(s)"
          if got else "no finished run in runs.csv")


def _per_step(runs, where) -> list[float]:
  """CPU core-seconds per train step of the finished runs ``where``."""
  got = (claims.CPU_PER_STEP.of(r) for r in studies.select(runs, where)
         if r.done)
  return [v for v in got if v is not None]


def _control_step(runs, _) -> str:
  """"1 train step x 3 seeds, 480-520 CPU core-seconds per step": the
  control's timing runs (``control_step``)."""
  where = sel("control", claims.CONTROL_STEP)
  per = _per_step(runs, where)
  if not per:
    return "no finished run in runs.csv"
  steps = "/".join(str(s) for s in sorted(
      {int(r.step) for r in studies.select(runs, where) if r.done}))
  return (f"{steps} train step x {len(per)} seeds, {min(per):.0f}-"
          f"{max(per):.0f} CPU core-seconds per step")


def _attention_per_step(runs, _) -> str:
  """"2.9-14": the range of the attention models' (A-H, 1 and 10 epochs)
  CPU core-seconds per train step."""
  per = [v for lab in "ABCDEFGH" for part in {"models", TEN_EPOCHS.get(
      lab, "models")} for v in _per_step(runs, sel(lab, part))]
  return f"{min(per):.2g}-{max(per):.2g}" if per else "?"


def _vs_noattn(runs, label, part) -> Verdict:
  """``label`` - attention-free, paired by seed (the rule's estimate and
  interval; not a declared claim)."""
  noattn = "noattn_10ep" if part.endswith("10ep") else "noattn"
  return judge(Claim("_", "", "", "", ACCURACY, sel(label, part),
                     sel(NOATTN, noattn), ">"), runs)


def _gap(runs, _) -> str:
  """The largest |no-BN model - attention-free| of a seed pair at 1 epoch."""
  gaps = [abs(d) for v in "BDFH" for d in pairs(Claim(
      "_", "", "", "", ACCURACY, sel(v), sel(NOATTN)), runs)[0]]
  return f"{max(gaps):.2g}" if gaps else "?"


def _bn_vs_noattn(runs, _) -> str:
  """"A +3.74 [+3.16, +4.31]; ...": the BN models against the
  attention-free baseline at 10 epochs."""
  return "; ".join(f"{v} {render.estimate(_vs_noattn(runs, v, TEN_EPOCHS[v]))}"
                   for v in "ACE")


def _times(runs, _) -> str:
  """"A 1.21 (paper 1); ...": our core-second ratios to B at 10 epochs."""
  got = {v: _time_ratio(runs, v) for v in TEN_EPOCHS
         if v in PAPER_MINUTES and v != "B"}
  return "; ".join(f"{v} {t.mean:.3g} (paper "
                   f"{PAPER_MINUTES[v] / PAPER_MINUTES['B']:.3g})"
                   for v, t in got.items() if t.mean is not None) or "none"


NOSKIP = sel("B, no skip, separate optimizers", "separate_10ep")


def _noskip_zero(runs, _) -> str:
  """"3 of 3": seeds of B without skip at 10 epochs whose attention
  layers' gradient norm is exactly 0 at every logged step."""
  rs = [r for r in studies.select(runs, NOSKIP) if r.done]
  return f"{sum(bool(r.value('value/layer_grads_zero')) for r in rs)} of " \
      f"{len(rs)}"


def _first_steps(runs, _) -> str:
  """The ``first_steps`` probe (stored in runs.csv): the share of each
  layer's ReLU outputs > 0 at init and after one Adam step."""
  rows = next((r.probes["first_steps"] for r in studies.select(runs, NOSKIP)
               if "first_steps" in r.probes), None)
  if not rows:
    return "not probed (export with probes)"
  init, one = rows[0], rows[1]
  return ("at init " + ", ".join(
      f"{100 * init['alive'][k]:.1f} % of {k}'s ReLU outputs are > 0"
      for k in sorted(init["alive"])) + "; after one Adam step " +
          ", ".join(f"{100 * one['alive'][k]:.1f} %"
                    for k in sorted(one["alive"])) +
          f" (layer gradient norm {one['grad_norm_layers']:.2g})")


FACTS = {
    "models": lambda runs, _: _design(runs, "models", {"model.skip": True}),
    "models_noskip": lambda runs, _: _design(runs, "models",
                                             {"model.skip": False}),
    "ten_epochs": _ten_epoch_design,
    # One part's budget, named as the part.
    **{p: (lambda runs, _, p=p: _design(runs, p)) for p in (
        "separate_10ep", "single_10ep", "separate_skip_10ep", "noattn",
        "noattn_10ep", "control")},
    "control_minutes": _minutes,
    "control_step": _control_step,
    "attention_per_step": _attention_per_step,
    "short": lambda runs, _: _design(runs, "models", {
        "model.skip": True}).split(" x ")[0],
    "gap": _gap, "bn_vs_noattn": _bn_vs_noattn, "times": _times,
    "noskip_zero": _noskip_zero, "first_steps": _first_steps,
    "branch_min": lambda runs, _: f"{BRANCH_MIN:g}",
    # What removing the attention branch costs (probes.branch_effect).
    **{f"branch_{key}": (lambda runs, _, w=sel(lab, part): render.cell(
        runs, w, claims.BRANCH)) for key, lab, part in (
            ("B", "B", "models_10ep"),
            ("separate", "B, separate optimizers", "separate_skip_10ep"),
            ("single", "single head", "single_10ep"))},
}

STUDY = studies.Study(
    name="elementwise",
    title="Element-wise attention (Baco China et al. 2023): reproduction",
    paper="../shared/papers/elementwise-attention-bacochina2023.txt",
    spec=SPEC, parts=BASE, optional=OPTIONAL, focus=FOCUS,
    fields=("model.variant", "model.heads", "model.skip"),
    values={"collapsed": collapsed, "collapse_step": collapse_step,
            "first_layer_grad": first_layer_grad,
            "layer_grads_zero": layer_grads_zero, "params": params},
    series=("train/accuracy", "train/loss", "eval/accuracy"),
    probe=probe, claims=CLAIMS, template=os.path.join(HERE, "RESULTS.md.tmpl"),
    tables=TABLES, plots=PLOTS, facts=FACTS)


if __name__ == "__main__":
  sys.exit(studies.main(STUDY))
