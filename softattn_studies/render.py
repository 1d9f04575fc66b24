"""What a study's RESULTS.md shows, rendered: the table cells it declares as
data, claims tables, verdicts and estimates, and the summary of all studies.
The hand-written template they fill is ``softattn_studies.template``'s.
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from softattn.sweep.records import RunRecord
from softattn_studies import claims as claims_lib
from softattn_studies import stats
from softattn_studies.claims import Claim, Metric, Verdict
from softattn_studies.runs import select

NOT_RUN = "not run yet"


def md_table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
  """A GitHub markdown table; cells are ``str``-ed, ``|`` escaped."""
  esc = lambda x: str(x).replace("|", "\\|").replace("\n", " ")
  lines = ["| " + " | ".join(esc(h) for h in headers) + " |",
           "|" + "|".join("---" for _ in headers) + "|"]
  lines += ["| " + " | ".join(esc(x) for x in row) + " |" for row in rows]
  return "\n".join(lines)


def fmt_summary(s: stats.Summary, declared: int, digits: int = 2,
                unit: str = "", scale: float = 1.0, sci: bool = False
                ) -> str:
  """``"81.20 ± 0.50 (n=3)"``: mean ± 95 % half-width over seeds."""
  if s.n == 0:
    return NOT_RUN if declared else "not declared"
  f = f".{digits}{'g' if sci else 'f'}"
  missing = f", {declared - s.n} missing" if declared > s.n else ""
  m = s.mean * scale
  if s.n == 1:
    return f"{m:{f}}{unit} (1 seed{missing})"
  return f"{m:{f}} ± {s.half * scale:{f}}{unit} (n={s.n}{missing})"


def cell(runs: Sequence[RunRecord], where: Mapping[str, Any], metric: Metric,
         per_seed: bool = False, **kw) -> str:
  """The table cell of ``metric`` over the runs ``where`` selects.
  ``per_seed``: for a selection that pools settings (depths, sizes), each
  seed's runs are averaged first and the interval is over seeds, since runs
  of one seed share init and data order (3 depths x 3 seeds are 3 draws,
  not 9); a seed with an unfinished run is missing."""
  rs = select(runs, where)
  if rs and all(r.diverged for r in rs):
    return f"diverged ({len(rs)}/{len(rs)})"
  vals = [metric.of(r) if r.done else None for r in rs]
  if per_seed:
    by_seed = {}
    for r, v in zip(rs, vals):
      by_seed.setdefault(r.seed, []).append(v)
    vals = [None if None in v else float(np.mean(v))
            for _, v in sorted(by_seed.items())]
  return fmt_summary(stats.summarize(vals), len(vals),
                     digits=kw.pop("digits", metric.digits), **kw)


@dataclasses.dataclass(frozen=True)
class Cell:
  """A table cell as data: ``metric`` over the runs ``where`` selects
  (``fmt``: ``fmt_summary``'s digits / unit / scale / sci; ``per_seed``:
  see ``cell``)."""
  where: Mapping[str, Any]
  metric: Metric
  fmt: Mapping[str, Any] = dataclasses.field(default_factory=dict)
  per_seed: bool = False

  def text(self, runs: Sequence[RunRecord]) -> str:
    return cell(runs, self.where, self.metric, self.per_seed, **self.fmt)


@dataclasses.dataclass(frozen=True)
class Events:
  """An event count as a table cell: "2/3 (step 285, 300)", the runs of
  ``where`` that ended (finished or diverged) in which ``event`` (a 0/1
  metric, e.g. "diverged or at chance") happened, then the step each did
  (the per-run value ``at``, in order). ``words``: what precedes the steps
  when one of them diverged, and when none did."""
  where: Mapping[str, Any]
  event: Metric
  at: str
  words: tuple[str, str] = ("step", "step")

  def text(self, runs: Sequence[RunRecord]) -> str:
    rs = [r for r in select(runs, self.where) if r.done or r.diverged]
    if not rs:
      return NOT_RUN
    hit = [r for r in rs if self.event.of(r)]
    at = [f"{v:.0f}" for v in sorted(r.value(self.at) for r in hit
                                       if r.value(self.at) is not None)]
    how = self.words[0 if any(r.diverged for r in hit) else 1]
    return f"{len(hit)}/{len(rs)}" + (f" ({how} {', '.join(at)})"
                                      if at else "")


@dataclasses.dataclass(frozen=True)
class Ratio:
  """A derived cell: ``metric``'s mean over the finished runs of ``a``
  over its mean over ``b``'s, "1.066" (``show_a``: "1.280 (1.066)", a's
  mean first); not paired by seed (for that, a claim's ``Contrast``)."""
  metric: Metric
  a: Mapping[str, Any]
  b: Mapping[str, Any]
  show_a: bool = False

  def text(self, runs: Sequence[RunRecord]) -> str:
    a, b = (stats.summarize(self.metric.finished(runs, w)).mean
            for w in (self.a, self.b))
    if a is None or b is None:
      return NOT_RUN
    return f"{a:.3f} ({a / b:.3f})" if self.show_a else f"{a / b:.3f}"


@dataclasses.dataclass(frozen=True)
class Contrast:
  """A claim's per-pair contrasts (lhs - rhs, or lhs / rhs), as the rule
  pairs them, whatever its verdict: "1.21 ± 0.092 (n=3)" (``spread=False``:
  "1.21"); a description where the rule gives no estimate (e.g. a claim
  not testable on this hardware). No pair: ``empty``."""
  claim: Claim
  spread: bool = True
  empty: str = "-"

  def text(self, runs: Sequence[RunRecord]) -> str:
    s = stats.summarize(claims_lib.pairs(self.claim, runs)[0])
    if s.mean is None:
      return self.empty
    if not self.spread:
      return f"{s.mean:.3g}"
    return f"{s.mean:.3g}" + (f" ± {s.half:.2g}" if s.half else "") + \
        f" (n={s.n})"


@dataclasses.dataclass(frozen=True)
class ClaimEstimate:
  """The estimate and 95 % CI ("+1.23 [+0.5, +2.0]") the rule gives
  ``claim``: for a paired comparison the prose quotes that is not a
  declared claim (no verdict of its own)."""
  claim: Claim

  def text(self, runs: Sequence[RunRecord]) -> str:
    return estimate(claims_lib.judge(self.claim, runs))


@dataclasses.dataclass(frozen=True)
class Span:
  """"474-514": the least and the largest ``metric`` over the finished
  runs of every selection in ``wheres`` (``fmt``: a format spec); one
  number when both read the same, "?" when none has it."""
  wheres: Sequence[Mapping[str, Any]]
  metric: Metric
  fmt: str = ".3g"

  def text(self, runs: Sequence[RunRecord]) -> str:
    got = [v for w in self.wheres for v in self.metric.finished(runs, w)]
    if not got:
      return "?"
    lo, hi = f"{min(got):{self.fmt}}", f"{max(got):{self.fmt}}"
    return lo if lo == hi else f"{lo}-{hi}"


@dataclasses.dataclass(frozen=True)
class Spread:
  """"±1.2": the widest 95 % half-width of ``metric`` over seeds among the
  selections ``wheres`` (one setting each): how far apart seeds are;
  "?" when none has two finished seeds."""
  wheres: Sequence[Mapping[str, Any]]
  metric: Metric
  digits: int = 1

  def text(self, runs: Sequence[RunRecord]) -> str:
    halves = [stats.summarize(self.metric.finished(runs, w)).half
              for w in self.wheres]
    halves = [h for h in halves if h]
    return f"±{max(halves):.{self.digits}f}" if halves else "?"


def as_text(x, runs: Sequence[RunRecord]) -> str:
  """A table entry or fact as text: a cell (anything with ``text(runs)``:
  ``Cell``, ``Events``, ``Ratio``, ...), a function of the runs, or a fixed
  string."""
  if hasattr(x, "text"):
    return x.text(runs)
  return x(runs) if callable(x) else str(x)


@dataclasses.dataclass(frozen=True)
class Table:
  """A table as data: ``columns`` (the first heads the row labels) and
  ``rows``, each a label and one entry (``as_text``) per further column."""
  columns: Sequence[str]
  rows: Sequence[tuple[str, Sequence[Any]]]

  def __post_init__(self):
    for label, row in self.rows:
      if len(row) != len(self.columns) - 1:
        raise ValueError(f"table row {label!r} has {len(row)} cells for "
                         f"{len(self.columns) - 1} columns")

  def _rows(self, runs: Sequence[RunRecord]) -> list[list[str]]:
    return [[label, *[as_text(x, runs) for x in row]]
            for label, row in self.rows]

  def cells(self, runs: Sequence[RunRecord]) -> dict[tuple[str, str], str]:
    """{(row label, column header): rendered cell}; a row label that
    repeats names no cell."""
    labels = [label for label, _ in self.rows]
    return {(row[0], col): x for row in self._rows(runs)
            if labels.count(row[0]) == 1
            for col, x in zip(self.columns[1:], row[1:])}

  def markdown(self, runs: Sequence[RunRecord]) -> str:
    return md_table(self.columns, self._rows(runs))


def epoch_range(runs: Sequence[RunRecord]) -> str:
  """"0.11-0.43" (or "2.6"): the span of the runs' declared epochs."""
  eps = sorted({r.epochs for r in runs if r.epochs})
  if not eps:
    return "?"
  return f"{eps[0]:.2g}" if eps[0] == eps[-1] else \
      f"{eps[0]:.2g}-{eps[-1]:.2g}"


def steps(runs: Sequence[RunRecord], where: Mapping[str, Any] | None = None
          ) -> str:
  """"50/100/200": the declared steps of the runs ``where`` selects."""
  rs = runs if where is None else select(runs, where)
  return "/".join(str(x) for x in sorted({r.total_steps for r in rs
                                          if r.total_steps})) or "?"


def seeds(runs: Sequence[RunRecord]) -> str:
  """"3", or "2-3" when settings differ: seeds per setting (runs that
  differ only in the seed)."""
  per: dict[str, set] = {}
  for r in runs:
    key = json.dumps({k: v for k, v in r.overrides.items() if k != "seed"},
                     sort_keys=True, default=repr)
    per.setdefault(key, set()).add(r.seed)
  ns = sorted({len(v) for v in per.values()})
  return "?" if not ns else f"{ns[0]}" if len(ns) == 1 else \
      f"{ns[0]}-{ns[-1]}"


def design(runs: Sequence[RunRecord], where: Mapping[str, Any],
           length: str = "steps") -> str:
  """A part's declared budget, read from its runs: "300 steps (0.32 epoch)
  x 3 seeds" (``length="steps"``) or "10 epochs x 3 seeds" ("epochs")."""
  rs = select(runs, where)
  if not rs:
    return "not declared"
  n = seeds(rs)
  tail = f" x {n} seed{'' if n == '1' else 's'}"
  if length == "epochs":
    eps = sorted({r.epochs for r in rs if r.epochs})
    if not eps:
      return "not declared"
    return (" / ".join(f"{e:g}" for e in eps) +
            f" epoch{'s' if eps[-1] != 1 else ''}" + tail)
  return f"{steps(rs)} steps ({epoch_range(rs)} epoch)" + tail


def estimate(v: Verdict, digits: int = 3) -> str:
  """"+1.23 [+0.5, +2.0]": the verdict's estimate and 95 % CI ("" if none)."""
  if v.estimate is None:
    return ""
  est = f"{v.estimate:+.{digits}g}"
  if v.ci is not None:
    est += f" [{v.ci[0]:+.{digits}g}, {v.ci[1]:+.{digits}g}]"
  return est


def verdict_cell(v: Verdict, digits: int = 3) -> str:
  if v.word == claims_lib.NOT_TESTABLE:
    return f"**{v.word}**: {v.reason}"
  parts = [estimate(v, digits)] if v.estimate is not None else []
  if v.p is not None:
    parts.append(f"p={v.p:.2g}")
  parts.append(f"n={v.n}")
  return f"**{v.word}** ({', '.join(parts)}): {v.reason}"


def claims_table(claims: Sequence[Claim], verdicts: Mapping[str, Verdict],
                 shown: set | None = None,
                 notes: Mapping[str, str] | None = None) -> str:
  """Claim | paper | verdict rows; records the ids in ``shown``;
  ``notes``: text after a claim's verdict (e.g. that it is post hoc)."""
  if shown is not None:
    shown.update(c.id for c in claims)
  notes = notes or {}
  return md_table(["claim", "paper", "verdict here (estimate [95 % CI])"],
                  [[f"{c.text} (`{c.id}`)", f"{c.paper_ref}: {c.paper_value}",
                    _with_note(verdict_cell(verdicts[c.id]),
                               notes.get(c.id))]
                   for c in claims])


def _with_note(cell_: str, note: str | None) -> str:
  if not note:
    return cell_
  return cell_ + ("" if cell_.rstrip().endswith(".") else ".") + " " + note


def image(path: str | None, alt: str) -> str:
  if not path:
    return f"({alt}: plotted once runs have finished)"
  return f"![{alt}]({os.path.basename(path)})"


SUMMARY_BEGIN = ("<!-- studies-summary: generated by `python -m "
                 "softattn_studies summary`; do not edit -->")
SUMMARY_END = "<!-- /studies-summary -->"


def replace_summary(text: str, table: str) -> str:
  """``text`` with the block between the summary markers replaced (added
  after the first heading when absent)."""
  block = f"{SUMMARY_BEGIN}\n{table}\n{SUMMARY_END}"
  if SUMMARY_BEGIN in text and SUMMARY_END in text:
    pre, rest = text.split(SUMMARY_BEGIN, 1)
    return pre + block + rest.split(SUMMARY_END, 1)[1]
  first, _, rest = text.partition("\n")
  return f"{first}\n\n{block}\n{rest}"
