r"""The scaled non-local study's claims as data (Cho et al. 2022): the
paper's numbers, the metrics and run selections the claims read, ``CLAIMS``
(Tables 1-4, Figs. 1-2, Sec. 3.1, the abstract) and the budget each is
judged at, in the paper's words (``BUDGET_TABLE``).
"""

from __future__ import annotations

import os

import softattn_studies as studies
from softattn_studies.claims import (ERROR, SANITY, STEP_MS, Budget, Claim,
                                     Metric, paper_fraction, precondition,
                                     unavailable, with_budgets)

HERE = os.path.dirname(os.path.abspath(__file__))
NL = "model.nl_blocks."
LABEL = {"softmax": "NL", "scaled": "scaled NL"}
FOCUS = "init_1ep"
MAIN_STEPS, FOCUS_STEPS = 300, 940  # sweep.py: `main`, `init_1ep` (~1 epoch)
SWEEP = studies.load_module(os.path.join(HERE, "sweep.py"))
# Sec. 3.1's block without the scaling factor (``sweep.py:subset=unscaled``)
# and Fig. 2's embedding width (``subset=embed``), as the sweep declares
# them so that selections match its runs.
UNSCALED, EMBED = SWEEP.UNSCALED, SWEEP.EMBED
UNSCALED_PART, EMBED_PART = "unscaled", "embed_reduction"
# The same block on 32x32 inputs: stage-2 maps of 16x16, the paper's size
# (CIFAR-10), where the unscaled output grows by sqrt(HW) = 16.
UNSCALED_32_PART = "unscaled_32px"
# Table 3's step times are judged on a timing session of their own
# (``sweep.py:subset=timing``, 32x32 inputs, 30 steps; this declaration
# was committed before its runs, after the audit had read `main`'s times):
# Table 3 times 32x32 CIFAR images, whose 16x16 stage-2 maps (HW = 256)
# make the NL block's HW x HW softmax a real part of a step, where `main`'s
# 8x8 maps do not; and `main`'s runs ran two at a time on the 2 cores, so
# their step times measure the machine's load as much as the block. The
# timing runs alternate NL and scaled NL and run one at a time.
TIMING_PART, TIMING_STEPS = "timing_32px", 30
# Sec. 3.1's divergence is an event over the paper's 164-epoch training: a
# run that shows it counts at any length, one that does not is censored
# below a tenth of that training (the README's event rule). Both s31 claims
# read it, whichever way they point.
SEC31_LENGTH = paper_fraction(
    0.1, 164, "Sec. 3.1's divergence is over the paper's 164-epoch "
    "training; a run that does not diverge within ours could still diverge "
    "later")

# Cho et al. 2022, test error % (CIFAR-10 / CIFAR-100), PreResNet-56 + 3 NL.
# The 0-head cells are one merged cell per row in the paper and garbled in
# its text extraction: our best reading, flagged in RESULTS.md.
PAPER_T3 = {0: {"softmax": (6.37, 26.5), "scaled": (6.37, 26.5)},
            1: {"softmax": (5.73, 25.12), "scaled": (5.64, 24.53)},
            2: {"softmax": (5.69, 24.63), "scaled": (5.48, 24.17)},
            4: {"softmax": (5.62, 24.43), "scaled": (5.43, 24.12)}}
PAPER_MEM = {0: (2827, 2827), 1: (3789, 3453), 2: (4269, 3429),
             4: (5229, 3417)}          # heads -> (NL MB, scaled MB)
# 0 heads: NL reads 62.27; the scaled cell reads "02.37" (garbled; the
# two rows are the same network without NL blocks).
PAPER_MS = {0: (62.27, 62.27), 1: (83.11, 77.92), 2: (88.96, 76.97),
            4: (100.93, 76.51)}        # ms/batch
PAPER_T1 = {"softmax": {"base": (5.73, 25.12), "magnitude": (5.83, 25.26),
                        "direction": (6.01, 25.44)},
            "scaled": {"base": (5.64, 24.53), "magnitude": (5.76, 25.20),
                       "direction": (5.67, 24.68)}}
PAPER_T2 = {"softmax": {"he": (5.91, 25.82), "normal": (5.73, 25.12),
                        "zeros": (6.23, 26.24)},
            "scaled": {"he": (5.64, 24.53), "normal": (5.69, 24.62),
                       "zeros": (6.14, 26.24)}}
INITS = {"he": "He", "normal": "sigma 0.01", "zeros": "sigma 0"}

