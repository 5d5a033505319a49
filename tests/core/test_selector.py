"""Tests of JMS message selectors: a table of cases, malformed selectors, and properties."""

from __future__ import annotations

import operator
import pickle
from collections.abc import Callable
from functools import lru_cache

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from raftmq.core.selector import MAX_NESTING, Selector, compile_selector
from raftmq.errors import SelectorError

PROPERTY_SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

CASES: list[tuple[str, dict[str, str], bool]] = [
    # literals
    ("s = 'it''s'", {"s": "it's"}, True),
    ("s = ''''", {"s": "'"}, True),
    ("s = ''", {"s": ""}, True),
    ("n = 10", {"n": "10"}, True),
    ("n = 10L", {"n": "10"}, True),
    ("n = 10l", {"n": "10"}, True),
    ("n = 1.5", {"n": "1.5"}, True),
    ("n = 1e3", {"n": "1000"}, True),
    ("n = 1.5E-1", {"n": "0.15"}, True),
    ("n = .5", {"n": "0.5"}, True),
    ("n = 7.", {"n": "7"}, True),
    ("f = TRUE", {"f": "true"}, True),
    ("f = TRUE", {"f": "TRUE"}, True),
    ("f = TRUE", {"f": "false"}, False),
    ("f = FALSE", {"f": "False"}, True),
    ("f <> TRUE", {"f": "false"}, True),
    ("f = TRUE", {"f": "yes"}, False),
    ("NOT (f = TRUE)", {"f": "yes"}, False),  # not a boolean: UNKNOWN
    ("f", {"f": "true"}, True),
    ("f", {"f": "1"}, False),
    ("NOT f", {"f": "false"}, True),
    ("TRUE", {}, True),
    ("FALSE", {}, False),
    ("NOT FALSE", {}, True),
    # identifiers: case-sensitive, Java identifier characters; keywords case-insensitive
    ("A = 1", {"a": "1"}, False),
    ("$x = 1 and _y_2 = 2", {"$x": "1", "_y_2": "2"}, True),
    ("größe = 3", {"größe": "3"}, True),
    ("a between 1 AnD 3", {"a": "2"}, True),
    ("a iS nOt NuLl", {"a": "x"}, True),
    ("a = 1 or b = 2", {"b": "2"}, True),
    ("f = true", {"f": "true"}, True),
    # arithmetic and its precedence
    ("a + b = 5", {"a": "2", "b": "3"}, True),
    ("a - b * 2 = -4", {"a": "2", "b": "3"}, True),
    ("(a - b) * 2 = -2", {"a": "2", "b": "3"}, True),
    ("1 + 2 * 3 = 7", {}, True),
    ("(1 + 2) * 3 = 9", {}, True),
    ("10 - 2 - 3 = 5", {}, True),
    ("12 / 2 / 3 = 2", {}, True),
    ("2 * 3 + 4 * 5 = 26", {}, True),
    ("-2 * -3 = 6", {}, True),
    ("a / 2 = 3", {"a": "7"}, True),  # integer division, as in Java
    ("a / 2 = -3", {"a": "-7"}, True),  # truncates toward zero
    ("-7 / 2 = -3", {}, True),
    ("a / 2.0 = 3.5", {"a": "7"}, True),
    ("a * 1.5 = 3", {"a": "2"}, True),
    ("a / 0 = 1", {"a": "7"}, False),
    ("NOT (a / 0 = 1)", {"a": "7"}, False),  # division by zero: UNKNOWN
    ("a / 0.0 > 1", {"a": "7"}, False),
    ("-a = -5", {"a": "5"}, True),
    ("+a = 5", {"a": "5"}, True),
    ("- -a = 5", {"a": "5"}, True),
    ("a + 1 > 2", {"a": "x"}, False),
    ("NOT (a + 1 > 2)", {"a": "x"}, False),
    ("a + 1 > 2", {}, False),
    ("NOT (a + 1 > 2)", {}, False),
    # comparisons, numeric coercion of header strings
    ("a = 5", {"a": "5"}, True),
    ("a <> 5", {"a": "5"}, False),
    ("a < 5", {"a": "4"}, True),
    ("a <= 5", {"a": "5"}, True),
    ("a > 5", {"a": "5"}, False),
    ("a >= 5", {"a": "5"}, True),
    ("a > 2", {"a": "2.5"}, True),
    ("a = 10", {"a": "10.0"}, True),
    ("a = 1000", {"a": "1e3"}, True),
    ("a = 5", {"a": "+5"}, True),
    ("a > 5", {"a": "007"}, True),
    ("a > 5", {"a": " 7"}, False),  # not a number: UNKNOWN
    ("a > 5", {"a": "1_000"}, False),
    ("a > 5", {"a": "inf"}, False),
    ("a <> 5", {"a": "abc"}, False),
    ("NOT (a <> 5)", {"a": "abc"}, False),
    ("a > 5", {"a": "9" * 5000}, False),  # beyond int()'s digit limit: not a number
    ("a > 5", {"a": "1" + "0" * 400}, True),
    ("5 < a", {"a": "6"}, True),
    ("a > 1 = TRUE", {"a": "2"}, True),  # (a > 1) = TRUE
    ("(a > 1) = FALSE", {"a": "2"}, False),
    ("(a > 1) = FALSE", {}, False),
    # strings compare with = and <> only, as strings
    ("t = 'x'", {"t": "x"}, True),
    ("t = 'x'", {"t": "X"}, False),
    ("t <> 'x'", {"t": "y"}, True),
    ("t <> 'x'", {}, False),
    ("'x' = t", {"t": "x"}, True),
    ("a = '10'", {"a": "10"}, True),
    ("a = '10'", {"a": "10.0"}, False),
    ("'a' = 'a'", {}, True),
    ("'a' <> 'a'", {}, False),
    # identifier against identifier: numbers when both parse, else strings
    ("a = b", {"a": "1", "b": "1.0"}, True),
    ("a = b", {"a": "x", "b": "x"}, True),
    ("a = b", {"a": "x", "b": "y"}, False),
    ("a <> b", {"a": "x", "b": "y"}, True),
    ("a <> b", {"a": "1"}, False),
    ("a < b", {"a": "1", "b": "2"}, True),
    ("a < b", {"a": "x", "b": "y"}, False),
    ("a + b = c", {"a": "1", "b": "2", "c": "3"}, True),
    # BETWEEN
    ("a BETWEEN 1 AND 3", {"a": "1"}, True),
    ("a BETWEEN 1 AND 3", {"a": "3"}, True),
    ("a BETWEEN 1 AND 3", {"a": "0"}, False),
    ("a BETWEEN 1 AND 3", {"a": "4"}, False),
    ("a BETWEEN 1 AND 3", {"a": "2.5"}, True),
    ("a NOT BETWEEN 1 AND 3", {"a": "4"}, True),
    ("a NOT BETWEEN 1 AND 3", {"a": "2"}, False),
    ("a BETWEEN 1 AND 3", {}, False),
    ("a NOT BETWEEN 1 AND 3", {}, False),
    ("a BETWEEN 1 AND 3 AND b = 1", {"a": "2", "b": "1"}, True),
    ("a BETWEEN 1 AND 3 AND b = 1", {"a": "2", "b": "2"}, False),
    ("a BETWEEN b AND 3", {"a": "5"}, False),
    ("a NOT BETWEEN b AND 3", {"a": "5"}, True),  # UNKNOWN AND FALSE is FALSE
    ("a NOT BETWEEN b AND 3", {"a": "2"}, False),  # UNKNOWN AND TRUE is UNKNOWN
    ("a + 1 BETWEEN 2 * 1 AND 2 + 1", {"a": "2"}, True),
    ("a BETWEEN -3 AND -1", {"a": "-2"}, True),
    # IN
    ("c IN ('UK', 'US')", {"c": "US"}, True),
    ("c IN ('UK', 'US')", {"c": "FR"}, False),
    ("c NOT IN ('UK', 'US')", {"c": "FR"}, True),
    ("c NOT IN ('UK', 'US')", {"c": "UK"}, False),
    ("c IN ('UK', 'US')", {}, False),
    ("c NOT IN ('UK', 'US')", {}, False),
    ("c IN ('it''s')", {"c": "it's"}, True),
    ("c IN (1, 2)", {"c": "2.0"}, True),
    ("c IN (1, -2)", {"c": "-2"}, True),
    ("c IN (1, 2)", {"c": "3"}, False),
    ("c IN (1, 2)", {"c": "x"}, False),
    ("c NOT IN (1, 2)", {"c": "x"}, False),  # 'x' = 1 is UNKNOWN
    ("c IN ('x', 1)", {"c": "x"}, True),
    # LIKE, with regular-expression metacharacters taken literally
    ("p LIKE 'ab%'", {"p": "abc"}, True),
    ("p LIKE 'ab%'", {"p": "ab"}, True),
    ("p LIKE 'ab%'", {"p": "xab"}, False),
    ("p LIKE '%b%'", {"p": "abc"}, True),
    ("p LIKE 'a_c'", {"p": "abc"}, True),
    ("p LIKE 'a_c'", {"p": "ac"}, False),
    ("p LIKE 'a_c'", {"p": "abbc"}, False),
    ("p LIKE 'A%'", {"p": "abc"}, False),
    ("p LIKE '%'", {"p": ""}, True),
    ("p LIKE 'a%'", {"p": "a\nb"}, True),
    ("p LIKE 'a.c'", {"p": "abc"}, False),
    ("p LIKE 'a.c'", {"p": "a.c"}, True),
    ("p LIKE '(a)*[b]+?{2}|^$\\'", {"p": "(a)*[b]+?{2}|^$\\"}, True),
    ("p LIKE '(a)*[b]+?'", {"p": "aab"}, False),
    ("p LIKE '100\\%' ESCAPE '\\'", {"p": "100%"}, True),
    ("p LIKE '100\\%' ESCAPE '\\'", {"p": "1000"}, False),
    ("p LIKE 'a!_b' ESCAPE '!'", {"p": "a_b"}, True),
    ("p LIKE 'a!_b' ESCAPE '!'", {"p": "axb"}, False),
    ("p LIKE 'a!!b' ESCAPE '!'", {"p": "a!b"}, True),
    ("p LIKE '%.%' ESCAPE '.'", {"p": "x%y"}, False),  # '.%' is a literal %, the first % is a wildcard
    ("p LIKE '%.%' ESCAPE '.'", {"p": "xy%"}, True),
    ("p LIKE 'x' ESCAPE '%'", {"p": "x"}, True),
    ("p NOT LIKE 'ab%'", {"p": "xyz"}, True),
    ("p NOT LIKE 'ab%'", {"p": "abc"}, False),
    ("p LIKE 'ab%'", {}, False),
    ("p NOT LIKE 'ab%'", {}, False),
    ("p LIKE '1%'", {"p": "123"}, True),
    # IS NULL
    ("a IS NULL", {}, True),
    ("a IS NULL", {"a": ""}, False),
    ("a IS NOT NULL", {"a": ""}, True),
    ("a IS NOT NULL", {}, False),
    ("NOT a IS NULL", {}, False),
    # three-valued NOT, AND, OR
    ("a = 1 AND b = 1", {"a": "2"}, False),
    ("NOT (a = 1 AND b = 1)", {"a": "2"}, True),  # FALSE AND UNKNOWN is FALSE
    ("NOT (a = 1 AND b = 1)", {"a": "1"}, False),  # TRUE AND UNKNOWN is UNKNOWN
    ("a = 1 OR b = 1", {"a": "1"}, True),  # TRUE OR UNKNOWN is TRUE
    ("a = 1 OR b = 1", {"a": "2"}, False),
    ("NOT (a = 1 OR b = 1)", {"a": "2"}, False),  # FALSE OR UNKNOWN is UNKNOWN
    ("NOT b = 1", {}, False),
    ("NOT NOT b = 1", {}, False),
    ("b = 1 OR TRUE", {}, True),
    ("b = 1 AND FALSE", {}, False),
    ("NOT (b = 1 AND FALSE)", {}, True),
    # logical precedence
    ("a = 1 OR b = 1 AND c = 1", {"a": "1"}, True),
    ("(a = 1 OR b = 1) AND c = 1", {"a": "1"}, False),
    ("NOT a = 1 AND b = 1", {"a": "2", "b": "1"}, True),
    ("NOT a = 1 OR b = 1", {"a": "1", "b": "1"}, True),
    ("NOT (a = 1 OR b = 1)", {"a": "1", "b": "2"}, False),
    ("a = 1 AND b = 1 OR c = 1", {"c": "1"}, True),
    ("a = 1 AND (b = 1 OR c = 1)", {"c": "1"}, False),
    # JMS header identifiers
    ("JMSPriority = 4", {}, True),
    ("JMSPriority > 5", {"priority": "9"}, True),
    ("JMSPriority > 5", {"priority": "2"}, False),
    ("priority = 9", {"priority": "9"}, True),
    ("priority IS NULL", {}, True),
    ("JMSMessageID = 'm-1'", {"message-id": "m-1"}, True),
    ("JMSMessageID IS NULL", {}, True),
    ("JMSTimestamp > 1000", {"timestamp": "2000"}, True),
    ("JMSTimestamp > 1000", {}, False),
    ("JMSCorrelationID = 'c-7'", {"correlation-id": "c-7"}, True),
    ("JMSType = 'car'", {"type": "car"}, True),
    ("JMSType IS NULL", {}, True),
    ("JMSDeliveryMode = 'PERSISTENT'", {"persistent": "true"}, True),
    ("JMSDeliveryMode = 'PERSISTENT'", {"persistent": "TRUE"}, True),
    ("JMSDeliveryMode = 'NON_PERSISTENT'", {}, True),
    ("JMSDeliveryMode = 'NON_PERSISTENT'", {"persistent": "false"}, True),
    ("JMSDeliveryMode IS NULL", {}, False),
    ("JMSExpiration = 0", {}, True),
    ("JMSExpiration > 100", {"expires": "123"}, True),
    ("JMSXGroupID = 'g1'", {"JMSXGroupID": "g1"}, True),
    ("jmspriority IS NULL", {}, True),  # identifiers are case-sensitive: not the JMS field
    # an empty selector is no selector
    ("", {}, True),
    ("  \t", {"a": "1"}, True),
    # whitespace of every kind between tokens
    ("a\t=\n1\r\nAND\fb=2", {"a": "1", "b": "2"}, True),
]


