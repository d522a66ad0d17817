// The values a compiled template works on (scopes, the loop variable, namespaces, tuples)
// and the interpreter's semantics for them: truthiness, printing, member access, slicing.

/** The compiled render met something it does not reproduce exactly: use the interpreter. */
export class Bail extends Error {
  override name = "Bail";
}

// deno-lint-ignore no-explicit-any
export type Node = any;
export type Value = unknown;

export class Scope {
  readonly vars = new Map<string, Value>();
  constructor(readonly parent?: Scope) {}
  lookup(name: string): Value {
    const v = this.vars.get(name);
    if (v !== undefined || this.vars.has(name)) return v;
    return this.parent?.lookup(name);
  }
}

/** `namespace(...)`: the only object a template may assign attributes of. */
export class Namespace {
  constructor(readonly fields: Map<string, Value>) {}
}

/** The `loop` variable of a for loop. */
export class Loop {
  constructor(
    readonly index0: number,
    readonly length: number,
    readonly previtem: Value,
    readonly nextitem: Value,
  ) {}
  field(name: string): Value {
    const i = this.index0;
    switch (name) {
      case "index":
        return i + 1;
      case "index0":
        return i;
      case "revindex":
        return this.length - i;
      case "revindex0":
        return this.length - i - 1;
      case "first":
        return i === 0;
      case "last":
        return i === this.length - 1;
      case "length":
        return this.length;
      case "previtem":
        return this.previtem;
      case "nextitem":
        return this.nextitem;
      default:
        // Not a loop field: the interpreter looks at the mapping's methods (get, items...).
        if (MAPPING_METHODS.has(name)) throw new Bail();
        return undefined;
    }
  }
}

/** A tuple literal: a list to most of the interpreter, but not to `is iterable`, to a for
 * loop's unpacking, or to `tojson`. */
export class Tuple extends Array<Value> {}

class BreakSignal {}
class ContinueSignal {}
export const BREAK = new BreakSignal();
export const CONTINUE = new ContinueSignal();

export const MAPPING_METHODS = new Set(["get", "items", "keys", "values", "dictsort"]);
export const STRING_METHODS = new Set([
  "upper",
  "lower",
  "strip",
  "title",
  "capitalize",
  "rstrip",
  "lstrip",
  "startswith",
  "endswith",
  "split",
  "replace",
]);
export const GLOBALS: ReadonlyArray<[string, Value]> = [
  ["true", true],
  ["false", false],
  ["none", null],
  ["True", true],
  ["False", false],
  ["None", null],
];
/** The globals, shared by every render (nothing writes to this scope). */
export const GLOBAL_SCOPE = new Scope();
for (const [name, value] of GLOBALS) GLOBAL_SCOPE.vars.set(name, value);
/** Names the interpreter declares itself: a variable of the same name is an error there. */
export const RESERVED = new Set([
  ...GLOBALS.map(([name]) => name),
  "raise_exception",
  "range",
  "strftime_now",
  "namespace",
]);

export type Expr = (scope: Scope) => Value;
export type Stmt = (scope: Scope) => string;

/** Not compilable: the template keeps the interpreter. */
export class Unsupported extends Error {}

/** A plain object from the variables (the interpreter's ObjectValue), or the loop. */
export function isMapping(v: Value): v is Record<string, Value> {
  return typeof v === "object" && v !== null && !Array.isArray(v) && !(v instanceof Namespace);
}

/** A list that is not a tuple (the interpreter's exact ArrayValue type). */
export function isList(v: Value): v is Value[] {
  return Array.isArray(v) && !(v instanceof Tuple);
}

export function isPrimitive(v: Value): boolean {
  return v === null || (typeof v !== "object" && typeof v !== "function");
}

/** The interpreter's `__bool__`. */
export function truthy(v: Value): boolean {
  if (Array.isArray(v)) return v.length > 0;
  if (v instanceof Namespace) return true;
  if (v instanceof Loop) return true;
  if (typeof v === "object" && v !== null) {
    for (const _ in v) return true;
    return false;
  }
  return !!v;
}

export function isIntOrUndefined(v: Value): v is number | undefined {
  return v === undefined || (typeof v === "number" && Number.isInteger(v));
}

export function getMember(o: Value, p: Value): Value {
  if (o instanceof Loop) {
    if (typeof p !== "string") throw new Bail();
    return o.field(p);
  }
  if (o instanceof Namespace) {
    if (typeof p !== "string") throw new Bail();
    return o.fields.get(p);
  }
  if (Array.isArray(o) || typeof o === "string") {
    if (typeof p === "number" && Number.isInteger(p)) return o.at(p);
    if (typeof p !== "string") throw new Bail();
    if (p === "length") return o.length;
    // A method as a value (not called): not modelled.
    if (typeof o === "string" && STRING_METHODS.has(p)) throw new Bail();
    return undefined;
  }
  if (isMapping(o)) {
    if (typeof p !== "string") throw new Bail();
    if (Object.hasOwn(o, p)) return o[p];
    if (MAPPING_METHODS.has(p)) throw new Bail();
    return undefined;
  }
  // Numbers, booleans, none and undefined have no attributes.
  if (typeof p !== "string") throw new Bail();
  return undefined;
}

/** Python slicing as the interpreter implements it. */
export function slice<T>(items: readonly T[], start?: number, stop?: number, step = 1): T[] {
  const n = items.length;
  const out: T[] = [];
  if (step > 0) {
    const from = start === undefined ? 0 : start < 0 ? Math.max(n + start, 0) : Math.min(start, n);
    const to = stop === undefined ? n : stop < 0 ? Math.max(n + stop, 0) : Math.min(stop, n);
    for (let i = from; i < to; i += step) out.push(items[i]!);
  } else if (step < 0) {
    const from = start === undefined
      ? n - 1
      : start < 0
      ? Math.max(n + start, -1)
      : Math.min(start, n - 1);
    const to = stop === undefined ? -1 : stop < -1 ? Math.max(n + stop, -1) : Math.min(stop, n - 1);
    for (let i = from; i > to; i += step) out.push(items[i]!);
  }
  return out;
}

export function isInt(v: Value): v is number {
  return typeof v === "number" && Number.isInteger(v);
}

/** A value whose JavaScript string is the interpreter's `.value.toString()`. */
export function isPrintable(v: Value): v is string | number | boolean {
  return typeof v === "string" || typeof v === "number" || typeof v === "boolean";
}

/** How a value prints in output (the interpreter's `toString`, for the values modelled). */
export function show(v: Value): string {
  switch (typeof v) {
    case "string":
      return v;
    case "number":
      return String(v);
    case "boolean":
      return v ? "true" : "false";
    case "undefined":
      return "";
    default:
      if (v === null) return "";
      throw new Bail();
  }
}
