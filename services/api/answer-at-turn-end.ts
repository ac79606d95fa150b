import { validateHeaderName, validateHeaderValue } from 'node:http';
import type { FastifyReply, onSendHookHandler } from 'fastify';
import { turnEnd } from '../shared/turn-end.ts';

/**
 * An onSend hook that writes every answer at the end of the turn that made it, with the turn's
 * other answers (see turn-end.ts). The service's app and the bench's bare baseline that batches
 * its writes the same way both use it.
 *
 * What the rest of the send throws (a header value Node refuses, a payload of the wrong type) goes
 * to Fastify as the hook's error, as it would from an async hook, not to an unhandled rejection;
 * without the headers that cannot be written, so that the error's own answer (a 500 in the
 * documented shape) can be.
 */
export const answerAtTurnEnd: onSendHookHandler = (_request, reply, payload, done) => {
  void turnEnd()
    .then(() => {
      try {
        done(null, payload);
      } catch (err) {
        dropUnwritableHeaders(reply);
        done(err as Error);
      }
    })
    .catch((err: unknown) => reply.log.error({ err }, 'an answer could not be written'));
};

/** Removes the headers of `reply` that Node would refuse to write (a name or value it rejects). */
function dropUnwritableHeaders(reply: FastifyReply): void {
  for (const [name, value] of Object.entries(reply.getHeaders())) {
    try {
      validateHeaderName(name);
      if (value !== undefined) validateHeaderValue(name, String(value));
    } catch {
      reply.removeHeader(name);
    }
  }
}
