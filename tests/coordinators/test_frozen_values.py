"""freeze / thaw / check_json_clean: deep immutability, equality, pickling, JSON paths."""

from __future__ import annotations

import copy
import json
import pickle

import cloudpickle
import pytest
from pydantic import BaseModel

from coordinators import FrozenDict, FrozenList, check_json_clean, freeze, thaw


def test_freeze_turns_nested_dicts_and_lists_into_frozen_equal_values() -> None:
    plain = {"a": [1, {"b": [2, 3]}], "c": None}
    frozen = freeze(plain)
    assert isinstance(frozen, FrozenDict) and isinstance(frozen["a"], tuple)
    assert isinstance(frozen["a"][1], FrozenDict)
    assert frozen == plain and plain == frozen


@pytest.mark.parametrize(
    "mutate",
    [
        lambda d: d.__setitem__("x", 1),
        lambda d: d.__delitem__("a"),
        lambda d: d.update(x=1),
        lambda d: d.pop("a"),
        lambda d: d.setdefault("x", 1),
        lambda d: d.clear(),
        lambda d: d["a"].append(1),
        lambda d: d["a"].__setitem__(0, 9),
        lambda d: d["a"][1].__setitem__("b", 0),
        lambda d: setattr(d, "anything", 1),
    ],
)
def test_frozen_values_raise_type_error_on_every_mutation(mutate) -> None:
    frozen = freeze({"a": [1, {"b": 2}]})
    with pytest.raises(TypeError):
        mutate(frozen)
    assert frozen == {"a": [1, {"b": 2}]}


def test_ior_on_frozen_dict_raises() -> None:
    frozen = freeze({"a": 1})
    with pytest.raises(TypeError):
        frozen |= {"b": 2}


def test_freeze_copies_so_later_changes_to_the_source_do_not_show() -> None:
    plain = {"a": [1]}
    frozen = freeze(plain)
    plain["a"].append(2)
    assert frozen == {"a": [1]}


def test_frozen_values_are_hashable_pickle_and_deepcopy_to_themselves() -> None:
    frozen = freeze({"a": [1, {"b": 2}], "s": "x"})
    assert hash(frozen) == hash(freeze({"s": "x", "a": [1, {"b": 2}]}))
    for dumps, loads in ((pickle.dumps, pickle.loads), (cloudpickle.dumps, cloudpickle.loads)):
        back = loads(dumps(frozen))
        assert back == frozen and type(back["a"][1]) is FrozenDict
        with pytest.raises(TypeError):
            back["a"][1]["b"] = 3
    assert copy.deepcopy(frozen) is frozen


def test_frozen_values_serialise_as_plain_json() -> None:
    assert json.loads(json.dumps(freeze({"a": [1, {"b": None}]}))) == {"a": [1, {"b": None}]}


def test_thaw_returns_fresh_plain_containers() -> None:
    frozen = freeze({"a": [1, {"b": 2}]})
    plain = thaw(frozen)
    assert type(plain) is dict and type(plain["a"]) is list and type(plain["a"][1]) is dict
    plain["a"].append(3)
    assert frozen == {"a": [1, {"b": 2}]}


def test_frozen_list_equals_list_and_tuple() -> None:
    assert FrozenList([1, 2]) == [1, 2] == FrozenList([1, 2])
    assert FrozenList([1, 2]) == (1, 2)
    assert FrozenList([1, 2]) != [2, 1]


class _Plan(BaseModel):
    steps: list[str] = []


def test_freeze_makes_a_frozen_copy_of_a_mutable_model_that_pickles() -> None:
    plan = _Plan(steps=["a"])
    frozen = freeze(plan)
    assert isinstance(frozen, _Plan) and frozen.steps == ["a"]
    with pytest.raises(TypeError):
        frozen.steps.append("b")
    with pytest.raises(ValueError):  # pydantic's frozen-instance error
        frozen.steps = []
    plan.steps.append("z")
    assert frozen.steps == ["a"]
    assert pickle.loads(pickle.dumps(frozen)).steps == ["a"]
    assert thaw(frozen) == {"steps": ["a"]}


def test_check_json_clean_accepts_plain_json() -> None:
    check_json_clean({"a": [1, 2.5, "s", None, True, {"b": (1, 2)}]}, "data")


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ({"arguments": {"x": {1, 2}}}, "data.arguments.x: set is not JSON-clean"),
        ({"v": float("nan")}, "data.v: float nan is not JSON-clean (must be finite)"),
        ({"v": float("inf")}, "data.v: float inf is not JSON-clean (must be finite)"),
        ({"v": [1, object()]}, "data.v[1]: object is not JSON-clean"),
        ({"v": {3: "x"}}, "data.v: key 3 is not a string"),
        ({"v": b"bytes"}, "data.v: bytes is not JSON-clean"),
    ],
)
def test_check_json_clean_names_the_offending_path(value, expected) -> None:
    with pytest.raises(ValueError) as info:
        check_json_clean(value, "data")
    assert expected in str(info.value)


def test_check_json_clean_reports_every_problem_and_cycles() -> None:
    loop: list = []
    loop.append(loop)
    with pytest.raises(ValueError) as info:
        check_json_clean({"a": {1}, "b": float("nan"), "c": loop}, "data")
    text = str(info.value)
    assert "data.a:" in text and "data.b:" in text and "data.c[0]: contains itself" in text
