// Event subjects: NATS-style names checked and matched the same way on every backend, and
// the subject a component's events travel on.

import { InvalidArgumentError } from "../errors.ts";
import { slug, validateName } from "../names.ts";

const TOKEN = /^[A-Za-z0-9_\-$:]+$/;

/**
 * Checks a subject: non-empty tokens split on "."; with `wildcards`, a token may be "*"
 * and the last one ">".
 * @throws {InvalidArgumentError} a malformed subject
 */
export function validateSubject(subject: string, wildcards: boolean): string {
  if (typeof subject !== "string" || subject.length === 0) {
    throw new InvalidArgumentError(`an event subject must be a non-empty string, got ${subject}`);
  }
  const tokens = subject.split(".");
  for (let i = 0; i < tokens.length; i++) {
    const t = tokens[i]!;
    if (TOKEN.test(t)) continue;
    if (wildcards && (t === "*" || (t === ">" && i === tokens.length - 1))) continue;
    throw new InvalidArgumentError(
      `malformed event subject ${JSON.stringify(subject)}: token ${JSON.stringify(t)}` +
        (wildcards ? "" : " (wildcards are for subscribing only)"),
    );
  }
  return subject;
}

/** True when `subject` matches `pattern` ("*" one token, a final ">" one or more). */
export function subjectMatches(pattern: string, subject: string): boolean {
  if (pattern === subject) return true;
  const p = pattern.split(".");
  const s = subject.split(".");
  for (let i = 0; i < p.length; i++) {
    const t = p[i]!;
    if (t === ">") return s.length > i;
    if (i >= s.length) return false;
    if (t !== "*" && t !== s[i]) return false;
  }
  return p.length === s.length;
}

/**
 * The subject of a component's events named `name`: `{slug(namespace_component)}.events.{name}`.
 * `name` may hold several "."-separated tokens (and wildcards, for subscribing).
 */
export function componentEventSubject(namespace: string, component: string, name: string): string {
  validateName("namespace", namespace);
  validateName("component", component);
  return `${slug(`${namespace}_${component}`)}.events.${name}`;
}