MEMORY = Metric("XLA train-step MB (full scale)", "value/full_step_mb",
                digits=0)
VERTICAL = Metric("var across queries / var across keys",
                  "value/vertical_ratio", digits=3)
# XLA's FLOP count of one compiled train step of the reduced runs: a
# property of the config (identical in every seed), so claims on it are
# deterministic.
FLOPS = Metric("XLA GFLOP per train step (reduced)", "flops_per_step",
               scale=1e-9, digits=3)


class _Diverged(Metric):
  """1 when a run stopped on a non-finite loss (``kind=nonfinite``), 0 when
  it finished: read from the run's state, so every runs.csv row has it."""

  def of(self, run):
    return 1.0 if run.diverged else (0.0 if run.done else None)


DIVERGED = _Diverged("diverged (non-finite loss)", "state")


def sel(heads, block="softmax", mode="base", init="normal", part="main"):
  if heads == 0:
    return {"part": part, NL + "heads": 0}
  return {"part": part, NL + "heads": heads, NL + "normalizer": block,
          NL + "mode": mode, NL + "init": init}


timed = lambda heads, block="softmax": sel(heads, block, part=TIMING_PART)


# The paper's own setting where ``main`` differs (``sweep.py:subset=paper``):
# scaled NL with He init, Tables 1 and 2 at 1 head.
PAPER_PART = "paper_defaults"
PAPER_INIT = {"softmax": "normal", "scaled": "he"}
PAPER_NOTE = " (the paper's setting: 1 head, He for scaled NL)"


def paper_sel(heads, block="softmax", mode="base", init=None):
  """A setting with the paper's init for ``block`` unless ``init`` is given
  (NL sigma 0.01, scaled NL He), from ``main`` or ``paper_defaults``
  (``sweep.py:subset=paper`` declares only what ``main`` lacks)."""
  return sel(heads, block, mode, init or PAPER_INIT[block],
             part=("main", PAPER_PART))


def _table1(suffix, at, helps, setting, note="") -> list[Claim]:
  """Table 1's claims on ``at(block, mode)`` selections. Its equivalence
  claim presupposes that the NL block beats the network without NL blocks
  (claim ``helps``, at the variants' head count): else the blocks may be
  inert and the two variants agree by construction (experiments/README.md's
  "D ~ B" example)."""
  return [
      Claim("t1.direction_hurts_nl" + suffix, "removing the magnitude hurts "
            "NL: direction-only NL error > NL error" + note,
            "Table 1, abstract", "6.01 vs 5.73", ERROR,
            at("softmax", "direction"), at("softmax"), ">", section="t1"),
      Claim("t1.direction_scaled_better" + suffix, "direction-only: scaled "
            "NL error < NL error" + note, "Table 1",
            "5.67 vs 6.01; 24.68 vs 25.44", ERROR,
            at("scaled", "direction"), at("softmax", "direction"), "<",
            section="t1"),
      Claim("t1.direction_hurts_nl_more" + suffix, "direction-only hurts NL "
            "more than scaled NL (gap of the direction - base gaps)" + note,
            "Table 1", "NL +0.28, scaled +0.03", ERROR, terms=(
                (1, at("softmax", "direction")), (-1, at("softmax")),
                (-1, at("scaled", "direction")), (1, at("scaled"))),
            relation=">", section="t1"),
      Claim("t1.magnitude_equal" + suffix, "magnitude-only: scaled NL ~ NL "
            "(±1 point)" + note, "Table 1", "5.76 vs 5.83", ERROR,
            at("scaled", "magnitude"), at("softmax", "magnitude"), "~",
            margin=1.0, section="t1", min_budget=(precondition(
                helps, f"NL must beat the network without NL blocks "
                f"({setting}): otherwise the blocks may be inert, and two "
                "variants of them agree by construction"),)),
  ]


def embed_sel(block):
  """Fig. 2's reduced embedding: ``block`` at 4 heads, sigma 0.01, EMBED
  embedding channels (``embed_reduction``); ``sel(4, block)`` is its
  full-width partner (all 32 channels, `main`)."""
  return {**sel(4, block, part=EMBED_PART), NL + "embed_channels": EMBED}


def paper_cell(pair):
  """"5.73 / 25.12": a paper cell (CIFAR-10 / CIFAR-100 test error %)."""
  return f"{pair[0]:.2f} / {pair[1]:.2f}"


