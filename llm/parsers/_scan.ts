// Text scanning shared by the streaming parsers: markers that may be split across deltas,
// and the end of a bracketed value (JSON or a Python literal) that may not have arrived yet.

/** The earliest full occurrence of any of `markers` in `text`, or undefined. */
export function findMarker(
  text: string,
  markers: readonly string[],
  from = 0,
): { at: number; marker: string } | undefined {
  let best: { at: number; marker: string } | undefined;
  for (const marker of markers) {
    const at = text.indexOf(marker, from);
    if (at >= 0 && (best === undefined || at < best.at)) best = { at, marker };
  }
  return best;
}

/**
 * Length of the longest suffix of `text` that is a proper prefix of one of `markers`: the
 * characters to hold back because the next delta may complete a marker.
 */
export function heldBack(text: string, markers: readonly string[]): number {
  let held = 0;
  for (const marker of markers) {
    const most = Math.min(marker.length - 1, text.length);
    for (let n = most; n > held; n--) {
      if (text.endsWith(marker.slice(0, n))) {
        held = n;
        break;
      }
    }
  }
  return held;
}

const OPENERS = "[{(";
const CLOSERS = "]})";

/**
 * The index just past the bracket that closes the one at `start`, skipping strings quoted
 * with one of `quotes` (backslash escapes). -1 when the text ends first; -2 when a closer
 * does not match its opener (not a value this scanner can read).
 */
export function bracketEnd(text: string, start: number, quotes: string): number {
  const stack: string[] = [];
  let quote = "";
  for (let i = start; i < text.length; i++) {
    const c = text[i]!;
    if (quote !== "") {
      if (c === "\\") i++;
      else if (c === quote) quote = "";
      continue;
    }
    if (quotes.includes(c)) {
      quote = c;
      continue;
    }
    const open = OPENERS.indexOf(c);
    if (open >= 0) {
      stack.push(CLOSERS[open]!);
      continue;
    }
    if (CLOSERS.includes(c)) {
      if (stack.pop() !== c) return -2;
      if (stack.length === 0) return i + 1;
    }
  }
  return -1;
}

/** Index of the first non-whitespace character at or after `from` (text.length if none). */
export function skipSpace(text: string, from: number): number {
  let i = from;
  while (i < text.length && /\s/.test(text[i]!)) i++;
  return i;
}

/** JSON.parse, or undefined when the text is not JSON. */
export function parseJson(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}

/** Whether a parsed JSON value is an object (not an array or null). */
export function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}
