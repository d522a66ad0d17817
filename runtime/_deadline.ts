// One promise raced against a timer that is always cleared: the deadline behind every
// bounded wait that has no AbortSignal of its own.

/** `promise`, or the error from `late()` once `ms` pass. */
export async function withDeadline<T>(
  promise: Promise<T>,
  ms: number,
  late: () => Error,
): Promise<T> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  try {
    return await Promise.race([
      promise,
      new Promise<never>((_, reject) => (timer = setTimeout(() => reject(late()), ms))),
    ]);
  } finally {
    clearTimeout(timer);
  }
}
