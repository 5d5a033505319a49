"""JMS 1.1 message selectors (the SQL-92 subset), compiled once into nested closures.

A selector is parsed by a small Pratt parser that type-checks as it goes and builds, for every
sub-expression, a closure `fn(headers) -> value`. Values follow SQL three-valued logic: a
condition yields True, False or None (UNKNOWN); an operand yields its value or None (NULL or
not convertible). `Selector.matches` is True only when the whole selector is TRUE.

STOMP header values are strings, so an identifier has no static type: it is converted where it
is used. Against a number or in arithmetic it becomes an int if it parses as one, else a float
if it parses as one, else the comparison is UNKNOWN. Against a string literal it stays a string.
Against TRUE/FALSE it must read 'true'/'false' (any case). Two identifiers compare as numbers
when both parse as numbers, otherwise (for `=`/`<>` only) as strings.

Departures from the letter of JMS, on purpose: division by zero and numeric overflow give
UNKNOWN instead of an exception; integer division truncates toward zero as in Java; `IN` also
accepts numeric literals; an empty selector matches every message (JMS: empty = no selector).
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable, Mapping
from typing import Any

from raftmq.errors import SelectorError

__all__ = ["MAX_NESTING", "Selector", "compile_selector"]

Headers = Mapping[str, str]
Evaluator = Callable[[Headers], Any]

# Bounds both parser recursion and closure depth, so no selector can exhaust the Python stack.
MAX_NESTING = 100

KEYWORDS = frozenset({"AND", "OR", "NOT", "BETWEEN", "LIKE", "ESCAPE", "IN", "IS", "NULL", "TRUE", "FALSE"})

# JMS header fields and the STOMP headers that carry them: (header name, value when absent).
JMS_HEADERS: dict[str, tuple[str, str | None]] = {
    "JMSPriority": ("priority", "4"),
    "JMSMessageID": ("message-id", None),
    "JMSTimestamp": ("timestamp", None),
    "JMSCorrelationID": ("correlation-id", None),
    "JMSType": ("type", None),
    "JMSExpiration": ("expires", "0"),
}

# Static kinds of sub-expressions. IDENT is a raw header string, converted where it is used.
NUM, STR, BOOL, IDENT = "number", "string", "boolean", "identifier"
_NOT_CONSTANT = object()

_FLOAT_RE = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
_INT_RE = re.compile(r"[+-]?[0-9]+")


def _to_number(text: str | None) -> int | float | None:
    """A header value as a number, or None. Strict: no spaces, underscores or 'nan'/'inf'."""
    if text is None:
        return None
    try:
        if text.isdigit() and text.isascii():  # the common case, without a regex
            return int(text)
        if _INT_RE.fullmatch(text):
            return int(text)
        if _FLOAT_RE.fullmatch(text):
            return float(text)
    except ValueError:  # more digits than int() converts
        return None
    return None


def _to_bool(text: str | None) -> bool | None:
    if text is None:
        return None
    lowered = text.lower()
    if lowered == "true":
        return True
    if lowered == "false":
        return False
    return None


# ---------------------------------------------------------------------------------------------
# Tokens


class _Token:
    __slots__ = ("kind", "pos", "text", "value")

    def __init__(self, kind: str, text: str, value: Any, pos: int) -> None:
        self.kind = kind  # "string", "number", "ident", "keyword", "op", "end"
        self.text = text  # keywords upper-cased
        self.value = value
        self.pos = pos  # 0-based offset into the selector

    def describe(self) -> str:
        return "end of selector" if self.kind == "end" else repr(self.text)


def _fail(pos: int, message: str) -> SelectorError:
    return SelectorError(f"invalid selector at position {pos + 1}: {message}")


_WHITESPACE = " \t\r\n\f"
_OPERATORS = ("<>", "<=", ">=", "=", "<", ">", "+", "-", "*", "/", "(", ")", ",")
_NUMBER_RE = re.compile(r"(?:[0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]+)?([lL])?")


def _tokenize(text: str) -> list[_Token]:
    tokens: list[_Token] = []
    pos, length = 0, len(text)
    while pos < length:
        char = text[pos]
        if char in _WHITESPACE:
            pos += 1
        elif char == "'":
            start, pos, parts = pos, pos + 1, []
            while True:
                close = text.find("'", pos)
                if close < 0:
                    raise _fail(start, "unterminated string literal (expected a closing quote)")
                parts.append(text[pos:close])
                if text.startswith("''", close):
                    parts.append("'")
                    pos = close + 2
                else:
                    pos = close + 1
                    break
            tokens.append(_Token("string", text[start:pos], "".join(parts), start))
        elif (char.isdigit() and char.isascii()) or (char == "." and "0" <= text[pos + 1 : pos + 2] <= "9"):
            match = _NUMBER_RE.match(text, pos)
            assert match is not None  # the first character is a digit or '.digit'
            literal = match.group(0)
            is_float = match.group(1) is not None or match.group(2) is not None or literal[0] == "."
            if is_float and match.group(3):
                raise _fail(pos, f"the L suffix is for integers only, found {literal!r}")
            try:
                value: int | float = float(literal) if is_float else int(literal.rstrip("lL"))
            except ValueError:
                raise _fail(pos, "numeric literal too long") from None
            tokens.append(_Token("number", literal, value, pos))
            pos = match.end()
        elif char.isalpha() or char in "_$":
            start = pos
            while pos < length and (text[pos].isalnum() or text[pos] in "_$"):
                pos += 1
            word = text[start:pos]
            if word.upper() in KEYWORDS:
                tokens.append(_Token("keyword", word.upper(), None, start))
            else:
                tokens.append(_Token("ident", word, word, start))
        else:
            for op in _OPERATORS:
                if text.startswith(op, pos):
                    tokens.append(_Token("op", op, None, pos))
                    pos += len(op)
                    break
            else:
                raise _fail(pos, f"unexpected character {char!r}")
    tokens.append(_Token("end", "", None, length))
    return tokens


# ---------------------------------------------------------------------------------------------
# Typed, compiled sub-expressions


class _Expr:
    """A compiled sub-expression: its static kind, its closure, and its value if constant."""

    __slots__ = ("const", "depth", "fn", "kind", "pos")

    def __init__(self, kind: str, fn: Evaluator, pos: int, depth: int = 1, const: Any = _NOT_CONSTANT) -> None:
        if depth > MAX_NESTING:
            raise _fail(pos, f"selector nests more than {MAX_NESTING} levels deep")
        self.kind, self.fn, self.pos, self.depth, self.const = kind, fn, pos, depth, const

    @property
    def is_constant(self) -> bool:
        return self.const is not _NOT_CONSTANT


def _constant(kind: str, value: Any, pos: int) -> _Expr:
    return _Expr(kind, lambda headers: value, pos, const=value)


def _combine(kind: str, fn: Evaluator, pos: int, *parts: _Expr) -> _Expr:
    """A new node over `parts`; folded to a constant when every part is one (fn never raises)."""
    if all(part.is_constant for part in parts):
        return _constant(kind, fn({}), pos)
    return _Expr(kind, fn, pos, depth=1 + max(part.depth for part in parts))


def _identifier(name: str, pos: int) -> _Expr:
    if name == "JMSDeliveryMode":

        def delivery_mode(headers: Headers) -> str:
            return "PERSISTENT" if (headers.get("persistent") or "").lower() == "true" else "NON_PERSISTENT"

        return _Expr(IDENT, delivery_mode, pos)
    header, default = JMS_HEADERS.get(name, (name, None))
    return _Expr(IDENT, lambda headers: headers.get(header, default), pos)


def _numeric(expr: _Expr, what: str) -> Evaluator:
    """expr's closure yielding a number or None; a compile error if expr can never be one."""
    if expr.kind == NUM:
        return expr.fn
    if expr.kind == IDENT:
        raw = expr.fn
        return lambda headers: _to_number(raw(headers))
    raise _fail(expr.pos, f"{what} needs a number, found a {expr.kind}")


