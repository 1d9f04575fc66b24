r"""The element-wise attention study's claims as data (Baco China et al. 2023):
the paper's constants with their refs, the metrics and requirements the
claims use, the selection of a setting by its Table 1 / appendix label
(``sel``, ``LABELS``, ``TEN_EPOCHS``), ``CLAIMS``, and the budget each is
judged at (``BUDGET_TABLE``, with the paper's wording). The "~ B" claims
are gated on sanity claims (``kind=SANITY``, counted apart from the
paper's): without BN each head is x * softmax_row * softmax_col ~ x / 784,
so B, D, F and H may be the Dense head on the pixels, equal by
construction.
"""

from __future__ import annotations

import os

import softattn_studies as studies
from softattn_studies.claims import (ACCURACY, SANITY, Budget, Claim,
                                     Metric, Requirement, paper_fraction,
                                     precondition, unavailable, with_budgets)
from softattn.models.elementwise import PAPER_COUNTS, PRESETS

HERE = os.path.dirname(os.path.abspath(__file__))
_probes = studies.load_module(os.path.join(HERE, "probes.py"))

# Baco China et al. 2023, Table 1 (Fashion-MNIST, 10 epochs):
# (loss, accuracy %, last gradients average); None = NaN (collapsed).
PAPER_T1 = {"control": (4.5083, 88.29, 0.002),
            "A": (34.539, None, 0.0), "B": (7.5913, 81.46, 0.000029),
            "C": (34.5388, None, 0.0), "D": (7.4856, 81.66, 0.000001),
            "E": (9.8522, 77.09, 0.000032), "F": (7.4806, 81.33, 0.000004),
            "G": (10.0345, 76.37, 0.000055), "H": (7.7475, 80.79, -0.000006)}
PAPER_PARAMS = {**PAPER_COUNTS, "control": 929_510, "single head": 11_132}
# Sec. 2.2: the CIFAR-10 models (32x32x3), counted from their declared
# configs (no run needed): label -> (paper count, sweep args).
PAPER_CIFAR_PARAMS = {
    "CIFAR-10: 8 heads x 4 layers, no BN": (
        506_560, "part=models,scale=full,dataset=cifar10,variants=F,"
                 "extras=false"),
    "CIFAR-10: control": (961_310, "part=control,scale=full,dataset=cifar10")}
# Eq. 8 for the CIFAR-10 model: per layer 3*32*32 inputs x 2 x 8 heads
# attention weights + a 3x3 conv from 8*3 to 3 channels with bias (Eq. 1 and
# the bias, as in every Fashion-MNIST count: B = 2 * (784*16 + 8*9 + 1) +
# 7,850 = 33,084), 4 layers, then Dense(3072 -> 10) with bias. The
# parameter table's "ours" (counted from the declared config) equals it.
CIFAR_EQ8 = (4 * (3 * 32 * 32 * 2 * 8 + 8 * 3 * 3 * 9 + 3)
             + 3 * 32 * 32 * 10 + 10)
# Sec. 3: training time of 10 epochs on a Tesla T4, minutes.
PAPER_MINUTES = {"A": 35, "B": 35, "C": 70, "D": 70, "E": 90, "F": 90,
                 "G": 180, "H": 180}
NOATTN = "attention-free"
PAPER_APPENDIX = {
    "single head": "80.09 % (loss 8.3712)",
    "B, separate optimizers": "CIFAR-10 only (8 heads 4 layers: 43.10 %)",
    "B, no skip, separate optimizers": "82.13 % (loss 7.4980)",
    "B, no skip, one optimizer": "\"too unstable\" (not reported)",
}

COLLAPSED = Metric("collapsed", "value/collapsed")
PARAMS = Metric("parameters", "value/params", digits=0)
GRAD_AVG = Metric("|last gradients average|", "value/abs_grad_avg",
                  digits=2)
# log10 of it: the paper's collapsed models print 0 and "oscillated between
# 1e-12 and 9e-11", a scale a t test on the raw value cannot see.
LOG_GRAD = Metric("log10 |last gradients average|",
                  "value/log10_abs_grad_avg", digits=3)
W_BAND = Metric(f"share of the first head's x/y weights within "
                f"±{_probes.WEIGHT_BAND:g}", "value/w_within_band", digits=3)
