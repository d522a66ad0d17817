// Streaming tool-call parsers: a model's text, delta by delta, becomes content and tool calls.
// One engine (ToolCallParser) finds where a tool-call section opens (a marker anywhere, or a
// leading character at the start of the answer) and holds the section until its format
// reads it as calls or as plain text; each format (hermes, llama3_json, mistral, pythonic,
// deepseek_v3) only says how its sections read.

import { parsePythonCalls } from "./_python_literal.ts";
import { bracketEnd, findMarker, heldBack, isObject, parseJson, skipSpace } from "./_scan.ts";
import {
  type ParsedToolCall,
  type StreamingParser,
  type ToolCallOutput,
  UnknownParserError,
} from "./types.ts";

/** How a held section reads: calls (and how much text they took), or plain text. */
export type SectionScan =
  | { kind: "calls"; calls: ParsedToolCall[]; consumed: number }
  | { kind: "text"; skip: number }
  | undefined;

/** One model family's tool-call syntax. */
export interface ToolCallFormat {
  /** Markers that open a section wherever they appear. */
  readonly markers: readonly string[];
  /** Characters that open a section when they start the answer (or follow a section). */
  readonly leading?: string;
  /**
   * Its markers are special tokens of its models' vocabularies (`<|python_tag|>`,
   * `[TOOL_CALLS]`): answers must be decoded with special tokens kept, or the markers vanish.
   */
  readonly specialMarkers?: boolean;
  /**
   * Reads the section at the start of `section` (a marker or leading character first).
   * Returns undefined while a later delta may change the reading (never when `final`);
   * `{kind: "text", skip}` when it holds no calls: the first `skip` characters are content.
   */
  scan(section: string, final: boolean): SectionScan;
}

const text = (skip: number): SectionScan => ({ kind: "text", skip });

/** A tool call from `{name, arguments | parameters}` (`strict`: one of the two required). */
function callOf(v: unknown, strict = false): ParsedToolCall | undefined {
  if (!isObject(v)) return undefined;
  const fn = isObject(v.function) ? v.function : v;
  const name = fn.name;
  if (typeof name !== "string" || name === "") return undefined;
  const args = "arguments" in fn ? fn.arguments : fn.parameters;
  if (args === undefined && strict) return undefined;
  if (typeof args === "string") return { name, arguments: args };
  return { name, arguments: JSON.stringify(args ?? {}) };
}

/** Calls from a JSON object or array of objects, or undefined if any is not a call. */
function jsonCalls(json: string): ParsedToolCall[] | undefined {
  const v = parseJson(json);
  const list = Array.isArray(v) ? v : [v];
  const calls = list.map((c) => callOf(c));
  if (calls.length === 0 || calls.some((c) => c === undefined)) return undefined;
  return calls as ParsedToolCall[];
}

const HERMES_OPEN = "<tool_call>";
const HERMES_CLOSE = "</tool_call>";

/** Hermes / Qwen: `<tool_call>{"name": ..., "arguments": {...}}</tool_call>`, repeated. */
export const hermesFormat: ToolCallFormat = {
  markers: [HERMES_OPEN],
  scan(s, final) {
    const open = HERMES_OPEN.length;
    const close = s.indexOf(HERMES_CLOSE, open);
    if (close < 0 && !final) {
      // A body that cannot become JSON is text without waiting for the close.
      const at = skipSpace(s, open);
      return at < s.length && s[at] !== "{" && s[at] !== "[" ? text(open) : undefined;
    }
    const body = s.slice(open, close < 0 ? s.length : close).trim();
    const calls = jsonCalls(body);
    if (calls === undefined) return text(open);
    return { kind: "calls", calls, consumed: close < 0 ? s.length : close + HERMES_CLOSE.length };
  },
};

const PYTHON_TAG = "<|python_tag|>";

/**
 * Llama 3.1 / 3.2 JSON: `{"name": ..., "parameters": {...}}` at the start of the answer or
 * after `<|python_tag|>`, several separated by `;`.
 */
