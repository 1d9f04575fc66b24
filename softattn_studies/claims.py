"""Claims as data (``Claim``: which runs, which metric, the relation the
paper states, its declared ``Budget``, the settings it ``covers``), and
``judge``, which applies the one ``RULE`` to turn runs into a ``Verdict``.
"""

from __future__ import annotations

import dataclasses
import fnmatch
from typing import Any, Mapping, Sequence

import numpy as np

from softattn.sweep.records import RunRecord
from softattn_studies import stats
from softattn_studies.runs import select

ALPHA = 0.05
MIN_PAIRS = 3
CONFIRMED, CONTRADICTED = "confirmed", "contradicted"
INCONCLUSIVE, NOT_TESTABLE = "inconclusive", "not testable here"
WORDS = (CONFIRMED, CONTRADICTED, INCONCLUSIVE, NOT_TESTABLE)

RULE = f"""**Verdict rule** (`softattn_studies.claims.RULE`; the same in every
study). Runs with the same seed share init and data order, so each claim
compares settings *paired by seed* (or by the claim's pairing key, e.g.
depth and seed): per pair, the difference of the metric (or its ratio,
where the claim is about a ratio); a claim that pools several settings
within a seed (depths, widths) averages its pairs to one value per seed
before the test, as runs of one seed share init and data order.

* **Not testable here** comes first: when the runs are below the claim's
  declared minimum budget (a fraction of the paper's training, or a
  measured condition such as "the attention weights moved from their
  init"), or the setup cannot measure it (data not available offline), the
  reason is printed and no other label is given.
* **Budget:** each claim is judged at the training length it declares,
  with the paper's wording for it, before the data are read (see
  experiments/README.md); runs of any other length are refused.
* **Covered settings:** a general claim (e.g. "X breaks down", at every
  depth; "NSM ahead early", at every early budget) covers several
  settings and is judged over all of them, not at one: each seed's
  contrast is averaged over the covered settings it ran (those the rule
  can judge), and the test runs on those per-seed means. When two covered
  settings give opposite labels on their own (confirmed against
  contradicted), the claim is *inconclusive* (mixed). The words of every
  covered setting are printed. Events pool the runs of every covered
  setting.
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
  when they are mixed. A run shorter than the claim's minimum budget that
  shows the event counts (it happened within the budget); one that does
  not is censored (left out and named): it could still have happened.
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
  """A number per run: ``offset + scale * run.value(column)``, divided by
  ``run.value(per)`` when ``per`` is set (e.g. core-seconds per train step:
  ``column="core_seconds", per="step"``, comparable across run lengths)."""
  name: str
  column: str
  scale: float = 1.0
  offset: float = 0.0
  unit: str = ""
  digits: int = 2
  per: str | None = None

  def of(self, run: RunRecord) -> float | None:
    v = run.value(self.column)
    if v is not None and self.per is not None:
      d = run.value(self.per)
      v = v / d if d else None
    return None if v is None else self.offset + self.scale * v

  def finished(self, runs: Sequence[RunRecord], where: Mapping[str, Any]
               ) -> list[float]:
    """The metric of each finished run ``where`` selects that has it."""
    return [v for r in select(runs, where)
            if r.done and (v := self.of(r)) is not None]


ACCURACY = Metric("test accuracy %", "final/accuracy", 100.0, unit=" points")
ERROR = Metric("test error %", "final/accuracy", -100.0, 100.0,
               unit=" points")
STEP_MS = Metric("train step ms", "value/step_ms", digits=1)   # runs.step_ms


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

  def unmet(self, runs: Sequence[RunRecord],
            verdicts: Mapping[str, "Verdict"] | None = None) -> str | None:
    """Why the runs cannot test the claim, or None."""
    if self.claim is not None:
      if verdicts is None or self.claim not in verdicts:
        raise ValueError(f"precondition {self.claim!r} is not judged before "
                         "the claim that needs it; declare it earlier")
      word = verdicts[self.claim].word
      return None if word == CONFIRMED else \
          f"{self.why} (precondition `{self.claim}`: {word})"
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


def with_budgets(claims: Sequence["Claim"],
                 table: Sequence[tuple[str, Budget]]) -> list["Claim"]:
  """``claims``, each given the ``Budget`` of the first ``table`` row
  whose id pattern (``fnmatch``, e.g. ``"t1.*"``) matches it; a claim that
  declares its own budget keeps it. A claim no row matches, or a row that
  matches no claim, is an error: the table is the study's budget
  declaration, read before its data."""
  out, used = [], set()
  for c in claims:
    if c.budget is None:
      hit = next((i for i, (pat, _) in enumerate(table)
                  if fnmatch.fnmatchcase(c.id, pat)), None)
      if hit is None:
        raise ValueError(f"claim {c.id}: no budget row matches it; declare "
                         "one (with the paper's reason)")
      used.add(hit)
      c = dataclasses.replace(c, budget=table[hit][1])
    out.append(c)
  stale = [pat for i, (pat, _) in enumerate(table) if i not in used]
  if stale:
    raise ValueError(f"budget rows that match no claim: {stale}")
  return out


def unavailable(why: str) -> Requirement:
  return Requirement(why)


def precondition(claim_id: str, why: str) -> Requirement:
  """Testable only once claim ``claim_id`` is confirmed."""
  return Requirement(why, claim=claim_id)


Selection = Mapping[str, Any]
PAPER, SANITY = "paper", "sanity"


@dataclasses.dataclass(frozen=True)
class Budget:
  """The training lengths (our runs' ``total_steps``) a claim is judged at,
  and why: the paper's wording that places the claim in training ("early",
  "after 100 epochs"), with its section. Declared before the data are
  read; ``judge`` refuses a run of any other length, so no budget can be
  chosen after the fact (experiments/README.md states the policy)."""
  steps: tuple[int, ...]
  why: str

  def __post_init__(self):
    if not self.why.strip():
      raise ValueError("a Budget needs its reason: quote or cite the "
                       "paper's wording that places the claim in training")
    if any(int(s) != s or s <= 0 for s in self.steps):
      raise ValueError(f"Budget steps must be positive step counts; got "
                       f"{self.steps}")


@dataclasses.dataclass(frozen=True)
class Claim:
  """One claim of a paper, as data.

  ``relation``: ``>``/``<`` (``lhs - rhs`` against ``target``, default 0),
  ``~`` (``|lhs - rhs - target| < margin``), ``all``/``none`` (every /
  no run of ``lhs`` has ``metric`` true, e.g. ``value/diverged``).
  ``contrast="ratio"`` compares ``lhs / rhs`` instead (``target`` then
  defaults to 1). ``terms`` replaces ``lhs``/``rhs`` by a signed sum, e.g.
  a gap of gaps. ``pair_by``: the settings that pair runs (default the
  seed; pooled settings are averaged to one value per seed).
  ``deterministic``: the metric is the same in every seed (see ``RULE``).
  ``budget``: where in training it is judged (``Budget``). ``covers``: a
  general claim's settings as ``(label, overrides)``, the first (no
  overrides) the one it is judged at; the overrides replace fields of
  every selection (e.g. ``{"part": "main", "model.depth": 2}``; see
  ``at``).
  ``kind``: ``paper`` (the paper's claim) or ``sanity`` (the study's own
  check of what a paper claim presupposes; counted apart).
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
  budget: Budget | None = None
  covers: tuple[tuple[str, Selection], ...] = ()
  kind: str = PAPER

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
    if self.kind not in (PAPER, SANITY):
      raise ValueError(f"claim {self.id}: kind={self.kind!r}; use "
                       f"{PAPER!r} or {SANITY!r}")
    if self.covers and (len(self.covers) < 2 or self.covers[0][1]):
      raise ValueError(f"claim {self.id}: covers lists the setting it is "
                       "judged at first, with no overrides, then at least "
                       "one other")

  def at(self, overrides: Selection) -> "Claim":
    """The claim at another covered setting: ``overrides`` replace fields
    of every selection (lhs, rhs, terms); a mapping value maps the
    selection's own value (``{"part": {"loss": "loss_2ep"}}``), leaving
    selections without that field or value as they are. ``"sides"``: one
    more mapping per selection, in order (lhs, rhs, or each of ``terms``),
    applied to that selection only, e.g. depth 8 against depth 4 where
    the claim's own setting is depth 4 against depth 1."""
    sides = list(overrides.get("sides", ()))
    common = {k: v for k, v in overrides.items() if k != "sides"}
    n = len(self.terms) if self.terms else 1 + (self.rhs is not None)
    if sides and len(sides) != n:
      raise ValueError(f"claim {self.id}: a covered setting's 'sides' has "
                       f"{len(sides)} mappings; give one per selection "
                       f"({n})")

    def upd(w, i):
      if w is None:
        return None
      out = dict(w)
      for k, v in {**common, **(sides[i] if sides else {})}.items():
        if not isinstance(v, Mapping):
          out[k] = v
        elif k in out and out[k] in v:
          out[k] = v[out[k]]
        elif k in out and str(out[k]) in v:
          # A declaration read back from JSON (preregistration) has its
          # mapping keys as strings.
          out[k] = v[str(out[k])]
      return out
    return dataclasses.replace(
        self, lhs=upd(self.lhs, 0), rhs=upd(self.rhs, 1),
        terms=tuple((c, upd(w, i)) for i, (c, w) in enumerate(self.terms)),
        covers=())

  @property
  def event(self) -> bool:
    """An event claim (``all``/``none``): counted per run, not paired."""
    return self.relation in ("all", "none")

  @property
  def null(self) -> float:
    if self.target is not None:
      return self.target
    return 1.0 if self.contrast == "ratio" else 0.0

  def groups(self) -> list[tuple[float, Selection]]:
    """(coefficient, selection) of each side: ``terms``, else lhs - rhs."""
    if self.terms:
      return list(self.terms)
    return [(1.0, self.lhs)] + ([(-1.0, self.rhs)] if self.rhs is not None
                                else [])