Y_OVER_X_STD = Metric("std(y weights) / std(x weights), first head",
                      "value/y_over_x_std", digits=3)
X_STD = Metric("std of the first head's x weights", "value/x_w_std",
               digits=4)
# CPU core-seconds, not wall_s: the 10-epoch runs shared 2 cores
# (--parallel=2), so a run's wall time depends on what ran beside it (C's
# seed 2 took ~55 % of its seeds 0-1's wall time at equal core-seconds).
CPU_TIME = Metric("CPU core-seconds of the run", "core_seconds", digits=3)
# The same per train step, for runs of different lengths: a run's total
# (compilation, data loading and evaluations included) over its steps.
CPU_PER_STEP = Metric("CPU core-seconds per train step (run total / steps)",
                      "core_seconds", digits=3, per="step")
# The control's timing part (report.py's focus part): 1 step x 3 seeds, the
# paper's batch and recipe. Its runs are 1 step into training, so only the
# timing claim selects them (the control's accuracy claims read
# part=control, gated at 10 epochs).
CONTROL_STEP = "control_step"
# B on one Adam at lr 0.1 for every weight (the Conclusion's collapse).
LR01 = "lr01_1ep"
# A 1-step run's core-seconds also hold its compilation and one test-set
# evaluation (10,000 images forward: ~0.8 of a 4096-image train step, as a
# forward pass is about a third of a train step), which the attention runs
# amortise over 15-147 steps: so ours overstates the control's per-step cost
# by up to ~2x, and "faster" needs a ratio above that.
CONTROL_OVERHEAD = 2.0
END = paper_fraction(1.0, 10, "Table 1 compares end points after 10 epochs")
# The control's Table 1 claims: the same gate, with why it stays shut (1
# epoch: 42 min alone, 70 CPU-minutes; sweep.py). A 10-epoch control part,
# once declared and run, meets the gate.
CONTROL_END = Requirement(
    "not run here (CPU budget: the 10-epoch control takes ~7 h on 2 cores; "
    "the opt-in `CONTROL=1` part declares 1 epoch and has no finished run "
    "in runs.csv); Table 1 compares end points after 10 epochs", "epochs",
    10.0)
# Only for claims on the weights' own statistics (at the N(0, 0.02) init
# they already match the paper's numbers). It no longer gates the "~ B"
# claims: B's weights move 43 % in 1 epoch while its attention branch stays
# inert, so the sanity preconditions below replace it there.
MOVED = Requirement("the attention weights must have moved from their "
                    "init (relative change of the x/y weights >= 10 %; "
                    "below it their statistics are the init's)",
                    "value/attn_moved", 0.10)


# Accuracy lost when the attention branch is removed (probes.branch_effect).
BRANCH = Metric("test accuracy lost with the attention branch removed",
                "value/branch_effect", 100.0, unit=" points")
# Below half a point, the "~ B" claims' 1-point margin cannot separate
# settings whose attention differs.
BRANCH_MIN = 0.5


def beats_noattn(*models, branch=False) -> tuple[Requirement, ...]:
  """Preconditions of a "~" claim on no-BN models: each model must beat the
  attention-free baseline, and (``branch``) B's attention branch must carry
  accuracy; else the two sides agree by construction."""
  return (precondition(
      "sanity.B_branch_matters", "the attention branch must carry B's "
      "accuracy: without it, settings that differ only in their attention "
      "(heads, layers) agree by construction"),) * branch + tuple(precondition(
          f"sanity.{m}_beats_noattn", f"{m} must beat the attention-free "
          "baseline: without it its attention branch is inert and the two "
          "sides are both the Dense head on the pixels, equal by "
          "construction") for m in models)


def sel(label, part="models"):
  """Selection of a setting by its Table 1 / appendix label."""
  if label == "control":
    return {"part": "control" if part == "models" else part}
  if label == NOATTN:
    return {"part": {"models": "noattn", "models_10ep": "noattn_10ep"}.get(
        part, part), "model.layers": 0}
  if label == "single head":
    return {"part": part, "model.heads": 1}
  if label == "B, no skip, one optimizer":
    return {"part": part, "model.variant": "B", "model.skip": False}
  if label.startswith("B, ") and "separate" in label:
    return {"part": "separate" if part == "models" else part,
            "model.skip": "no skip" not in label}
  return {"part": part, "model.variant": label, "model.skip": True,
          "model.heads": PRESETS[label][0]}


