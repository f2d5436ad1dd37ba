"""How a line the port made too long is broken: at its brackets, as ``ruff format`` would.

A guarded rewrite (``(torch.accelerator.memory_allocated() if
torch.accelerator.is_available() else 0)``) is 80 characters on its own, so a line that held
``torch.cuda.memory_allocated()`` often ends up past PEP 8's 99. :func:`fit` breaks such a
line the way black and ``ruff format`` do, in the few forms they use: the last bracket pair
split open, its contents on lines of their own (``f(\\n    a,\\n    b,\\n)``, with the
trailing comma); an assignment's or a ``return``'s value wrapped in parentheses and split so;
a trailing call (``(...).to(device)``) left closed while the pair before it opens; and a
content that is still too long split before its weakest operator (one argument a line, then
``and``/``or``, comparisons, ``if``/``else``, ``+``/``-``). Only lines the port changed are
touched (:func:`fit_changed`), and only where every bracket of the line closes on it and no
comment is on it; what cannot be broken so (a long f-string) is left as it is.

Pure functions over text, with :mod:`tokenize`: breaking a line inside brackets changes no
token, so the code means what it meant.
"""

from __future__ import annotations

import ast
import io
import tokenize
from dataclasses import dataclass

__all__ = ["WIDTH", "fit", "fit_changed"]

#: The widest line the port writes: PEP 8's limit for a team that agrees on more than 79.
WIDTH = 99

_OPEN = {"(": ")", "[": "]", "{": "}"}
_CLOSE = frozenset(_OPEN.values())
_FSTRING_START = getattr(tokenize, "FSTRING_START", None)  # 3.12+: f-strings are tokens
_FSTRING_END = getattr(tokenize, "FSTRING_END", None)
#: Words at a content's top level that make it unsafe to split (a comprehension, a lambda's
#: parameters, which commas separate).
_UNSPLIT = frozenset({"for", "async", "lambda"})
_COMPARISONS = frozenset({"==", "!=", "<", ">", "<=", ">="})
#: Where a content splits, weakest binding first (black's priorities, in its order).
_PRIORITIES = (
    frozenset({","}),
    frozenset({"or"}),
    frozenset({"and"}),
    _COMPARISONS,
    frozenset({"if", "else"}),
    frozenset({"+", "-"}),
)


@dataclass(frozen=True)
class _Atom:
    """A token of one line (an f-string whole), by its columns in that line."""

    text: str
    start: int
    end: int
    kind: int


def _atoms(code: str) -> list[_Atom] | None:
    """The tokens of ``code``, one logical line; ``None`` where it does not tokenize as one
    whole line, holds a comment or leaves a bracket open."""
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(code + "\n").readline))
    except (tokenize.TokenError, SyntaxError, IndentationError):
        return None
    atoms: list[_Atom] = []
    depth = 0
    nested = 0  # inside an f-string (3.12+ tokenizes its parts)
    start = 0
    for token in tokens:
        if token.type in (tokenize.NEWLINE, tokenize.NL, tokenize.ENDMARKER):
            continue
        if token.type in (tokenize.COMMENT, tokenize.INDENT, tokenize.DEDENT):
            return None
        if token.start[0] != 1 or token.end[0] != 1:
            return None  # a string over several lines
        if _FSTRING_START is not None and token.type == _FSTRING_START:
            if nested == 0:
                start = token.start[1]
            nested += 1
            continue
        if nested:
            if token.type == _FSTRING_END:
                nested -= 1
                if nested == 0:
                    atoms.append(_Atom(code[start : token.end[1]], start, token.end[1], 3))
            continue
        if token.string in _OPEN:
            depth += 1
        elif token.string in _CLOSE:
            depth -= 1
            if depth < 0:
                return None
        atoms.append(_Atom(token.string, token.start[1], token.end[1], token.type))
    return atoms if depth == 0 and atoms else None


def _pairs(atoms: list[_Atom]) -> list[tuple[int, int]]:
    """The bracket pairs at the line's top level, as (opening, closing) atom indices."""
    pairs: list[tuple[int, int]] = []
    stack: list[int] = []
    for index, atom in enumerate(atoms):
        if atom.kind == tokenize.OP and atom.text in _OPEN:
            stack.append(index)
        elif atom.kind == tokenize.OP and atom.text in _CLOSE:
            opening = stack.pop()
            if not stack:
                pairs.append((opening, index))
    return pairs


