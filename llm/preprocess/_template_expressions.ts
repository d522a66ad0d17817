// Compiles template expressions (literals, members, calls, operators, filters, tests) to
// closures over a scope.

import { identifierFilter, testFunction, toJson } from "./_template_filters.ts";
import {
  Bail,
  type Expr,
  getMember,
  GLOBALS,
  isInt,
  isIntOrUndefined,
  isMapping,
  isPrimitive,
  isPrintable,
  Loop,
  Namespace,
  type Node,
  RESERVED,
  slice,
  STRING_METHODS,
  truthy,
  Tuple,
  Unsupported,
  type Value,
} from "./_template_values.ts";

export function expression(node: Node): Expr {
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

function test(node: Node): Expr {
  const operand = expression(node.operand);
  const negate: boolean = node.negate;
  const check = testFunction(node.test.value);
  return (scope) => check(operand(scope)) !== negate;
}