LABELS = ["control", *"ABCDEFGH", NOATTN]
# Every setting run for the paper's 10 epochs, and the part that holds it.
TEN_EPOCHS = {"A": "models_10ep", "B": "models_10ep", "C": "models_10ep",
              "D": "df_10ep", "E": "e_10ep", "F": "df_10ep",
              # Declared before its runs finished, none of them read.
              "G": "gh_10ep", "H": "gh_10ep",
              "B, no skip, separate optimizers": "separate_10ep",
              "single head": "single_10ep",
              "B, separate optimizers": "separate_skip_10ep",
              NOATTN: "noattn_10ep"}


def _sanity() -> list[Claim]:
  """B, D, F, H against the attention-free baseline at 10 epochs: not the
  paper's claims, but what its "~ B" claims presuppose (Sec. 3 itself
  admits B's accuracy "might not come from the attention layer, but rather
  from the feedforward layer")."""
  ref = ("none (sanity check; Sec. 3: \"might not come from the "
         "attention layer\")")
  return [Claim(
      f"sanity.{v}_beats_noattn", f"{v}'s attention layers add to its "
      f"accuracy: {v} > the attention-free baseline (same recipe, no "
      "attention layer: the Dense head on the pixels; 10 epochs)",
      ref, f"{v}: {PAPER_T1[v][1]}", ACCURACY, sel(v, TEN_EPOCHS[v]),
      sel(NOATTN, "models_10ep"), ">", section="sanity", kind=SANITY)
          for v in "BDFH"] + [
          Claim("sanity.B_branch_matters", "B's attention branch carries "
                "its accuracy: removing it (conv kernels zeroed, biases "
                f"kept) costs more than {BRANCH_MIN:g} points (10 epochs)",
                ref, "-", BRANCH, sel("B", "models_10ep"), relation=">",
                target=BRANCH_MIN, section="sanity", kind=SANITY)]


# Timings on other hardware are a different setting, not a test: XLA:CPU's
# relative cost of the element-wise softmaxes, BN and convs need not match a
# T4's, so a ratio that differs would not contradict the paper.
HARDWARE = unavailable(
    "the paper times a Tesla T4 GPU; ours are CPU core-seconds on XLA:CPU, "
    "whose relative costs of these layers differ (our ratios are shown in "
    "the Training time section as a description)")


def _time_claims() -> list[Claim]:
  """Sec. 3's training times as ratios to B's, paired by seed, ±10 % of
  the paper's ratio (the README's margin for a time ratio); not testable
  on this hardware (``HARDWARE``), declared so the ratios are computed."""
  return [Claim(
      f"time.{v}_over_B", f"{v} trains in ~{ratio:.3g}x B's time "
      f"(ratio within {ratio:.3g} ± {0.1 * ratio:.2g}; ours: CPU "
      "core-seconds, not a T4)", "Sec. 3 (training times)",
      f"{PAPER_MINUTES[v]} vs {PAPER_MINUTES['B']} min", CPU_TIME,
      sel(v, TEN_EPOCHS[v]), sel("B", "models_10ep"), "~",
      margin=round(0.1 * ratio, 2), target=ratio, contrast="ratio",
      min_budget=(HARDWARE,), section="time")
          for v in "ACDEFGH"
          for ratio in (PAPER_MINUTES[v] / PAPER_MINUTES["B"],)]


