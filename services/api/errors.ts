import type { FastifyError, FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { hasZodFastifySchemaValidationErrors } from 'fastify-type-provider-zod';
import { z } from 'zod';
import { WrongExpectedRevisionError } from '../../adapters/event-store/port.ts';
import {
  ERRORS,
  type ErrorBody,
  type ErrorCode,
  type RpcErrorBody,
  ServiceError,
} from '../../contracts/errors.ts';

/**
 * One mapping from whatever a route threw to a catalog error: catalog errors as they are, zod
 * and schema failures as INVALID_FIELD naming the field, Fastify's own request errors (FST_ERR_*)
 * as the catalog's framing codes, a lost append race as CONFLICT; the rest is INTERNAL_ERROR.
 * Each plugin's handler then writes the result in its channel's shape.
 */

type Issue = { code: string; path: readonly PropertyKey[]; message: string; keys?: readonly string[] };

/** A failed parse as INVALID_FIELD: its first problem, naming the field. */
function fieldError(issue: Issue, where = 'body'): ServiceError {
  const keys = issue.code === 'unrecognized_keys' ? (issue.keys ?? []) : [];
  const field = keys.length > 0 ? keys[0]! : issue.path.length > 0 ? issue.path.map(String).join('.') : where;
  const detail = keys.length > 0 ? `unknown field "${field}"` : `${field}: ${issue.message}`;
  return new ServiceError('INVALID_FIELD', { detail }, field);
}

/** Fastify's request errors, by their FST_ERR code. */
const FRAMEWORK: Record<string, () => ServiceError> = {
  FST_ERR_CTP_BODY_TOO_LARGE: () => new ServiceError('BODY_TOO_LARGE'),
  FST_ERR_CTP_INVALID_MEDIA_TYPE: () => new ServiceError('UNSUPPORTED_MEDIA_TYPE'),
  FST_ERR_CTP_INVALID_JSON_BODY: () => new ServiceError('INVALID_JSON'),
  FST_ERR_CTP_EMPTY_JSON_BODY: () => new ServiceError('INVALID_JSON'),
  FST_ERR_CTP_INVALID_CONTENT_LENGTH: () =>
    new ServiceError('BAD_REQUEST', { detail: 'the body size does not match Content-Length' }),
};

type WithValidation = FastifyError & { retryable?: boolean };

const isCode = (code: string): code is ErrorCode => Object.hasOwn(ERRORS, code);

function toServiceError(error: unknown): ServiceError | null {
  if (error instanceof ServiceError) return error;
  if (error instanceof z.ZodError) return fieldError(error.issues[0]!);
  // A route schema's refusal (zod, through the type provider's validator): the first issue.
  if (hasZodFastifySchemaValidationErrors(error)) {
    const first = error.validation[0]!;
    const path = first.instancePath.split('/').filter((part) => part !== '');
    const keys = (first.params as { keys?: string[] }).keys;
    const where = (error as { validationContext?: string }).validationContext ?? 'body';
    return fieldError(
      { code: first.keyword, path, message: first.message ?? 'invalid', ...(keys ? { keys } : {}) },
      where,
    );
  }
  if (error instanceof WrongExpectedRevisionError) return new ServiceError('CONFLICT');
  const fastify = error as WithValidation;
  if (typeof fastify?.code === 'string') {
    const known = FRAMEWORK[fastify.code];
    if (known) return known();
    // An error that names its catalog code and status (the event store's outage, say).
    if (isCode(fastify.code) && fastify.statusCode === ERRORS[fastify.code].status) {
      return new ServiceError(fastify.code, { detail: fastify.message });
    }
  }
  // secure-json-parse's refusal of __proto__ / constructor keys.
  if (error instanceof SyntaxError && (error as { statusCode?: number }).statusCode === 400) {
    return new ServiceError('INVALID_JSON');
  }
  return null;
}

/** A catalog error in the /api shape. */
export function errorBody(error: ServiceError): ErrorBody {
  return {
    code: error.code,
    message: error.message,
    ...(error.field ? { field: error.field } : {}),
    ...(error.retryable ? { retryable: true } : {}),
  };
}

/** A catalog error in the JSON-RPC shape of /mcp. */
export function rpcErrorBody(error: ServiceError): RpcErrorBody {
  const spec = ERRORS[error.code as ErrorCode] as { rpc?: number };
  return {
    jsonrpc: '2.0',
    error: { code: spec.rpc ?? -32600, message: error.message, data: { code: error.code } },
    id: null,
  };
}

type Render = (error: ServiceError) => unknown;

/** Writes `error` through `render` with its status, and a Retry-After when it is retryable. */
function answer(reply: FastifyReply, error: ServiceError, render: Render): FastifyReply {
  if (error.retryable && error.statusCode >= 500) reply.header('retry-after', '1');
  return reply.code(error.statusCode).type('application/json; charset=utf-8').send(render(error));
}

/** The error handler of a plugin (or the app) answering in `render`'s shape. */
export function errorHandler(render: Render) {
  return (error: WithValidation, request: FastifyRequest, reply: FastifyReply) => {
    const known = toServiceError(error);
    if (known?.statusCode === 503) {
      // No stack per request: the adapter logs the outage (a full disk, a lost server) once.
      request.log.warn(
        { code: known.code, reason: known.message },
        'request refused: a backing server is unavailable',
      );
    }
    if (known) return answer(reply, known, render);
    const status = error.statusCode ?? 500;
    if (status >= 400 && status < 500) {
      return answer(reply, new ServiceError('BAD_REQUEST', { detail: error.message }), render);
    }
    request.log.error({ err: error }, 'request failed');
    return answer(reply, new ServiceError('INTERNAL_ERROR'), render);
  };
}

/** Installs the /api error shape on `app` (and the plugins registered under it). */
export function useApiErrors(app: FastifyInstance): void {
  app.setErrorHandler(errorHandler(errorBody));
}
