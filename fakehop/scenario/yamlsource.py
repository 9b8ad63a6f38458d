"""Safe YAML loading that remembers where every mapping key and list item came from.

Scenario errors must name the file and the line, so the loader builds plain dicts and
lists that also carry the line of each key and item. Only the safe YAML subset is
accepted: tags that would build Python objects are errors, like any other bad input. So is a
document whose aliases would expand it far beyond its own size ("billion laughs"): a few
lines of anchors can stand for billions of nodes, and whatever walked or serialised them
(tool-call arguments are turned into JSON) would run out of time and memory.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import yaml

if TYPE_CHECKING:  # the stubs give the C loader no class in common with the pure one, whose methods it has
    _BaseLoader = yaml.SafeLoader
else:
    try:  # the C loader is several times faster on big files; both are safe loaders
        _BaseLoader = yaml.CSafeLoader
    except AttributeError:  # pragma: no cover - depends on how PyYAML was built
        _BaseLoader = yaml.SafeLoader


class LineDict(dict):
    """A mapping from YAML, with `line` (its own) and `key_lines` (each key's)."""

    line: int = 0

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.key_lines: dict = {}


class LineList(list):
    """A list from YAML, with `line` (its own) and `item_lines` (each item's)."""

    line: int = 0

    def __init__(self, *args):
        super().__init__(*args)
        self.item_lines: list[int] = []


class YamlProblem(Exception):
    """The text is not YAML fakehop can read; `line` is 1-based (0 when unknown)."""

    def __init__(self, message: str, line: int = 0):
        super().__init__(message)
        self.message = message
        self.line = line


MAX_EXPANDED_SIZE = (
    4_000_000  # nodes plus scalar characters, aliases expanded; a 1 MB file without aliases stays below 2,000,000
)


MERGE_TAG = "tag:yaml.org,2002:merge"  # the `<<` key


class _Loader(_BaseLoader):
    pass


class _AliasCheckingLoader(_Loader):
    """For text with anchors (`&name`), without which there are no aliases to expand."""

    def get_single_data(self):
        node = self.get_single_node()
        if node is None:
            return None
        _check_expanded_size(node)
        return self.construct_document(node)


def _check_expanded_size(root: yaml.Node) -> None:
    """Refuse a document that aliases would expand beyond MAX_EXPANDED_SIZE, or that contains itself.

    Each node's expanded size is counted once (an aliased node is the same object wherever it
    appears), so this takes time in proportion to the text, whatever it expands to.
    """
    sizes: dict[int, int] = {}
    open_nodes: set[int] = set()  # nodes whose children are being counted: the path from the root
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, children_counted = stack.pop()
        key = id(node)
        if children_counted:
            open_nodes.discard(key)
            sizes[key] = 1 + sum(sizes[id(child)] for child in _children(node))
            if sizes[key] > MAX_EXPANDED_SIZE:
                raise YamlProblem(
                    f"aliases expand this document to more than {MAX_EXPANDED_SIZE:,} nodes and characters",
                    node.start_mark.line + 1,
                )
        elif key in open_nodes:
            raise YamlProblem("an alias refers to a node that contains it", node.start_mark.line + 1)
        elif key not in sizes:
            if isinstance(node, yaml.ScalarNode):
                sizes[key] = 1 + len(node.value)
                continue
            open_nodes.add(key)
            stack.append((node, True))
            stack.extend((child, False) for child in _children(node))


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    return []


def _construct_mapping(loader, node):
    """A LineDict of the node's pairs. The keys a merge (`<<: *defaults`) brings come first, and
    a key of the mapping's own overrides them, as YAML's merge says; a key given twice in the
    mapping itself is refused."""
    own = sum(1 for key_node, _ in node.value if key_node.tag != MERGE_TAG)
    loader.flatten_mapping(node)
    merged = len(node.value) - own
    mapping = LineDict()
    mapping.line = node.start_mark.line + 1
    own_keys: set = set()
    for index, (key_node, value_node) in enumerate(node.value):
        key = loader.construct_object(key_node, deep=True)
        key_line = key_node.start_mark.line + 1
        if not isinstance(key, (str, int, float, bool)) and key is not None:
            raise YamlProblem("a mapping key must be a plain value", key_line)
        if key in own_keys:
            raise YamlProblem(f"duplicate key {key!r} (first on line {mapping.key_lines[key]})", key_line)
        if index >= merged:
            own_keys.add(key)
        mapping[key] = loader.construct_object(value_node, deep=True)
        mapping.key_lines[key] = key_line
    return mapping


def _construct_sequence(loader, node):
    items = LineList(loader.construct_object(child, deep=True) for child in node.value)
    items.line = node.start_mark.line + 1
    items.item_lines = [child.start_mark.line + 1 for child in node.value]
    return items


def _refuse_tag(loader, suffix, node):
    raise YamlProblem(f"YAML tag {node.tag!r} is not allowed", node.start_mark.line + 1)


_Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)
_Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_SEQUENCE_TAG, _construct_sequence)
_Loader.add_multi_constructor("", _refuse_tag)


def with_lines(value):
    """JSON values as the loader's LineDict/LineList (with no line numbers), for parse_document."""
    if isinstance(value, dict):
        return LineDict({key: with_lines(item) for key, item in value.items()})
    if isinstance(value, list):
        return LineList(with_lines(item) for item in value)
    return value


def load(text: str):
    """Parse one YAML document into LineDict/LineList/scalars, or raise YamlProblem."""
    try:
        return yaml.load(text, Loader=_AliasCheckingLoader if "&" in text else _Loader)
    except YamlProblem:
        raise
    except yaml.MarkedYAMLError as exc:
        raise syntax_problem(text, exc) from None
    except yaml.reader.ReaderError as exc:
        raise character_problem(text, exc) from None
    except yaml.YAMLError as exc:
        raise YamlProblem(f"not valid YAML: {exc}") from None
    except RecursionError:
        raise YamlProblem("not valid YAML: nested too deeply") from None


TAB = "a tab, which YAML does not take for indentation: indent with spaces"


def syntax_problem(text: str, exc: yaml.MarkedYAMLError) -> YamlProblem:
    """Where the YAML broke, line and column, and the tab when a tab broke it: the C parser
    never names the character it stopped at, and a tab in the indentation is the usual cause."""
    mark = exc.problem_mark or exc.context_mark
    if mark is None:
        return YamlProblem(f"not valid YAML: {exc.problem or exc.context}")
    lines = text.splitlines()  # the line breaks YAML knows: any other that splitlines takes is refused before parsing
    at_tab = mark.line < len(lines) and lines[mark.line][mark.column : mark.column + 1] == "\t"
    return YamlProblem(
        f"not valid YAML at column {mark.column + 1}: {TAB if at_tab else exc.problem or exc.context}", mark.line + 1
    )


def character_problem(text: str, exc: yaml.reader.ReaderError) -> YamlProblem:
    """A character YAML does not take, with its line and column (the reader gives only its offset)."""
    before = text[: exc.position]
    column = len(before) - before.rfind("\n")
    code = exc.character if isinstance(exc.character, int) else ord(exc.character)  # the C reader gives a number
    return YamlProblem(
        f"not valid YAML at column {column}: character U+{code:04X}: {exc.reason}", before.count("\n") + 1
    )