@dataclasses.dataclass(frozen=True)
class Verdict:
  """What the rule says about one claim."""
  word: str
  estimate: float | None
  ci: tuple[float, float] | None
  p: float | None
  n: int
  reason: str
  budgets: tuple[int, ...] = ()   # the runs' total_steps the rule read


def _key(run: RunRecord, pair_by: Sequence[str]) -> tuple:
  return tuple(run.seed if f == "seed" else repr(run.get(f))
               for f in pair_by)


def _some(names: Sequence[str], k: int) -> str:
  """The first ``k`` of ``names``, then how many more."""
  return "; ".join(names[:k]) + (f"; +{len(names) - k} more"
                                 if len(names) > k else "")


def _excluded(runs: Sequence[RunRecord]) -> str:
  out = [f"{r.part}/{r.name} " + (f"diverged at step {r.step}" if r.diverged
                                  else r.state.value)
         for r in runs if r.diverged or not r.done]
  return f" Left out: {_some(out, 4)}." if out else ""


def _matched(claim: Claim, runs: Sequence[RunRecord]
             ) -> tuple[list[tuple[tuple, list[RunRecord], list]],
                        list[RunRecord]]:
  """(pairing key, runs, metric values) of every complete key of
  ``claim``, and the runs left out of them (unfinished or diverged)."""
  sides = []
  for _, where in claim.groups():
    by_key: dict[tuple, RunRecord] = {}
    for r in select(runs, where):
      k = _key(r, claim.pair_by)
      if k in by_key:
        raise ValueError(
            f"claim {claim.id}: two runs ({by_key[k].name}, {r.name}) share "
            f"the pairing key {claim.pair_by}={k}; add the setting that "
            "tells them apart to pair_by")
      by_key[k] = r
    sides.append(by_key)
  out, left = [], []
  for k in sorted(set.intersection(*map(set, sides))) if sides else []:
    rs = [m[k] for m in sides]
    vals = [claim.metric.of(r) if r.done or claim.deterministic else None
            for r in rs]
    if any(v is None for v in vals):
      left += [r for r, v in zip(rs, vals) if v is None]
      continue
    out.append((k, rs, vals))
  return out, left