@pytest.mark.parametrize(("text", "headers", "expected"), CASES)
def test_selector_table(text: str, headers: dict[str, str], expected: bool) -> None:
    assert compile_selector(text).matches(headers) is expected


MALFORMED: list[tuple[str, str]] = [
    ("(a = 1", "expected ')'"),
    ("((a = 1)", "expected ')'"),
    ("a = 1)", "expected an operator or end of selector"),
    ("a = 1 b", "expected an operator or end of selector"),
    ("a ! 1", "unexpected character '!'"),
    ("a == 1", "expected an operand"),
    ("a != 1", "unexpected character '!'"),
    ("a = #", "unexpected character '#'"),
    ("a = ", "expected an operand"),
    ("= 1", "expected an operand"),
    ("a AND", "expected an operand"),
    ("a = 1 OR", "expected an operand"),
    ("()", "expected an operand"),
    ("a = 'abc", "unterminated string"),
    ("a = 'it''s", "unterminated string"),
    ("a BETWEEN 1 3", "expected AND"),
    ("a BETWEEN 1", "expected AND"),
    ("a LIKE b", "string pattern after LIKE"),
    ("a LIKE 'x' ESCAPE 'ab'", "exactly one character"),
    ("a LIKE 'x' ESCAPE ''", "exactly one character"),
    ("a LIKE 'x!' ESCAPE '!'", "ends with its escape"),
    ("a IN ()", "string or number literal in the IN list"),
    ("a IN ('x' 'y')", "',' or ')' in the IN list"),
    ("a IN (b)", "string or number literal in the IN list"),
    ("a IN ('x',)", "string or number literal in the IN list"),
    ("a IN 'x'", "'(' after IN"),
    ("a IS 1", "NULL or NOT NULL"),
    ("a IS NOT 1", "expected NULL"),
    ("a NOT = 1", "expected BETWEEN, LIKE or IN after NOT"),
    ("'x' < 'y'", "compare only with = and <>"),
    ("a < 'y'", "compare only with = and <>"),
    ("TRUE > FALSE", "compare only with = and <>"),
    ("a < b < c", "compare only with = and <>"),
    ("1 = 'x'", "cannot compare a number with a string"),
    ("TRUE = 1", "cannot compare a boolean with a number"),
    ("'x' + 1 = 2", "needs a number, found a string"),
    ("-'x' = 1", "needs a number, found a string"),
    ("'a' BETWEEN 1 AND 2", "BETWEEN needs a number"),
    ("5", "needs a condition, found a number"),
    ("'x'", "needs a condition, found a string"),
    ("a = 1 AND 5", "AND needs a condition"),
    ("NOT 5", "NOT needs a condition"),
    ("1 LIKE 'x'", "LIKE applies to an identifier"),
    ("'a' IS NULL", "IS NULL applies to an identifier"),
    ("1 IN (1)", "IN applies to an identifier"),
    ("n = 1.5L", "the L suffix is for integers only"),
    ("AND = 1", "expected an operand"),
    ("NULL = 1", "expected an operand"),
    ("a = NULL", "expected an operand"),
    ("a = .", "unexpected character '.'"),
    ("\u00a0", "unexpected character"),  # only SQL whitespace separates tokens
    ("a = 1" + "0" * 5000, "numeric literal too long"),
    ("(" * 200 + "a" + ")" * 200, f"more than {MAX_NESTING} levels deep"),
    ("NOT " * 200 + "a", f"more than {MAX_NESTING} levels deep"),
    ("- " * 200 + "a = 1", f"more than {MAX_NESTING} levels deep"),
    ("a = (b = (c = " * 40 + "d" + "))" * 40, f"more than {MAX_NESTING} levels deep"),
]


