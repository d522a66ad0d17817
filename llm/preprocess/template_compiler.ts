// A compiler from @huggingface/jinja's parsed template to JavaScript closures, for the
// request hot path: the interpreter allocates a wrapper per value and a scope per loop
// iteration, which made the chat template a fifth of the frontend's CPU per request.
//
// It covers the part of the language chat templates use and reproduces the interpreter's
// semantics there (its quirks included: `strip('\n')` trims all whitespace, `==` is
// JavaScript's loose equality). Anything else is refused: at compile time (an unsupported
// node, filter or function: `compileTemplate` returns undefined) or at render time (a
// value it does not model exactly, or any error: the render throws `Bail`). The caller
// then renders with the interpreter, so the output is always the interpreter's.

/** The compiled render met something it does not reproduce exactly: use the interpreter. */
export class Bail extends Error {
  override name = "Bail";
}

/** A compiled template: variables in, prompt text out. */
export type CompiledTemplate = (vars: Record<string, unknown>) => string;

// deno-lint-ignore no-explicit-any
type Node = any;
type Value = unknown;

class Scope {
  readonly vars = new Map<string, Value>();
  constructor(readonly parent?: Scope) {}
  lookup(name: string): Value {
    const v = this.vars.get(name);
    if (v !== undefined || this.vars.has(name)) return v;
    return this.parent?.lookup(name);
  }
}

/** `namespace(...)`: the only object a template may assign attributes of. */
class Namespace {
  constructor(readonly fields: Map<string, Value>) {}
}