def _condition(expr: _Expr, what: str) -> Evaluator:
    """expr's closure yielding True/False/None; an identifier must read 'true' or 'false'."""
    if expr.kind == BOOL:
        return expr.fn
    if expr.kind == IDENT:
        raw = expr.fn
        return lambda headers: _to_bool(raw(headers))
    raise _fail(expr.pos, f"{what} needs a condition, found a {expr.kind}")


def _not(operand: Evaluator) -> Evaluator:
    def fn(headers: Headers) -> bool | None:
        value = operand(headers)
        return None if value is None else not value

    return fn


def _and(parts: list[Evaluator]) -> Evaluator:
    def fn(headers: Headers) -> bool | None:
        result: bool | None = True
        for part in parts:
            value = part(headers)
            if value is False:
                return False
            if value is None:
                result = None
        return result

    return fn


def _or(parts: list[Evaluator]) -> Evaluator:
    def fn(headers: Headers) -> bool | None:
        result: bool | None = False
        for part in parts:
            value = part(headers)
            if value is True:
                return True
            if value is None:
                result = None
        return result

    return fn


def _divide(left: float, right: float) -> int | float | None:
    if right == 0:
        return None
    if isinstance(left, int) and isinstance(right, int):
        quotient = abs(left) // abs(right)  # Java truncates toward zero
        return quotient if (left < 0) == (right < 0) else -quotient
    return left / right