def _cifar_claims() -> list[Claim]:
  cifar = unavailable("no CIFAR-10 offline; `sweep.py:scale=full,"
                      "dataset=cifar10` declares the runs")
  # Counting needs no run (t1.B_97pct_fewer_params is judged on the
  # control's not-started row, its count from the config); what fails is
  # the paper's number itself: it contradicts the paper's own Eq. 8, so no
  # model built from the paper's description can test it.
  ctrl = PAPER_CIFAR_PARAMS["CIFAR-10: control"][0]
  counted = unavailable(
      f"the paper's count contradicts its own Eq. 8: 4 layers of "
      f"3*32*32*2*8 attention weights and a 3x3 conv from 24 to 3 channels "
      f"with bias, then Dense(3072 -> 10) with bias (the biases its "
      f"Fashion-MNIST counts include), give {CIFAR_EQ8:,}, not 506,560; "
      f"ours follows Eq. 8: {CIFAR_EQ8:,}, {CIFAR_EQ8 / ctrl:.1%} of the "
      f"control's {ctrl:,}; the paper does not say how it counted, so "
      f"the model behind its number is not the one it describes")
  rows = [
      ("cifar10", "4 layers 8 heads on CIFAR-10 reach 41.81 % vs the "
       "control's 67.12 %", "Sec. 3", "41.81 vs 67.12", cifar),
      ("cifar.acc_60pct", "on CIFAR-10 the attention model reaches ~60 % of "
       "the control's accuracy", "Abstract", "41.81 / 67.12", cifar),
      ("cifar.plateau_first", "on CIFAR-10 the attention model plateaus "
       "well before the control", "Sec. 3 (Fig. 10)", "curves", cifar),
      ("cifar.overfits", "on CIFAR-10 the attention model overfits "
       "(\"extreme overfitting\")", "Sec. 3", "loss 80.89", cifar),
      ("cifar.separate_peak_earlier", "separate optimizers make the "
       "CIFAR-10 model peak earlier (44.63 % at epoch 9)", "Appendix",
       "peak epoch 9", cifar),
      ("cifar.noskip_unstable", "without skip the CIFAR-10 model could not "
       "be stabilised (any init or lr tried)", "Appendix", "10.05 % peak",
       cifar),
      ("cifar.params", "the CIFAR-10 model (8 heads x 4 layers, no BN) has "
       "506,560 parameters", "Sec. 2.2", "506,560", counted),
      ("cifar.params_50pct", "the CIFAR-10 model has ~50 % fewer "
       "parameters than its control", "Abstract", "506,560 vs 961,310",
       counted)]
  return [Claim(i, t, ref, val, None, min_budget=(why,)) for i, t, ref, val,
          why in rows]