@pytest.mark.parametrize(("text", "fragment"), MALFORMED)
def test_malformed_selector_raises_selector_error(text: str, fragment: str) -> None:
    with pytest.raises(SelectorError) as raised:
        compile_selector(text)
    assert fragment in str(raised.value)
    assert "at position " in str(raised.value)


@pytest.mark.parametrize(
    ("text", "position"),
    [
        ("a = 1 ? 2", 7),  # the unknown character
        ("a = 1 AND (b = 2", 17),  # one past the end: where ')' was expected
        ("a = 'x", 5),  # where the unterminated string starts
        ("a BETWEEN 1 OR 3", 13),  # the token found instead of AND
        ("a LIKE 'x' ESCAPE 'ab'", 19),
    ],
)
def test_error_message_names_one_based_position(text: str, position: int) -> None:
    with pytest.raises(SelectorError, match=f"at position {position}:"):
        compile_selector(text)


def test_long_flat_chains_compile_and_evaluate() -> None:
    # Chains are n-ary nodes: thousands of terms must not hit the nesting limit or the stack.
    alternatives = compile_selector(" OR ".join(f"a = {i}" for i in range(3000)))
    assert alternatives.matches({"a": "2999"})
    assert not alternatives.matches({"a": "3000"})
    assert compile_selector("a" + " + 1" * 3000 + " = 3001").matches({"a": "1"})
    conjunction = compile_selector(" AND ".join(f"h{i} IS NOT NULL" for i in range(2000)))
    assert conjunction.matches({f"h{i}": "" for i in range(2000)})
    assert not conjunction.matches({f"h{i}": "" for i in range(1999)})