def _claims() -> list[Claim]:
  # Table 3's head counts; our 8-head runs are in the table, but the paper
  # makes no 8-head claim to judge.
  # Table 3's scaled NL cells are of He init: quoted beside our sigma-0.01
  # scaled NL, they say so.
  he_cells = " (its scaled NL: He init)"
  scaled_lt_nl = lambda sfx, at, note, where="", cells="": [Claim(
      f"t3.scaled_lt_nl.h{h}{sfx}", f"scaled NL{note} error < NL error, "
      f"{h} head(s){where}", "Table 3", paper_cell(PAPER_T3[h]["scaled"])
      + " vs " + paper_cell(PAPER_T3[h]["softmax"]) + cells, ERROR,
      at(h, "scaled"), at(h), "<", section="t3") for h in (1, 2, 4)]
  c = [
      *scaled_lt_nl("", sel, "", ", sigma 0.01 for both", he_cells),
      Claim("t3.nl_helps", "NL blocks help: 4-head NL error < no NL",
            "Table 3", "5.62 vs 6.37 (CIFAR-10)", ERROR, sel(4), sel(0), "<",
            section="t3"),
      # What `t1.magnitude_equal.h1` presupposes (`t3.nl_helps` is the
      # same at 4 heads): the study's check, not a claim of the paper's.
      Claim("sanity.nl_helps.h1", "NL blocks help at 1 head: 1-head NL "
            "(sigma 0.01) error < no NL", "none (sanity check; what "
            "`t1.magnitude_equal.h1` presupposes; Table 3's cells)",
            "5.73 vs 6.37 (CIFAR-10)", ERROR, sel(1), sel(0), "<",
            section="t3", kind=SANITY),
      *[Claim(f"t3.heads_help_{k}", f"more heads help {what}: 4 < 1 head",
              "Table 3", value, ERROR, sel(4, b), sel(1, b), "<",
              section="t3") for k, what, b, value in (
          ("scaled", "scaled NL (sigma 0.01)", "scaled",
           "5.43 vs 5.64" + he_cells),
          ("nl", "NL", "softmax", "5.62 vs 5.73"))],
      *scaled_lt_nl(".paper", paper_sel, " (He, the paper's init for it)"),
      Claim("t3.heads_help_scaled.paper", "more heads help scaled NL (He): "
            "4 < 1 head", "Table 3", "5.43 vs 5.64", ERROR,
            paper_sel(4, "scaled"), paper_sel(1, "scaled"), "<",
            section="t3"),
      Claim("t3.scaled_lt_nl.h4.1ep", "scaled NL error < NL error, 4 heads, "
            f"sigma 0.01 for both, the longer budget (`{FOCUS}`)", "Table 3",
            "5.43 vs 5.62" + he_cells, ERROR, sel(4, "scaled", part=FOCUS),
            sel(4, part=FOCUS), "<", section="t3"),
      Claim("t3.scaled_lt_nl.h4.1ep.paper", "scaled NL (He, the paper's "
            "init for it) error < NL error (sigma 0.01), 4 heads, the longer "
            f"budget (`{FOCUS}`)", "Table 3", "5.43 vs 5.62", ERROR,
            sel(4, "scaled", init="he", part=FOCUS), sel(4, part=FOCUS), "<",
            section="t3"),
      Claim("t3.nl_time_grows", "NL step time grows from 1 to 4 heads "
            "(32x32 inputs)", "Table 3", "83 -> 101 ms", STEP_MS,
            timed(4), timed(1), ">", section="t3b"),
      Claim("t3.scaled_time_flat", "scaled NL step time flat from 1 to 4 "
            "heads (ratio within 1 ± 0.1; 32x32 inputs)", "Table 3",
            "78 -> 77 ms", STEP_MS, timed(4, "scaled"), timed(1, "scaled"),
            "~", margin=0.1, contrast="ratio", section="t3b"),
      *[Claim(f"t3.scaled_time_below_nl.h{h}", f"{h} head(s): scaled NL "
              "step time < NL step time (32x32 inputs)", "Table 3",
              f"{PAPER_MS[h][1]} vs {PAPER_MS[h][0]} ms", STEP_MS,
              timed(h, "scaled"), timed(h), "<", section="t3b")
        for h in SWEEP.TIMED_HEADS],
      Claim("t3.nl_memory_grows", "NL memory grows from 1 to 4 heads "
            "(ratio > 1.05)", "Table 3", "3789 -> 5229 MB", MEMORY, sel(4),
            sel(1), ">", target=1.05, contrast="ratio", deterministic=True,
            section="t3b"),
      Claim("t3.scaled_memory_flat", "scaled NL memory flat from 1 to 4 "
            "heads (ratio within 1 ± 0.05)", "Table 3", "3453 -> 3417 MB",
            MEMORY, sel(4, "scaled"), sel(1, "scaled"), "~", margin=0.05,
            contrast="ratio", deterministic=True, section="t3b"),
      *[Claim(f"t3.scaled_memory_below_nl.h{h}", f"{h} head(s): scaled NL "
              "needs less memory than NL (scaled / NL < 1)", "Table 3",
              f"{PAPER_MEM[h][1]} vs {PAPER_MEM[h][0]} MB", MEMORY,
              sel(h, "scaled"), sel(h), "<", contrast="ratio",
              deterministic=True, section="t3b") for h in (1, 2, 4)],
      # Sec. 1: NL's memory is "a linear function of the number of heads":
      # the per-head increment from 2 to 4 heads equals the 1 -> 2 one.
      # XLA's plan counts bytes exactly; the 2 MB margin absorbs buffer
      # alignment and is small next to any increment that matters (the
      # paper's is 480 MB per head).
      Claim("t3.nl_memory_linear", "NL memory linear in heads: (m4 - m2) / "
            "2 - (m2 - m1) within ±2 MB", "Sec. 1, Table 3",
            "3789, 4269, 5229 MB: +480 per head", MEMORY,
            terms=((0.5, sel(4)), (-1.5, sel(2)), (1, sel(1))),
            relation="~", margin=2.0, deterministic=True, section="t3b"),
      Claim("t3.scaled_flops_flat", "scaled NL FLOPs do not grow from 1 to 4 "
            "heads (XLA count, 4-head / 1-head < 1.01)", "Sec. 1, Table 3",
            "'without additional computational cost'", FLOPS,
            sel(4, "scaled"), sel(1, "scaled"), "<", target=1.01,
            contrast="ratio", deterministic=True, section="t3b"),
      # Holds by construction, so it is not a test (the reason says why).
      Claim("t3.nl_flops_grow", "NL FLOPs grow from 1 to 4 heads (XLA "
            "count, 4-head / 1-head > 1)", "Sec. 1, Table 3",
            "step time a linear function of heads", FLOPS, sel(4), sel(1),
            ">", contrast="ratio", deterministic=True, section="t3b",
            min_budget=(unavailable(
                "cannot fail: NL's matrix products (HW^2 C multiply-adds "
                "for the scores and the weighted sum, whatever the head "
                "count) do not grow with heads; only the per-head "
                "softmax's N_h x HW^2 elementwise operations do, so any "
                "multi-head NL counts more FLOPs than 1 head (ours: the "
                "GFLOP columns above). The paper's sentence is about "
                "memory and step time: `t3.nl_memory_grows`, "
                "`t3.nl_memory_linear`, `t3.nl_time_grows`"),)),
      *_table1("", lambda b, mode="base": sel(4, b, mode), "t3.nl_helps",
               "4 heads, sigma 0.01, `main`"),
      *_table1(".h1", lambda b, mode="base": paper_sel(1, b, mode),
               "sanity.nl_helps.h1", "1 head, sigma 0.01, `main`",
               PAPER_NOTE),
  ]
  # Table 2 at 4 heads (He vs sigma 0.01 at the longer budget, sigma 0 at
  # `main`) and in the paper's setting: 1 head, 300 steps x 3 seeds.
  one = lambda b, init: paper_sel(1, b, init=init)
  for sfx, at, note, zeros_at, zeros_note in (
      ("", lambda b, init: sel(4, b, init=init, part=FOCUS),
       f" (the longer budget, `{FOCUS}`)",
       lambda b, init: sel(4, b, init=init), ""),
      (".h1", one, PAPER_NOTE, one, PAPER_NOTE)):
    c += [
        Claim(f"t2.nl_normal_beats_he{sfx}", "NL: sigma 0.01 beats He" + note,
              "Table 2", "5.73 vs 5.91", ERROR, at("softmax", "normal"),
              at("softmax", "he"), "<", section="t2"),
        # Sec. 4: scaled NL "shows the best performance with the standard
        # He initialization": a direction (lower error than sigma 0.01).
        Claim(f"t2.scaled_he_best{sfx}", "scaled NL: He beats sigma 0.01"
              + note, "Table 2, Sec. 4", "5.64 vs 5.69", ERROR,
              at("scaled", "he"), at("scaled", "normal"), "<", section="t2"),
        *[Claim(f"t2.zeros_worst.{b}{sfx}", f"{LABEL[b]}: sigma 0 is worse "
                "than sigma 0.01" + zeros_note, "Table 2",
                f"{PAPER_T2[b]['zeros'][0]} vs {PAPER_T2[b]['normal'][0]}",
                ERROR, zeros_at(b, "zeros"), zeros_at(b, "normal"), ">",
                section="t2") for b in LABEL],
    ]
  c += _robust_init()
  c += [
      Claim("s31.scaled_never_diverges", "scaled NL never diverges (every "
            "scaled NL run of every part: heads, inits, modes)", "Sec. 3.1",
            "'scaling successfully prevents divergence'", DIVERGED,
            {NL + "normalizer": "scaled"}, relation="none",
            min_budget=(SEC31_LENGTH,), section="s31"),
      # "Often": every run diverging confirms, none contradicts, a mix is
      # inconclusive (the rule's event reading). Judged at the paper's map
      # size (16x16 stage-2 maps from 32x32 inputs, `unscaled_32px`); on our
      # 8x8 maps (`unscaled`) the block's output grows by sqrt(HW) = 8, not
      # the paper's 16: counted in the table, not judged. Censored below
      # SEC31_LENGTH (added after the 32x32 runs showed no divergence: the
      # README's event rule, which the first declaration missed).
      Claim("s31.unscaled_diverges", "NL without softmax and without the "
            "1/sqrt(HW) scaling diverges (4 heads, He, the scaled block's "
            "init in the paper; 16x16 stage-2 maps, as the paper's)",
            "Sec. 3.1", "'often diverging'", DIVERGED,
            sel(4, UNSCALED, init="he", part=UNSCALED_32_PART),
            relation="all", min_budget=(SEC31_LENGTH,), section="s31"),
      Claim("fig1.vertical_lines", "NL maps are closer to vertical lines "
            "than scaled NL's (NL ratio < scaled ratio; the paper: NL shows "
            "vertical lines, scaled NL does not)", "Fig. 1", "qualitative",
            VERTICAL, sel(4), sel(4, "scaled"), "<", section="fig1",
            min_budget=(unavailable(
                "the ordering is there before training: the same statistic "
                "on the untrained models (each seed's init, the same 4 test "
                "images) already puts NL below scaled NL, and training moves "
                "the two toward each other, so a comparison of trained runs "
                "cannot tell what training learned from what the blocks are "
                "by construction; without checkpoints runs.csv holds no "
                "init-time values to compare against"),)),
      Claim("fig1.nl_vertical", "NL attention maps show clear vertical "
            "lines", "Fig. 1, Sec. 3.2", "qualitative", None,
            min_budget=(unavailable(
                "no defensible threshold: the paper judges 'clear' by eye; "
                "our ratio is 0 for perfect vertical lines and ~1 for maps "
                "as query- as key-dependent, and no value in between is "
                "'clear' by any stated criterion (the ratios are in the "
                "table above)"),)),
      Claim("t3.cifar100", "scaled NL < NL on CIFAR-100 and Tiny-ImageNet",
            "Tables 3, 4", "24.12 vs 24.43", None, min_budget=(unavailable(
                "no CIFAR-100 / Tiny-ImageNet offline (TFDS has no "
                "Tiny-ImageNet builder); `sweep.py:scale=full,"
                "dataset=cifar100` declares the CIFAR-100 runs"),)),
      Claim("t4.depth_width", "scaled NL helps at every depth and width",
            "Table 4", "PreResNet-32..110, WRN-28-10", None,
            min_budget=(unavailable(
                "not run here (CPU budget): sweep `model.depth` at "
                "scale=full (hours per run on a GPU)"),)),
      # Sec. 3.2: "performance degradation due to embedding channel
      # reduction is significantly smaller than for the NL block": a gap of
      # gaps (the reduced - full error gap, NL minus scaled NL), as Table
      # 1's direction-only claim.
      Claim("fig2.embed_reduction", "scaled NL tolerates embedding channel "
            f"reduction better than NL: embedding to {EMBED} of 32 "
            "channels (4 heads, sigma 0.01) costs NL more error than scaled "
            "NL (gap of the reduced - full gaps)", "Fig. 2, Sec. 3.2",
            "figure: degradation \"significantly smaller than for the NL "
            "block\"", ERROR, terms=(
                (1, embed_sel("softmax")), (-1, sel(4)),
                (-1, embed_sel("scaled")), (1, sel(4, "scaled"))),
            relation=">", section="fig2"),
  ]
  return c