def _contrast(claim: Claim, vals: Sequence[float]) -> float:
  coefs = [c for c, _ in claim.groups()]
  if claim.contrast == "ratio":
    if len(vals) != 2 or vals[1] == 0:
      raise ValueError(f"claim {claim.id}: a ratio needs lhs and rhs "
                       "with rhs != 0")
    return vals[0] / vals[1]
  return sum(c * v for c, v in zip(coefs, vals))


def per_seed(keys: Sequence[tuple], values: Sequence[float],
             pair_by: Sequence[str]) -> tuple[list[float], int]:
  """One value per seed: the mean of ``values`` over the pairing keys
  that share a seed (a claim pooled over depths x seeds has one draw of
  init and data order per seed, not one per depth), and how many keys
  were pooled per seed at most (1: nothing pooled)."""
  if "seed" not in pair_by or len(pair_by) == 1:
    return list(values), 1
  i = list(pair_by).index("seed")
  by_seed: dict[Any, list[float]] = {}
  for k, v in zip(keys, values):
    by_seed.setdefault(k[i], []).append(v)
  return ([float(np.mean(by_seed[s])) for s in sorted(by_seed)],
          max((len(v) for v in by_seed.values()), default=1))


def pairs(claim: Claim, runs: Sequence[RunRecord]
          ) -> tuple[list[float], list[RunRecord]]:
  """The per-seed contrasts of ``claim`` (``per_seed``: pooled settings
  averaged within each seed) and the runs left out of them."""
  matched, left = _matched(claim, runs)
  return _seed_contrasts(claim, matched)[0], left


