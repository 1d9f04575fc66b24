"""``--config.<field>=<value>`` overrides, one field of a loaded config each.

``apply_override`` sets one ``--config.<field>=<text>`` on a config (from
``softattn.config_files.load_file``), parsing the text into the field's type
the way ``ml_collections.config_flags`` does; ``split_overrides`` finds them
on a command line. Errors are ``ValueError`` with one line naming the fix;
``softattn.main``, ``softattn.aot`` and the sweep declarations share them,
so a sweep's override is checked by the same code that will apply it.

Why not ``config_flags.DEFINE_config_file`` (as ``big_vision`` does)? With
ml_collections 1.1 it cannot keep what the command line promises
(tests/test_cli.py), each a one-line error naming the fix:
  * an unknown field (``--config.model.dropout=0.1``) escapes flag parsing
    as a bare ``AttributeError: 'dropout'`` (``KeyError`` for
    ``--config.seed.x``): not an ``absl`` flag error, so a traceback, and it
    names neither the field's path nor the valid fields;
  * a ``ValueError`` from ``get_config`` (an unknown or mistyped config arg)
    is re-raised with the whole traceback inside its message;
  * a missing config file is no error while parsing: the flag holds a
    placeholder that raises a multi-line ``IOError`` on first access;
  * ``--config.model=vit`` (a section) is parsed as a ``ConfigDict`` literal
    ("malformed node"), not "set its fields";
  * overrides are found in ``sys.argv`` (or a ``sys_argv`` fixed when the flag
    is defined) and each defines a new flag in the ``FlagValues``, so a second
    command line in one process (the in-process CLI tests) needs a fresh
    ``FlagValues`` with every flag defined again, and a sweep's
    ``--set field=value`` (no command line of its own) cannot use it at all.
What it does do is reused here: its value parsers (``_PARSERS``) and
``config_path`` (field types, setting values), so ``--config.x=...`` means
what it means to ``config_flags``, with ``--config.x value`` and
``--noconfig.x`` too.
"""

from __future__ import annotations

from typing import Any, Sequence

from absl import flags
import ml_collections
from ml_collections.config_flags import config_path, tuple_parser

from softattn.config_files import load_file
from softattn.config_schema import did_you_mean, one_line


def field_type(config: ml_collections.ConfigDict, path: str) -> type:
  """The type of leaf ``path`` (``"model.normalizer"``) in ``config``.

  Raises:
    ValueError: ``path`` names no field (with the valid names and the nearest
      one), names a section rather than a field, or a field whose value is
      ``None`` with no type (``config_flags`` cannot parse those either).
  """
  holder = config
  keys = path.split(".")
  for i, key in enumerate(keys):
    where = "config." + ".".join(keys[:i]) if i else "config"
    if not isinstance(holder, ml_collections.ConfigDict):
      raise ValueError(f"unknown config field {path!r}: {where} is a "
                       f"{type(holder).__name__}, not a section.")
    if key not in holder:
      raise ValueError(
          f"unknown config field {path!r}{did_you_mean(key, holder.keys())}; "
          f"{where} has: {', '.join(sorted(holder.keys()))}.")
    holder = holder[key]
  if isinstance(holder, ml_collections.ConfigDict):
    raise ValueError(f"config.{path} is a section, not a field; set its fields "
                     f"(--config.{path}.<field>=...) instead.")
  kind = config_path.get_type(path, config)
  if kind is type(None):
    raise ValueError(
        f"config.{path} is None in the config file and has no type to parse "
        f"into; give it a typed default or "
        f"ml_collections.config_dict.placeholder(<type>) there.")
  return kind


# The parsers ``ml_collections.config_flags`` uses for each field type, so a
# value typed here means what it means to ``--config.<field>`` in big_vision.
_PARSERS = {bool: flags.BooleanParser(), int: flags.IntegerParser(),
            float: flags.FloatParser(), str: flags.ArgumentParser(),
            tuple: tuple_parser.TupleParser()}
_EXAMPLES = {bool: "true", int: "100", float: "0.5", tuple: "'(4, 4)'"}


def parse_value(config: ml_collections.ConfigDict, path: str, text: str) -> Any:
  """``text`` parsed into the type of field ``path`` (see ``field_type``)."""
  kind = field_type(config, path)
  parser = _PARSERS.get(kind)
  if parser is None:
    raise ValueError(f"config.{path} has type {kind.__name__}, which command "
                     f"line overrides cannot set; change it in the config file.")
  try:
    value = parser.parse(text)
  except (ValueError, TypeError, SyntaxError):
    raise ValueError(
        f"config.{path}={text!r} is not a {kind.__name__}; e.g. "
        f"--config.{path}={_EXAMPLES.get(kind, '...')}.") from None
  if kind is float and isinstance(value, int):
    value = float(value)
  return value


def apply_override(config: ml_collections.ConfigDict, path: str, value: Any
                   ) -> None:
  """Sets field ``path``; ``value`` is text (parsed) or an already typed value."""
  if isinstance(value, str) and field_type(config, path) is not str:
    value = parse_value(config, path, value)
  else:
    field_type(config, path)
  try:
    config_path.set_value(path, config, value)
  except (TypeError, ValueError) as e:
    raise ValueError(f"cannot set config.{path}={value!r}: {one_line(e)}"
                     ) from None


def split_overrides(argv: Sequence[str]
                    ) -> tuple[list[str], list[tuple[str, str]]]:
  """Separates ``--config.<field>[=<value>]`` overrides from the other flags.

  Returns ``(other_argv, [(field, text), ...])``. A bare ``--config.<f>`` means
  ``true`` and ``--noconfig.<f>`` ``false``, as absl's boolean flags;
  ``--config.<f> <value>`` takes the next token unless it is another flag.
  """
  rest, overrides = [], []
  args = list(argv)
  i = 0
  while i < len(args):
    arg = args[i]
    name, eq, text = arg.partition("=")
    if name.startswith(("--config.", "--noconfig.")):
      field = name.split(".", 1)[1]
      if name.startswith("--noconfig."):
        text = "false"
      elif not eq:
        if i + 1 < len(args) and not args[i + 1].startswith("--"):
          i += 1
          text = args[i]
        else:
          text = "true"
      overrides.append((field, text))
    else:
      rest.append(arg)
    i += 1
  return rest, overrides


def load_with_overrides(spec: str, overrides: Sequence[tuple[str, str]]
                        ) -> ml_collections.ConfigDict:
  """``load_file(spec)`` with each ``(field, text)`` override applied, in order.

  Raises:
    ValueError: one line naming the fix (see ``load_file``, ``apply_override``).
  """
  config = load_file(spec)
  for field, text in overrides:
    apply_override(config, field, text)
  return config