def _robust_init() -> list[Claim]:
  """The abstract's "robustness to embedding weight initialization", at
  He (the standard init the paper recommends for scaled NL): scaled NL He
  < NL He wherever both ran, and scaled NL He < scaled NL sigma 0."""
  he = PAPER_T2["scaled"]["he"][0]
  heads = lambda h: f"{h} head{'s' if h > 1 else ''}"
  return [Claim(f"t2.scaled_lt_nl.he{sfx}", "He init: scaled NL error < NL "
                f"error ({heads(h)}, `{part}`)", "Table 2, abstract",
                f"{he} vs {PAPER_T2['softmax']['he'][0]}", ERROR,
                sel(h, "scaled", init="he", part=part),
                sel(h, init="he", part=part), "<", section="t2")
          for sfx, h, part in (("", 4, "main"), (".1ep", 4, FOCUS),
                               (".h1", 1, PAPER_PART))] + [
      Claim(f"t2.scaled_he_lt_zeros{sfx}", "scaled NL: He error < sigma 0 "
            f"error ({heads(h)})", "Table 2",
            f"{he} vs {PAPER_T2['scaled']['zeros'][0]}", ERROR,
            paper_sel(h, "scaled", init="he"),
            paper_sel(h, "scaled", init="zeros"), "<", section="t2")
      for sfx, h in (("", 4), (".h1", 1))]


