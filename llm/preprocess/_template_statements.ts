// Compiles template statements (output, if, for, set, break, continue) to closures that
// return the text they print.

import { expression } from "./_template_expressions.ts";
import {
  Bail,
  BREAK,
  CONTINUE,
  type Expr,
  isList,
  isMapping,
  Loop,
  Namespace,
  type Node,
  Scope,
  show,
  type Stmt,
  truthy,
  Unsupported,
  type Value,
} from "./_template_values.ts";

export function block(nodes: Node[] | undefined): Stmt {
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