def _value_start(atoms: list[_Atom]) -> int | None:
    """The index of the first atom of an assignment's value (after its last top-level
    ``=``, or an augmented one) or of a ``return``'s; ``None`` for any other line."""
    if atoms[0].text == "return" and len(atoms) > 1:
        return 1
    depth = 0
    found = None
    for index, atom in enumerate(atoms):
        if atom.text in _OPEN:
            depth += 1
        elif atom.text in _CLOSE:
            depth -= 1
        elif (
            depth == 0
            and atom.kind == tokenize.OP
            and atom.text.endswith("=")
            and atom.text not in ("==", "!=", "<=", ">=", ":=")
            and index + 1 < len(atoms)
        ):
            found = index + 1
    return found


def fit(code: str, indent: str, width: int = WIDTH) -> list[str]:
    """``code`` (one line, without its indentation) at ``indent``, broken into lines of at
    most ``width`` characters where its brackets allow (see the module docstring)."""
    if len(indent) + len(code) <= width:
        return [indent + code]
    atoms = _atoms(code)
    if atoms is None:
        return [indent + code]
    pairs = _pairs(atoms)
    # The last pair (the line ends in it, or in it and a comma or colon), then the pairs
    # before a trailer (``(...).to(device)``), last first; an assignment's or a return's
    # value in parentheses of its own comes first where the value has operators or commas
    # of its own (``a, b = x.to(d), y.to(d)``), last otherwise, as black orders them.
    ends = [pair for pair in pairs if all(a.text in ",:" for a in atoms[pair[1] + 1 :])]
    splits: list[tuple[str, str, str, bool]] = [_around(code, atoms, *pair) for pair in ends]
    splits += [_around(code, atoms, *pair) for pair in reversed(pairs) if pair not in ends]
    value = _value_start(atoms)
    if value is not None and not (
        pairs and pairs[-1] == (value, len(atoms) - 1) and atoms[value].text == "("
    ):
        last = len(atoms) - 1 if atoms[-1].text == "," else len(atoms)  # an argument's comma
        wrapped = (
            code[: atoms[value].start] + "(",
            code[atoms[value].start : atoms[last - 1].end],
            ")" + code[atoms[last - 1].end :],
            True,
        )
        if _operators(atoms[value:]):
            splits.insert(0, wrapped)
        else:
            splits.append(wrapped)
    for head, body, tail, explode in splits:
        if not body.strip() or len(indent) + len(head.rstrip()) > width:
            continue
        inner = _contents(body.strip(), indent + "    ", width, head.rstrip()[-1], explode)
        if inner is None:
            continue
        lines = [indent + head.rstrip(), *inner, *fit(tail.strip(), indent, width)]
        if all(len(line) <= width for line in lines):
            return lines
    return [indent + code]


def _operators(atoms: list[_Atom]) -> list[int]:
    """The indices of ``atoms``' operators at their top level where a content splits
    (:data:`_PRIORITIES`): not a sign, not inside brackets."""
    depth = 0
    top: list[int] = []
    delimiters = frozenset().union(*_PRIORITIES)
    for index, atom in enumerate(atoms):
        if atom.text in _OPEN:
            depth += 1
        elif atom.text in _CLOSE:
            depth -= 1
        elif depth == 0 and atom.text in delimiters and not _unary(atoms, index):
            top.append(index)
    return top


def _around(
    code: str, atoms: list[_Atom], opening: int, closing: int
) -> tuple[str, str, str, bool]:
    """``code`` as the text up to a bracket pair's opening, its contents, and the rest
    (and ``False``: its contents stay on one line where they fit)."""
    return (
        code[: atoms[opening].end],
        code[atoms[opening].end : atoms[closing].start],
        code[atoms[closing].start :],
        False,
    )


