"""The studies' verdict counts, written once: every RESULTS.md ``Summary``
line (``line``) and the table at the top of experiments/README.md
(``table``) render the same ``Tally``, so the two cannot disagree.

A ``Tally`` splits a study's claims three ways:

* **kind**: the paper's claims, and the study's own sanity checks (what a
  paper claim presupposes), which are never counted with them;
* **registration** (``softattn_studies.preregistration``, read from the
  study's ``registration.json``): *pre-registered* (declared, unchanged,
  before any run it judges was committed), *post hoc* (declared or
  changed after), *no data yet*;
* **evidence**: *empirical*, or *by construction*: a deterministic
  quantity (memory plan, FLOP or parameter count; ``Claim.deterministic``)
  that follows from the configs, not from training, so its confirmation
  is no evidence about a normalizer's behaviour.

A post hoc claim that was declared before its data in another form is
also judged as first declared (``original_verdicts``); the counts of those
labels are shown beside today's.
"""

from __future__ import annotations

import dataclasses
from typing import Mapping, Sequence

from softattn.sweep.records import RunRecord
from softattn_studies import claims as claims_lib
from softattn_studies import preregistration as prereg
from softattn_studies import render
from softattn_studies.claims import Claim, Verdict

EMPIRICAL, CONSTRUCTION = "empirical", "by construction"
UNCHECKED = "not checked"       # no registration.json entry (yet)
STATUSES = (prereg.PRE, prereg.POST, prereg.NO_DATA, UNCHECKED)
DECLARED = {prereg.PRE: "pre-registered", prereg.POST: "post hoc",
            prereg.NO_DATA: "no data yet",
            UNCHECKED: "not checked (run `python -m softattn_studies "
                       "preregistration --write`)"}
CONSTRUCTION_WHAT = "memory, FLOP or parameter counts"


def evidence(claim: Claim) -> str:
  return CONSTRUCTION if claim.deterministic else EMPIRICAL


def status(claim_id: str, registration: Mapping[str, Mapping] | None) -> str:
  entry = (registration or {}).get(claim_id)
  return entry["status"] if entry else UNCHECKED


def original_verdicts(claims: Sequence[Claim], runs: Sequence[RunRecord],
                      verdicts: Mapping[str, Verdict],
                      registration: Mapping[str, Mapping] | None
                      ) -> dict[str, Verdict]:
  """Each post hoc claim with an earlier declaration, judged as that
  declaration reads (``preregistration.original_claim``) on today's runs:
  the one in force before its data, else its first one (made after its
  data) where it differs from today's; preconditions read today's verdicts
  of the claims they name."""
  out = {}
  for c in claims:
    entry = (registration or {}).get(c.id)
    first = entry and entry["status"] == prereg.POST and (
        entry["original"] or entry.get("first"))
    if first:
      out[c.id] = claims_lib.judge(prereg.original_claim(c, first), runs,
                                   verdicts=verdicts)
  return out


@dataclasses.dataclass(frozen=True)
class Tally:
  """``cells[(kind, status, evidence)][word]``: how many claims; ``firsts``:
  the paper's post hoc claims whose declaration changed, by the word their
  first declaration gets (``original_verdicts``); ``phenomena``: per group
  of claims that restate one phenomenon (``Study.phenomena``), its words."""
  cells: Mapping[tuple[str, str, str], Mapping[str, int]]
  firsts: Mapping[str, int]
  phenomena: tuple[tuple[str, Mapping[str, int]], ...] = ()

  def count(self, kind: str = claims_lib.PAPER, status_: str | None = None,
            evidence_: str | None = None, word: str | None = None) -> int:
    return sum(n for (k, s, e), words in self.cells.items()
               if k == kind and status_ in (None, s)
               and evidence_ in (None, e)
               for w, n in words.items() if word in (None, w))


def tally(claims: Sequence[Claim], verdicts: Mapping[str, Verdict],
          registration: Mapping[str, Mapping] | None = None,
          originals: Mapping[str, Verdict] | None = None,
          phenomena: Mapping[str, Sequence[str]] | None = None) -> Tally:
  cells: dict = {}
  firsts = dict.fromkeys(claims_lib.WORDS, 0)
  for c in claims:
    key = (c.kind, status(c.id, registration), evidence(c))
    words = cells.setdefault(key, dict.fromkeys(claims_lib.WORDS, 0))
    words[verdicts[c.id].word] += 1
    if c.kind == claims_lib.PAPER and c.id in (originals or {}):
      firsts[originals[c.id].word] += 1
  groups = tuple((name, {w: n for w in claims_lib.WORDS if (n := sum(
      verdicts[i].word == w for i in ids))}) for name, ids in (
          phenomena or {}).items())
  return Tally(cells, firsts, groups)


def _phenomena(t: Tally) -> str:
  return "; ".join(f"\"{name}\" ({sum(words.values())} claims: " + ", ".join(
      f"{n} {w}" for w, n in words.items()) + ")" for name, words in
                   t.phenomena)


def _words(t: Tally, kind: str, status_: str | None, evidence_: str) -> str:
  return ", ".join(f"{n} {w}" for w in claims_lib.WORDS
                   if (n := t.count(kind, status_, evidence_, w)))


def _group(t: Tally, kind: str, status_: str) -> str:
  n = t.count(kind, status_)
  emp = _words(t, kind, status_, EMPIRICAL)
  con = _words(t, kind, status_, CONSTRUCTION)
  parts = [emp] if emp else []
  if con:
    parts.append(f"{CONSTRUCTION} ({CONSTRUCTION_WHAT}): {con}")
  return f"{DECLARED[status_]} ({n}): " + "; ".join(parts)