/** The `loop` variable of a for loop. */
class Loop {
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
class Tuple extends Array<Value> {}

class BreakSignal {}
class ContinueSignal {}
const BREAK = new BreakSignal();
const CONTINUE = new ContinueSignal();

const MAPPING_METHODS = new Set(["get", "items", "keys", "values", "dictsort"]);
const STRING_METHODS = new Set([
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
const GLOBALS: ReadonlyArray<[string, Value]> = [
  ["true", true],
  ["false", false],
  ["none", null],
  ["True", true],
  ["False", false],
  ["None", null],
];
/** The globals, shared by every render (nothing writes to this scope). */
const GLOBAL_SCOPE = new Scope();
for (const [name, value] of GLOBALS) GLOBAL_SCOPE.vars.set(name, value);
/** Names the interpreter declares itself: a variable of the same name is an error there. */
const RESERVED = new Set([
  ...GLOBALS.map(([name]) => name),
  "raise_exception",
  "range",
  "strftime_now",
  "namespace",
]);

type Expr = (scope: Scope) => Value;
type Stmt = (scope: Scope) => string;

/** Not compilable: the template keeps the interpreter. */
class Unsupported extends Error {}

/**
 * Compiles a parsed template (`new Template(source).parsed`).
 *
 * @param program the parsed template
 * @returns the compiled render, or undefined when the template uses something this
 *   compiler does not cover
 * @example
 * ```ts
 * const render = compileTemplate(new Template("{{ x }}!").parsed);
 * render?.({ x: "hi" }); // "hi!"
 * ```
 */
export function compileTemplate(program: Node): CompiledTemplate | undefined {
  let body: Stmt;
  try {
    if (program?.type !== "Program") throw new Unsupported();
    body = block(program.body);
  } catch (err) {
    if (err instanceof Unsupported) return undefined;
    throw err;
  }
  return (vars) => {
    // The variables and top-level `set`s share one scope, as in the interpreter.
    const scope = new Scope(GLOBAL_SCOPE);
    for (const name in vars) {
      if (RESERVED.has(name)) throw new Bail();
      scope.vars.set(name, vars[name]);
    }
    try {
      return body(scope);
    } catch (err) {
      // Errors are the interpreter's to word; break/continue outside a loop too.
      if (err instanceof Bail) throw err;
      throw new Bail(undefined, { cause: err });
    }
  };
}

// --- statements ---------------------------------------------------------------------------

function block(nodes: Node[] | undefined): Stmt {
  const stmts = (nodes ?? []).map(statement);
  if (stmts.length === 1) return stmts[0]!;
  return (scope) => {
    let out = "";
    for (let i = 0; i < stmts.length; i++) out += stmts[i]!(scope);
    return out;
  };
}

function statement(node: Node): Stmt {
  switch (node.type) {
    case "StringLiteral": {
      const text: string = node.value;
      return () => text;
    }
    case "Comment":
      return () => "";
    case "If": {
      const test = expression(node.test);
      const body = block(node.body);
      const alternate = block(node.alternate);
      return (scope) => truthy(test(scope)) ? body(scope) : alternate(scope);
    }
    case "For":
      return forLoop(node);
    case "Set":
      return setStatement(node);
    case "Break":
      return () => {
        throw BREAK;
      };
    case "Continue":
      return () => {
        throw CONTINUE;
      };
    case "Macro":
    case "CallStatement":
    case "FilterStatement":
      throw new Unsupported();
    default: {
      const value = expression(node);
      return (scope) => show(value(scope));
    }
  }
}

/** How a value prints in output (the interpreter's `toString`, for the values modelled). */
function show(v: Value): string {
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

function forLoop(node: Node): Stmt {
  const loopvar = node.loopvar;
  let names: string[];
  let unpack: boolean;
  if (loopvar.type === "Identifier") {
    names = [loopvar.value];
    unpack = false;
  } else if (
    loopvar.type === "TupleLiteral" &&
    loopvar.value.every((n: Node) => n.type === "Identifier")
  ) {
    names = loopvar.value.map((n: Node) => n.value);
    unpack = true;
  } else {
    throw new Unsupported();
  }
  const select = node.iterable.type === "SelectExpression";
  const iterable = expression(select ? node.iterable.lhs : node.iterable);
  const filter = select ? expression(node.iterable.test) : undefined;
  const body = block(node.body);
  const otherwise = block(node.defaultBlock);
  const bind = (scope: Scope, item: Value) => {
    if (!unpack) {
      scope.vars.set(names[0]!, item);
      return;
    }
    if (!isList(item) || item.length !== names.length) throw new Bail();
    for (let j = 0; j < names.length; j++) scope.vars.set(names[j]!, item[j]);
  };
  return (outer) => {
    const scope = new Scope(outer);
    const source = iterable(scope);
    let all: readonly Value[];
    if (Array.isArray(source)) all = source;
    else if (isMapping(source) && !(source instanceof Loop)) all = Object.keys(source);
    else throw new Bail();
    let items = all;
    if (filter !== undefined) {
      items = [];
      for (const item of all) {
        const itemScope = new Scope(scope);
        bind(itemScope, item);
        if (truthy(filter(itemScope))) (items as Value[]).push(item);
      }
    }
    let out = "";
    let none = true;
    const n = items.length;
    for (let i = 0; i < n; i++) {
      scope.vars.set(
        "loop",
        new Loop(i, n, i > 0 ? items[i - 1] : undefined, i < n - 1 ? items[i + 1] : undefined),
      );
      bind(scope, items[i]);
      try {
        out += body(scope);
      } catch (signal) {
        // As the interpreter does: the iteration's output is dropped, and an iteration
        // left by continue or break does not count as one for the else block.
        if (signal === CONTINUE) continue;
        if (signal === BREAK) break;
        throw signal;
      }
      none = false;
    }
    if (none) out += otherwise(scope);
    return out;
  };
}

function setStatement(node: Node): Stmt {
  const value: Expr = node.value ? expression(node.value) : block(node.body);
  const target = node.assignee;
  if (target.type === "Identifier") {
    const name: string = target.value;
    return (scope) => {
      scope.vars.set(name, value(scope));
      return "";
    };
  }
  if (target.type === "TupleLiteral" && target.value.every((n: Node) => n.type === "Identifier")) {
    const names: string[] = target.value.map((n: Node) => n.value);
    return (scope) => {
      const v = value(scope);
      if (!Array.isArray(v) || v.length !== names.length) throw new Bail();
      names.forEach((name, i) => scope.vars.set(name, v[i]));
      return "";
    };
  }
  if (
    target.type === "MemberExpression" && !target.computed &&
    target.property.type === "Identifier"
  ) {
    const object = expression(target.object);
    const field: string = target.property.value;
    return (scope) => {
      const v = value(scope);
      const ns = object(scope);
      if (!(ns instanceof Namespace)) throw new Bail();
      ns.fields.set(field, v);
      return "";
    };
  }
  throw new Unsupported();
}

// --- expressions --------------------------------------------------------------------------

function expression(node: Node): Expr {
  switch (node.type) {
    case "StringLiteral":
    case "IntegerLiteral": {
      const v = node.value;
      return () => v;
    }
    case "Identifier": {
      const name: string = node.value;
      // Functions as values (not called) are not modelled.
      if (RESERVED.has(name) && !GLOBALS.some(([g]) => g === name)) throw new Unsupported();
      return (scope) => scope.lookup(name);
    }
    case "ArrayLiteral": {
      const items: Expr[] = node.value.map(expression);
      return (scope) => items.map((e) => e(scope));
    }
    case "TupleLiteral": {
      const items: Expr[] = node.value.map(expression);
      return (scope) => Tuple.from(items, (e) => e(scope));
    }
    case "MemberExpression":
      return member(node);
    case "CallExpression":
      return call(node);
    case "UnaryExpression":
      return unary(node);
    case "BinaryExpression":
      return binary(node);
    case "FilterExpression":
      return filter(node);
    case "TestExpression":
      return test(node);
    case "SelectExpression": {
      const lhs = expression(node.lhs);
      const cond = expression(node.test);
      return (scope) => truthy(cond(scope)) ? lhs(scope) : undefined;
    }
    case "Ternary": {
      const cond = expression(node.condition);
      const yes = expression(node.trueExpr);
      const no = expression(node.falseExpr);
      return (scope) => truthy(cond(scope)) ? yes(scope) : no(scope);
    }
    default:
      // FloatLiteral (its printing differs from a JS number's), ObjectLiteral, spreads...
      throw new Unsupported();
  }
}

/** A plain object from the variables (the interpreter's ObjectValue), or the loop. */
function isMapping(v: Value): v is Record<string, Value> {
  return typeof v === "object" && v !== null && !Array.isArray(v) && !(v instanceof Namespace);
}

/** A list that is not a tuple (the interpreter's exact ArrayValue type). */
function isList(v: Value): v is Value[] {
  return Array.isArray(v) && !(v instanceof Tuple);
}

function isPrimitive(v: Value): boolean {
  return v === null || (typeof v !== "object" && typeof v !== "function");
}

/** The interpreter's `__bool__`. */
function truthy(v: Value): boolean {
  if (Array.isArray(v)) return v.length > 0;
  if (v instanceof Namespace) return true;
  if (v instanceof Loop) return true;
  if (typeof v === "object" && v !== null) {
    for (const _ in v) return true;
    return false;
  }
  return !!v;
}

function member(node: Node): Expr {
  const object = expression(node.object);
  if (node.computed && node.property.type === "SliceExpression") {
    const s = node.property;
    const start = s.start ? expression(s.start) : () => undefined;
    const stop = s.stop ? expression(s.stop) : () => undefined;
    const step = s.step ? expression(s.step) : () => undefined;
    return (scope) => {
      const o = object(scope);
      const a = start(scope), b = stop(scope), c = step(scope);
      if (!isIntOrUndefined(a) || !isIntOrUndefined(b) || !isIntOrUndefined(c)) throw new Bail();
      if (Array.isArray(o)) return slice(o, a, b, c);
      if (typeof o === "string") return slice(Array.from(o), a, b, c).join("");
      throw new Bail();
    };
  }
  let property: Expr;
  if (node.computed) property = expression(node.property);
  else if (node.property.type === "Identifier" || node.property.type === "IntegerLiteral") {
    const p = node.property.value;
    property = () => p;
  } else throw new Unsupported();
  return (scope) => getMember(object(scope), property(scope));
}

function isIntOrUndefined(v: Value): v is number | undefined {
  return v === undefined || (typeof v === "number" && Number.isInteger(v));
}

function getMember(o: Value, p: Value): Value {
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
function slice<T>(items: readonly T[], start?: number, stop?: number, step = 1): T[] {
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

function call(node: Node): Expr {
  const callee = node.callee;
  const positional: Expr[] = [];
  const keywords: [string, Expr][] = [];
  for (const arg of node.args) {
    if (arg.type === "KeywordArgumentExpression") {
      keywords.push([arg.key.value, expression(arg.value)]);
    } else if (arg.type === "SpreadExpression" || arg.type === "KeywordSpreadExpression") {
      throw new Unsupported();
    } else positional.push(expression(arg));
  }
  if (callee.type === "Identifier") {
    if (callee.value === "namespace" && positional.length === 0) {
      return (scope) => {
        const fields = new Map<string, Value>();
        for (const [k, e] of keywords) {
          if (fields.has(k)) throw new Bail();
          fields.set(k, e(scope));
        }
        return new Namespace(fields);
      };
    }
    if (callee.value === "raise_exception") {
      // The interpreter raises it, with its wording.
      return () => {
        throw new Bail();
      };
    }
    throw new Unsupported();
  }
  if (
    callee.type !== "MemberExpression" || callee.computed || callee.property.type !== "Identifier"
  ) {
    throw new Unsupported();
  }
  if (keywords.length > 0) throw new Unsupported();
  const object = expression(callee.object);
  const name: string = callee.property.value;
  if (STRING_METHODS.has(name)) return stringMethod(name, object, positional);
  if (name === "items" || name === "keys" || name === "values" || name === "get") {
    return mappingMethod(name, object, positional);
  }
  throw new Unsupported();
}

function stringMethod(name: string, object: Expr, args: Expr[]): Expr {
  const method = (s: string, a: Value[]): Value => {
    switch (name) {
      case "upper":
        return s.toUpperCase();
      case "lower":
        return s.toLowerCase();
      // The interpreter ignores the characters argument of the strips: all whitespace goes.
      case "strip":
        return s.trim();
      case "rstrip":
        return s.trimEnd();
      case "lstrip":
        return s.trimStart();
      case "capitalize":
        return s.charAt(0).toUpperCase() + s.slice(1);
      case "startswith":
      case "endswith": {
        const test = name === "startswith"
          ? (x: string) => s.startsWith(x)
          : (x: string) => s.endsWith(x);
        const pattern = a[0];
        if (typeof pattern === "string") return test(pattern);
        if (Array.isArray(pattern) && pattern.every((x) => typeof x === "string")) {
          return pattern.some(test);
        }
        throw new Bail();
      }
      case "split": {
        const sep = a[0];
        // Only split(sep) with a non-empty separator and no maxsplit.
        if (typeof sep !== "string" || sep === "" || a.length > 1) throw new Bail();
        return s.split(sep);
      }
      default:
        throw new Bail();
    }
  };
  return (scope) => {
    const a = args.map((e) => e(scope));
    const s = object(scope);
    if (typeof s !== "string") throw new Bail();
    return method(s, a);
  };
}

function mappingMethod(name: string, object: Expr, args: Expr[]): Expr {
  return (scope) => {
    const a = args.map((e) => e(scope));
    const o = object(scope);
    // A key of that name shadows the method; the loop and namespaces are not modelled.
    if (!isMapping(o) || o instanceof Loop || Object.hasOwn(o, name)) throw new Bail();
    switch (name) {
      case "items":
        if (a.length > 0) throw new Bail();
        return Object.keys(o).map((k) => [k, o[k]]);
      case "keys":
        if (a.length > 0) throw new Bail();
        return Object.keys(o);
      case "values":
        if (a.length > 0) throw new Bail();
        return Object.values(o);
      default: {
        const [key, fallback] = a;
        if (typeof key !== "string" || a.length > 2) throw new Bail();
        if (Object.hasOwn(o, key)) return o[key];
        return a.length > 1 ? fallback : null;
      }
    }
  };
}

function unary(node: Node): Expr {
  const arg = expression(node.argument);
  switch (node.operator.value) {
    case "not":
      return (scope) => !truthy(arg(scope));
    case "-":
    case "+": {
      const sign = node.operator.value === "-" ? -1 : 1;
      return (scope) => {
        const v = arg(scope);
        if (typeof v === "boolean") return sign * (v ? 1 : 0);
        if (typeof v === "number" && Number.isInteger(v)) return sign * v;
        throw new Bail();
      };
    }
    default:
      throw new Unsupported();
  }
}

function binary(node: Node): Expr {
  const op: string = node.operator.value;
  const left = expression(node.left);
  const right = expression(node.right);
  switch (op) {
    case "and":
      return (scope) => {
        const l = left(scope);
        return truthy(l) ? right(scope) : l;
      };
    case "or":
      return (scope) => {
        const l = left(scope);
        return truthy(l) ? l : right(scope);
      };
    case "==":
    case "!=": {
      const eq = op === "==";
      return (scope) => {
        const l = left(scope), r = right(scope);
        if (!isPrimitive(l) || !isPrimitive(r)) throw new Bail();
        // The interpreter compares the wrapped values with JavaScript's `==`.
        return (l == r) === eq;
      };
    }
    case "in":
    case "not in": {
      const yes = op === "in";
      return (scope) => {
        const l = left(scope), r = right(scope);
        if (r === undefined) return !yes;
        if (l === undefined || l === null || r === null) throw new Bail();
        if (!isPrimitive(l)) throw new Bail();
        if (Array.isArray(r)) {
          return r.some((x) => x === l) === yes;
        }
        if (typeof l === "string" && typeof r === "string") return r.includes(l) === yes;
        if (typeof l === "string" && isMapping(r) && !(r instanceof Loop)) {
          return Object.hasOwn(r, l) === yes;
        }
        throw new Bail();
      };
    }
    case "+":
      return (scope) => {
        const l = left(scope), r = right(scope);
        if (isInt(l) && isInt(r)) return l + r;
        if (Array.isArray(l) && Array.isArray(r)) return [...l, ...r];
        if (
          (typeof l === "string" || typeof r === "string") && isPrintable(l) && isPrintable(r)
        ) {
          return String(l) + String(r);
        }
        throw new Bail();
      };
    case "~":
      return (scope) => {
        const l = left(scope), r = right(scope);
        if (!isPrintable(l) || !isPrintable(r)) throw new Bail();
        return String(l) + String(r);
      };
    case "-":
    case "*":
    case "%":
      return (scope) => {
        const l = left(scope), r = right(scope);
        if (!isInt(l) || !isInt(r)) throw new Bail();
        const v = op === "-" ? l - r : op === "*" ? l * r : l % r;
        if (!Number.isFinite(v)) throw new Bail();
        return v;
      };
    case "<":
    case ">":
    case "<=":
    case ">=":
      return (scope) => {
        const l = left(scope), r = right(scope);
        if (typeof l !== "number" || typeof r !== "number") throw new Bail();
        return op === "<" ? l < r : op === ">" ? l > r : op === "<=" ? l <= r : l >= r;
      };
    default:
      // "/", "//", "**": float results print differently; not modelled.
      throw new Unsupported();
  }
}

function isInt(v: Value): v is number {
  return typeof v === "number" && Number.isInteger(v);
}

/** A value whose JavaScript string is the interpreter's `.value.toString()`. */
function isPrintable(v: Value): v is string | number | boolean {
  return typeof v === "string" || typeof v === "number" || typeof v === "boolean";
}

function filter(node: Node): Expr {
  const operand = expression(node.operand);
  const f = node.filter;
  if (f.type === "Identifier") {
    const name: string = f.value;
    const apply = identifierFilter(name);
    return (scope) => apply(operand(scope));
  }
  if (f.type === "CallExpression" && f.callee.type === "Identifier") {
    const name: string = f.callee.value;
    const positional: Expr[] = [];
    const keywords = new Map<string, Expr>();
    for (const arg of f.args) {
      if (arg.type === "KeywordArgumentExpression") {
        keywords.set(arg.key.value, expression(arg.value));
      } else if (arg.type === "SpreadExpression" || arg.type === "KeywordSpreadExpression") {
        throw new Unsupported();
      } else positional.push(expression(arg));
    }
    if (
      name === "tojson" && positional.length === 0 &&
      [...keywords.keys()].every((k) => k === "indent")
    ) {
      const indent = keywords.get("indent");
      return (scope) => {
        const v = operand(scope);
        const n = indent?.(scope) ?? null;
        if (n !== null && !(isInt(n) && n >= 0)) throw new Bail();
        return toJson(v, n === null ? 0 : n, 0);
      };
    }
    if (name === "join" && keywords.size === 0 && positional.length === 1) {
      return (scope) => {
        const v = operand(scope);
        const sep = positional[0]!(scope);
        if (
          typeof sep !== "string" || !Array.isArray(v) || !v.every((x) => typeof x === "string")
        ) {
          throw new Bail();
        }
        return v.join(sep);
      };
    }
    if (name === "default" && keywords.size === 0 && positional.length === 1) {
      return (scope) => {
        const v = operand(scope);
        const fallback = positional[0]!(scope);
        return v === undefined ? fallback : v;
      };
    }
  }
  throw new Unsupported();
}

function identifierFilter(name: string): (v: Value) => Value {
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
function toJson(v: Value, indent: number, depth: number): string {
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

// --- tests (`is ...`) -----------------------------------------------------------------------

function test(node: Node): Expr {
  const operand = expression(node.operand);
  const negate: boolean = node.negate;
  const check = testFunction(node.test.value);
  return (scope) => check(operand(scope)) !== negate;
}

function testFunction(name: string): (v: Value) => boolean {
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
