// Instance ids given as a list or as a set (a model's live set of instances is passed as it
// is, without a copy per request).

/** Instance ids, as a caller may hold them. */
export type InstanceIds = readonly string[] | ReadonlySet<string>;

/** `ids` as a set: the set itself when it is one, else a new one. */
export function idSet(ids: InstanceIds): ReadonlySet<string> {
  return ids instanceof Set ? ids : new Set(ids as readonly string[]);
}

/**
 * The ids of `ids` that `allowed` holds: `ids` itself when it holds all of them (the common
 * case: every instance of the endpoint serves the model), else a new array.
 */
export function idsWithin(ids: string[], allowed: ReadonlySet<string>): string[] {
  for (let i = 0; i < ids.length; i++) {
    if (!allowed.has(ids[i]!)) return ids.filter((id) => allowed.has(id));
  }
  return ids;
}

/** Whether any of `ids` is in `among`. */
export function anyIn(ids: readonly string[], among: ReadonlySet<string>): boolean {
  for (let i = 0; i < ids.length; i++) if (among.has(ids[i]!)) return true;
  return false;
}
