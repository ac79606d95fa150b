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

/**
 * The route handler's return for an async answer (Fastify's handling of a returned promise, minus
 * one cost): the answer sends or hijacks `reply` itself, or resolves to a payload that is sent as
 * Fastify sends an async handler's; its rejection goes where Fastify sends a rejected handler's (the
 * error handler, or a log line once the answer is out). Returned from an async handler, the reply
 * is a thenable that the handler's promise adopts: with the answer held until the turn ends
 * (answerAtTurnEnd), it is not sent yet at that moment, and Fastify's Reply.then then watches the
 * response to its end (stream.finished: listeners added and removed, a closure, a promise settled
 * late) on every call. So an answer passed here resolves to undefined once it has sent, never to
 * the reply. Unlike Fastify, an answer that resolves to undefined without sending is not answered
 * with an empty 200: every answer passed here sends.
 */
export function answeredBy(answer: Promise<unknown>, reply: FastifyReply): undefined {
  answer.then(
    (payload) => {
      if (payload === undefined) return;
      try {
        reply.send(payload);
      } catch (err) {
        failed(reply, err);
      }
    },
    (err: unknown) => failed(reply, err),
  );
  return undefined;
}

function failed(reply: FastifyReply, err: unknown): void {
  if (reply.sent) {
    reply.log.error({ err }, 'Promise errored, but reply.sent = true was set');
    return;
  }
  reply.send(err instanceof Error ? err : new Error(String(err)));
}
