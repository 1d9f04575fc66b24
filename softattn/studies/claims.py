"""Claims as data, and the one rule that turns runs into a ``Verdict``.

A study declares each claim of its paper once, as a ``Claim``: which runs
(``lhs``/``rhs`` selections, or signed ``terms`` for a gap of gaps), which
metric, the relation the paper states (``>``, ``<``, ``~`` with a margin,
``all``/``none`` for events such as divergence), and the least budget at
which our runs can test it (``min_budget``). ``judge`` applies ``RULE``.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping, Sequence

import numpy as np

from softattn.studies import stats
from softattn.studies.runs import Run, select

ALPHA = 0.05
MIN_PAIRS = 3
CONFIRMED, CONTRADICTED = "confirmed", "contradicted"
INCONCLUSIVE, NOT_TESTABLE = "inconclusive", "not testable here"
WORDS = (CONFIRMED, CONTRADICTED, INCONCLUSIVE, NOT_TESTABLE)

RULE = f"""**Verdict rule** (`softattn.studies.claims.RULE`; the same in every
study). Runs with the same seed share init and data order, so each claim
compares settings *paired by seed* (or by the claim's pairing key, e.g.
depth and seed): per pair, the difference of the metric (or its ratio,
where the claim is about a ratio).

* **Not testable here** comes first: when the runs are below the claim's
  declared minimum budget (a fraction of the paper's training, or a
  measured condition such as "the attention weights moved from their
  init"), or the setup cannot measure it (data not available offline), the
  reason is printed and no other label is given.
* **Minimum evidence:** fewer than {MIN_PAIRS} complete seed pairs is
  *inconclusive*, whatever the numbers. Runs that diverged
  (`kind=nonfinite`) or did not finish are left out of the pairs and named.
* **Differences** (`>`/`<`): a one-sided paired t test ({MIN_PAIRS}+ pairs,
  n-1 degrees of freedom) at alpha = {ALPHA}, in the paper's direction:
  *confirmed* when p < {ALPHA}; *contradicted* when the one-sided test in
  the opposite direction has p < {ALPHA}; *inconclusive* otherwise.
* **Equivalence** (`~`): TOST (two one-sided paired t tests) against the
  claim's declared margin: *confirmed* when p_TOST < {ALPHA} (the 90 %
  interval lies inside the margin); *contradicted* when the one-sided test
  that the difference lies beyond the margin has p < {ALPHA};
  *inconclusive* otherwise (equal within noise is not shown equal).
* **Events** (`all`/`none`, e.g. "X diverges"): counted per run; with
  finished or diverged runs from {MIN_PAIRS}+ seeds (runs of one seed at
  several depths are not independent evidence), *confirmed* when every run agrees
  with the claim, *contradicted* when every run disagrees, *inconclusive*
  when they are mixed.
* **Deterministic quantities** (parameter counts, XLA's compiled memory
  plan: the same in every seed) are compared directly with the claim's
  threshold.
* **Preconditions:** a claim can require another claim to be confirmed
  first (e.g. "D ~ B" needs "the attention layers matter" confirmed:
  otherwise the two are equal by construction); unless it is, the claim
  is not testable here, with the precondition's verdict as the reason.