export const llama3JsonFormat: ToolCallFormat = {
  markers: [PYTHON_TAG],
  specialMarkers: true,
  leading: "{",
  scan(s, final) {
    const head = s.startsWith(PYTHON_TAG) ? PYTHON_TAG.length : 0;
    const notCalls = text(head || 1);
    const calls: ParsedToolCall[] = [];
    const done = (consumed: number): SectionScan =>
      calls.length > 0 ? { kind: "calls", calls, consumed } : notCalls;
    let pos = skipSpace(s, head);
    for (;;) {
      if (pos >= s.length) return final ? done(pos) : undefined;
      if (s[pos] !== "{") return done(pos);
      const key = skipSpace(s, pos + 1);
      if (key < s.length && s[key] !== '"') return done(pos);
      const end = bracketEnd(s, pos, '"');
      if (end === -1 && !final) return undefined;
      const call = end > 0 ? callOf(parseJson(s.slice(pos, end)), true) : undefined;
      if (call === undefined) return done(pos);
      calls.push(call);
      pos = skipSpace(s, end);
      if (pos >= s.length) return final ? done(pos) : undefined;
      if (s[pos] !== ";") return done(pos);
      pos = skipSpace(s, pos + 1);
    }
  },
};

const MISTRAL_TAG = "[TOOL_CALLS]";
const MISTRAL_ARGS = "[ARGS]";

/**
 * Mistral: `[TOOL_CALLS][{"name": ..., "arguments": {...}}, ...]`, or the newer
 * `[TOOL_CALLS]name[ARGS]{...}`.
 */
export const mistralFormat: ToolCallFormat = {
  markers: [MISTRAL_TAG],
  specialMarkers: true,
  scan(s, final) {
    const head = MISTRAL_TAG.length;
    const pos = skipSpace(s, head);
    if (pos >= s.length) return final ? text(head) : undefined;
    if (s[pos] === "[" || s[pos] === "{") {
      const end = bracketEnd(s, pos, '"');
      if (end === -1 && !final) return undefined;
      const calls = end > 0 ? jsonCalls(s.slice(pos, end)) : undefined;
      return calls === undefined ? text(head) : { kind: "calls", calls, consumed: end };
    }
    const argsAt = s.indexOf(MISTRAL_ARGS, pos);
    if (argsAt < 0) {
      const sofar = s.slice(pos, s.length - heldBack(s, [MISTRAL_ARGS]));
      if (!/^[\w.-]*$/.test(sofar) || final) return text(head);
      return undefined;
    }
    const name = s.slice(pos, argsAt);
    if (!/^[\w.-]+$/.test(name)) return text(head);
    const start = skipSpace(s, argsAt + MISTRAL_ARGS.length);
    if (start >= s.length) return final ? text(head) : undefined;
    if (s[start] !== "{") return text(head);
    const end = bracketEnd(s, start, '"');
    if (end === -1 && !final) return undefined;
    const args = end > 0 ? parseJson(s.slice(start, end)) : undefined;
    if (!isObject(args)) return text(head);
    return { kind: "calls", calls: [{ name, arguments: JSON.stringify(args) }], consumed: end };
  },
};

const PYTHON_START = "<|python_start|>";
const PYTHON_END = "<|python_end|>";

/** Pythonic (Llama 3.2 / 4): `[get_weather(city="Paris"), f(x=1)]`. */
export const pythonicFormat: ToolCallFormat = {
  markers: [PYTHON_START],
  specialMarkers: true,
  leading: "[",
  scan(s, final) {
    const head = s.startsWith(PYTHON_START) ? PYTHON_START.length : 0;
    const notCalls = text(head || 1);
    const pos = skipSpace(s, head);
    if (pos >= s.length) return final ? notCalls : undefined;
    if (s[pos] !== "[") return notCalls;
    // `[` then a function name and `(`: anything else is text without waiting for the `]`.
    const rest = s.slice(skipSpace(s, pos + 1));
    const name = /^[A-Za-z_][\w.]*/.exec(rest);
    if (
      rest.length > 0 && (!name || (name[0].length < rest.length && rest[name[0].length] !== "("))
    ) {
      return notCalls;
    }
    const end = bracketEnd(s, pos, "\"'");
    if (end === -1 && !final) return undefined;
    const calls = end > 0 ? parsePythonCalls(s.slice(pos, end)) : undefined;
    if (calls === undefined) return notCalls;
    let consumed = end;
    if (head > 0) {
      const after = skipSpace(s, end);
      const tail = s.slice(after);
      if (tail.startsWith(PYTHON_END)) consumed = after + PYTHON_END.length;
      else if (!final && PYTHON_END.startsWith(tail)) return undefined;
    }
    return { kind: "calls", calls, consumed };
  },
};