def _seed_contrasts(claim: Claim, matched) -> tuple[list[float], int]:
  return per_seed([k for k, _, _ in matched],
                  [_contrast(claim, v) for _, _, v in matched], claim.pair_by)


def _involved(claim: Claim, runs: Sequence[RunRecord]) -> list[RunRecord]:
  """Every run a selection of ``claim`` (and of each covered setting)
  picks, once."""
  if claim.metric is None:
    return []
  cs = [claim] + [claim.at(o) for _, o in claim.covers[1:]]
  return list({id(r): r for c in cs for _, w in c.groups() if w is not None
               for r in select(runs, w)}.values())


def _check_budget(claim: Claim, used: Sequence[RunRecord]) -> tuple[int, ...]:
  """The budgets (``total_steps``) of the runs the rule read; refuses a
  length the claim did not declare."""
  got = tuple(sorted({int(r.total_steps) for r in used
                      if r.total_steps is not None}))
  if claim.budget is not None:
    extra = [b for b in got if b not in claim.budget.steps]
    if extra:
      raise ValueError(
          f"claim {claim.id}: its runs have {extra} steps, not in its "
          f"declared budget {claim.budget.steps}; declare the budget (with "
          "the paper's reason) before reading the data, or narrow the "
          "selection")
  return got


def judge(claim: Claim, runs: Sequence[RunRecord], alpha: float = ALPHA,
          verdicts: Mapping[str, Verdict] | None = None) -> Verdict:
  """The verdict ``RULE`` gives ``claim`` on ``runs`` (``verdicts``: those
  of the claims judged before it, for preconditions), at every setting it
  covers; ``Verdict.budgets`` records the runs' lengths it read."""
  first = _judge_setting(claim, runs, alpha, verdicts)
  if not claim.covers or first.word == NOT_TESTABLE and claim.event:
    return first
  if claim.event:
    return dataclasses.replace(
        first, reason=f"{_end(first.reason)} Pooled over the settings it "
        "covers (runs with the event / finished or diverged): " + "; ".join(
            f"{label}: {_events(claim.at(o), runs)}"
            for label, o in claim.covers) + ".")
  others = [(label, _judge_setting(claim.at(o), runs, alpha, verdicts))
            for label, o in claim.covers[1:]]
  budgets = tuple(sorted(set(first.budgets).union(
      *[v.budgets for _, v in others])))
  word = lambda v: v.word + (f" ({v.estimate:+.3g})"
                             if v.estimate is not None else "")
  every = [(claim.covers[0][0], first), *others]
  shown = "; ".join(f"{label}: {word(v)}" for label, v in every)
  decisive = {v.word for _, v in every} & {CONFIRMED, CONTRADICTED}
  if len(decisive) == 2:
    return Verdict(INCONCLUSIVE, first.estimate, first.ci, first.p, first.n,
                   f"mixed across the settings the claim covers: {shown}.",
                   budgets)
  if claim.deterministic or "seed" not in claim.pair_by:
    return dataclasses.replace(
        first, budgets=budgets, reason=f"{_end(first.reason)} Judged at "
        f"{claim.covers[0][0]}; the settings it covers: {shown}.")
  # One test over every covered setting the rule can judge: each seed's
  # contrasts averaged over the settings it ran (runs of one seed share
  # init and data order across settings, as across pooled depths), so no
  # one setting, or budget, is picked for its p-value.
  judged = [o for (_, o), (_, v) in zip(claim.covers, every)
            if v.word != NOT_TESTABLE]
  diffs, left = covered_pairs(claim, runs, judged)
  pooled = _judge_diffs(claim, diffs, 1, left, alpha)
  return dataclasses.replace(
      pooled, budgets=budgets, reason=f"{_end(pooled.reason)} Pooled over "
      f"the {len(judged)} covered settings it can judge (each seed's "
      f"contrast averaged over the settings it ran); per setting: {shown}.")


