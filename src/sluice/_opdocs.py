"""Writes the operator reference, ``docs/operators.md``, from the operator schemas: per operator its devices, the
packages each device needs, inputs, outputs, every argument with its type, default and whether it may vary per
sample, and where it differs from DALI (the compatibility layer's tables, arguments kept only for DALI's sake, and
the notes below).

    python -m sluice._opdocs          # rewrites docs/operators.md (in a source checkout)
    python -m sluice._opdocs --check  # exits 1 when it is out of date (run by the tests)
"""

from __future__ import annotations

import ast
import enum
import re
import sys
from pathlib import Path

import sluice.ops  # noqa: F401 - registers the operators
from sluice._optional import EXTRAS
from sluice._stubs import write_or_check
from sluice.compat._legacy import (ARG_RULES, FN_ALIASES, FN_OTHER_NAMES, OPS_ALIASES, OPS_OTHER_NAMES, Dropped,
                                   OnlyValues, Renamed)
from sluice.schema import REGISTRY, REQUIRED, Arg, OpSchema, _camel

DOC = Path(__file__).resolve().parents[2] / "docs" / "operators.md"

#: Differences from DALI that no table of the compatibility layer holds. (They would sit better in the schemas;
#: they are kept here while the operators' files are being rewritten elsewhere, and move there with them.)
NOTES: dict[str, list[str]] = {
    "decoders.image": ["Also decodes GIF (the first frame)."],
    "decoders.image_crop": ["Also decodes GIF (the first frame)."],
    "decoders.image_random_crop": ["Also decodes GIF (the first frame)."],
    "decoders.image_slice": ["Also decodes GIF (the first frame)."],
    "decoders.audio": ["`device='mixed'` is a sluice extension (DALI decodes audio on the CPU only): WAV samples "
                       "are converted on the GPU and the outputs are CUDA tensors."],
    "readers.video": ["With `filenames` and no `labels` sluice still yields a label output (DALI yields none); the "
                      "DALI compatibility layer drops it, as DALI does.",
                      "Variable frame rates are read exactly: `skip_vfr_check` is not needed."],
    "external_source": ["A per-sample source whose data ends mid-batch gives the samples it has as a last, smaller "
                        "batch, then ends the epoch (nothing read is dropped)."],
}

_GROUPS = (("readers", "Readers"), ("decoders", "Decoders"), ("image", "Image processing"), ("audio", "Audio"),
           ("detection", "Bounding boxes and coordinates"), ("random", "Random numbers"), ("io", "Files"),
           ("tensor", "Tensors and data"))

_ACCEPTED = re.compile(r"^Accepted for (DALI )?compatibility", re.IGNORECASE)


def _group(schema: OpSchema) -> str:
    first = schema.name.split(".")[0]
    if first in ("readers", "decoders", "random", "io"):
        return first
    kernel = next(iter(schema.kernels.values()), None)
    module = getattr(getattr(kernel, "kernel", kernel), "__module__", "") or ""
    parts = module.split(".")
    package = parts[2] if len(parts) > 3 else ""
    if package == "decoders":
        return "decoders"
    return package if package in ("image", "audio", "detection") else "tensor"


def _value(value: object) -> str:
    if value is REQUIRED:
        return "required"
    if isinstance(value, enum.Enum):
        return f"types.{value.name}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_value(v) for v in value) + "]"
    return repr(value)


def _cell(text: str) -> str:
    return _markdown(text).replace("|", "\\|").replace("\n", " ")


def _is_python(code: str) -> bool:
    try:
        ast.parse(code)
    except SyntaxError:  # a formula or a shell line
        return False
    return True


