"""YAML read with its line numbers kept, so that a wrong inventory can say where it is wrong.

PyYAML's safe_load forgets positions and silently keeps the last of two equal keys; here
the composed node tree is turned into plain values by SafeLoader itself, and every
mapping remembers the line of each key.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from burnin.core.rootfiles import refusal, running_as_root, untrusted
from burnin.errors import SourceError, SourceErrors  # noqa: F401  (raised here, caught by callers)


class Mapping(dict):
    """A dict that knows the line of its own start and of each of its keys."""

    line: int | None = None
    key_lines: dict


class Sequence(list):
    """A list that knows the line of its own start and of each of its items."""

    line: int | None = None
    item_lines: list


def load(path: Path, shown_as: str | None = None):
    """Parse a YAML file into Mapping/Sequence/scalars; raise SourceErrors on bad YAML."""
    shown = shown_as or str(path)
    # Run as root (node-check under slurmd, a run with Slurm or hooks), the inventory is
    # root's instructions: the commands it names run as uid 0.
    problem = untrusted(path) if running_as_root() else ""
    if problem:
        raise SourceErrors([SourceError(shown, None, "", refusal("the inventory", path,
                                                                 problem))])
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise SourceErrors([SourceError(shown, None, "", "file not found")]) from None
    except (OSError, UnicodeDecodeError) as e:
        raise SourceErrors([SourceError(shown, None, "", f"cannot read: {e}")]) from None
    try:
        loader = yaml.SafeLoader(text)
    except yaml.reader.ReaderError as e:  # a character YAML does not allow, anywhere
        line: int | None = text.count("\n", 0, e.position) + 1
        raise SourceErrors([SourceError(shown, line, "", f"not valid YAML: {e.reason} "
                                        f"#x{e.character:04x}")]) from None
    try:
        root = loader.get_single_node()
        if root is None:
            return None
        return _convert(loader, root, shown)
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        line = mark.line + 1 if mark else None
        problem = e.problem or str(e)
        raise SourceErrors([SourceError(shown, line, "", f"not valid YAML: {problem}")]) from None
    except yaml.YAMLError as e:
        raise SourceErrors([SourceError(shown, None, "", f"not valid YAML: {e}")]) from None
    except RecursionError:  # PyYAML composes nested collections recursively
        raise SourceErrors([SourceError(shown, None, "", "not valid YAML: nested too deeply "
                                        "to read")]) from None
    finally:
        loader.dispose()


def _convert(loader: yaml.SafeLoader, node: yaml.Node, shown: str):
    if isinstance(node, yaml.MappingNode):
        loader.flatten_mapping(node)  # resolves YAML merge keys (<<)
        out = Mapping()
        out.line = node.start_mark.line + 1
        out.key_lines = {}
        for key_node, value_node in node.value:
            key = _convert(loader, key_node, shown)
            line = key_node.start_mark.line + 1
            if isinstance(key, (Mapping, Sequence)):
                raise SourceErrors([SourceError(shown, line, "", "a key must be a plain value")])
            if key in out:
                raise SourceErrors([SourceError(
                    shown, line, str(key),
                    f"duplicate key (first given on line {out.key_lines[key]})")])
            out[key] = _convert(loader, value_node, shown)
            out.key_lines[key] = line
        return out
    if isinstance(node, yaml.SequenceNode):
        seq = Sequence(_convert(loader, item, shown) for item in node.value)
        seq.line = node.start_mark.line + 1
        seq.item_lines = [item.start_mark.line + 1 for item in node.value]
        return seq
    return loader.construct_object(node, deep=True)
