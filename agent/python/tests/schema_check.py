"""Checks the probe's messages against `schemas/probe.v1.schema.json`, the schema the
agent's `ProbeMessage` is generated with (gpumem_proto::probe).

A small validator for the part of JSON Schema that schemars writes (type, const, enum,
properties, required, additionalProperties, items, oneOf/anyOf, $ref into $defs,
minimum), strict about one thing the schema leaves open: a property the schema does not
name is an error (except "v", the protocol version every line carries), so a field the
probe sends and the agent would drop fails the test.
"""

import json
import os

HERE = os.path.dirname(os.path.abspath(__file__))
SCHEMA_PATH = os.path.join(HERE, "..", "..", "..", "schemas", "probe.v1.schema.json")

_TYPES = {
    "object": dict,
    "array": list,
    "string": str,
    "boolean": bool,
    "null": type(None),
}


def _type_ok(value, name):
    if name == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if name == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    return isinstance(value, _TYPES[name])


def errors(value, schema, root, path="$", top=False):
    """The reasons `value` does not match `schema`, as a list of strings."""
    if "$ref" in schema:
        name = schema["$ref"].split("/")[-1]
        return errors(value, root["$defs"][name], root, path)
    out = []
    for key in ("oneOf", "anyOf"):
        if key in schema:
            matches = [s for s in schema[key] if not errors(value, s, root, path, top)]
            if (key == "oneOf" and len(matches) != 1) or (key == "anyOf" and not matches):
                tag = value.get("type") if isinstance(value, dict) else None
                return ["%s: matches %d of %s (type %r)" % (path, len(matches), key, tag)]
    if "type" in schema:
        names = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
        if not any(_type_ok(value, n) for n in names):
            return ["%s: %r is not %s" % (path, value, "/".join(names))]
    if "const" in schema and value != schema["const"]:
        return ["%s: %r is not %r" % (path, value, schema["const"])]
    if "enum" in schema and value not in schema["enum"]:
        return ["%s: %r not in %r" % (path, value, schema["enum"])]
    if "minimum" in schema and isinstance(value, (int, float)) and value < schema["minimum"]:
        out.append("%s: %r below %r" % (path, value, schema["minimum"]))
    if isinstance(value, dict):
        props = schema.get("properties")
        for name in schema.get("required", []):
            if name not in value:
                out.append("%s: missing %s" % (path, name))
        for name, v in value.items():
            if props is not None and name in props:
                out += errors(v, props[name], root, "%s.%s" % (path, name))
            elif props is not None and not (top and name == "v"):
                out.append("%s: %s is not in the schema (the agent would drop it)" % (path, name))
            elif props is None and isinstance(schema.get("additionalProperties"), dict):
                out += errors(v, schema["additionalProperties"], root, "%s.%s" % (path, name))
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        for i, v in enumerate(value):
            out += errors(v, schema["items"], root, "%s[%d]" % (path, i))
    return out


def load():
    with open(SCHEMA_PATH) as f:
        return json.load(f)


def check_message(message, schema=None):
    """Raises AssertionError naming every mismatch of one probe message."""
    schema = schema or load()
    if message.get("v") != schema["x-limits"]["protocol_version"]:
        raise AssertionError("message without the protocol version: %r" % (message,))
    found = errors(message, schema, schema, top=True)
    if found:
        raise AssertionError("%s: %s" % (message.get("type"), "; ".join(found)))