const DS_CALLS_BEGIN = "<｜tool▁calls▁begin｜>";
const DS_CALLS_END = "<｜tool▁calls▁end｜>";
const DS_CALL_BEGIN = "<｜tool▁call▁begin｜>";
const DS_CALL_END = "<｜tool▁call▁end｜>";
const DS_SEP = "<｜tool▁sep｜>";

/** One DeepSeek call: V3 `function<sep>NAME\n```json\nARGS\n```` or V3.1 `NAME<sep>ARGS`. */
function deepseekCall(inner: string): ParsedToolCall | undefined {
  const sep = inner.indexOf(DS_SEP);
  if (sep < 0) return undefined;
  const before = inner.slice(0, sep).trim();
  const after = inner.slice(sep + DS_SEP.length);
  let name: string;
  let argsText: string;
  const newline = after.indexOf("\n");
  if (before === "function" && newline > 0) {
    name = after.slice(0, newline).trim();
    const body = after.slice(newline + 1);
    const fenced = /^\s*```(?:json)?\s*([\s\S]*?)\s*```\s*$/.exec(body);
    argsText = fenced ? fenced[1]! : body.trim();
  } else {
    name = before;
    argsText = after.trim();
  }
  const args = parseJson(argsText);
  if (name === "" || !isObject(args)) return undefined;
  return { name, arguments: JSON.stringify(args) };
}

/**
 * DeepSeek V3 / R1 / V3.1: `<｜tool▁calls▁begin｜>` then calls between
 * `<｜tool▁call▁begin｜>` and `<｜tool▁call▁end｜>`, then `<｜tool▁calls▁end｜>`.
 */
export const deepseekV3Format: ToolCallFormat = {
  markers: [DS_CALLS_BEGIN],
  scan(s, final) {
    const head = DS_CALLS_BEGIN.length;
    const end = s.indexOf(DS_CALLS_END, head);
    if (end < 0 && !final) return undefined;
    const body = s.slice(head, end < 0 ? s.length : end);
    const calls: ParsedToolCall[] = [];
    let i = 0;
    for (;;) {
      const b = body.indexOf(DS_CALL_BEGIN, i);
      if (b < 0) break;
      const e = body.indexOf(DS_CALL_END, b);
      if (e < 0) break;
      const call = deepseekCall(body.slice(b + DS_CALL_BEGIN.length, e));
      if (call === undefined) return text(head);
      calls.push(call);
      i = e + DS_CALL_END.length;
    }
    if (calls.length === 0) return text(head);
    return { kind: "calls", calls, consumed: end < 0 ? s.length : end + DS_CALLS_END.length };
  },
};

/** The registered tool-call formats, by the reference's `--dyn-tool-call-parser` names. */
export const TOOL_CALL_FORMATS: Readonly<Record<string, ToolCallFormat>> = {
  hermes: hermesFormat,
  llama3_json: llama3JsonFormat,
  mistral: mistralFormat,
  pythonic: pythonicFormat,
  deepseek_v3: deepseekV3Format,
  deepseek_v3_1: deepseekV3Format,
};

/** The names {@linkcode toolCallParser} knows. */
export const TOOL_CALL_PARSER_NAMES: readonly string[] = Object.keys(TOOL_CALL_FORMATS);

/**
 * The format registered under `name`.
 *
 * @param name A `--dyn-tool-call-parser` name (hermes, llama3_json, mistral, ...).
 * @returns The format.
 * @throws {UnknownParserError} No format has that name.
 */
