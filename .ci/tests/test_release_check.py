import pytest
from release_check import publish_order, unsatisfied

SIBLINGS = ["core-primitives", "lox-logging", "gpt-models"]


def test_satisfied_by_a_published_version():
    reqs = ["core-primitives>=0.1.0,<0.2", "jax>=0.7.2"]
    assert unsatisfied(reqs, {"core-primitives": ["0.1.0", "0.1.3"]}, SIBLINGS) == []


def test_lower_bound_above_every_published_version_is_reported():
    reqs = ["core-primitives>=0.2.0,<0.3", "lox-logging[wandb]>=0.1.0,<0.2"]
    available = {"core-primitives": ["0.1.0", "0.1.3"], "lox-logging": ["0.1.0"]}
    assert unsatisfied(reqs, available, SIBLINGS) == [
        "core-primitives>=0.2.0,<0.3: available versions are 0.1.0, 0.1.3; none satisfies it"
    ]


def test_never_published_sibling_is_reported():
    assert unsatisfied(["lox-logging>=0.1.0"], {}, SIBLINGS) == [
        "lox-logging>=0.1.0: available versions are none; none satisfies it"
    ]


def test_upper_bound_counts_and_prereleases_do_not():
    available = {"core-primitives": ["0.2.0", "0.1.5rc1", "legacy-junk"]}
    assert unsatisfied(["core-primitives>=0.1,<0.2"], available, SIBLINGS) != []


def test_third_party_requirements_are_not_checked():
    assert unsatisfied(["jax>=99"], {}, SIBLINGS) == []


def test_names_are_compared_canonically():
    assert unsatisfied(["Core_Primitives>=0.1"], {"core-primitives": ["0.1.0"]}, SIBLINGS) == []


def test_publish_order_puts_dependencies_first_and_ignores_packages_not_released():
    requires = {
        "gpt-models": ["lox-logging", "core-primitives"],
        "lox-logging": ["core-primitives"],
    }
    assert publish_order(requires) == ["lox-logging", "gpt-models"]
    requires["core-primitives"] = []
    assert publish_order(requires) == ["core-primitives", "lox-logging", "gpt-models"]


def test_publish_order_reports_a_cycle():
    with pytest.raises(ValueError, match="cycle: a -> b -> a"):
        publish_order({"a": ["b"], "b": ["a"]})
