// Filters (`| name`) and tests (`is name`) on values, as the interpreter applies them.

import {
  Bail,
  isInt,
  isList,
  isMapping,
  Loop,
  Namespace,
  Tuple,
  Unsupported,
  type Value,
} from "./_template_values.ts";

export function identifierFilter(name: string): (v: Value) => Value {
  switch (name) {
    case "safe":
      return (v) => v;
    case "tojson":
      return (v) => toJson(v, 0, 0);
    case "length":
      return (v) => {
        if (Array.isArray(v) || typeof v === "string") return v.length;
        if (isMapping(v) && !(v instanceof Loop)) return Object.keys(v).length;
        throw new Bail();
      };
    case "trim":
      return (v) => {
        if (typeof v !== "string") throw new Bail();
        return v.trim();
      };
    case "upper":
    case "lower":
      return (v) => {
        if (typeof v !== "string") throw new Bail();
        return name === "upper" ? v.toUpperCase() : v.toLowerCase();
      };
    case "first":
    case "last":
      return (v) => {
        // An empty list gives the interpreter a JavaScript undefined, not a value.
        if (!Array.isArray(v) || v.length === 0) throw new Bail();
        return name === "first" ? v[0] : v[v.length - 1];
      };
    case "items":
      return (v) => {
        if (!isMapping(v) || v instanceof Loop) throw new Bail();
        return Object.keys(v).map((k) => [k, v[k]]);
      };
    case "list":
      return (v) => {
        if (!Array.isArray(v)) throw new Bail();
        return v;
      };
    default:
      throw new Unsupported();
  }
}

/** The interpreter's `tojson` (Python's json.dumps separators; undefined as null). */
export function toJson(v: Value, indent: number, depth: number): string {
  if (v === null || v === undefined) return "null";
  switch (typeof v) {
    case "string":
    case "boolean":
      return JSON.stringify(v);
    case "number":
      // A float's JSON (1.5) is what the interpreter writes too.
      return JSON.stringify(v);
    case "object":
      break;
    default:
      throw new Bail();
  }
  if (v instanceof Loop || v instanceof Tuple) throw new Bail();
  const pad = indent > 0 ? " ".repeat(indent) : "";
  const base = "\n" + pad.repeat(depth);
  const inner = base + pad;
  const itemSep = indent > 0 ? "," : ", ";
  let parts: string[];
  let open: string, close: string;
  if (Array.isArray(v)) {
    parts = v.map((x) => toJson(x, indent, depth + 1));
    open = "[";
    close = "]";
  } else {
    const entries = v instanceof Namespace ? [...v.fields] : Object.entries(v);
    parts = entries.map(([k, x]) => JSON.stringify(k) + ": " + toJson(x, indent, depth + 1));
    open = "{";
    close = "}";
  }
  if (indent > 0 && parts.length > 0) {
    return open + inner + parts.join(itemSep + inner) + base + close;
  }
  return open + parts.join(itemSep) + close;
}

export function testFunction(name: string): (v: Value) => boolean {
  switch (name) {
    case "defined":
      return (v) => v !== undefined;
    case "undefined":
      return (v) => v === undefined;
    case "none":
      return (v) => v === null;
    case "string":
      return (v) => typeof v === "string";
    case "number":
      return (v) => typeof v === "number";
    case "integer":
      return isInt;
    case "boolean":
      return (v) => typeof v === "boolean";
    case "true":
      return (v) => v === true;
    case "false":
      return (v) => v === false;
    case "mapping":
      // The loop variable is a mapping to the interpreter; a namespace is not.
      return (v) => isMapping(v);
    case "iterable":
      return (v) => isList(v) || typeof v === "string";
    case "sequence":
      return (v) => Array.isArray(v) || typeof v === "string" || isMapping(v);
    default:
      throw new Unsupported();
  }
}
