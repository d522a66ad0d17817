// Reads a pythonic tool-call list, `[f(a=1), g(b="x", c=[1, 2])]`, whose argument values are
// Python literals (strings, numbers, True/False/None, lists, tuples, dicts), into calls with
// JSON arguments. Anything else (positional arguments, expressions) is not a call list.

import type { ParsedToolCall } from "./types.ts";

/** Thrown inside the reader; never leaves this module. */
class NotPythonic extends Error {
  override name = "NotPythonic";
}

/**
 * The calls of a pythonic call list, or undefined when the text is not one.
 *
 * @param text The whole list, from `[` to `]`.
 * @returns The calls, arguments as JSON object text.
 */
export function parsePythonCalls(text: string): ParsedToolCall[] | undefined {
  try {
    const reader = new Reader(text);
    const calls = reader.callList();
    reader.space();
    if (reader.i !== text.length || calls.length === 0) return undefined;
    return calls;
  } catch (err) {
    if (err instanceof NotPythonic) return undefined;
    throw err;
  }
}

class Reader {
  readonly s: string;
  i = 0;

  constructor(s: string) {
    this.s = s;
  }

  space(): void {
    while (this.i < this.s.length && /\s/.test(this.s[this.i]!)) this.i++;
  }

  expect(c: string): void {
    this.space();
    if (this.s[this.i] !== c) throw new NotPythonic();
    this.i++;
  }

  peek(): string | undefined {
    this.space();
    return this.s[this.i];
  }

  /** `[` call (`,` call)* `]`. */
  callList(): ParsedToolCall[] {
    this.expect("[");
    const calls: ParsedToolCall[] = [];
    if (this.peek() === "]") throw new NotPythonic();
    for (;;) {
      calls.push(this.call());
      if (this.peek() === ",") {
        this.i++;
        continue;
      }
      this.expect("]");
      return calls;
    }
  }

  call(): ParsedToolCall {
    this.space();
    const m = /^[A-Za-z_][\w.]*/.exec(this.s.slice(this.i));
    if (!m) throw new NotPythonic();
    const name = m[0];
    this.i += name.length;
    this.expect("(");
    const args: Record<string, unknown> = {};
    while (this.peek() !== ")") {
      const key = /^[A-Za-z_]\w*/.exec(this.s.slice(this.i));
      if (!key) throw new NotPythonic();
      this.i += key[0].length;
      this.expect("=");
      Object.defineProperty(args, key[0], {
        value: this.value(),
        enumerable: true,
        writable: true,
        configurable: true,
      });
      if (this.peek() === ",") this.i++;
      else if (this.peek() !== ")") throw new NotPythonic();
    }
    this.i++;
    return { name, arguments: JSON.stringify(args) };
  }

  value(): unknown {
    const c = this.peek();
    if (c === '"' || c === "'") return this.string(c);
    if (c === "[" || c === "(") return this.sequence(c === "[" ? "]" : ")");
    if (c === "{") return this.dict();
    const rest = this.s.slice(this.i);
    const word = /^(True|False|None)\b/.exec(rest);
    if (word) {
      this.i += word[0].length;
      return word[0] === "True" ? true : word[0] === "False" ? false : null;
    }
    const num = /^[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?/.exec(rest);
    if (num) {
      this.i += num[0].length;
      return Number(num[0]);
    }
    throw new NotPythonic();
  }

  sequence(close: string): unknown[] {
    this.i++;
    const items: unknown[] = [];
    while (this.peek() !== close) {
      items.push(this.value());
      if (this.peek() === ",") this.i++;
      else if (this.peek() !== close) throw new NotPythonic();
    }
    this.i++;
    return items;
  }

  dict(): Record<string, unknown> {
    this.i++;
    const out: Record<string, unknown> = {};
    while (this.peek() !== "}") {
      const key = this.value();
      if (typeof key !== "string" && typeof key !== "number") throw new NotPythonic();
      this.expect(":");
      Object.defineProperty(out, String(key), {
        value: this.value(),
        enumerable: true,
        writable: true,
        configurable: true,
      });
      if (this.peek() === ",") this.i++;
      else if (this.peek() !== "}") throw new NotPythonic();
    }
    this.i++;
    return out;
  }

  string(quote: string): string {
    const triple = this.s.startsWith(quote.repeat(3), this.i);
    const close = triple ? quote.repeat(3) : quote;
    this.i += close.length;
    let out = "";
    while (this.i < this.s.length) {
      if (this.s.startsWith(close, this.i)) {
        this.i += close.length;
        return out;
      }
      const c = this.s[this.i]!;
      if (c === "\\") {
        const e = this.s[this.i + 1];
        if (e === undefined) break;
        if (e === "u" && /^[0-9a-fA-F]{4}$/.test(this.s.slice(this.i + 2, this.i + 6))) {
          out += String.fromCharCode(parseInt(this.s.slice(this.i + 2, this.i + 6), 16));
          this.i += 6;
          continue;
        }
        out += ESCAPES[e] ?? e;
        this.i += 2;
        continue;
      }
      if (c === "\n" && !triple) break;
      out += c;
      this.i++;
    }
    throw new NotPythonic();
  }
}

const ESCAPES: Record<string, string> = { n: "\n", t: "\t", r: "\r", "0": "\0" };