def test_nesting_up_to_the_limit_is_accepted() -> None:
    depth = MAX_NESTING // 2 - 1
    assert compile_selector("(" * depth + "a = 1" + ")" * depth).matches({"a": "1"})


def test_selector_value_semantics() -> None:
    selector = compile_selector("JMSType = 'car' AND weight > 2.5")
    assert isinstance(selector, Selector)
    assert selector.text == "JMSType = 'car' AND weight > 2.5"
    assert selector == compile_selector("JMSType = 'car' AND weight > 2.5")
    assert hash(selector) == hash(compile_selector(selector.text))
    assert selector != compile_selector("JMSType = 'car'")
    assert repr(selector) == "Selector(\"JMSType = 'car' AND weight > 2.5\")"
    restored = pickle.loads(pickle.dumps(selector))
    assert restored == selector
    assert restored.matches({"type": "car", "weight": "3"})
    assert not restored.matches({"type": "car", "weight": "2"})


def test_compiled_selector_is_reusable_across_header_sets() -> None:
    selector = compile_selector("color IN ('red', 'blue') AND size BETWEEN 1 AND 10")
    headers = [{"color": c, "size": str(s)} for c in ("red", "blue", "green") for s in (0, 5, 11)]
    assert [selector.matches(h) for h in headers] == [False, True, False, False, True, False, False, False, False]


