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

import { block } from "./_template_statements.ts";
import {
  Bail,
  GLOBAL_SCOPE,
  type Node,
  RESERVED,
  Scope,
  type Stmt,
  Unsupported,
} from "./_template_values.ts";

export { Bail } from "./_template_values.ts";

/** A compiled template: variables in, prompt text out. */
export type CompiledTemplate = (vars: Record<string, unknown>) => string;

/**
 * Compiles a parsed template (`new Template(source).parsed`).
 *
 * @param program the parsed template
 * @returns the compiled render, or undefined when the template uses something this
 *   compiler does not cover
 * @example
 * ```ts
 * import { Template } from "@huggingface/jinja";
 * import { compileTemplate } from "./template_compiler.ts";
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
