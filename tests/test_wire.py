"""The TypedDicts of ``torchscan.wire`` against the shipped JSON Schema: walked together from the root, every object
of the schema has a TypedDict with the same field names and the same required set, every nested field has the type
the schema gives it (the right TypedDict, list, ``Literal`` of its enumeration, nullable or not), and every TypedDict
of the module is reached.

The types may be narrower than the schema where the schema offers alternatives (``oneOf``): a sequence's ``items``
hold value descriptions only, a named tuple's keyed values only. On object fields they must agree exactly.
"""

import copy
import functools
import operator
import types
import typing
from dataclasses import dataclass, field
from typing import Any, Literal, Union, get_args, get_origin, get_type_hints

import pytest

from torchscan import diagnostics, wire
from torchscan.results import METRIC_UNITS, SCOPES, MetricResult
from torchscan.schema import SCHEMA_VERSION, report_schema

#: Fields the schema requires but does not describe, and the TypedDicts that describe them from the code instead.
UNDESCRIBED_FIELDS = {"#/properties/context": {"torchscan", "torch", "python", "model_type", "execution",
                                               "prior_training", "custom_modules", "custom_formulas"}}
UNDESCRIBED_TYPES = {wire.Execution, wire.PriorTraining, wire.CustomModule}
#: Schema objects that accept keys they do not list (no ``additionalProperties: false``), unlike their TypedDicts.
OPEN_OBJECTS = {"#/properties/context", "#/$defs/call/properties/kwargs/items"}

PRIMITIVES: dict[str, tuple[type, ...]] = {"string": (str,), "integer": (int,), "boolean": (bool,),
                                           "number": (int, float)}


def typeddicts_of(module: types.ModuleType) -> set[type]:
    return {value for value in vars(module).values() if typing.is_typeddict(value)}


