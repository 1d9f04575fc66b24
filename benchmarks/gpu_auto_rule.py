"""Where ``auto`` should switch from dense to the fused kernels on a GPU,
read from the committed H200 runs (issue #46: at the ViT lengths 196, 576
and 1024, ``auto`` picks whichever of fused and dense is faster).

    python benchmarks/gpu_auto_rule.py      # prints the table and the range

Reads forward+backward times (bf16, B4 H16 D128, no mask; ms) of
``implementation="pallas"`` and ``"dense"`` from the runs of 2026-11-28
(``benchmarks/results/gpu_2026-11-28/call{1,2}_grid.json``: the Triton
kernels with today's 128 x 128 blocks; call 2, with the 3-stage forward,
supersedes call 1 where both have a row). Per (length, normalizer) the
winner is the path faster by more than ``MARGIN`` (the two calls' rows
agreed within 3 % in forward+backward), else a tie. The scores per (batch,
head) above which ``auto`` fuses, ``attention.AUTO_PALLAS_MIN_SCORES_GPU``,
must lie at or above every length dense won and below every length fused
won; ``tests/test_attention.py`` checks that it does. The Mosaic GPU
kernels are untimed (docs/kernels.md): the same threshold applies to them
until they are measured.
"""

from __future__ import annotations

import json
import os

RUNS = ("call1_grid.json", "call2_grid.json")   # later supersedes earlier
FOLDER = os.path.join(os.path.dirname(__file__), "results", "gpu_2026-11-28")
MARGIN = 0.03


def times(folder: str = FOLDER) -> dict[tuple[int, str, str], float]:
  """``(length, normalizer, impl) -> fwd+bwd ms`` for pallas and dense at
  the default blocks and launch."""
  out = {}
  for name in RUNS:
    with open(os.path.join(folder, name)) as f:
      for row in json.load(f)["rows"]:
        if (row["impl"] in ("pallas", "dense") and row.get("launch") is None
            and row.get("blocks") in (None, [None, None])
            and isinstance(row.get("fwd_bwd_ms"), float)):
          out[row["length"], row["normalizer"], row["impl"]] = row["fwd_bwd_ms"]
  return out


def winners(ms: dict) -> dict[tuple[int, str], str]:
  """``(length, normalizer) -> "pallas" | "dense" | "tie"`` where both ran."""
  out = {}
  for (length, norm, impl), t in ms.items():
    other = ms.get((length, norm, "dense"))
    if impl != "pallas" or other is None:
      continue
    out[length, norm] = ("pallas" if t < other * (1 - MARGIN) else
                         "dense" if other < t * (1 - MARGIN) else "tie")
  return out


def allowed(won: dict) -> tuple[int, int]:
  """``(low, high)``: a threshold on ``Lq * Lk`` fuses exactly where fused
  won and leaves to dense where dense won iff ``low <= threshold < high``."""
  low = max((l * l for (l, _), w in won.items() if w == "dense"), default=0)
  high = min((l * l for (l, _), w in won.items() if w == "pallas"),
             default=2**62)
  return low, high


def main():
  ms = times()
  won = winners(ms)
  print("| L | normalizer | pallas fwd+bwd ms | dense fwd+bwd ms | faster |")
  print("|---|---|---|---|---|")
  for length, norm in sorted(won):
    print(f"| {length} | {norm} | {ms[length, norm, 'pallas']:.3f} | "
          f"{ms[length, norm, 'dense']:.3f} | {won[length, norm]} |")
  low, high = allowed(won)
  print(f"\nfuse when Lq * Lk > T for any T in [{low}, {high}) "
        f"(sqrt: [{low ** 0.5:.0f}, {high ** 0.5:.0f}))")


if __name__ == "__main__":
  main()