# ---------------------------------------------------------------------------------------------
# Properties

SELECTOR_WORDS = [
    "a", "b", "JMSPriority", "JMSDeliveryMode", "AND", "or", "NOT", "BETWEEN", "LIKE", "ESCAPE", "IN", "IS", "NULL",
    "TRUE", "false", "=", "<>", "<", "<=", ">", ">=", "+", "-", "*", "/", "(", ")", ",", "'x'", "'%_'", "''''", "'",
    "1", "0", "2.5", "1e3", "7L", ".5", "!", "\"", "$", "é",
]
HEADER_VALUES = st.one_of(
    st.text(max_size=8), st.integers(-20, 20).map(str), st.sampled_from(["true", "FALSE", "1.5", "0", "x"])
)
HEADERS = st.dictionaries(st.sampled_from(["a", "b", "c", "priority", "persistent"]), HEADER_VALUES, max_size=5)


@PROPERTY_SETTINGS
@given(text=st.one_of(st.text(max_size=60), st.lists(st.sampled_from(SELECTOR_WORDS), max_size=14).map(" ".join)),
       headers=HEADERS)
@example(text=".\u00b9", headers={})  # a dot, then a non-ASCII digit (superscript one): it once raised AssertionError
def test_any_text_compiles_or_raises_selector_error(text: str, headers: dict[str, str]) -> None:
    try:
        selector = compile_selector(text)
    except SelectorError:
        return
    assert isinstance(selector.matches(headers), bool)