def _markdown(text: str) -> str:
    """RST-flavoured docstring text -> Markdown: ``x`` -> `x`, and a paragraph ending in ``::`` followed by an
    indented block -> a fenced Python block."""
    text = re.sub(r"``([^`]+)``", r"`\1`", text)
    lines = text.split("\n")
    out: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.rstrip().endswith("::") and i + 1 < len(lines):
            out.append(line.rstrip()[:-2].rstrip() + (":" if not line.rstrip()[:-2].endswith(":") else ""))
            i += 1
            while i < len(lines) and not lines[i].strip():
                i += 1
            block = []
            while i < len(lines) and (lines[i].startswith("    ") or not lines[i].strip()):
                block.append(lines[i][4:] if lines[i].strip() else "")
                i += 1
            while block and not block[-1]:
                block.pop()
            out += ["", "```python" if _is_python("\n".join(block)) else "```", *block, "```", ""]
            continue
        out.append(line)
        i += 1
    return "\n".join(out).strip()


def _requires(schema: OpSchema) -> str:
    parts = []
    for device in schema.devices:
        modules = schema.requires.get(device, ())
        if modules:
            extras = sorted({EXTRAS[m][1] for m in modules if m in EXTRAS})
            parts.append(f"{device}: {', '.join(f'`{m}`' for m in modules)} "
                         f"({', '.join(f'`sluice[{e}]`' for e in extras)})")
    return "; ".join(parts)


def dali_differences(schema: OpSchema) -> list[str]:
    """Where this operator differs from DALI's, as lines of Markdown."""
    lines = []
    names = sorted(f"`fn.{n}`" for n, (target, _) in FN_ALIASES.items() if target == schema.name)
    names += sorted(f"`ops.{n}`" for n, (target, _) in OPS_ALIASES.items() if target == schema.name)
    if names:
        lines.append(f"DALI's deprecated names {', '.join(names)} work through `sluice.compat` (with a "
                     "DeprecationWarning).")
    other = sorted([f"`fn.{n}`" for n, t in FN_OTHER_NAMES.items() if t == schema.name]
                   + [f"`ops.{n}`" for n, t in OPS_OTHER_NAMES.items() if t == schema.name])
    if other:
        lines.append(f"DALI calls it {', '.join(other)}.")
    dropped: dict[str, list[str]] = {}  # why -> arguments
    for arg, rule in ARG_RULES.get(schema.name, {}).items():
        if isinstance(rule, Renamed):
            lines.append(f"DALI's `{arg}` is spelled `{rule.new}`; `sluice.compat` takes the old name with a "
                         "DeprecationWarning.")
        elif isinstance(rule, Dropped):
            dropped.setdefault(rule.why, []).append(f"`{arg}`")
        elif isinstance(rule, OnlyValues):
            distinct: list = []
            for v in rule.values:
                if not any(v == d for d in distinct):  # 0 and 0.0 are one value
                    distinct.append(v)
            values = ", ".join(_value(v) for v in distinct)
            lines.append(f"`{arg}`: only {values} ({rule.why}); other values raise NotImplementedError.")
    for why, args in dropped.items():
        lines.append(f"{', '.join(args)}: accepted by `sluice.compat` and ignored: {why}.")
    accepted = [a.name for a in schema.args.values() if _ACCEPTED.match(a.doc) and a.name != "bytes_per_sample_hint"]
    if accepted:
        lines.append(f"{', '.join(f'`{a}`' for a in accepted)}: accepted for compatibility, no effect.")
    if "shard_id" in schema.args and "num_shards" in schema.args:
        lines.append("With `torch.distributed` initialised, `shard_id` / `num_shards` default to the global rank and "
                     "world size (DALI: 0 and 1, which `sluice.compat` keeps).")
    lines += NOTES.get(schema.name, [])
    return lines


def _inputs(schema: OpSchema) -> str:
    n = schema.max_inputs if schema.max_inputs < 8 else schema.min_inputs
    names = schema.input_names or (["input"] if n == 1 else [f"input{i}" for i in range(n)])
    shown = [f"`{name}`" + ("" if i < schema.min_inputs else " (optional)") for i, name in enumerate(names[:n])]
    if schema.max_inputs > n:
        shown.append("more inputs")
    return ", ".join(shown) if shown else "none"


