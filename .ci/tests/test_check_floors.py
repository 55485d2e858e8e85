from check_floors import floor_problems


def test_requirements_at_their_floors_pass():
    installed = {"numpy": "2.0.0", "jax": "0.7.2", "wandb": "0.19.10"}
    assert floor_problems(["numpy>=2.0", "jax>=0.7.2", "wandb>=0.19.10,<1"], installed) == []


def test_a_floor_the_resolver_could_not_reach_is_reported_with_the_fix():
    (problem,) = floor_problems(["numpy>=1.26"], {"numpy": "2.0.0", "jax": "0.7.2"})
    assert problem.startswith("numpy>=1.26 resolved to 2.0.0, not its floor 1.26")
    assert "Raise the floor" in problem


def test_missing_floor_and_missing_package_are_reported():
    problems = floor_problems(["optax", "orbax-checkpoint>=0.11.17"], {"optax": "0.2.7"})
    assert problems[0].startswith("optax declares no lower bound")
    assert problems[1].startswith("orbax-checkpoint>=0.11.17 is not installed")


def test_names_and_markers_of_requirements_are_read():
    reqs = ["Orbax_Checkpoint>=0.11.17", "matplotlib>=3.8.4; python_version >= '3'"]
    installed = {"orbax-checkpoint": "0.11.17", "matplotlib": "3.8.4"}
    assert floor_problems(reqs, installed) == []