@dataclass
class Walk:
    """One walk of a schema and a type together: what disagrees, which TypedDicts were reached, which type each
    ``$defs`` entry was matched with, and the objects that are open or have undescribed fields."""

    root: dict[str, Any]
    problems: list[str] = field(default_factory=list)
    reached: set[type] = field(default_factory=set)
    defs: dict[str, set[Any]] = field(default_factory=dict)
    open_objects: set[str] = field(default_factory=set)
    undescribed: dict[str, set[str]] = field(default_factory=dict)
    undescribed_types: set[type] = field(default_factory=set)
    #: The (schema object, types) pairs entered: a recursive definition (``$defs/value``) is entered once.
    entered: set[tuple[str, frozenset[Any]]] = field(default_factory=set)

    def trial(self) -> "Walk":
        return Walk(self.root, entered=set(self.entered))

    def absorb(self, other: "Walk") -> None:
        self.problems += other.problems
        self.entered |= other.entered
        self.reached |= other.reached
        for name, found in other.defs.items():
            self.defs.setdefault(name, set()).update(found)
        self.open_objects |= other.open_objects
        self.undescribed.update(other.undescribed)
        self.undescribed_types |= other.undescribed_types

    # -- the schema side ---------------------------------------------------------------------------------------

    def alternatives(self, node: dict[str, Any], pointer: str) -> list[tuple[dict[str, Any], str]]:
        """The schema's alternatives for a value: ``$ref`` followed, ``oneOf`` branches and ``type`` lists spelled
        out, nested ones flattened. A definition's pointer is ``#/$defs/<name>``."""
        if "$ref" in node:
            pointer = node["$ref"]
            node = self.root
            for part in pointer.removeprefix("#/").split("/"):
                node = node[part]
        if "oneOf" in node:
            return [alt for index, branch in enumerate(node["oneOf"])
                    for alt in self.alternatives(branch, f"{pointer}/oneOf/{index}")]
        if isinstance(node.get("type"), list):
            return [({**node, "type": kind}, pointer) for kind in node["type"]]
        return [(node, pointer)]

    # -- pairing -----------------------------------------------------------------------------------------------

    def match(self, node: dict[str, Any], pointer: str, tp: Any) -> None:
        """Pair a schema node with a type: ``None`` where the schema allows null, then the other alternatives."""
        schema_alts = self.alternatives(node, pointer)
        type_alts = list(flatten(tp))
        nullable = [alt for alt in schema_alts if alt[0].get("type") == "null"]
        if bool(nullable) != (type(None) in type_alts):
            self.problems.append(f"{pointer}: nullable in {'the schema' if nullable else 'the type'} only ({tp})")
        schema_alts = [alt for alt in schema_alts if alt[0].get("type") != "null"]
        type_alts = [alt for alt in type_alts if alt is not type(None)]
        if len(schema_alts) == 1:
            self.match_one(*schema_alts[0], type_alts)
            return
        for group in grouped(type_alts):  # several alternatives: each of the type's must match one of them
            trials = []
            for alt_node, alt_pointer in schema_alts:
                trial = self.trial()
                trial.match_one(alt_node, alt_pointer, group)
                trials.append(trial)
            matched = [trial for trial in trials if not trial.problems]
            if matched:
                self.absorb(matched[0])
            else:
                self.problems.append(f"{pointer}: {group} matches none of the schema's alternatives")

    def match_one(self, node: dict[str, Any], pointer: str, type_alts: list[Any]) -> None:
        """Pair one schema alternative with the type's alternatives (several only for a union of TypedDicts, or
        ``int | float`` for a number)."""
        if pointer.startswith("#/$defs/") and pointer.count("/") == 2:  # which type the definition was paired with
            self.defs.setdefault(pointer, set()).add(functools.reduce(operator.or_, type_alts))
        if "const" in node or "enum" in node:
            self.match_literal(node, pointer, type_alts)
        elif node.get("type") == "object" or "properties" in node:
            if (pointer, frozenset(type_alts)) in self.entered:
                return
            self.entered.add((pointer, frozenset(type_alts)))
            if all(map(typing.is_typeddict, type_alts)) and len(type_alts) > 1:
                self.match_variants(node, pointer, type_alts)
            elif len(type_alts) == 1 and typing.is_typeddict(type_alts[0]):
                self.match_object(node, pointer, type_alts[0])
            else:
                self.problems.append(f"{pointer}: an object, typed {type_alts}")
        elif node.get("type") == "array":
            if len(type_alts) != 1 or get_origin(type_alts[0]) is not list:
                self.problems.append(f"{pointer}: an array, typed {type_alts}")
            else:
                self.match(node["items"], f"{pointer}/items", get_args(type_alts[0])[0])
        elif node.get("type") in PRIMITIVES:
            if not type_alts or not set(type_alts) <= set(PRIMITIVES[node["type"]]):
                self.problems.append(f"{pointer}: {node['type']}, typed {type_alts}")
        else:
            self.problems.append(f"{pointer}: a schema node this test does not know how to pair: {node}")

    def match_literal(self, node: dict[str, Any], pointer: str, type_alts: list[Any]) -> None:
        values = {node["const"]} if "const" in node else set(node["enum"])
        literal = [value for alt in type_alts if get_origin(alt) is Literal for value in get_args(alt)]
        if len(literal) != sum(len(get_args(alt)) for alt in type_alts) or set(literal) != values:
            self.problems.append(f"{pointer}: the values {sorted(values, key=str)}, typed {type_alts}")

    def match_object(self, node: dict[str, Any], pointer: str, td: type) -> None:
        """The same field names and required set; each field paired with its schema; undescribed fields noted."""
        properties, required = node.get("properties", {}), set(node.get("required", ()))
        hints = get_type_hints(td)
        self.compare_names(pointer, td.__name__, set(properties) | required, set(hints), required,
                           set(td.__required_keys__))
        self.note_object(node, pointer, required - set(properties))
        for name in hints.keys() & properties.keys():
            self.match(properties[name], f"{pointer}/properties/{name}", hints[name])
        for name in hints.keys() & (required - set(properties)):
            self.undescribed_types |= {tp for tp in reachable(hints[name])}
        self.reached.add(td)

    def match_variants(self, node: dict[str, Any], pointer: str, variants: list[type]) -> None:
        """One schema object, several TypedDicts told apart by a ``Literal`` field (``$defs/value`` by ``kind``):
        together they have the object's field names, each has the fields it needs, and their literals split the
        enumeration between them."""
        properties, required = node.get("properties", {}), set(node.get("required", ()))
        hints = {td: get_type_hints(td) for td in variants}
        names = set().union(*map(set, hints.values()))
        common = set.intersection(*(set(td.__required_keys__) for td in variants))
        label = " | ".join(td.__name__ for td in variants)
        self.compare_names(pointer, label, set(properties) | required, names, required, common)
        self.note_object(node, pointer, required - set(properties))
        for name in sorted(required & names):
            literals = [get_args(hints[td][name]) for td in variants]
            if "enum" in properties.get(name, {}) and sum(map(len, literals)) != len(set().union(*literals)):
                self.problems.append(f"{pointer}: the {name!r} literals of {label} overlap")
        for td in variants:
            for name in hints[td].keys() & properties.keys():
                if name in required and "enum" in properties[name]:  # the discriminator: a part of the enum
                    extra = set(get_args(hints[td][name])) - set(properties[name]["enum"])
                    if extra:
                        self.problems.append(f"{pointer}/properties/{name}: {td.__name__} has {sorted(extra)}")
                else:
                    self.match(properties[name], f"{pointer}/properties/{name}", hints[td][name])
            self.reached.add(td)
        discriminators = [name for name in required if "enum" in properties.get(name, {})]
        for name in discriminators:
            covered = set().union(*(get_args(hints[td][name]) for td in variants))
            if covered != set(properties[name]["enum"]):
                self.problems.append(f"{pointer}/properties/{name}: {label} cover {sorted(covered)}, the schema "
                                     f"{sorted(properties[name]['enum'])}")

    def compare_names(self, pointer: str, label: str, schema_names: set[str], type_names: set[str],
                      schema_required: set[str], type_required: set[str]) -> None:
        if schema_names != type_names:
            self.problems.append(f"{pointer} vs {label}: fields only in the schema {sorted(schema_names - type_names)}"
                                 f", only in the type {sorted(type_names - schema_names)}")
        if schema_required != type_required:
            self.problems.append(f"{pointer} vs {label}: required only in the schema "
                                 f"{sorted(schema_required - type_required)}, only in the type "
                                 f"{sorted(type_required - schema_required)}")

    def note_object(self, node: dict[str, Any], pointer: str, undescribed: set[str]) -> None:
        if node.get("additionalProperties") is not False:
            self.open_objects.add(pointer)
        if undescribed:
            self.undescribed[pointer] = undescribed