Each estimate is the mean paired difference (for a claim on one setting
against a threshold, e.g. a ratio > 1: the mean value, tested against
that threshold) with its two-sided 95 % t interval; p is the p-value of
the test that gave the word. A one-sided test at alpha = {ALPHA}
corresponds to a 90 % interval, so a difference can be significant while
the printed 95 % interval still touches the null (or the margin). Each
claim is tested on its own, with no correction for the number of claims:
across a study's few dozen claims, a claim with no real effect is labelled
confirmed or contradicted with probability up to {2 * ALPHA:g}, so expect a
few such labels by chance. Table cells
are mean ± 95 % t-interval half-width over seeds (n = seeds finished)."""


@dataclasses.dataclass(frozen=True)
class Metric:
  """A number per run: ``offset + scale * run.value(column)``."""
  name: str
  column: str
  scale: float = 1.0
  offset: float = 0.0
  unit: str = ""
  digits: int = 2

  def of(self, run: Run) -> float | None:
    v = run.value(self.column)
    return None if v is None else self.offset + self.scale * v


ACCURACY = Metric("test accuracy %", "final/accuracy", 100.0, unit=" points")
ERROR = Metric("test error %", "final/accuracy", -100.0, 100.0,
               unit=" points")


@dataclasses.dataclass(frozen=True)
class Requirement:
  """A condition the claim's runs must meet to test it.

  ``column`` (``epochs``, ``value/<name>``) must be at least ``at_least`` in
  every run of the claim that has it (or, with ``on``, in every run that
  selection picks: e.g. an ablation without weight decay is judged on its
  runs, but whether decay matters is measured on the runs that have it);
  ``column=None``: never met (the setup cannot measure the claim), ``why``
  says so. ``claim``: a precondition, met when that claim (declared
  earlier in the study) is confirmed.
  """
  why: str
  column: str | None = None
  at_least: float = 0.0
  on: Mapping[str, Any] | None = None
  claim: str | None = None

  def unmet(self, runs: Sequence[Run],
            verdicts: Mapping[str, "Verdict"] | None = None) -> str | None:
    """Why the runs cannot test the claim, or None."""
    if self.claim is not None:
      if verdicts is None or self.claim not in verdicts:
        raise ValueError(f"precondition {self.claim!r} is not judged before "
                         "the claim that needs it; declare it earlier")
      pre = verdicts[self.claim]
      if pre.word == CONFIRMED:
        return None
      return f"{self.why} (precondition `{self.claim}`: {pre.word})"
    if self.column is None:
      return self.why
    vals = [v for v in (r.value(self.column) for r in runs) if v is not None]
    if not vals:
      # Runs that never ran say nothing; finished ones that lack the
      # measurement cannot show the condition holds.
      if any(r.done for r in runs):
        return f"{self.why} (not measured: no run records {self.column})"
      return None
    if min(vals) >= self.at_least:
      return None
    return (f"{self.why} (needs {self.column} >= {self.at_least:.3g}; "
            f"ours: {min(vals):.3g})")


def paper_fraction(fraction: float, paper_epochs: float, what: str
                   ) -> Requirement:
  """At least ``fraction`` of the paper's ``paper_epochs`` (in epochs of
  our training split)."""
  return Requirement(f"{what}: needs at least {fraction:.0%} of the paper's "
                     f"{paper_epochs:g} epochs", "epochs",
                     fraction * paper_epochs)


def unavailable(why: str) -> Requirement:
  return Requirement(why)


def precondition(claim_id: str, why: str) -> Requirement:
  """Testable only once claim ``claim_id`` is confirmed."""
  return Requirement(why, claim=claim_id)


Selection = Mapping[str, Any]


@dataclasses.dataclass(frozen=True)
class Claim:
  """One claim of a paper, as data.

  ``relation``: ``>``/``<`` (``lhs - rhs`` against ``target``, default 0),
  ``~`` (``|lhs - rhs - target| < margin``), ``all``/``none`` (every /
  no run of ``lhs`` has ``metric`` true, e.g. ``value/diverged``).
  ``contrast="ratio"`` compares ``lhs / rhs`` instead (``target`` then
  defaults to 1). ``terms`` replaces ``lhs``/``rhs`` by a signed sum, e.g.
  a gap of gaps. ``pair_by``: the settings that pair runs (default the
  seed). ``deterministic``: the metric is the same in every seed (see
  ``RULE``).
  """
  id: str
  text: str
  paper_ref: str
  paper_value: str
  metric: Metric | None
  lhs: Selection | None = None
  rhs: Selection | None = None
  relation: str = ">"
  margin: float | None = None
  target: float | None = None
  contrast: str = "diff"
  terms: tuple[tuple[float, Selection], ...] = ()
  pair_by: tuple[str, ...] = ("seed",)
  min_budget: tuple[Requirement, ...] = ()
  deterministic: bool = False
  section: str = ""

  def __post_init__(self):
    if self.relation not in (">", "<", "~", "all", "none"):
      raise ValueError(f"claim {self.id}: relation={self.relation!r}; use "
                       ">, <, ~, all or none")
    if self.relation == "~" and not (self.margin and self.margin > 0):
      raise ValueError(f"claim {self.id}: '~' needs a margin > 0")
    if self.contrast not in ("diff", "ratio"):
      raise ValueError(f"claim {self.id}: contrast={self.contrast!r}; use "
                       "diff or ratio")
    if self.metric is not None and not self.terms and self.lhs is None:
      raise ValueError(f"claim {self.id}: give lhs (and rhs) or terms")

  @property
  def null(self) -> float:
    if self.target is not None:
      return self.target
    return 1.0 if self.contrast == "ratio" else 0.0

  def groups(self) -> list[tuple[float, Selection]]:
    if self.terms:
      return list(self.terms)
    out = [(1.0, self.lhs)]
    if self.rhs is not None:
      out.append((-1.0, self.rhs))
    return out


@dataclasses.dataclass(frozen=True)
class Verdict:
  """What the rule says about one claim."""
  word: str
  estimate: float | None
  ci: tuple[float, float] | None
  p: float | None
  n: int
  reason: str


def _key(run: Run, pair_by: Sequence[str]) -> tuple:
  return tuple(run.seed if f == "seed" else repr(run.get(f))
               for f in pair_by)


def _excluded(runs: Sequence[Run]) -> str:
  out = []
  for r in runs:
    if r.diverged:
      out.append(f"{r.part}/{r.name} diverged at step {r.step}")
    elif not r.done:
      out.append(f"{r.part}/{r.name} {r.state.value}")
  if not out:
    return ""
  shown = "; ".join(out[:4]) + (f"; +{len(out) - 4} more" if len(out) > 4
                                else "")
  return f" Left out: {shown}."


def pairs(claim: Claim, runs: Sequence[Run]) -> tuple[list[float],
                                                      list[Run]]:
  """The per-pair contrasts of ``claim`` and the runs left out of them."""
  sides = []
  for coef, where in claim.groups():
    by_key: dict[tuple, Run] = {}
    for r in select(runs, where):
      k = _key(r, claim.pair_by)
      if k in by_key:
        raise ValueError(
            f"claim {claim.id}: two runs ({by_key[k].name}, {r.name}) share "
            f"the pairing key {claim.pair_by}={k}; add the setting that "
            "tells them apart to pair_by")
      by_key[k] = r
    sides.append((coef, by_key))
  keys = sorted(set.intersection(*[set(m) for _, m in sides])) if sides \
      else []
  out, left = [], []
  for k in keys:
    rs = [m[k] for _, m in sides]
    vals = [claim.metric.of(r) if r.done or claim.deterministic else None
            for r in rs]
    if any(v is None for v in vals):
      left += [r for r, v in zip(rs, vals) if v is None]
      continue
    if claim.contrast == "ratio":
      if len(vals) != 2 or vals[1] == 0:
        raise ValueError(f"claim {claim.id}: a ratio needs lhs and rhs "
                         "with rhs != 0")
      out.append(vals[0] / vals[1])
    else:
      out.append(sum(c * v for (c, _), v in zip(sides, vals)))
  return out, left


def _fmt(x: float, digits: int = 3) -> str:
  return f"{x:+.{digits}g}"


def judge(claim: Claim, runs: Sequence[Run], alpha: float = ALPHA,
          verdicts: Mapping[str, Verdict] | None = None) -> Verdict:
  """The verdict ``RULE`` gives ``claim`` on ``runs`` (``verdicts``: those
  of the claims judged before it, for preconditions)."""
  involved = [r for _, w in claim.groups() if w is not None
              for r in select(runs, w)] if claim.metric else []
  for req in claim.min_budget:
    why = req.unmet(involved if req.on is None else select(runs, req.on),
                    verdicts)
    if why:
      return Verdict(NOT_TESTABLE, None, None, None, 0, why)
  if claim.relation in ("all", "none"):
    return _judge_event(claim, involved)
  diffs, left = pairs(claim, runs)
  n = len(diffs)
  note = _excluded(left)
  if n == 0:
    return Verdict(INCONCLUSIVE, None, None, None, 0,
                   "no complete pair of finished runs (not run yet)." + note)
  # Sums of accuracies carry float noise (1e-15) that a zero-variance t
  # test would read as a signal: round far below any metric's resolution.
  d = np.round(np.asarray(diffs, float), 9)
  est = float(d.mean())
  if claim.deterministic:
    return _judge_fixed(claim, d, note)
  ci = stats.t_interval(d)
  if n < MIN_PAIRS:
    return Verdict(INCONCLUSIVE, est, ci, None, n,
                   f"only {n} seed pair(s); the rule needs {MIN_PAIRS}."
                   + note)
  c = claim.null
  if claim.relation == "~":
    p_eq = stats.tost(d, claim.margin, c)
    p_out = stats.outside(d, claim.margin, c)
    if p_eq < alpha:
      return Verdict(CONFIRMED, est, ci, p_eq, n,
                     f"TOST p={p_eq:.3g} < {alpha}: within ±{claim.margin:g}"
                     + note)
    if p_out < alpha:
      return Verdict(CONTRADICTED, est, ci, p_out, n,
                     f"beyond the ±{claim.margin:g} margin, one-sided "
                     f"p={p_out:.3g} < {alpha}" + note)
    # Say when the spread alone rules equivalence out at this n: a reader
    # should not wait for a verdict that more of the same cannot give.
    wide = (f"; the 95 % CI ({ci[1] - ci[0]:.3g} wide) is wider than the "
            f"±{claim.margin:g} band, so {n} pairs cannot show equivalence"
            if ci is not None and ci[1] - ci[0] > 2 * claim.margin else "")
    return Verdict(INCONCLUSIVE, est, ci, p_eq, n,
                   f"TOST p={p_eq:.3g}, outside-margin p={p_out:.3g}: neither "
                   f"< {alpha}{wide}" + note)
  want = "greater" if claim.relation == ">" else "less"
  other = "less" if want == "greater" else "greater"
  p_for = stats.paired_t(d, want, c)
  p_against = stats.paired_t(d, other, c)
  test = ("paired t" if len(claim.groups()) > 1 else "t") + (
      f" against {c:g}" if c else "")
  if p_for < alpha:
    return Verdict(CONFIRMED, est, ci, p_for, n,
                   f"one-sided {test} p={p_for:.3g} < {alpha}" + note)
  if p_against < alpha:
    return Verdict(CONTRADICTED, est, ci, p_against, n,
                   f"opposite direction, one-sided {test} p={p_against:.3g} "
                   f"< {alpha}" + note)
  return Verdict(INCONCLUSIVE, est, ci, p_for, n,
                 f"one-sided {test} p={p_for:.3g} >= {alpha}" + note)


def _judge_fixed(claim: Claim, d: np.ndarray, note: str) -> Verdict:
  if float(d.max() - d.min()) > 1e-9 * max(1.0, float(abs(d).max())):
    raise ValueError(f"claim {claim.id} is declared deterministic but its "
                     f"value varies across seeds: {d.tolist()}")
  est, c = float(d[0]), claim.null
  if claim.relation == "~":
    ok = abs(est - c) < claim.margin
    why = f"|{est:.4g} - {c:g}| {'<' if ok else '>='} {claim.margin:g}"
  else:
    ok = est > c if claim.relation == ">" else est < c
    why = f"{est:.4g} {claim.relation if ok else 'not ' + claim.relation} " \
        f"{c:g}"
  return Verdict(CONFIRMED if ok else CONTRADICTED, est, None, None, 1,
                 f"deterministic: {why}" + note)


def _judge_event(claim: Claim, runs: Sequence[Run]) -> Verdict:
  seen = [(r, claim.metric.of(r)) for r in runs if r.done or r.diverged]
  seen = [(r, v) for r, v in seen if v is not None]
  n = len(seen)
  k = sum(1 for _, v in seen if v)
  seeds = len({r.seed for r, _ in seen})
  note = _excluded([r for r in runs if not (r.done or r.diverged)])
  what = f"{k}/{n} runs {claim.metric.name}"
  if n < MIN_PAIRS or seeds < MIN_PAIRS:
    return Verdict(INCONCLUSIVE, k / n if n else None, None, None, n,
                   f"{what}; the rule needs runs from {MIN_PAIRS} seeds "
                   f"(these are from {seeds})." + note)
  want = claim.relation == "all"
  if k in (0, n):
    agrees = (k == n) == want
    return Verdict(CONFIRMED if agrees else CONTRADICTED, k / n, None, None,
                   n, what + "." + note)
  return Verdict(INCONCLUSIVE, k / n, None, None, n,
                 f"{what}: mixed." + note)


def judge_all(claims: Sequence[Claim], runs: Sequence[Run]
              ) -> dict[str, Verdict]:
  ids = [c.id for c in claims]
  dup = sorted({i for i in ids if ids.count(i) > 1})
  if dup:
    raise ValueError(f"claim ids must be unique; repeated: {dup}")
  out: dict[str, Verdict] = {}
  for c in claims:
    out[c.id] = judge(c, runs, verdicts=out)
  return out


def counts(verdicts: Mapping[str, Verdict]) -> dict[str, int]:
  return {w: sum(1 for v in verdicts.values() if v.word == w) for w in WORDS}