# Where in training each claim is judged, from the paper's wording (the
# policy: experiments/README.md, "The verdict rule"). Tables 1-4 are end
# points after the paper's 164 epochs; every budget here is early in that,
# so each ordering is an early-training reading at the budget its claim
# names (`main`, or the ~1-epoch `init_1ep` for the ids that say so).
_END = ("Tables 1-3: test error after the paper's 164 epochs (\"training is "
        "stopped at 164 epochs\"), read at ")
_FIXED = ("a property of the configuration (XLA's memory plan or FLOP "
          "count, the same at any length: Table 3 / Sec. 1), read on ")
BUDGET_TABLE = (
    ("*.1ep*", Budget((FOCUS_STEPS,), _END + f"our longer budget, "
                      f"{FOCUS_STEPS} steps (`{FOCUS}`)")),
    *[(cid, Budget((FOCUS_STEPS,), _END + f"our longer budget (`{FOCUS}`)"))
      for cid in ("t2.nl_normal_beats_he", "t2.scaled_he_best")],
    *[(cid, Budget((MAIN_STEPS,), _FIXED + "the `main` runs"))
      for cid in ("t3.*memory*", "t3.*flops*")],
    ("t3.*time*", Budget((TIMING_STEPS,), "Table 3: ms per batch, a rate "
                         "(no training stage): the median step of the "
                         f"{TIMING_STEPS}-step timing session "
                         f"(`{TIMING_PART}`)")),
    ("s31.scaled_never_diverges", Budget(
        (TIMING_STEPS, MAIN_STEPS, FOCUS_STEPS), "Sec. 3.1: \"scaling "
        "successfully prevents divergence\" (at any point of training): "
        "every scaled NL run, at each of our lengths")),
    ("s31.*", Budget((MAIN_STEPS,), "Sec. 3.1: \"often diverging\" (at "
                     "any point of training): the `unscaled` runs")),
    ("fig2.embed_reduction", Budget((MAIN_STEPS,), (
        "Fig. 2: test error after the paper's 164 epochs by embedding "
        f"width, read at the {MAIN_STEPS} steps of `main` and "
        f"`{EMBED_PART}`"))),
    ("fig1.vertical_lines", Budget((MAIN_STEPS,), "Fig. 1: maps of trained "
                                   "networks, read on the `main` runs")),
    ("sanity.nl_helps.h1", Budget((MAIN_STEPS,), (
        "what `t1.magnitude_equal.h1` presupposes, read where that claim "
        f"is: the `main` {MAIN_STEPS} steps"))),
    ("t3.cifar100", Budget((), "Tables 3-4 after 164 epochs on CIFAR-100 "
                           "and Tiny-ImageNet: no runs here (see the "
                           "reason)")),
    ("t[123].*", Budget((MAIN_STEPS,), _END + f"the `main` {MAIN_STEPS} "
                        "steps")),
    ("*", Budget((), "the paper's own training (164 epochs, CIFAR-100, "
                 "Tiny-ImageNet, deeper networks); no runs here (see the "
                 "reason)")),
)
CLAIMS = with_budgets(_claims(), BUDGET_TABLE)
