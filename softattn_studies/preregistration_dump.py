"""Prints the claim declarations of some studies, as one commit declares them.

Run by ``softattn_studies.preregistration`` in a subprocess whose working
directory is a commit's tree (``git archive``) and whose ``PYTHONPATH`` is
that tree, so it loads that commit's own engine (``softattn_studies``, or
``softattn.studies`` before it moved) and studies: ``python -c <this file's
text> STUDY...``. Standard library only, and no import of today's engine:
it serialises any version's ``Claim`` by its dataclass fields.

Output: one line ``PREREG_JSON {study: {"claims": {id: declaration}} or
{"error": one line}}``. A declaration is every field of the claim that
decides its verdict or where it is counted, prose left out (see
``preregistration.PROSE``); dataclasses carry their class name under
``"~"`` so the caller can drop fields at today's defaults.
"""

import dataclasses
import importlib.util
import json
import math
import os
import re
import sys

# Prose: what a field says, not what the rule reads. Kept in step with
# softattn_studies.preregistration.PROSE (a test checks).
PROSE = {"Claim": ("text", "paper_ref", "paper_value", "section"),
         "Metric": ("name", "unit", "digits"),
         "Requirement": ("why",),
         "Budget": ("why",)}


def canon(x):
  """``x`` as JSON data: dataclasses by field (prose left out), mappings
  with string keys, tuples as lists, integral floats as ints (a selection
  ``{"alpha": 1}`` picks the same runs as ``{"alpha": 1.0}``)."""
  if dataclasses.is_dataclass(x) and not isinstance(x, type):
    kind = type(x).__name__
    out = {"~": kind}
    for f in dataclasses.fields(x):
      if f.name in PROSE.get(kind, ()):
        continue
      v = getattr(x, f.name)
      if kind == "Claim" and f.name == "covers":
        # The label of each covered setting is prose; its overrides pick
        # the runs.
        out[f.name] = [canon(o) for _, o in v]
      else:
        out[f.name] = canon(v)
    return out
  if isinstance(x, dict) or hasattr(x, "items"):
    return {str(k): canon(v) for k, v in sorted(x.items(), key=lambda kv:
                                                 str(kv[0]))}
  if isinstance(x, (list, tuple)):
    return [canon(v) for v in x]
  if isinstance(x, bool) or x is None or isinstance(x, str):
    return x
  if hasattr(x, "item") and not isinstance(x, (int, float)):
    x = x.item()      # numpy scalars
  if isinstance(x, int):
    return int(x)
  if isinstance(x, float):
    if math.isfinite(x) and x == int(x) and abs(x) < 2 ** 53:
      return int(x)
    return repr(x) if not math.isfinite(x) else x
  if callable(x):
    return "callable:" + getattr(x, "__qualname__", type(x).__name__)
  return repr(x)


def load(path):
  name = "prereg_" + re.sub(r"\W", "_", os.path.abspath(path))
  spec = importlib.util.spec_from_file_location(name, path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


def declarations(study):
  rep = os.path.join("experiments", study, "report.py")
  if not os.path.exists(rep):
    return {"error": "no report.py"}
  mod = load(rep)
  st = getattr(mod, "STUDY", None)
  cl = getattr(st, "claims", None) if st is not None else None
  if cl is None:
    cl = getattr(mod, "CLAIMS", None)
  if cl is None:
    return {"error": "report.py declares no claims as data (no STUDY)"}
  out = {}
  for c in cl:
    if not dataclasses.is_dataclass(c):
      return {"error": f"a claim is not a dataclass: {type(c).__name__}"}
    out[c.id] = canon(c)
  return {"claims": out}


def main(studies):
  result = {}
  root = os.getcwd()
  for study in studies:
    try:
      result[study] = declarations(study)
    except BaseException as e:  # pylint: disable=broad-except
      # SystemExit too: an old report.py may parse sys.argv on import.
      line = (str(e).strip().splitlines() or [""])[0][:300]
      result[study] = {"error": f"{type(e).__name__}: {line}"}
    os.chdir(root)
  engine = sys.modules.get("softattn_studies") or sys.modules.get(
      "softattn.studies")
  where = getattr(engine, "__file__", None) or ""
  own = any(os.path.exists(p) for p in (
      "softattn_studies", os.path.join("softattn", "studies"),
      os.path.join("softattn", "studies.py")))
  if own and where and not os.path.abspath(where).startswith(root + os.sep):
    # The commit has its own engine, but the installed one was loaded.
    result = {s: {"error": f"engine loaded from {where}, not the commit"}
              for s in studies}
  sys.stdout.write("PREREG_JSON " + json.dumps(result, sort_keys=True) + "\n")
  sys.stdout.flush()


if __name__ == "__main__":
  main(sys.argv[1:])
