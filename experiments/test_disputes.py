"""The ten labels issue #49's re-audit disputed, each held to the label the
verdict rule gives on the committed runs (each check fails on the label
the audit disputed). Why each changed is in the claim's declaration and in
its study's RESULTS.md.
"""

import functools
import os

import pytest

import softattn_studies as studies
from softattn_studies import testing
from softattn_studies.testing import EXPERIMENTS


@functools.lru_cache(maxsize=None)
def _verdicts(study: str):
  claims = testing.load_study(study).claims
  return studies.judge_all(claims, studies.read_csv(
      os.path.join(EXPERIMENTS, study, "runs.csv")))


def _word(word):
  return lambda v: v.word == word


def _pooled_over(budgets):
  return lambda v: v.budgets == budgets and "Pooled over" in v.reason


# (study, claim, check, the dispute)
DISPUTES = [
    # "No clear best non-linearity": judged as the equivalence it was first
    # declared as, not the non-superiority chosen after the data (which a
    # worse activation passes, and which had all four confirmed).
    ("relu_attention", "act.sigmoid_equal_relu.medium",
     _word(studies.CONTRADICTED), "sigmoid/n is > 1 point below relu/n"),
    ("relu_attention", "act.sigmoid_equal_relu.small",
     _word(studies.INCONCLUSIVE), "was confirmed as non-superiority"),
    ("relu_attention", "act.softplus_equal_relu.small",
     _word(studies.INCONCLUSIVE), "was confirmed as non-superiority"),
    ("relu_attention", "act.softplus_equal_relu.medium",
     _word(studies.INCONCLUSIVE), "was confirmed as non-superiority"),
    # A budget picked where the data were significant: judged over every
    # declared budget, each seed's lead averaged over them (p ~ 0.087).
    ("normsoftmax", "accel.inf_gt_sm", _word(studies.INCONCLUSIVE),
     "confirmed at 200 steps alone, p=0.032"),
    # Fig. 4's sibling judged at 1200 steps alone: now at every budget the
    # other Fig. 4 claims read.
    ("normsoftmax", "fig4.sqrt_between.inf",
     _pooled_over((50, 100, 200, 1200)), "judged at 1200 steps alone"),
    # The depth trend judged over depth 8 and the 1-epoch runs too.
    ("periodic", "t2.depth_helps_softmax", _word(studies.CONTRADICTED),
     "judged at depth 4 vs 1 only: inconclusive"),
    ("periodic", "t2.gain_grows_with_depth", _word(studies.CONTRADICTED),
     "judged at depth 4 vs 1 only: inconclusive"),
    # cos_max's "cannot be optimized by pre-normalization", where cos_max
    # fails: the three declared prenorm(cos_max) runs ran and decide it.
    ("periodic", "bd.prenorm_no_gain.cos_max.d4_1ep",
     lambda v: v.n == 3 and v.word in (studies.CONFIRMED,
                                       studies.CONTRADICTED),
     "hidden by a precondition, its deciding runs not run"),
    # The appendix's contrast (one optimizer unstable, separate optimizers
    # train) cannot show when the no-skip model never trains on either.
    ("elementwise", "app.noskip_unstable",
     lambda v: v.word == studies.NOT_TESTABLE
     and "app.noskip_separate_equal_B" in v.reason,
     "confirmed, though separate optimizers collapse too"),
]


@pytest.mark.parametrize("study,claim,check,dispute", DISPUTES,
                         ids=[f"{s}:{c}" for s, c, _, _ in DISPUTES])
def test_a_disputed_label_follows_the_rule(study, claim, check, dispute):
  v = _verdicts(study)[claim]
  assert check(v), f"{study} {claim} (disputed: {dispute}): {v}"