export function toolCallFormat(name: string): ToolCallFormat {
  if (!Object.hasOwn(TOOL_CALL_FORMATS, name)) {
    throw new UnknownParserError("tool call", name, TOOL_CALL_PARSER_NAMES);
  }
  return TOOL_CALL_FORMATS[name]!;
}

/**
 * A new streaming tool-call parser of the format registered under `name`.
 *
 * @param name A `--dyn-tool-call-parser` name.
 * @returns A parser for one answer.
 * @throws {UnknownParserError} No format has that name.
 * @example
 * ```ts
 * const p = toolCallParser("hermes");
 * p.push('Let me look. <tool_call>{"name": "f", "argu');
 * p.push('ments": {"x": 1}}</tool_call>'); // { content: "", calls: [{ name: "f", arguments: '{"x":1}' }] }
 * ```
 */
export function toolCallParser(name: string): ToolCallParser {
  return new ToolCallParser(toolCallFormat(name));
}

/**
 * Splits a model's answer into content and tool calls, delta by delta. Whitespace just
 * before a call, between calls and after the last one is not content.
 */
export class ToolCallParser implements StreamingParser<ToolCallOutput> {
  readonly #format: ToolCallFormat;
  #buf = "";
  #inSection = false;
  /** Nothing but whitespace since the start or the last section: a leading char opens one. */
  #leadingOpen = true;
  /** Trailing whitespace of the content, held until text follows (dropped before a call). */
  #space = "";
  #calls = 0;

  /**
   * Creates a parser for one answer.
   *
   * @param format The model family's syntax.
   */
  constructor(format: ToolCallFormat) {
    this.#format = format;
  }

  /** How many calls the answer made so far. */
  get callCount(): number {
    return this.#calls;
  }

  /**
   * Takes the next delta.
   *
   * @param delta The model's next text.
   * @returns The content and the calls this delta made certain.
   */
  push(delta: string): ToolCallOutput {
    this.#buf += delta;
    return this.#run(false);
  }

  /**
   * The answer ended: what was held back (an unfinished call that reads as a call, or text).
   *
   * @returns The rest of the content and calls.
   */
  finish(): ToolCallOutput {
    return this.#run(true);
  }

  #run(final: boolean): ToolCallOutput {
    const out: ToolCallOutput = { content: "", calls: [] };
    const format = this.#format;
    for (;;) {
      if (this.#inSection) {
        const r = format.scan(this.#buf, final) ?? (final ? text(this.#buf.length) : undefined);
        if (r === undefined) break;
        this.#inSection = false;
        if (r.kind === "calls") {
          out.calls.push(...r.calls);
          this.#calls += r.calls.length;
          this.#buf = this.#buf.slice(r.consumed);
          this.#leadingOpen = true;
          this.#space = "";
        } else {
          const skip = Math.max(1, r.skip);
          this.#content(out, this.#buf.slice(0, skip));
          this.#buf = this.#buf.slice(skip);
          this.#leadingOpen = false;
        }
        continue;
      }
      const buf = this.#buf;
      let start = findMarker(buf, format.markers)?.at ?? -1;
      if (this.#leadingOpen && format.leading !== undefined) {
        const first = skipSpace(buf, 0);
        if (
          first < buf.length && format.leading.includes(buf[first]!) &&
          (start < 0 || first < start)
        ) {
          start = first;
        }
      }
      if (start >= 0) {
        this.#content(out, buf.slice(0, start));
        this.#space = "";
        this.#buf = buf.slice(start);
        this.#inSection = true;
        continue;
      }
      const keep = final ? 0 : heldBack(buf, format.markers);
      this.#content(out, buf.slice(0, buf.length - keep));
      this.#buf = buf.slice(buf.length - keep);
      break;
    }
    if (final) {
      if (this.#calls === 0) out.content += this.#space;
      this.#space = "";
    }
    return out;
  }

  #content(out: ToolCallOutput, piece: string): void {
    const all = this.#space + piece;
    const body = all.trimEnd();
    if (body.length > 0) {
      out.content += body;
      this.#leadingOpen = false;
    }
    this.#space = all.slice(body.length);
  }
}