def covered_pairs(claim: Claim, runs: Sequence[RunRecord],
                  settings: Sequence[Selection] | None = None
                  ) -> tuple[list[float], list[RunRecord]]:
  """The per-seed contrasts a covered claim is tested on: each seed's
  contrast (``per_seed`` within a setting) averaged over the covered
  ``settings`` (overrides; default all) it ran, in seed order; and the
  runs left out."""
  by_seed: dict[Any, list[float]] = {}
  left: list[RunRecord] = []
  for o in (settings if settings is not None else
            [o for _, o in claim.covers] or [{}]):
    c = claim.at(o)
    matched, out = _matched(c, runs)
    left += out
    i = list(c.pair_by).index("seed")
    one: dict[Any, list[float]] = {}
    for k, _, vals in matched:
      one.setdefault(k[i], []).append(_contrast(c, vals))
    for seed, vs in one.items():
      by_seed.setdefault(seed, []).append(float(np.mean(vs)))
  return [float(np.mean(by_seed[s])) for s in sorted(by_seed)], left


def _judge_setting(claim: Claim, runs: Sequence[RunRecord], alpha: float,
                   verdicts: Mapping[str, Verdict] | None) -> Verdict:
  """``judge`` at the claim's own selections (events: with every covered
  setting's runs pooled)."""
  event = claim.event
  # Events pool every covered setting's runs; a difference is judged at
  # its own selections here (``judge`` takes the covered ones in turn).
  involved = _involved(claim if event else dataclasses.replace(
      claim, covers=()), runs)
  for req in claim.min_budget:
    if event and _censors(req):
      continue     # events censor short runs instead (_judge_event)
    why = req.unmet(involved if req.on is None else select(runs, req.on),
                    verdicts)
    if why:
      return Verdict(NOT_TESTABLE, None, None, None, 0, why)
  if event:
    return _judge_event(claim, involved)
  matched, left = _matched(claim, runs)
  budgets = _check_budget(claim, [r for _, rs, _ in matched for r in rs])
  v = _judge_diffs(claim, *_seed_contrasts(claim, matched), left, alpha)
  return dataclasses.replace(v, budgets=budgets)


def _judge_diffs(claim: Claim, diffs: Sequence[float], pooled: int,
                 left: Sequence[RunRecord], alpha: float) -> Verdict:
  n = len(diffs)
  note = _excluded(left)
  if pooled > 1:
    note = (f" Pairs averaged within each seed (up to {pooled} settings "
            "per seed) before the test." + note)
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
  out = lambda word, p, why: Verdict(word, est, ci, p, n, why + note)
  if n < MIN_PAIRS:
    return out(INCONCLUSIVE, None,
               f"only {n} seed pair(s); the rule needs {MIN_PAIRS}.")
  c, margin = claim.null, claim.margin
  if claim.relation == "~":
    p_eq, p_out = stats.tost(d, margin, c), stats.outside(d, margin, c)
    if p_eq < alpha:
      return out(CONFIRMED, p_eq,
                 f"TOST p={p_eq:.3g} < {alpha}: within ±{margin:g}")
    if p_out < alpha:
      return out(CONTRADICTED, p_out, f"beyond the ±{margin:g} margin, "
                 f"one-sided p={p_out:.3g} < {alpha}")
    # Say when the spread alone rules equivalence out at this n: a reader
    # should not wait for a verdict that more of the same cannot give.
    wide = (f"; the 95 % CI ({ci[1] - ci[0]:.3g} wide) is wider than the "
            f"±{margin:g} band, so {n} pairs cannot show equivalence"
            if ci is not None and ci[1] - ci[0] > 2 * margin else "")
    return out(INCONCLUSIVE, p_eq, f"TOST p={p_eq:.3g}, outside-margin "
               f"p={p_out:.3g}: neither < {alpha}{wide}")
  want, other = ("greater", "less") if claim.relation == ">" else \
      ("less", "greater")
  p_for, p_against = stats.paired_t(d, want, c), stats.paired_t(d, other, c)
  test = ("paired t" if len(claim.groups()) > 1 else "t") + (
      f" against {c:g}" if c else "")
  if p_for < alpha:
    return out(CONFIRMED, p_for, f"one-sided {test} p={p_for:.3g} < {alpha}")
  if p_against < alpha:
    return out(CONTRADICTED, p_against, f"opposite direction, one-sided "
               f"{test} p={p_against:.3g} < {alpha}")
  return out(INCONCLUSIVE, p_for, f"one-sided {test} p={p_for:.3g} >= {alpha}")


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