_ARITHMETIC: dict[str, Callable[[Any, Any], Any]] = {
    "+": operator.add, "-": operator.sub, "*": operator.mul, "/": _divide,
}


def _arithmetic(first: Evaluator, rest: list[tuple[Callable[[Any, Any], Any], Evaluator]]) -> Evaluator:
    def fn(headers: Headers) -> int | float | None:
        total: int | float | None = first(headers)
        if total is None:
            return None
        for apply, operand in rest:
            value = operand(headers)
            if value is None:
                return None
            try:
                total = apply(total, value)
            except OverflowError:  # a huge int met a float
                return None
            if total is None:
                return None
        return total

    return fn


def _binary(apply: Callable[[Any, Any], bool], left: Evaluator, right: Evaluator, right_const: Any) -> Evaluator:
    if right_const is not _NOT_CONSTANT:  # the common `header <op> literal`: one call fewer
        if right_const is None:
            return lambda headers: None

        def against_constant(headers: Headers) -> bool | None:
            value = left(headers)
            return None if value is None else apply(value, right_const)

        return against_constant

    def fn(headers: Headers) -> bool | None:
        a = left(headers)
        if a is None:
            return None
        b = right(headers)
        return None if b is None else apply(a, b)

    return fn


def _header_equality(equal: bool, left: Evaluator, right: Evaluator) -> Evaluator:
    """`=`/`<>` between two identifiers: numeric when both parse as numbers, else as strings."""

    def fn(headers: Headers) -> bool | None:
        a, b = left(headers), right(headers)
        if a is None or b is None:
            return None
        a_number, b_number = _to_number(a), _to_number(b)
        if a_number is not None and b_number is not None:
            return (a_number == b_number) is equal
        return (a == b) is equal

    return fn


_RELATIONAL: dict[str, Callable[[Any, Any], bool]] = {
    "<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge,
}
_EQUALITY: dict[str, Callable[[Any, Any], bool]] = {"=": operator.eq, "<>": operator.ne}


def _comparison(op: str, left: _Expr, right: _Expr, pos: int) -> _Expr:
    kinds = {left.kind, right.kind}
    if op in _RELATIONAL or (kinds <= {NUM, IDENT} and kinds != {IDENT}):
        what = f"'{op}'"
        if op in _RELATIONAL and kinds & {STR, BOOL}:
            raise _fail(pos, f"{what} needs numbers (strings and booleans compare only with = and <>)")
        fn = _binary(_RELATIONAL.get(op) or _EQUALITY[op], _numeric(left, what), _numeric(right, what), right.const)
    elif kinds == {IDENT}:
        fn = _header_equality(op == "=", left.fn, right.fn)
    elif kinds <= {STR, IDENT}:
        fn = _binary(_EQUALITY[op], left.fn, right.fn, right.const)
    elif kinds <= {BOOL, IDENT}:
        fn = _binary(_EQUALITY[op], _condition(left, op), _condition(right, op), right.const)
    else:
        raise _fail(pos, f"cannot compare a {left.kind} with a {right.kind}")
    return _combine(BOOL, fn, pos, left, right)


