/**
 * Node's codes for a path the process may not use (a DATA_DIR or an output it cannot write): what
 * the code means, and what the operator can do about it.
 */
const WRITABLE = 'use a path this user (USER) may write, or fix its permissions';
const PATH_REFUSALS: Record<string, [meaning: string, remedy: string]> = {
  EACCES: ['permission denied', WRITABLE],
  EPERM: ['operation not permitted', WRITABLE],
  ENOTDIR: ['a part of the path is a file, not a directory', 'move that file or choose another path'],
  EROFS: ['read-only file system', 'use a path on a writable file system'],
  ENOSPC: ['no space left on the device', 'free space on that disk or use a path on another'],
  EISDIR: ['it is a directory', 'name a file, not a directory'],
  EEXIST: ['a file of that name is in the way', 'move that file or choose another path'],
};

/**
 * A mkdir's ENOENT once its parent exists (makeDirectory makes missing parents first): a
 * directory that takes no new entries, such as /proc or /sys. Elsewhere ENOENT is a file that is
 * not there, which the command reading it names itself.
 */
const NO_NEW_ENTRIES: [meaning: string, remedy: string] = [
  'its parent takes no new directories (as /proc and /sys)',
  'use a path on an ordinary writable file system',
];

/**
 * The one line for a path the process may not use (`cannot use PATH: meaning (CODE); remedy`), or
 * null when `err` is no such refusal.
 */
export function pathRefusal(err: unknown): string | null {
  const { code, path, syscall } = (err ?? {}) as { code?: unknown; path?: unknown; syscall?: unknown };
  if (typeof code !== 'string' || typeof path !== 'string') return null;
  const refusal =
    code === 'ENOENT' ? (syscall === 'mkdir' ? NO_NEW_ENTRIES : undefined) : PATH_REFUSALS[code];
  if (refusal === undefined) return null;
  const [meaning, remedy] = refusal;
  return `cannot use ${path}: ${meaning} (${code}); ${remedy.replace('USER', userName())}`;
}

function userName(): string {
  return process.env.USER ?? process.env.LOGNAME ?? `uid ${process.getuid?.() ?? '?'}`;
}