def _contents(
    body: str, indent: str, width: int, bracket: str, explode: bool = False
) -> list[str] | None:
    """The contents of a bracket pair as lines at ``indent``: on one line where it fits
    (a tuple made by parentheses the port added, ``explode``, one item a line, as ``ruff
    format`` writes it), else split before (or, for commas, after) its weakest operator;
    ``None`` where it cannot be split safely (a comprehension, a lambda)."""
    if len(indent) + len(body) <= width and not explode:
        return [indent + body]
    atoms = _atoms(body)
    if atoms is None:
        return None
    depth = 0
    for atom in atoms:
        if atom.text in _OPEN:
            depth += 1
        elif atom.text in _CLOSE:
            depth -= 1
        elif depth == 0 and atom.kind == tokenize.NAME and atom.text in _UNSPLIT:
            return None
    top = _operators(atoms)
    if explode and not any(atoms[i].text == "," for i in top):
        return [indent + body] if len(indent) + len(body) <= width else None
    for operators in _PRIORITIES:
        cuts = [i for i in top if atoms[i].text in operators]
        if not cuts:
            continue
        pieces: list[str] = []
        last = 0
        if operators == {","}:
            for cut in cuts:
                pieces.append(body[last : atoms[cut].end].strip())
                last = atoms[cut].end
            rest = body[last:].strip()
            if rest:  # the trailing comma black adds (a tuple stays a tuple: it has commas)
                pieces.append(rest + ("," if bracket in _OPEN else ""))
        else:
            for cut in cuts:
                pieces.append(body[last : atoms[cut].start].strip())
                last = atoms[cut].start
            pieces.append(body[last:].strip())
        pieces = [piece for piece in pieces if piece]
        if len(pieces) < 2:
            continue  # a trailing comma alone: split at the next operator
        lines: list[str] = []
        for piece in pieces:  # each inside the brackets still: split at its operators first
            lines.extend(_contents(piece, indent, width, "") or fit(piece, indent, width))
        return lines
    return fit(body, indent, width)


def _unary(atoms: list[_Atom], index: int) -> bool:
    """Whether the ``+``/``-`` at ``index`` is a sign, not an operator."""
    if atoms[index].text not in "+-":
        return False
    before = atoms[index - 1] if index else None
    return before is None or (
        (before.kind == tokenize.OP and before.text not in _CLOSE)
        or (before.kind == tokenize.NAME and before.text in ("if", "else", "and", "or", "not"))
    )


def fit_changed(old: str, new: str, width: int = WIDTH) -> str:
    """``new`` (the port of ``old``) with each line the port made too long broken by
    :func:`fit`; a line ``old`` has as it is (the user's own), and a line inside a
    multi-line string or continued by a backslash, stays."""
    lines = new.splitlines(keepends=True)
    if all(len(line.rstrip("\r\n")) <= width for line in lines):
        return new
    own = set(old.splitlines())
    try:
        tree = ast.parse(new)
    except SyntaxError:
        return new
    inside = _inside_brackets(new)
    in_strings: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Constant, ast.JoinedStr)) and node.end_lineno != node.lineno:
            in_strings.update(range(node.lineno, (node.end_lineno or node.lineno) + 1))
    out: list[str] = []
    for number, line in enumerate(lines, start=1):
        text = line.rstrip("\r\n")
        ending = line[len(text) :]
        if (
            len(text) <= width
            or text in own
            or number in in_strings
            or text.endswith("\\")
            or (number > 1 and lines[number - 2].rstrip("\r\n").endswith("\\"))
        ):
            out.append(line)
            continue
        code = text.lstrip()
        indent = text[: len(text) - len(code)]
        broken = (number in inside and _contents(code, indent, width, "")) or fit(
            code, indent, width
        )
        out.append("".join(f"{part}{ending or chr(10)}" for part in broken[:-1]))
        out.append(broken[-1] + ending)
    result = "".join(out)
    try:
        same = ast.dump(ast.parse(result)) == ast.dump(tree)
    except SyntaxError:
        same = False
    return result if same else new  # breaking lines changes no token: checked, to be safe


def _inside_brackets(text: str) -> set[int]:
    """The lines of ``text`` that start inside brackets: an argument of a call written over
    several lines, which may split at its operators as a bracket's contents do."""
    inside: set[int] = set()
    depth = 0
    seen = 0
    try:
        for token in tokenize.generate_tokens(io.StringIO(text).readline):
            line = token.start[0]
            if line > seen and token.type not in (tokenize.NL, tokenize.COMMENT):
                seen = line
                if depth:
                    inside.add(line)
            if token.type == tokenize.OP and token.string in _OPEN:
                depth += 1
            elif token.type == tokenize.OP and token.string in _CLOSE:
                depth -= 1
    except (tokenize.TokenError, SyntaxError):
        return set()
    return inside