def _claims() -> list[Claim]:
  c = _sanity()
  for v in "AC":
    c.append(Claim(f"t1.{v}_collapses", f"{v} (BN, 2 layers) collapses "
                   "within 10 epochs", "Table 1", "NaN", COLLAPSED,
                   sel(v, "models_10ep"), relation="all", section="t1"))
  c.append(Claim(
      "t1.AC_grads_vanish", "A's and C's first-layer gradients vanish: "
      "|grad avg| < 1e-10 (log10 < -10)", "Sec. 3 (on Table 1)",
      "0 (\"oscillated between 1e-12 and 9e-11\")", LOG_GRAD,
      {"part": "models_10ep", "model.variant": ("A", "C"),
       "model.skip": True}, relation="<", target=-10.0,
      pair_by=("model.variant", "seed"), min_budget=(END,), section="t1"))
  c += [
      *[Claim(f"t1.{v}_stable", f"{v} (BN, {PRESETS[v][0]} heads, 4 "
              "layers) does not collapse within 10 epochs", "Table 1",
              str(PAPER_T1[v][1]), COLLAPSED, sel(v, TEN_EPOCHS[v]),
              relation="none", min_budget=(END,), section="t1")
        for v in "EG"],
      # Each BN model against its no-BN twin (A and C: NaN in the paper).
      *[Claim(f"t1.bn_hurts_{cid}", f"BN hurts at {at}: {v} < {w} (10 "
              "epochs)", "Table 1", f"{PAPER_T1[v][1] or 'NaN'} vs "
              f"{PAPER_T1[w][1]}", ACCURACY, sel(v, TEN_EPOCHS[v]),
              sel(w, TEN_EPOCHS[w]), "<", min_budget=(END,) * gated,
              section="t1")
        for cid, at, v, w, gated in (
            ("4layers.EF", "4 layers", "E", "F", True),
            ("4layers.GH", "4 layers", "G", "H", True),
            ("2layers", "2 layers", "A", "B", False),
            ("2layers.CD", "2 layers, 16 heads", "C", "D", False))],
      # The "~" claims on no-BN models, gated on the sanity claims
      # (``beats_noattn``, its models in alphabetical order); a 1-epoch
      # reading also below the end-point budget (``END``).
      *[Claim(f"t1.{cid}", f"more {what} do not help{at}: {v} ~ {w} (±1 "
              f"point, {'1 epoch' if ep == 1 else '10 epochs'})", ref,
              f"{PAPER_T1[v][1]} vs {PAPER_T1[w][1]}", ACCURACY,
              sel(v, TEN_EPOCHS[v] if ep == 10 else "models"),
              sel(w, TEN_EPOCHS[w] if ep == 10 else "models"), "~",
              margin=1.0, min_budget=(END,) * (ep == 1) + beats_noattn(
                  *sorted(v + w), branch=True), section="t1")
        for cid, what, at, v, w, ep, ref in (
            ("heads_no_help.1ep", "heads", "", "D", "B", 1, "Table 1"),
            ("layers_no_help.1ep", "layers", "", "F", "B", 1, "Table 1"),
            ("heads_no_help", "heads", "", "D", "B", 10, "Table 1"),
            ("layers_no_help", "layers", "", "F", "B", 10, "Table 1"),
            ("F_equal_H", "heads", " at 4 layers", "F", "H", 10, "Sec. 4"))],
      # The control pairs with B at 10 epochs: the 1-epoch B can never meet
      # the end-point budget.
      Claim("t1.control_beats_B", "the control beats the attention models: "
            "control > B", "Table 1", "88.29 vs 81.46", ACCURACY,
            sel("control"), sel("B", "models_10ep"), ">",
            min_budget=(CONTROL_END,), section="t1"),
      Claim("t1.B_92pct_of_control", "B reaches ~92 % of the control's "
            "accuracy (ratio within 0.92 ± 0.05)", "Table 1",
            "81.46 / 88.29", ACCURACY, sel("B", "models_10ep"),
            sel("control"), "~", margin=0.05, target=0.92, contrast="ratio",
            min_budget=(CONTROL_END,), section="t1"),
      Claim("t1.B_97pct_fewer_params", "B has ~97 % fewer parameters than "
            "the control (ratio within 0.03 ± 0.015)", "Abstract",
            "33,084 vs 929,510", PARAMS, sel("B"), sel("control"), "~",
            margin=0.015, target=0.03, contrast="ratio", deterministic=True,
            section="params"),
      Claim("t1.control_larger_grads", "the control's first-layer gradients "
            "are larger than B's (|grad avg| ratio > 10)", "Table 1",
            "0.002 vs 2.9e-05", GRAD_AVG, sel("control"),
            sel("B", "models_10ep"), ">", target=10.0, contrast="ratio",
            min_budget=(CONTROL_END,), section="t1"),
      # The paper inspected G's trained weights; N(0, 0.02) puts 98.8 % in
      # the band at init, so both claims also need the weights to move.
      Claim("t1.G_weights_small", "G's trained first-head x/y weights "
            "mostly lie within ±0.05 (share > 0.5)", "Sec. 3 (after "
            "Fig. 9)", "\"most values\"", W_BAND, sel("G", "gh_10ep"),
            relation=">", target=0.5, min_budget=(END, MOVED),
            section="t1"),
      Claim("t1.G_y_std_smaller", "G's y weights have a smaller std than "
            "its x weights (ratio < 1)", "Sec. 3 (after Fig. 9)",
            "y around -1e-3 to -1e-4", Y_OVER_X_STD, sel("G", "gh_10ep"),
            relation="<", target=1.0, min_budget=(END, MOVED),
            section="t1"),
      Claim("t1.head_outputs_range", "trained attention heads output pixel "
            "values within [0.4, 0.5] (0.5 on the background)", "Sec. 3",
            # Not testable for a structural reason, not for a missing probe:
            # a probe of our heads would print 0 on the background whatever
            # the training, which says nothing about the paper's head.
            "[0.4, 0.5]", None, min_budget=(unavailable(
                "the implemented head is 0 at background pixels by "
                "construction: a head is the input times its relevance "
                "(softattn/nn/elementwise.py: heads = xr * rel; Sec. 2.2: "
                "the relevance is \"applied to the input data through "
                "array multiplication\"), and the background pixels are 0 "
                "(pixels in [0, 1]), so the first layer's heads are exactly "
                "0 there whatever the weights; the paper's 0.5 on the "
                "background describes a head that differs from its Eqs. 3-7 "
                "as we read them, and measuring ours would not test it"),),
            section="t1"),
      # Margins ±2, not ±1: the paper's own gaps (1.57 and 1.29 points)
      # exceed ±1, so ±1 would contradict the paper's own numbers; ±2 is
      # the smallest whole-point margin that covers them.
      # Not gated on the sanity claims (decided before its 10-epoch runs):
      # the single-head model has BN and D has not, so the two sides differ
      # beyond their attention and are not equal by construction.
      # The appendix's statement is general ("using more than one attention
      # head is a trivial matter"); it compares with D because A and C
      # collapsed in the paper. Ours did not, and A (8 heads) and C (16
      # heads) are the single head's twins (BN, 2 layers) that differ from
      # it in heads only, so they are covered settings of the claim, judged
      # at D (the paper's comparison) first. (Added after the audit read
      # the committed runs; the paper's wording, not the data, puts them
      # under the claim.)
      Claim("app.single_equal_D", "a single head is about as good as many: "
            "single ~ D (±2 points; also against A and C, its BN twins "
            "with 8 and 16 heads)", "Appendix", "80.09 vs 81.66", ACCURACY,
            sel("single head", "single_10ep"), sel("D", "df_10ep"), "~",
            margin=2.0, min_budget=(Requirement(
                "the appendix's single-head accuracy is an end point after "
                "10 epochs, compared with Table 1's D", "epochs", 10.0),),
            covers=(("D (16 heads, no BN), 10 epochs", {}),
                    *[(f"{v} ({PRESETS[v][0]} heads, BN), 10 epochs", {
                        "part": {"df_10ep": TEN_EPOCHS[v]},
                        "model.variant": {"D": v},
                        "model.heads": {16: PRESETS[v][0]}})
                      for v in "AC"]),
            section="app"),
      # Gated on B beating the attention-free baseline only, not on B's
      # branch carrying its accuracy: the separate arm trains its attention
      # weights at lr 0.1, so it is not B's inert branch by construction.
      # (Decided after the 10-epoch runs, which moved it 2 points above B.)
      Claim("app.separate_equal_B", "separate optimizers give no relevant "
            "gain: ~ B (±2 points; a Fashion-MNIST analog on model B)",
            "Appendix (CIFAR-10, 8 heads x 4 layers)", "43.10 vs 41.81",
            ACCURACY, sel("B, separate optimizers", "separate_skip_10ep"),
            sel("B", "models_10ep"), "~", margin=2.0, min_budget=(Requirement(
                "the appendix measures this on CIFAR-10 (8 heads x 4 "
                "layers, after 10 epochs); ours is a Fashion-MNIST analog "
                "on model B at the same length", "epochs", 10.0),
                *beats_noattn("B")), section="app"),
      # Not gated on the sanity claims: without skip nothing carries the
      # pixels past the attention branch, so it is not B by construction.
      Claim("app.noskip_separate_equal_B", "without skip, separate "
            "optimizers train B to ~B's accuracy (±1 point, 10 epochs)",
            "Appendix", "82.13 vs 81.46", ACCURACY,
            sel("B, no skip, separate optimizers", "separate_10ep"),
            sel("B", "models_10ep"), "~", margin=1.0, section="app"),
      Claim("app.noskip_x_weights", "without skip, separate optimizers: "
            "the first head's x weights end with std ~0.0208 (±0.002)",
            "Appendix", "mean 0.0007, std 0.0208", X_STD,
            sel("B, no skip, separate optimizers", "separate_10ep"),
            relation="~", margin=0.002, target=0.0208,
            min_budget=(MOVED,), section="app"),
      # The appendix contrasts one optimizer ("too unstable") with
      # segregated optimization, which trained the no-skip model to 82 %.
      # Here the no-skip model collapses on separate optimizers too (its
      # attention gradients are exactly 0 from the first steps, every seed):
      # a collapse on one optimizer then shows a model that never trains,
      # not the instability the paper contrasts (issue #49).
      Claim("app.noskip_unstable", "without skip on one optimizer training "
            "is unstable (collapses), where separate optimizers train it",
            "Appendix", "\"too unstable\"", COLLAPSED,
            sel("B, no skip, one optimizer"), relation="all",
            min_budget=(END, precondition(
                "app.noskip_separate_equal_B", "\"too unstable\" on one "
                "optimizer is the appendix's contrast with segregated "
                "optimization, which trained the no-skip model: it "
                "presupposes that separate optimizers train it here")),
            section="app"),
      # B (no BN) on one Adam at lr 0.1 for every weight, 1 epoch x 3
      # seeds: an event claim, judged like app.noskip_unstable.
      Claim("concl.lr01_collapses", "Adam lr 0.1 collapses the model, even "
            "without BN (B, lr 0.1 on every weight)", "Conclusion",
            "collapse", COLLAPSED, sel("B", LR01), relation="all",
            min_budget=(END,), section="app"),
      # The Conclusion's "faster training" as cost per train step at the
      # paper's batch and recipe: the control's 1-step runs against F at 10
      # epochs (E and F are the slowest the paper ran that we ran at 10
      # epochs: 1.5 h each), with every other attention model covered at
      # 10 epochs; paired by seed, as ratios.
      Claim("time.faster_than_control", "the attention models train faster "
            "than the control: per train step (batch 4096), the control's "
            f"CPU core-seconds are > {CONTROL_OVERHEAD:g}x F's (10 epochs; a "
            "1-step control run also pays its compilation and one "
            "evaluation, up to ~one more step)", "Conclusion",
            "\"faster training\"", CPU_PER_STEP,
            sel("control", CONTROL_STEP), sel("F", "df_10ep"), ">",
            target=CONTROL_OVERHEAD, contrast="ratio", covers=(
                ("F, 10 epochs", {}),
                *[(f"{v}, 10 epochs", {
                    "part": {"df_10ep": TEN_EPOCHS[v]},
                    "model.variant": {"F": v},
                    "model.heads": {8: PRESETS[v][0]}}) for v in "EDCBAGH"]),
            section="time"),
  ]
  return c + _time_claims() + _cifar_claims()


