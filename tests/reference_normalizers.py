"""Independent float64 NumPy references, written from the formulas in the papers
(as quoted in each ``softattn.normalizers`` docstring), not from that code.

Each reference works on one row of *valid* scores (a 1-D array) and returns its
weights; ``apply`` scatters rows back and gives masked keys 0. Nothing here
imports softattn, so the implementation is checked against the formulas, not
against itself.
"""

import math

import numpy as np


def _softmax(x):
  e = np.exp(x - x.max())
  return e / e.sum()


def _gelu_tanh(x):  # jax.nn.gelu's default (approximate=True)
  return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))


ACTS = {
    "relu": lambda x: np.maximum(x, 0),
    "relu2": lambda x: np.maximum(x, 0) ** 2,
    "gelu": _gelu_tanh,
    "gelu_exact": lambda x: 0.5 * x * (1 + np.vectorize(math.erf)(x / math.sqrt(2))),
    "softplus": lambda x: np.log1p(np.exp(x)),
    "identity": lambda x: x,
    "relu6": lambda x: np.clip(x, 0, 6),
    "sigmoid": lambda x: 1 / (1 + np.exp(-x)),
}


def _ratio(g, eps):
  den = g.sum()
  return g / (den + eps if den >= 0 else den - eps)


def _bisect(f, lo, hi, iters=200):
  """Root of the decreasing function f on [lo, hi]."""
  for _ in range(iters):
    mid = 0.5 * (lo + hi)
    lo, hi = (mid, hi) if f(mid) > 0 else (lo, mid)
  return 0.5 * (lo + hi)


def sparsemax(x):
  tau = _bisect(lambda t: np.maximum(x - t, 0).sum() - 1, x.min() - 1, x.max())
  return np.maximum(x - tau, 0)


def entmax15(x):
  z = x / 2
  tau = _bisect(lambda t: (np.maximum(z - t, 0) ** 2).sum() - 1,
                z.min() - 1, z.max())
  return np.maximum(z - tau, 0) ** 2


def stick_breaking(x):
  beta = 1 / (1 + np.exp(-x))
  return np.array([beta[j] * np.prod(1 - beta[j + 1:]) for j in range(len(x))])


def _std(x, eps):
  return math.sqrt(x.var() + eps)


def _sink(x, sink):
  # exp(x_i) / (exp(sink) + sum exp(x_j)), via one log-sum-exp over the row
  # with the sink appended.
  return np.exp(x - np.logaddexp.reduce(np.append(x, sink)))


def _stablemax(x):
  g = np.array([v + 1 if v >= 0 else 1 / (1 - v) for v in x])
  return g / g.sum()


def _lssa(x, power, kappa):
  # softplus(kappa log(n) x)^power over the row's n keys, normalised in log
  # space: softplus underflows for every key of a row of large negative
  # scores. log softplus(y) = log(logaddexp(0, y)) while that is finite, and
  # y - e^y/2 (its expansion, error ~e^{2y}) below y = -30.
  y = kappa * math.log(len(x)) * x
  with np.errstate(divide="ignore"):
    log_sp = np.where(y > -30, np.log(np.logaddexp(0.0, np.maximum(y, -30))),
                      y - np.exp(np.minimum(y, -30)) / 2)
  return _softmax(power * log_sp)


def _laplace(x, mu=math.sqrt(0.5), sigma=math.sqrt(1 / (4 * math.pi)),
             alpha=1.0):
  z = (x / len(x) ** alpha - mu) / (sigma * math.sqrt(2))
  return 0.5 * (1 + np.vectorize(math.erf)(z))


