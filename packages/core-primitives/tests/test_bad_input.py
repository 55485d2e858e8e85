"""The bad-input catalogue of core_primitives: wrong arguments and rules that break the contract.

Each case asserts the exception type and that the message says what failed, what was given and
how to fix it: interpreter rules that break their contract, interpreter and helper arguments of
the wrong kind.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest
from jax import lax

import core_primitives as cp
from core_primitives import Interpreter, RuleOutputError


def f(x):
    return jnp.sin(x) + 1.0


def in_scan(xs):
    return lax.scan(lambda c, x: (c + jnp.sin(x), None), 0.0, xs)[0]


# --- a rule returning other than one value per output (was KeyError: Var(...) or silent) ------

RULE_RESULTS = {
    "none": (lambda ctx, eqn, invals: [], r"returned a list of 0 values, expected a list of 1"),
    "two": (
        lambda ctx, eqn, invals: [jnp.sin(invals[0]), invals[0]],
        r"returned a list of 2 values, expected a list of 1",
    ),
    "bare array": (
        lambda ctx, eqn, invals: jnp.sin(invals[0]),
        r"returned ArrayImpl of shape \(\), expected a list of 1 .*\nWrap a single output in a "
        r"list: return \[y\], not y\.",
    ),
    "None": (
        lambda ctx, eqn, invals: None,
        r"returned NoneType, .*\nThe rule returned nothing: .*return ctx\.bind\(eqn, invals\)",
    ),
}


@pytest.mark.parametrize("case", list(RULE_RESULTS))
def test_rule_with_the_wrong_number_of_outputs(case):
    rule, message = RULE_RESULTS[case]
    with pytest.raises(RuleOutputError, match=r"the rule .*<lambda> for primitive sin " + message):
        Interpreter({lax.sin_p: rule}).transform(f)(1.0)


def test_rule_output_error_names_the_fix_and_the_outputs():
    with pytest.raises(RuleOutputError) as info:
        Interpreter({lax.sin_p: lambda ctx, eqn, invals: []}).transform(f)(1.0)
    message = str(info.value)
    assert "(one per eqn.outvars: " in message and "float32[]" in message
    assert "Return one value per output of the equation" in message
    assert isinstance(info.value, TypeError)  # as JAX's own custom-rule output errors


def test_rule_with_the_wrong_number_of_outputs_inside_a_scan():
    interp = Interpreter({lax.sin_p: lambda ctx, eqn, invals: []})
    with pytest.raises(RuleOutputError, match=r"for primitive sin returned a list of 0 values"):
        interp.transform(in_scan)(jnp.ones(3))


def test_default_rule_with_the_wrong_number_of_outputs():
    interp = Interpreter(default=lambda ctx, eqn, invals: [*ctx.bind(eqn, invals), 0.0])
    with pytest.raises(RuleOutputError, match=r"returned a list of 2 values, expected a list of 1"):
        interp.transform(f)(1.0)


def test_emitting_a_non_array_from_a_scan_body():
    def rule(ctx, eqn, invals):
        ctx.emit({"name": "sin"})
        return ctx.bind(eqn, invals)

    with pytest.raises(TypeError, match=r"holds a str \('sin'\) at name, expected arrays.*Emit"):
        Interpreter({lax.sin_p: rule}).transform(in_scan)(jnp.ones(3))


# --- arguments of the wrong kind ----------------------------------------------------------------


def _sin_eqn():
    return jax.make_jaxpr(jnp.sin)(1.0).eqns[0]


BAD_ARGUMENTS = {
    "rules as a list": (
        lambda: Interpreter([lax.sin_p]),
        TypeError,
        r"rules must be a mapping \{primitive: rule\}, got list. Example: Interpreter\(",
    ),
    "rules keyed by name": (
        lambda: Interpreter({"sin": lambda ctx, eqn, invals: invals}),
        TypeError,
        r"keyed by primitive objects \(e.g. lax.sin_p\), got the key 'sin'.*Names do not work",
    ),
    "a rule that is not callable": (
        lambda: Interpreter({lax.sin_p: "cos"}),
        TypeError,
        r"the rule for sin must be callable fn\(ctx, eqn, invals\) -> outvals, got 'cos'",
    ),
    "a default that is not callable": (
        lambda: Interpreter(default=1),
        TypeError,
        r"default must be a rule fn\(ctx, eqn, invals\) -> outvals or None, got 1",
    ),
    "transform of a result": (
        lambda: Interpreter().transform(f(1.0)),
        TypeError,
        r"fn must be callable, got .*Pass the function itself, not its result",
    ),
    "eval_jaxpr of a function": (
        lambda: Interpreter().eval_jaxpr(f, [1.0]),
        TypeError,
        r"expected a jaxpr \(closed or open\), got function.*jax.make_jaxpr\(f\)\(\*args\)",
    ),
    "eval_jaxpr with too few args": (
        lambda: Interpreter().eval_jaxpr(jax.make_jaxpr(f)(1.0), []),
        TypeError,
        r"the jaxpr takes 1 input, got 0 arguments. Pass the flat list of array leaves",
    ),
    "bind_eqn with too many operands": (
        lambda: cp.bind_eqn(_sin_eqn(), [1.0, 2.0]),
        TypeError,
        r"the sin equation takes 1 operand, got 2. Pass one value per eqn.invars",
    ),
    "pytree_dataclass of an instance": (
        lambda: cp.pytree_dataclass(3),
        TypeError,
        r"decorates a class, got 3 \(int\). Use it as @pytree_dataclass",
    ),
    "identity_primitive without a name": (
        lambda: cp.identity_primitive(""),
        TypeError,
        r"name must be a non-empty str \(shown in jaxprs\), got ''",
    ),
    "identity_primitive with a rule name": (
        lambda: cp.identity_primitive("t", jvp="default"),
        TypeError,
        r"jvp must be a callable rule or None \(the default\), got 'default'",
    ),
    "format_path of a number": (
        lambda: cp.format_path(3),
        TypeError,
        r"expected a tuple path such as \('net', 'mlp', 'kernel'\), got 3 \(int\). Wrap",
    ),
}


@pytest.mark.parametrize("case", list(BAD_ARGUMENTS))
def test_bad_argument(case):
    call, error, message = BAD_ARGUMENTS[case]
    with pytest.raises(error, match=message):
        call()
