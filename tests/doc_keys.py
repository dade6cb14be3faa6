"""Read the JSON keys a document lists, and the keys a JSON output has, in one shape: {path: keys}.

The key blocks of README.md and docs/plan-json.md are fenced code blocks, one entry per line that starts in
column 0:

    name            description                    a key (its description after two spaces)
    a, b, c         floats                         several keys
    name[] {x, y (a note), z [low, high]}          a row list or mapping and its keys, over several lines if need be
    name[].x {p, q}                                a key added to the rows of name[], with its own keys
    --qps:          x, y, z                        (README) the keys a flag adds, after the condition and its colon

Parentheses are notes and brackets describe a value: neither holds keys. A key's path is its parents' names
joined by dots, without the brackets ('fleet', 'deployments.fidelity', '' at the top).
"""

from __future__ import annotations

import re
from collections import defaultdict
from typing import Any

_IDENT = re.compile(r"[a-z][a-z0-9_]*")


def code_blocks(text: str) -> list[str]:
    """The fenced code blocks of a markdown text, without their fences."""
    return re.findall(r"^```[a-z]*\n(.*?)^```", text, flags=re.S | re.M)


def block_starting(text: str, first_word: str) -> str:
    """The one code block whose first line starts with ``first_word``."""
    found = [b for b in code_blocks(text) if b.startswith(first_word)]
    assert len(found) == 1, f"{len(found)} code blocks start with {first_word!r}"
    return found[0]


def without_notes(text: str) -> str:
    """``text`` without its (notes) and [value descriptions], nested ones included."""
    previous = None
    while previous != text:
        previous = text
        text = re.sub(r"\([^()]*\)", " ", text)
        text = re.sub(r"\[[^\[\]]*\]", " ", text)
    return text


def _names(text: str) -> list[str]:
    """The keys of a comma-separated list: the first identifier of each item."""
    out = []
    for item in without_notes(text).split(","):
        if m := _IDENT.match(item.strip()):
            out.append(m.group(0))
    return out


def _path(name: str) -> str:
    return name.replace("[]", "").strip()


def _closing_brace(text: str, start: int) -> int:
    """Index of the brace that closes the one at ``start``."""
    depth = 0
    for i in range(start, len(text)):
        depth += (text[i] == "{") - (text[i] == "}")
        if depth == 0:
            return i
    raise AssertionError(f"unclosed brace in {text[start:start + 60]!r}")


def parse_key_block(block: str) -> dict[str, set[str]]:
    """{path: keys} of a plan-json style block (see the module docstring)."""
    out: dict[str, set[str]] = defaultdict(set)
    lines = block.splitlines()
    k = 0
    while k < len(lines):
        line = lines[k]
        if not line or line[0].isspace():
            k += 1
            continue
        head = re.split(r"\s{2,}|\{|\"", line, maxsplit=1)[0].replace("[]", "")
        names = [n.strip() for n in without_notes(head).split(",") if n.strip()]
        for name in names:
            parent, _, leaf = _path(name).rpartition(".")
            out[parent].add(leaf)
        if "{" in line and len(names) == 1:  # name {keys...}, over as many lines as the braces take
            rest = "\n".join(lines[k:])
            start = rest.index("{")
            end = _closing_brace(rest, start)
            out[_path(names[0])] |= set(_names(rest[start + 1:end]))
            k += rest[:end].count("\n")
        k += 1
    return dict(out)


def parse_flag_block(block: str) -> dict[str, set[str]]:
    """{condition: keys} of a README block ``condition:   key, key (note), name {sub, keys}`` (an entry runs on over
    the indented lines below it); a key's own keys (in braces) count as keys of the same condition. A template
    ``simulated_<m>_p<q>_ms (q: 50, 99)`` stands for each q given after it and each m of the block's ``(m: ...)``."""
    entries: dict[str, str] = defaultdict(str)
    condition = ""
    for line in block.splitlines():
        if line and not line[0].isspace():
            condition, _, line = line.partition(":")
        entries[condition] += " " + line
    m_values: list[str] = []
    if found := re.search(r"\(m: ([a-z0-9, ]+)\)", block):
        m_values = [v.strip() for v in found.group(1).split(",")]
    out: dict[str, set[str]] = {}
    template = r"[a-z0-9_]*<m>[a-z0-9_]*<q>[a-z0-9_]*"
    for condition, text in entries.items():
        keys: set[str] = set()
        for name, qs in re.findall(rf"({template})(?=[^()]*?\(q: ([0-9, ]+)\))", text):
            keys |= {name.replace("<m>", m).replace("<q>", q.strip()) for m in m_values for q in qs.split(",")}
        text = re.sub(template, " ", text)
        out[condition] = keys | set(_IDENT.findall(without_notes(text.replace("{", ",").replace("}", ","))))
    return out


def json_keys(data: Any, path: str = "", out: dict[str, set[str]] | None = None) -> dict[str, set[str]]:
    """{path: keys} of a JSON value: a mapping's keys, the union of a row list's keys, and theirs below."""
    out = defaultdict(set) if out is None else out
    rows = [data] if isinstance(data, dict) else [r for r in data if isinstance(r, dict)] if isinstance(data, list) else []
    for row in rows:
        out[path] |= set(row)
        for key, value in row.items():
            if isinstance(value, dict | list):
                json_keys(value, f"{path}.{key}" if path else key, out)
    return out


def flat_keys(data: Any) -> set[str]:
    """Every key of a JSON value, at any depth."""
    return set().union(*json_keys(data).values()) if isinstance(data, dict) else set()