def _outputs(schema: OpSchema) -> str:
    return str(schema._outputs) if not callable(schema._outputs) else "depends on the arguments"


def _arg_row(arg: Arg) -> str:
    doc = arg.doc
    if arg.choices is not None:
        doc += f" One of {', '.join(_value(c) for c in arg.choices)}."
    if arg.range_text():
        doc += f" {arg.range_text().capitalize()}."
    return (f"| `{arg.name}` | {arg.type_name()} | `{_value(arg.default)}` | {'yes' if arg.per_sample else ''} | "
            f"{_cell(doc)} |")


def _section(schema: OpSchema) -> list[str]:
    *path, _ = schema.name.split(".")
    cls = ".".join(["ops", *path, _camel(schema.name)])
    lines = [f"### fn.{schema.name}", "", _markdown(schema.doc), "",
             f"- Class form: `{cls}`",
             f"- Devices: {', '.join(f'`{d}`' for d in schema.devices)} (default `{schema.default_device}`)",
             f"- Inputs: {_inputs(schema)}; outputs: {_outputs(schema)}"]
    needs = _requires(schema)
    lines.append(f"- Needs: {needs}" if needs else "- Needs: nothing beyond numpy and torch")
    lines += ["", "| argument | type | default | per sample | description |", "|---|---|---|---|---|"]
    lines += [_arg_row(a) for a in schema.args.values() if a.name not in ("preserve", "bytes_per_sample_hint")]
    diffs = dali_differences(schema)
    if diffs:
        lines += ["", "Differences from DALI:", ""] + [f"- {d}" for d in diffs]
    return lines + [""]


def generate() -> str:
    schemas = [s for name, s in sorted(REGISTRY.items()) if not name.startswith("_")]
    lines = ["<!-- Generated by `python -m sluice._opdocs` from the operator schemas; do not edit. -->", "",
             "# Operator reference", "",
             f"{len(schemas)} operators, as `fn.<name>(...)` (functions) and `ops.<Name>(...)` (classes), with "
             "DALI's names and arguments. `help(fn.<name>)` shows the same text, and `src/sluice/fn.pyi` gives "
             "IDEs the signatures.", "",
             "Every operator also takes `device` (`'cpu'`, `'gpu'`, or `'mixed'` for decoders: bytes in, CUDA "
             "tensors out), `name`, and DALI's `preserve` and `bytes_per_sample_hint` (accepted; sluice sizes its "
             "buffers itself). Arguments marked *per sample* may be given as a DataNode (one value per sample, "
             "e.g. `angle=fn.random.uniform(range=(-10, 10))`).", "",
             "\"Needs\" lists the optional packages a device imports and the extra that installs them; a pipeline "
             "that uses an operator whose package is missing fails when it is built, naming the extra. "
             "Differences from DALI common to all operators are in [docs/dali.md](dali.md).", ""]
    by_group: dict[str, list[OpSchema]] = {}
    for schema in schemas:
        by_group.setdefault(_group(schema), []).append(schema)
    lines += ["## Contents", ""]
    for key, title in _GROUPS:
        if key in by_group:
            links = ", ".join(f"[{s.name}](#fn{s.name.replace('.', '')})" for s in by_group[key])
            lines.append(f"- **{title}**: {links}")
    lines.append("")
    for key, title in _GROUPS:
        if key not in by_group:
            continue
        lines += [f"## {title}", ""]
        for schema in by_group[key]:
            lines += _section(schema)
    missing = set(by_group) - {k for k, _ in _GROUPS}
    assert not missing, f"operator groups without a title: {missing}"
    return "\n".join(lines).rstrip() + "\n"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not DOC.parent.parent.joinpath("pyproject.toml").exists():
        print(f"{DOC} is not in a source checkout of sluice; run this from one", file=sys.stderr)
        return 2
    return write_or_check(DOC, generate(), argv, "python -m sluice._opdocs")


if __name__ == "__main__":
    sys.exit(main())