COMPARISONS: dict[str, Callable[[object, object], bool]] = {
    "=": operator.eq, "<>": operator.ne, "<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge,
}


@PROPERTY_SETTINGS
@given(
    op=st.sampled_from(sorted(COMPARISONS)),
    header=st.integers(-10**12, 10**12),
    offset=st.one_of(st.integers(-2, 2), st.integers(-10**12, 10**12)),  # often equal or adjacent
    suffix=st.sampled_from(["", "L"]),
)
def test_integer_comparison_agrees_with_python(op: str, header: int, offset: int, suffix: str) -> None:
    literal = header + offset
    selector = compile_selector(f"x {op} {literal}{suffix}")
    assert selector.matches({"x": str(header)}) is COMPARISONS[op](header, literal)


@PROPERTY_SETTINGS
@given(op=st.sampled_from(sorted(COMPARISONS)), header=st.floats(allow_nan=False, allow_infinity=False),
       literal=st.integers(-1000, 1000))
def test_float_header_comparison_agrees_with_python(op: str, header: float, literal: int) -> None:
    selector = compile_selector(f"{literal} {op} x")
    assert selector.matches({"x": repr(header)}) is COMPARISONS[op](literal, header)


# A small expression language for the last properties: a tree, its selector text, and a reference
# evaluation written independently of the implementation (for headers that are all present).
NAMES = ("a", "b", "c")
ARITHMETIC = {"+": operator.add, "-": operator.sub, "*": operator.mul}

arithmetic_trees = st.recursive(
    st.one_of(st.sampled_from(NAMES).map(lambda n: ("ident", n)), st.integers(-50, 50).map(lambda v: ("lit", v))),
    lambda inner: st.tuples(st.just("bin"), st.sampled_from(sorted(ARITHMETIC)), inner, inner),
    max_leaves=4,
)
like_patterns = st.text(alphabet="12-%_", max_size=4)
leaf_conditions = st.one_of(
    st.tuples(st.just("cmp"), arithmetic_trees, st.sampled_from(sorted(COMPARISONS)), arithmetic_trees),
    st.tuples(st.just("between"), st.sampled_from(NAMES), st.integers(-50, 50), st.integers(-50, 50), st.booleans()),
    st.tuples(st.just("in"), st.sampled_from(NAMES), st.lists(st.integers(-5, 5).map(str), min_size=1, max_size=3),
              st.booleans()),
    st.tuples(st.just("like"), st.sampled_from(NAMES), like_patterns, st.booleans()),
    st.tuples(st.just("isnull"), st.sampled_from(NAMES), st.booleans()),
    st.tuples(st.just("bool"), st.booleans()),
)
condition_trees = st.recursive(
    leaf_conditions,
    lambda inner: st.one_of(
        st.tuples(st.just("not"), inner),
        st.tuples(st.sampled_from(["and", "or"]), inner, inner),
    ),
    max_leaves=6,
)
present_headers = st.fixed_dictionaries({name: st.integers(-60, 60) for name in NAMES})


