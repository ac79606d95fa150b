import { z } from 'zod';

/**
 * The kind of a dependency's failure, as /readyz and the answers that name a failing dependency
 * show it (services/shared/failure-reason.ts picks it from the error's code): a stable value a
 * client can act on, never the error's words, which name hosts, addresses and URLs.
 */
export const FailureReason = z
  .union([
    z.enum([
      'refused',
      'name not resolved',
      'timed out',
      'unreachable',
      'connection reset',
      'TLS certificate refused',
      'login refused',
      'permission denied',
      'out of space',
      'stream not found',
      'consumer not found',
      'failed',
    ]),
    z.templateLiteral(['HTTP ', z.number().int()]),
  ])
  .describe(
    "Why it failed, as a reason code: refused, name not resolved, timed out, unreachable, connection reset, TLS certificate refused, login refused, permission denied, out of space, stream not found or consumer not found (the NATS server has no such JetStream stream or consumer), 'HTTP <status>' (the status the dependency answered), or failed (none of those known). The error's words go to the service log.",
  );
export type FailureReason = z.infer<typeof FailureReason>;