def flatten(tp: Any) -> list[Any]:
    """A type's alternatives: unions (aliases included) opened, ``Literal``s kept whole."""
    if get_origin(tp) in (Union, types.UnionType):
        return [alt for arg in get_args(tp) for alt in flatten(arg)]
    return [tp]


def grouped(type_alts: list[Any]) -> list[list[Any]]:
    """The type's alternatives as the schema's alternatives see them: the TypedDicts together (a union of variants
    pairs with one object), ``int`` with ``float`` (a number), everything else alone."""
    typeddicts = [alt for alt in type_alts if typing.is_typeddict(alt)]
    numbers = [alt for alt in type_alts if alt in (int, float)]
    rest = [[alt] for alt in type_alts if alt not in typeddicts and alt not in numbers]
    return [group for group in (typeddicts, numbers) if group] + rest


def reachable(tp: Any) -> set[type]:
    """Every TypedDict a type refers to, at any depth."""
    found: set[type] = set()
    pending = [tp]
    while pending:
        current = pending.pop()
        if typing.is_typeddict(current):
            if current not in found:
                found.add(current)
                pending.extend(get_type_hints(current).values())
        else:
            pending.extend(arg for arg in get_args(current) if get_origin(current) is not Literal)
    return found


def walk(schema: dict[str, Any], root: type = wire.Report) -> Walk:
    result = Walk(schema)
    result.match(schema, "#", root)
    return result


@pytest.fixture(scope="module")
def walked() -> Walk:
    return walk(report_schema())


# -- the types agree with the schema -------------------------------------------------------------------------------


def test_every_schema_object_has_a_typeddict_with_its_fields_and_required_set(walked: Walk) -> None:
    assert walked.problems == []


def test_every_typeddict_of_the_wire_module_is_reached(walked: Walk) -> None:
    assert walked.undescribed_types == UNDESCRIBED_TYPES
    assert typeddicts_of(wire) == walked.reached | walked.undescribed_types
    assert MetricResult in walked.reached and wire.MetricResult is MetricResult


def test_each_schema_definition_is_one_type(walked: Walk) -> None:
    """``$defs/ref`` is always `CallReference`, ``$defs/metric`` always `MetricResult`, and so on: no two types
    stand for one definition. ``$defs/value`` is the union `ValueDescription`."""
    expected = {"metric": MetricResult, "value": wire.ValueDescription, "ref": wire.CallReference,
                "layer": wire.LayerRecord, "diagnostic": wire.Diagnostic, "call": wire.CallMetadata,
                "attention_kernel": wire.AttentionKernel, "stand_ins": wire.StandIns, "kv_cache": wire.KVCache,
                "training_at_peak": wire.TrainingMemoryAtPeak, "parallel_categories": wire.ParallelCategories,
                "parallel_step": wire.ParallelStep, "collective_bytes": wire.CollectiveBytes,
                "time_statistics": wire.TimeStatistics}
    assert set(expected) == set(report_schema()["$defs"])
    assert walked.defs == {f"#/$defs/{name}": {tp} for name, tp in expected.items()}