def render(tree: tuple) -> str:
    kind = tree[0]
    if kind == "ident":
        return tree[1]
    if kind == "lit":
        return str(tree[1])
    if kind == "bin":
        return f"({render(tree[2])} {tree[1]} {render(tree[3])})"
    if kind == "cmp":
        return f"{render(tree[1])} {tree[2]} {render(tree[3])}"
    if kind == "between":
        return f"{tree[1]} {'NOT ' if tree[4] else ''}BETWEEN {tree[2]} AND {tree[3]}"
    if kind == "in":
        return f"{tree[1]} {'NOT ' if tree[3] else ''}IN ({', '.join(repr(item) for item in tree[2])})"
    if kind == "like":
        return f"{tree[1]} {'NOT ' if tree[3] else ''}LIKE '{tree[2]}'"
    if kind == "isnull":
        return f"{tree[1]} IS {'NOT ' if tree[2] else ''}NULL"
    if kind == "bool":
        return "TRUE" if tree[1] else "FALSE"
    if kind == "not":
        return f"NOT ({render(tree[1])})"
    return f"({render(tree[1])}) {kind.upper()} ({render(tree[2])})"


def like_reference(text: str, pattern: str) -> bool:
    @lru_cache(maxsize=None)
    def match(i: int, j: int) -> bool:
        if j == len(pattern):
            return i == len(text)
        if pattern[j] == "%":
            return match(i, j + 1) or (i < len(text) and match(i + 1, j))
        return i < len(text) and (pattern[j] == "_" or pattern[j] == text[i]) and match(i + 1, j + 1)

    return match(0, 0)


def evaluate(tree: tuple, values: dict[str, int]) -> int | bool:
    kind = tree[0]
    if kind == "ident":
        return values[tree[1]]
    if kind == "lit":
        return tree[1]
    if kind == "bin":
        return ARITHMETIC[tree[1]](evaluate(tree[2], values), evaluate(tree[3], values))
    if kind == "cmp":
        return COMPARISONS[tree[2]](evaluate(tree[1], values), evaluate(tree[3], values))
    if kind == "between":
        return (tree[2] <= values[tree[1]] <= tree[3]) != tree[4]
    if kind == "in":
        return (str(values[tree[1]]) in tree[2]) != tree[3]
    if kind == "like":
        return like_reference(str(values[tree[1]]), tree[2]) != tree[3]
    if kind == "isnull":
        return tree[2]  # every identifier is present: IS NULL is false, IS NOT NULL true
    if kind == "bool":
        return tree[1]
    if kind == "not":
        return not evaluate(tree[1], values)
    if kind == "and":
        return evaluate(tree[1], values) and evaluate(tree[2], values)
    return evaluate(tree[1], values) or evaluate(tree[2], values)


@PROPERTY_SETTINGS
@given(tree=condition_trees, values=present_headers)
def test_not_negates_when_every_identifier_is_present(tree: tuple, values: dict[str, int]) -> None:
    headers = {name: str(value) for name, value in values.items()}
    text = render(tree)
    plain = compile_selector(text).matches(headers)
    assert compile_selector(f"NOT ({text})").matches(headers) is (not plain)
    assert plain is bool(evaluate(tree, values))


@PROPERTY_SETTINGS
@given(tree=condition_trees, headers=st.dictionaries(st.sampled_from(NAMES), HEADER_VALUES, max_size=3))
def test_a_selector_and_its_negation_never_both_match(tree: tuple, headers: dict[str, str]) -> None:
    text = render(tree)
    assert not (compile_selector(text).matches(headers) and compile_selector(f"NOT ({text})").matches(headers))


@st.composite
def near_miss_selectors(draw: st.DrawFn) -> str:
    """A valid selector with one splice of selector vocabulary: often still valid, often not."""
    text = render(draw(condition_trees))
    start = draw(st.integers(0, len(text)))
    end = draw(st.integers(start, min(len(text), start + 4)))
    return text[:start] + draw(st.sampled_from(SELECTOR_WORDS + [""])) + text[end:]


@PROPERTY_SETTINGS
@given(text=near_miss_selectors(), headers=HEADERS)
def test_near_miss_selectors_compile_or_raise_selector_error(text: str, headers: dict[str, str]) -> None:
    try:
        selector = compile_selector(text)
    except SelectorError:
        return
    assert isinstance(selector.matches(headers), bool)