REFS = {
    "softmax": lambda x: _softmax(x),
    "normsoftmax": lambda x, gamma=math.inf, tau=1.0, eps=1e-6: _softmax(
        (x - x.mean()) / (tau * min(_std(x, eps), gamma))),
    "normsoftmax_learnable": lambda x, w, eps=1e-6: _softmax(w * x / _std(x, eps)),
    "normsoftmax_inverse": lambda x, gamma=1.0, eps=1e-6: _softmax(
        x / max(_std(x, eps), gamma)),
    "logitnorm": lambda x, tau=None, eps=1e-6: _softmax(
        x / ((len(x) ** -0.5 if tau is None else tau) * np.linalg.norm(x) + eps)),
    "relu_seqlen": lambda x, alpha=1.0, act="relu": len(x) ** -alpha * ACTS[act](x),
    "scaled": lambda x: x / math.sqrt(len(x)),
    "sin_max": lambda x, freq=1.0, eps=1e-6: _ratio(np.sin(freq * x), eps),
    "sin_max_constant": lambda x, freq=1.0, eps=1e-6: _ratio(
        1 + np.sin(freq * x), eps),
    "cos_max": lambda x, freq=1.0, eps=1e-6: _ratio(np.cos(freq * x), eps),
    "sin2_max": lambda x, freq=1.0, eps=1e-6: _ratio(np.sin(freq * x) ** 2, eps),
    "sin2_max_shifted": lambda x, freq=1.0, eps=1e-6: _ratio(
        np.sin(freq * x + math.pi / 4) ** 2, eps),
    "sin_softmax": lambda x, freq=1.0, post_scale=1.0: _softmax(
        post_scale * np.sin(freq * x)),
    "siren_max": lambda x, freq=1.0, eps=1e-6: _ratio(
        (1 + np.sin(freq * x)) / (2 - 2 * np.sin(freq * x) + eps), eps),
    "sigmoid": lambda x, bias=None: 1 / (1 + np.exp(
        -(x + (-math.log(len(x)) if bias is None else bias)))),
    "ssmax": lambda x, s_scale: _softmax(s_scale * math.log(len(x)) * x),
    "softpick": lambda x, eps=1e-6: np.maximum(np.exp(x) - 1, 0) / (
        np.abs(np.exp(x) - 1).sum() + eps),
    "stick_breaking": stick_breaking,
    "taylor_softmax": lambda x, eps=0.0: _ratio(1 + x + x * x / 2, eps),
    "sparsemax": sparsemax,
    "entmax15": entmax15,
    "nap": lambda x, g=1.0, b=0.0, eps=1e-6: (x - x.mean()) / _std(x, eps) * g + b,
    "softmax_1": lambda x: _sink(x, 0.0),
    "softmax_sink": _sink,
    "cog": lambda x: np.sign(x) * _softmax(np.abs(x)),
    "stablemax": lambda x, eps=0.0: _stablemax(x),
    "consmax": lambda x, beta, denom, max_exponent=80.0: np.exp(
        np.minimum(x - beta, max_exponent)) / denom,
    "lssa": lambda x, power=1.0, kappa=1.0: _lssa(x, power, kappa),
    "lssar": lambda x, power, kappa=1.0: _lssa(x, power, kappa),
    "laplace": _laplace,
    "polynomial": lambda x, p=3: x ** p / math.sqrt(len(x)),
}


def prenorm(inner, eps=1e-5):
  def ref(x, **params):
    var_unbiased = x.var(ddof=1) if len(x) > 1 else 0.0
    return REFS[inner]((x - x.mean()) / math.sqrt(var_unbiased + eps), **params)
  return ref


def apply(ref, scores, mask=None, **params):
  """Applies a row reference to ``scores[..., n]`` with a boolean ``mask``."""
  scores = np.asarray(scores, np.float64)
  mask = np.ones(scores.shape, bool) if mask is None else np.broadcast_to(
      np.asarray(mask, bool), scores.shape)
  out = np.zeros_like(scores)
  for idx in np.ndindex(scores.shape[:-1]):
    valid = mask[idx]
    if valid.any():
      out[idx][valid] = ref(scores[idx][valid], **params)
  return out