def test_the_schema_gaps_are_the_known_ones(walked: Walk) -> None:
    """What the types state and the schema does not: fields of ``context`` required by name only, and two objects
    without ``additionalProperties: false``. A schema that closes a gap fails here, to have the lists updated."""
    assert walked.undescribed == UNDESCRIBED_FIELDS
    assert walked.open_objects == OPEN_OBJECTS


def test_the_literals_are_the_package_vocabulary() -> None:
    assert get_args(wire.MetricName) == tuple(METRIC_UNITS)
    assert set(get_args(wire.Ownership)) <= set(SCOPES)
    assert get_args(wire.Report.__annotations__["schema_version"]) == (SCHEMA_VERSION,)
    assert {severity for severity, _ in diagnostics.CODES.values()} <= set(get_args(wire.Severity))


def test_the_engine_diagnostic_type_has_the_wire_fields() -> None:
    """``torchscan.diagnostics.Diagnostic`` (``total=False``) names the same fields as the wire type."""
    assert get_type_hints(diagnostics.Diagnostic) == get_type_hints(wire.Diagnostic)


# -- the walk would see a difference -------------------------------------------------------------------------------


def edited(pointer: str, edit: Any) -> dict[str, Any]:
    schema = copy.deepcopy(report_schema())
    node = schema
    for part in pointer.removeprefix("#/").split("/"):
        node = node[part] if part else node
    edit(node)
    return schema


@pytest.mark.parametrize(("pointer", "edit", "expected"), [
    ("#/$defs/layer", lambda node: node["properties"].update(extra={"type": "string"}),
     "fields only in the schema ['extra']"),
    ("#/$defs/layer", lambda node: node["properties"].pop("breakdown"), "only in the type ['breakdown']"),
    ("#/$defs/layer", lambda node: node["required"].append("memory"), "required only in the schema ['memory']"),
    ("#/$defs/layer", lambda node: node["required"].remove("metrics"), "only in the type ['metrics']"),
    ("#/$defs/value", lambda node: node["properties"].update(stride={"type": "array"}),
     "fields only in the schema ['stride']"),
    ("#/$defs/value", lambda node: node["properties"]["kind"]["enum"].append("sparse_tensor"), "'sparse_tensor'"),
    ("#/$defs/training_at_peak",
     lambda node: node["properties"].update(workspace={"$ref": "#/$defs/metric"}), "['workspace']"),
    ("#/$defs/kv_cache", lambda node: node["properties"]["dtype"].update(type="string"), "nullable in the type"),
    ("#/$defs/stand_ins", lambda node: node["properties"]["kind"].update(const="real_tensors"), "fake_tensors"),
    ("#/$defs/ref", lambda node: node["properties"]["call_index"].update(type="string"), "string, typed"),
])
def test_a_field_changed_on_one_side_only_fails_the_walk(pointer: str, edit: Any, expected: str) -> None:
    problems = walk(edited(pointer, edit)).problems
    assert problems and any(expected in problem for problem in problems), problems


def test_a_field_added_to_a_type_only_fails_the_walk() -> None:
    class Layer(wire.LayerRecord):
        extra: int

    class Report(wire.Report):  # the report with that layer type
        layers: list[Layer]

    problems = walk(report_schema(), Report).problems
    assert any("only in the type ['extra']" in problem for problem in problems), problems


# -- the (path, call_index) index ----------------------------------------------------------------------------------


def reference(path: str, call_index: int) -> wire.CallReference:
    return {"path": path, "call_index": call_index}


def test_call_key_and_the_index_by_call() -> None:
    records = [reference(wire.ROOT_PATH, 0), reference("0", 0), reference("0", 1)]
    assert wire.call_key(records[2]) == ("0", 1)
    assert wire.index_by_call(records) == {("", 0): records[0], ("0", 0): records[1], ("0", 1): records[2]}
    assert wire.index_by_call(records)[("0", 1)] is records[2]
    assert wire.positions_by_call(records) == {("", 0): 0, ("0", 0): 1, ("0", 1): 2}


@pytest.mark.parametrize("index", [wire.index_by_call, wire.positions_by_call])
def test_a_repeated_call_is_an_error(index: Any) -> None:
    with pytest.raises(ValueError, match="more than one layer record for path '0', call_index 1"):
        index([reference("0", 1), reference("", 0), reference("0", 1)])