def _like_regex(pattern: str, escape: str | None, pos: int) -> re.Pattern[str]:
    parts: list[str] = []
    chars = iter(pattern)
    for char in chars:
        if char == escape:
            escaped = next(chars, None)
            if escaped is None:
                raise _fail(pos, "LIKE pattern ends with its escape character")
            parts.append(re.escape(escaped))
        elif char == "%":
            parts.append(".*")
        elif char == "_":
            parts.append(".")
        else:
            parts.append(re.escape(char))
    return re.compile("".join(parts), re.DOTALL)


# ---------------------------------------------------------------------------------------------
# Parser: Pratt-style, precedence lowest first: OR, AND, NOT, (= <>), (< <= > >= BETWEEN LIKE IN
# IS), (+ -), (* /), unary (+ -). Chains of AND, OR, +/- and * / are gathered into one n-ary node
# so long selectors stay shallow.

# Binding powers: an operator takes the operands of every operator that binds tighter.
_OR, _AND, _NOT_OPERAND, _EQUALITY_BP, _RELATIONAL_BP = 10, 20, 30, 40, 50
_ADDITIVE, _MULTIPLICATIVE, _UNARY = 60, 70, 80


class _Parser:
    def __init__(self, text: str) -> None:
        self.tokens = _tokenize(text)
        self.index = 0
        self.nesting = 0

    # -- token helpers

    def peek(self) -> _Token:
        return self.tokens[self.index]

    def advance(self) -> _Token:
        token = self.tokens[self.index]
        if token.kind != "end":
            self.index += 1
        return token

    def at(self, kind: str, text: str | None = None) -> bool:
        token = self.tokens[self.index]
        return token.kind == kind and (text is None or token.text == text)

    def expect(self, kind: str, text: str | None, expected: str) -> _Token:
        if not self.at(kind, text):
            token = self.peek()
            raise _fail(token.pos, f"expected {expected}, found {token.describe()}")
        return self.advance()

    # -- grammar

    def parse(self) -> _Expr:
        expr = self.expression(0)
        self.expect("end", None, "an operator or end of selector")
        return expr

    def expression(self, min_bp: int) -> _Expr:
        self.nesting += 1
        if self.nesting > MAX_NESTING:
            raise _fail(self.peek().pos, f"selector nests more than {MAX_NESTING} levels deep")
        left = self.prefix()
        while True:
            token = self.peek()
            bp = _infix_binding_power(token)
            if bp <= min_bp:
                break
            left = self.infix(left, bp)
        self.nesting -= 1
        return left

    def prefix(self) -> _Expr:
        token = self.advance()
        if token.kind == "number":
            return _constant(NUM, token.value, token.pos)
        if token.kind == "string":
            return _constant(STR, token.value, token.pos)
        if token.kind == "ident":
            return _identifier(token.text, token.pos)
        if token.text in ("TRUE", "FALSE") and token.kind == "keyword":
            return _constant(BOOL, token.text == "TRUE", token.pos)
        if token.text == "NOT" and token.kind == "keyword":
            operand = self.expression(_NOT_OPERAND)
            return _combine(BOOL, _not(_condition(operand, "NOT")), token.pos, operand)
        if token.text == "(" and token.kind == "op":
            inner = self.expression(0)
            self.expect("op", ")", "')'")
            return inner
        if token.text in ("+", "-") and token.kind == "op":
            operand = self.expression(_UNARY)
            number = _numeric(operand, f"unary '{token.text}'")
            if token.text == "+":
                return _combine(NUM, number, token.pos, operand)
            def negate(headers: Headers) -> Any:
                return None if (value := number(headers)) is None else -value

            return _combine(NUM, negate, token.pos, operand)
        raise _fail(token.pos, f"expected an operand (literal, identifier, NOT or '('), found {token.describe()}")

    def infix(self, left: _Expr, bp: int) -> _Expr:
        token = self.peek()
        if bp in (_OR, _AND):
            return self.logical_chain(left, token.text)
        if bp in (_ADDITIVE, _MULTIPLICATIVE):
            return self.arithmetic_chain(left, bp)
        self.advance()
        if bp == _EQUALITY_BP or token.text in _RELATIONAL:
            right = self.expression(bp)
            return _comparison(token.text, left, right, token.pos)
        if token.text == "IS":
            return self.is_null(left, token)
        negated = token.text == "NOT"
        if negated:
            if not (self.at("keyword", "BETWEEN") or self.at("keyword", "LIKE") or self.at("keyword", "IN")):
                found = self.peek()
                raise _fail(found.pos, f"expected BETWEEN, LIKE or IN after NOT, found {found.describe()}")
            token = self.advance()
        if token.text == "BETWEEN":
            expr = self.between(left, token)
        elif token.text == "LIKE":
            expr = self.like(left, token)
        else:
            expr = self.in_list(left, token)
        return _combine(BOOL, _not(expr.fn), token.pos, expr) if negated else expr

    def logical_chain(self, first: _Expr, keyword: str) -> _Expr:
        bp = _OR if keyword == "OR" else _AND
        operands = [first]
        while self.at("keyword", keyword):
            self.advance()
            operands.append(self.expression(bp))
        parts = [_condition(operand, keyword) for operand in operands]
        return _combine(BOOL, (_or if keyword == "OR" else _and)(parts), first.pos, *operands)

    def arithmetic_chain(self, first: _Expr, bp: int) -> _Expr:
        symbols = ("+", "-") if bp == _ADDITIVE else ("*", "/")
        operands, rest = [first], []
        while self.peek().kind == "op" and self.peek().text in symbols:
            symbol = self.advance().text
            operand = self.expression(bp)
            operands.append(operand)
            rest.append((_ARITHMETIC[symbol], _numeric(operand, f"'{symbol}'")))
        fn = _arithmetic(_numeric(first, f"'{symbols[0]}'"), rest)
        return _combine(NUM, fn, first.pos, *operands)

    def is_null(self, left: _Expr, token: _Token) -> _Expr:
        negated = self.at("keyword", "NOT")
        if negated:
            self.advance()
        self.expect("keyword", "NULL", "NULL" if negated else "NULL or NOT NULL")
        if left.kind != IDENT:
            raise _fail(token.pos, f"IS NULL applies to an identifier, found a {left.kind}")
        raw = left.fn
        fn = (lambda headers: raw(headers) is not None) if negated else (lambda headers: raw(headers) is None)
        return _combine(BOOL, fn, token.pos, left)

    def between(self, left: _Expr, token: _Token) -> _Expr:
        low = self.expression(_RELATIONAL_BP)
        self.expect("keyword", "AND", "AND between the bounds of BETWEEN")
        high = self.expression(_RELATIONAL_BP)
        value, low_fn, high_fn = (_numeric(expr, "BETWEEN") for expr in (left, low, high))
        if low.is_constant and high.is_constant and low.const is not None and high.const is not None:
            low_value, high_value = low.const, high.const

            def within_constants(headers: Headers) -> bool | None:
                x = value(headers)
                return None if x is None else low_value <= x <= high_value

            return _combine(BOOL, within_constants, token.pos, left, low, high)

        def fn(headers: Headers) -> bool | None:
            # x BETWEEN a AND b is x >= a AND x <= b, with three-valued AND.
            x = value(headers)
            a, b = low_fn(headers), high_fn(headers)
            above = None if x is None or a is None else x >= a
            below = None if x is None or b is None else x <= b
            if above is False or below is False:
                return False
            return None if above is None or below is None else True

        return _combine(BOOL, fn, token.pos, left, low, high)

    def like(self, left: _Expr, token: _Token) -> _Expr:
        if left.kind != IDENT:
            raise _fail(token.pos, f"LIKE applies to an identifier, found a {left.kind}")
        pattern = self.expect("string", None, "a string pattern after LIKE")
        escape: str | None = None
        if self.at("keyword", "ESCAPE"):
            self.advance()
            escape_token = self.expect("string", None, "a one-character string after ESCAPE")
            if len(escape_token.value) != 1:
                raise _fail(escape_token.pos, f"ESCAPE needs exactly one character, found {escape_token.text}")
            escape = escape_token.value
        full_match = _like_regex(pattern.value, escape, pattern.pos).fullmatch
        raw = left.fn

        def fn(headers: Headers) -> bool | None:
            value = raw(headers)
            return None if value is None else full_match(value) is not None

        return _combine(BOOL, fn, token.pos, left)

    def in_list(self, left: _Expr, token: _Token) -> _Expr:
        if left.kind != IDENT:
            raise _fail(token.pos, f"IN applies to an identifier, found a {left.kind}")
        self.expect("op", "(", "'(' after IN")
        strings: set[str] = set()
        numbers: set[int | float] = set()
        while True:
            sign = self.advance().text if self.peek().kind == "op" and self.peek().text in ("+", "-") else ""
            item = self.peek()
            if item.kind == "number":
                numbers.add(-item.value if sign == "-" else item.value)
            elif item.kind == "string" and not sign:
                strings.add(item.value)
            else:
                raise _fail(item.pos, f"expected a string or number literal in the IN list, found {item.describe()}")
            self.advance()
            if not self.at("op", ","):
                break
            self.advance()
        self.expect("op", ")", "',' or ')' in the IN list")
        raw, frozen_strings, frozen_numbers = left.fn, frozenset(strings), frozenset(numbers)

        def fn(headers: Headers) -> bool | None:
            value = raw(headers)
            if value is None:
                return None
            if value in frozen_strings:
                return True
            if not frozen_numbers:
                return False
            number = _to_number(value)
            if number is None:
                return None  # `value = <number>` is UNKNOWN for every numeric item
            return number in frozen_numbers

        return _combine(BOOL, fn, token.pos, left)


