"""The YAML reading of a spec: PyYAML's safe loader, with numbers read as YAML 1.2 reads them.

PyYAML reads YAML 1.1, where ``1e-3`` is text and ``1:30`` is the number 90. A spec's numbers
mean what YAML 1.2 (and a reader) says: ``1e-3`` and ``.5e3`` are numbers, and a number that the
two versions read differently is an error (`AmbiguousNumber`) asking for plain digits. So are the
words YAML 1.1 alone reads as booleans (``on``, ``yes``, ``off``, ``no``) and its dates
(``2024-01-01``): they are text in YAML 1.2, so the spec asks for true/false or quotes
(`AmbiguousValue`).
"""

import re

import yaml


class AmbiguousValue(yaml.constructor.ConstructorError):
    """A plain scalar that YAML 1.1 (PyYAML) and YAML 1.2 read as different values."""


class AmbiguousNumber(AmbiguousValue):
    """A number that YAML 1.1 and YAML 1.2 read differently (``1:30``, ``017``, ``1_000``)."""


class _Loader(yaml.SafeLoader):
    """PyYAML's safe loader, reading 1e-3 and .5e3 as numbers as YAML 1.2 does (1.1 wants 1.0e-3).

    A number that YAML 1.1 reads otherwise than YAML 1.2 (and than a reader expects) is an
    error instead of a silent value: ``1:30`` (base 60: 90), ``017`` (octal: 15), ``0b101``
    (binary: 5), ``1_000`` (1000; text in 1.2) and ``0o17`` (text in 1.1; 15 in 1.2).
    """

    def __init__(self, stream):
        super().__init__(stream)
        self.ambiguous: list[str] = []   # `_build`'s lines about such numbers, raised at the end

    def construct_yaml_int(self, node):
        _refuse_ambiguous(node, super().construct_yaml_int(node))
        return super().construct_yaml_int(node)

    def construct_yaml_float(self, node):
        _refuse_ambiguous(node, super().construct_yaml_float(node))
        return super().construct_yaml_float(node)

    def construct_yaml_bool(self, node):
        value = super().construct_yaml_bool(node)
        if node.value.lower() not in ("true", "false"):
            raise AmbiguousValue(None, None, (
                f"{node.value} is {str(value).lower()} in YAML 1.1 but text in YAML 1.2; write "
                f"{str(value).lower()}, or quote it ('{node.value}') if you mean text"),
                node.start_mark)
        return value

    def construct_yaml_timestamp(self, node):
        raise AmbiguousValue(None, None, (
            f"{node.value} is a date in YAML 1.1 but text in YAML 1.2; quote it "
            f"('{node.value}')"), node.start_mark)

    def construct_yaml_str(self, node):
        text = node.value
        if node.style is None and re.fullmatch(r"[-+]?0(?:o[0-7]+|[0-9]+)", text):
            number = int(text.replace("o", ""), 8 if "o" in text else 10)
            raise AmbiguousNumber(None, None, _ambiguous(
                text, f"is text in YAML 1.1 but the number {number} in YAML 1.2", str(number)),
                node.start_mark)
        return super().construct_yaml_str(node)


_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9_]+)[eE][-+]?[0-9]+$"),
    list("-+.0123456789"))
for _tag, _constructor in (("int", _Loader.construct_yaml_int),
                           ("float", _Loader.construct_yaml_float),
                           ("str", _Loader.construct_yaml_str),
                           ("bool", _Loader.construct_yaml_bool),
                           ("timestamp", _Loader.construct_yaml_timestamp)):
    _Loader.add_constructor(f"tag:yaml.org,2002:{_tag}", _constructor)


def _refuse_ambiguous(node, value: int | float) -> None:
    """Raise AmbiguousNumber when YAML 1.1 reads plain scalar `node` unlike YAML 1.2."""
    text, shown = node.value, repr(value) if isinstance(value, float) else str(value)
    if ":" in text:
        why = f"is {shown} in YAML 1.1 (base 60)"
    elif re.fullmatch(r"[-+]?0b[01_]+", text):
        why = f"is the binary number {shown} in YAML 1.1"
    elif "_" in text:
        why = f"is {shown} in YAML 1.1"
    elif re.fullmatch(r"[-+]?0[0-7]+", text) and value != int(text):
        raise AmbiguousNumber(None, None, _ambiguous(
            text, f"is the octal number {shown} in YAML 1.1 but {int(text)} in YAML 1.2",
            f"{shown} or {int(text)}"), node.start_mark)
    else:
        return
    raise AmbiguousNumber(None, None, _ambiguous(text, why + " but text in YAML 1.2", shown),
                          node.start_mark)


def _ambiguous(text: str, why: str, plain: str) -> str:
    return (f"{text} {why}; write the number in plain digits ({plain}), or quote it if you mean "
            "text")


def ambiguous_problem(err: AmbiguousValue, key: str | int | None) -> str:
    """The error's text; for ``divergence_factor: off`` (a number), how to turn the check off."""
    word = err.problem.split(" ", 1)[0]
    if key == "divergence_factor" and word.lower() in ("off", "no", "n"):
        return (f"{word} is false in YAML 1.1 but text in YAML 1.2, and divergence_factor is a "
                "number: write null to turn the divergence check off")
    return err.problem