def _end(reason: str) -> str:
  """``reason`` as a sentence (ends with a full stop)."""
  return reason if reason.endswith(".") else reason + "."


def _events(claim: Claim, runs: Sequence[RunRecord]) -> str:
  """"k/n": runs of ``claim``'s selections with the event, of those
  finished or diverged."""
  seen = _ended(claim, _involved(claim, runs))
  return f"{sum(1 for _, v in seen if v)}/{len(seen)}"


def _ended(claim: Claim, runs: Sequence[RunRecord]
           ) -> list[tuple[RunRecord, float]]:
  """(run, event value) of the runs that finished or diverged."""
  return [(r, v) for r in runs if r.done or r.diverged
          if (v := claim.metric.of(r)) is not None]


def _short(claim: Claim, run: RunRecord) -> str | None:
  """Why ``run`` is shorter than a column requirement of the claim (e.g.
  the "early stages" epochs of a break-down), or None."""
  for req in filter(_censors, claim.min_budget):
    v = run.value(req.column)
    if v is not None and v < req.at_least:
      return req.why
  return None


def _censors(req: Requirement) -> bool:
  """A length requirement on the claim's own runs: an event claim censors
  the shorter runs instead of refusing the claim."""
  return req.claim is None and req.column is not None and req.on is None


def _judge_event(claim: Claim, runs: Sequence[RunRecord]) -> Verdict:
  seen = _ended(claim, runs)
  # A short run that shows the event shows it within the budget; one that
  # does not could still show it later: censored, whichever the claim.
  censored = [r for r, v in seen if not v and _short(claim, r)]
  seen = [(r, v) for r, v in seen if v or not _short(claim, r)]
  budgets = _check_budget(claim, [r for r, _ in seen])
  n = len(seen)
  k = sum(1 for _, v in seen if v)
  seeds = len({r.seed for r, _ in seen})
  note = _excluded([r for r in runs if not (r.done or r.diverged)])
  if censored:
    names = _some([f"{r.part}/{r.name}" for r in censored], 3)
    note += (f" Censored ({len(censored)} shorter than the budget without "
             f"the event): {names}.")
  if not seen and censored:
    return Verdict(NOT_TESTABLE, None, None, None, 0,
                   f"{_short(claim, censored[0])} (every run is shorter, "
                   f"and none shows the event).")
  out = lambda word, why: Verdict(word, k / n if n else None, None, None, n,
                                  f"{k}/{n} runs {claim.metric.name}{why}"
                                  + note, budgets)
  if n < MIN_PAIRS or seeds < MIN_PAIRS:
    return out(INCONCLUSIVE, f"; the rule needs runs from {MIN_PAIRS} seeds "
               f"(these are from {seeds}).")
  if k in (0, n):   # every run agrees with the claim, or every run does not
    agrees = (k == n) == (claim.relation == "all")
    return out(CONFIRMED if agrees else CONTRADICTED, ".")
  return out(INCONCLUSIVE, ": mixed.")


def judge_all(claims: Sequence[Claim], runs: Sequence[RunRecord]
              ) -> dict[str, Verdict]:
  ids = [c.id for c in claims]
  dup = sorted({i for i in ids if ids.count(i) > 1})
  if dup:
    raise ValueError(f"claim ids must be unique; repeated: {dup}")
  out: dict[str, Verdict] = {}
  for c in claims:
    out[c.id] = judge(c, runs, verdicts=out)
  return out


def of_kind(claims: Sequence[Claim], verdicts: Mapping[str, Verdict],
            kind: str) -> dict[str, Verdict]:
  """The verdicts of the claims of one ``kind`` (paper or sanity)."""
  return {c.id: verdicts[c.id] for c in claims if c.kind == kind}


def counts(verdicts: Mapping[str, Verdict]) -> dict[str, int]:
  return {w: sum(1 for v in verdicts.values() if v.word == w) for w in WORDS}