# Where in training each claim is judged, from the paper's wording (the
# policy: experiments/README.md, "The verdict rule"). "All models were
# trained for 10 epochs" and Table 1 holds "the metrics obtained after 10
# epochs": its end points are judged at our 10-epoch runs (the paper's own
# budget); a 1-epoch reading of one (`.1ep`) is declared at 1 epoch and
# gated below 10 (`END`).
STEPS_1EP, STEPS_10EP = 15, 147     # batch 4096 (sweep.py): 1 and 10 epochs
_T1 = ("Sec. 2.3 / Table 1: \"the metrics obtained after 10 epochs\", "
       "the paper's own budget")
BUDGET_TABLE = (
    ("t1.B_97pct_fewer_params", Budget((STEPS_1EP,), "Abstract: parameter "
                                       "counts, the same at any length; "
                                       "read on the 1-epoch runs")),
    ("t1.*", Budget((STEPS_1EP, STEPS_10EP), _T1 + ": the 10-epoch runs "
                    "where declared; 1-epoch settings (and the opt-in "
                    "control, declared at 1 epoch) are gated below 10 "
                    "epochs")),
    ("sanity.*", Budget((STEPS_10EP,), "what Table 1's \"~ B\" claims "
                        "presuppose, at their budget: 10 epochs")),
    ("app.noskip_unstable", Budget((STEPS_1EP,), "Appendix: \"too "
                                   "unstable\" over its 10 epochs: a "
                                   "collapse at any length is one; a "
                                   "shorter run without one is censored "
                                   "(`END`)")),
    ("app.*", Budget((STEPS_1EP, STEPS_10EP), "Appendix: end points after "
                     "10 epochs; the 10-epoch runs where declared, 1-epoch "
                     "settings gated below 10 epochs")),
    ("time.*_over_B", Budget((STEPS_1EP, STEPS_10EP), "Sec. 3: training "
                             "time of 10 epochs (not testable on this "
                             "hardware; ratios shown)")),
    ("time.faster_than_control", Budget(
        (1, STEPS_1EP, STEPS_10EP), "Conclusion: \"faster training\", a "
        "rate (the cost of a train step at the paper's batch), the same at "
        "any length: read per step on the control's 1-step timing runs and "
        "the attention models' 10-epoch runs")),
    ("concl.lr01_collapses", Budget((STEPS_1EP,), "Conclusion: lr 0.1 "
     "\"caused the collapse of the model\", an event with no length given: "
     "a collapse within the 1-epoch runs counts; a run without one is "
     "censored (`END`)")),
    ("*", Budget((), "the paper's own runs (CIFAR-10, lr 0.1); no runs "
                 "here (see the reason)")),
)
CLAIMS = with_budgets(_claims(), BUDGET_TABLE)