def line(t: Tally) -> str:
  """The RESULTS.md Summary line."""
  paper = t.count()
  text = f"the paper's {paper} claims, by how they were declared: " + \
      " | ".join(_group(t, claims_lib.PAPER, s) for s in STATUSES
                 if t.count(claims_lib.PAPER, s)) + "."
  first = sum(t.firsts.values())
  if first:
    text += (f" As first declared, {first} of the post hoc claims read: " + ", ".join(
                 f"{n} {w}" for w, n in t.firsts.items() if n) + ".")
  if t.phenomena:
    text += (" Claims that restate one phenomenon, so one piece of evidence "
             f"each group: {_phenomena(t)}.")
  checks = t.count(claims_lib.SANITY)
  if checks:
    text += (f" Sanity checks ({checks}, not counted above): " + ", ".join(
        f"{n} {w}" for w in claims_lib.WORDS
        if (n := t.count(claims_lib.SANITY, word=w))) + ".")
  return text


def table(rows: Sequence[tuple[str, Tally | None]]) -> str:
  """experiments/README.md's table: a row per study and registration
  status, the paper's claims only; the verdict columns count empirical
  claims, *by construction* the deterministic ones apart."""
  head = ["study", "declared", *claims_lib.WORDS, CONSTRUCTION, "claims"]
  out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
  total: dict[tuple[str, str], int] = {}
  firsts = dict.fromkeys(claims_lib.WORDS, 0)
  for name, t in rows:
    if t is None:
      out.append(f"| {name} | no runs.csv yet |" + " - |" * (len(head) - 2))
      continue
    for w, n in t.firsts.items():
      firsts[w] += n
    for s in STATUSES:
      if not t.count(claims_lib.PAPER, s):
        continue
      cells = [t.count(claims_lib.PAPER, s, EMPIRICAL, w)
               for w in claims_lib.WORDS]
      for w, n in zip(claims_lib.WORDS, cells):
        total[(s, w)] = total.get((s, w), 0) + n
      con = _words(t, claims_lib.PAPER, s, CONSTRUCTION) or "-"
      total[(s, CONSTRUCTION)] = total.get((s, CONSTRUCTION), 0) + t.count(
          claims_lib.PAPER, s, CONSTRUCTION)
      out.append(f"| {name} | {DECLARED[s]} | " + " | ".join(
          map(str, cells)) + f" | {con} | {t.count(claims_lib.PAPER, s)} |")
  lines = []
  for s in STATUSES:
    n = sum(v for (ss, _), v in total.items() if ss == s)
    if not n:
      continue
    words = ", ".join(f"{total[(s, w)]} {w}" for w in claims_lib.WORDS
                      if total.get((s, w)))
    con = total.get((s, CONSTRUCTION), 0)
    lines.append(f"* {DECLARED[s]} ({n}): {words}"
                 + (f"; {con} {CONSTRUCTION}" if con else "") + ".")
  text = "\n".join(out)
  if lines:
    text += ("\n\nAll studies with data, the paper's claims (by "
             f"construction: {CONSTRUCTION_WHAT}, counted apart):\n\n"
             + "\n".join(lines))
  groups = [f"`{name}`: {_phenomena(t)}" for name, t in rows
            if t is not None and t.phenomena]
  if groups:
    text += ("\n\nClaims counted above that restate one phenomenon (one "
             "piece of evidence each group): " + "; ".join(groups) + ".")
  if sum(firsts.values()):
    text += ("\n\nThe post hoc claims whose declaration changed, as first "
             "declared: " + ", ".join(
                 f"{n} {w}" for w, n in firsts.items() if n) + ".")
  return text


def notes(claims: Sequence[Claim], registration: Mapping[str, Mapping] | None,
          originals: Mapping[str, Verdict]) -> dict[str, str]:
  """The text after each post hoc claim's verdict in RESULTS.md: what
  changed after its data and, where it had an earlier declaration, the
  label that declaration gets."""
  out = {}
  for c in claims:
    entry = (registration or {}).get(c.id)
    if not entry or entry["status"] != prereg.POST:
      continue
    how = next((f for f in entry["changed"] if f.startswith("declared")),
               None)
    if how and "removed" in entry["changed"]:
      how += ", removed, declared again"
    changed = [f for f in entry["changed"]
               if not f.startswith("declared") and f != "removed"]
    if how and not changed:
      text = f"*Post hoc*: {how} after its data"
    else:
      text = (f"*Post hoc*: {how + ', then its ' if how else 'its '}"
              f"{', '.join(changed)} changed after its data")
    if c.id in originals:
      v = originals[c.id]
      est = render.estimate(v)
      when = "before its data" if entry["original"] else "after its data"
      text += (f"; as first declared ({when}): **{v.word}**"
               + (f" ({est})" if est else ""))
    out[c.id] = text + "."
  return out


def of_study(study, runs: Sequence[RunRecord], verdicts: Mapping[str, Verdict],
             study_dir: str) -> tuple[Tally, dict[str, str]]:
  """A study's ``Tally`` and post hoc ``notes``, with the registration
  read from ``study_dir`` (where its runs.csv is): what its RESULTS.md and
  the README's table both render."""
  reg = prereg.read_registration(study_dir or ".")
  firsts = original_verdicts(study.claims, runs, verdicts, reg)
  return (tally(study.claims, verdicts, reg, firsts, study.phenomena),
          notes(study.claims, reg, firsts))