_KEYWORD_BINDING_POWER = {
    "OR": _OR,
    "AND": _AND,
    **dict.fromkeys(("NOT", "BETWEEN", "LIKE", "IN", "IS"), _RELATIONAL_BP),  # NOT here is `x NOT LIKE ...`
}
_OPERATOR_BINDING_POWER = {
    **dict.fromkeys(("=", "<>"), _EQUALITY_BP),
    **dict.fromkeys(("<", "<=", ">", ">="), _RELATIONAL_BP),
    **dict.fromkeys(("+", "-"), _ADDITIVE),
    **dict.fromkeys(("*", "/"), _MULTIPLICATIVE),
}


def _infix_binding_power(token: _Token) -> int:
    """How tightly `token` binds as an infix operator; 0 when it is not one (ends the expression)."""
    if token.kind == "keyword":
        return _KEYWORD_BINDING_POWER.get(token.text, 0)
    if token.kind == "op":
        return _OPERATOR_BINDING_POWER.get(token.text, 0)
    return 0


# ---------------------------------------------------------------------------------------------
# Public API


class Selector:
    """A compiled selector. Immutable; equal when the texts are equal; pickles as its text."""

    __slots__ = ("_evaluate", "text")

    def __init__(self, text: str, evaluate: Evaluator) -> None:
        self.text = text
        self._evaluate = evaluate

    def matches(self, headers: Headers) -> bool:
        """True only when the selector is TRUE for these headers (never for FALSE or UNKNOWN)."""
        return self._evaluate(headers) is True

    def __repr__(self) -> str:
        return f"Selector({self.text!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Selector) and other.text == self.text

    def __hash__(self) -> int:
        return hash(self.text)

    def __reduce__(self) -> tuple[Callable[[str], Selector], tuple[str]]:
        return compile_selector, (self.text,)


def compile_selector(text: str) -> Selector:
    """Parse and type-check a JMS selector once; raises SelectorError naming position and expectation.

    Positions in messages are 1-based character offsets into `text`. An empty (or all-blank)
    selector matches every message.
    """
    if not text.strip(_WHITESPACE):
        return Selector(text, lambda headers: True)
    expr = _Parser(text).parse()
    return Selector(text, _condition(expr, "the selector"))
