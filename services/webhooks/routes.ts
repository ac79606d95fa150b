import type { FastifyPluginAsync, FastifyReply, FastifyRequest } from 'fastify';
import type { Dispatcher } from 'undici';
import { z } from 'zod';
import { type EventStore, WrongExpectedRevisionError } from '../../adapters/event-store/port.ts';
import { EVENT_VERSIONS, webhookOpenApi } from '../../contracts/webhook-schemas.ts';
import {
  CreatedWebhook,
  CreateWebhookRequest,
  DeliveryView,
  ReEnableWebhookRequest,
  RotatedSecret,
  RotateSecretRequest,
  SendResultView,
  WebhookErrorBody,
  WebhookView,
} from '../../contracts/webhooks.ts';
import type { ProjectionRunner } from '../../projections/runner.ts';
import { documented, type ResponseDoc, type RouteDoc } from '../api/openapi.ts';
import type { ResolveKey } from './auth.ts';
import { deliveryView, findDelivery, sequenceStream } from './delivery-log-fold.ts';
import type { DeliveryWorker } from './delivery-worker.ts';
import { claimNextAttempt } from './next-attempt.ts';
import { readDeliveryRecord } from './recovery.ts';
import { SAMPLE_VERIFY_BODY, SAMPLE_VERIFY_PATH, sampleEnvelope } from './sample.ts';
import type { SecretBox } from './secret-box.ts';
import { type SendResult, sendSigned } from './sender.ts';
import type { WebhookSettings } from './settings.ts';
import { checkWebhookUrl } from './ssrf/url-policy.ts';
import {
  createSubscription,
  deleteSubscription,
  reEnableSubscription,
  rotateSecret,
  SubscriptionLimitError,
  SubscriptionNotFoundError,
} from './subscription-commands.ts';
import {
  findSubscription,
  type SubscriptionRecord,
  subscriptionsOfKey,
  toView,
} from './subscription-fold.ts';
import type { WebhookState } from './webhook-projection.ts';

export interface WebhookRoutesDeps {
  store: EventStore;
  /** The webhook projection, started: the only source of subscription and delivery state. */
  runner: ProjectionRunner<WebhookState>;
  worker: DeliveryWorker;
  agent: Dispatcher;
  secrets: SecretBox;
  settings: Pick<
    WebhookSettings,
    'urlPolicy' | 'maxPerKey' | 'timeoutMs' | 'verifyBaseUrl' | 'rotationOverlapMs'
  >;
  resolveKey: ResolveKey;
}

class HttpError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
    readonly field?: string,
  ) {
    super(message);
  }
}

/** The first problem of a failed parse, as a 400 that names the field. */
function fieldError(error: z.ZodError): HttpError {
  const issue = error.issues[0]!;
  const keys = issue.code === 'unrecognized_keys' ? (issue as { keys: string[] }).keys : [];
  const field =
    keys.length > 0 ? keys[0]! : issue.path.length > 0 ? issue.path.map(String).join('.') : 'body';
  const message = keys.length > 0 ? `unknown field "${field}"` : `${field}: ${issue.message}`;
  return new HttpError(400, 'INVALID_FIELD', message, field);
}

function resultView(deliveryId: string, r: SendResult) {
  return {
    delivery_id: deliveryId,
    delivered: r.ok,
    status: r.status,
    latency_ms: Math.round(r.latencyMs),
    error: r.error,
    response: r.response,
  };
}

const fail = (description: string): ResponseDoc => ({ description, schema: WebhookErrorBody });
const Id = z.object({ id: z.string() });
/** Every keyed webhook route answers these besides its own. */
const KEYED = {
  401: fail('UNAUTHORIZED: a live API key is required'),
  503: fail('KEY_UNVERIFIABLE: the key could not be checked right now'),
};
const keyed = (doc: Omit<RouteDoc, 'tags' | 'auth'>) =>
  documented({ ...doc, tags: ['webhooks'], auth: 'bearer', responses: { ...doc.responses, ...KEYED } });

const DOCS = {
  sample: documented({
    summary: 'The verify target of sample deliveries (POST /api/webhooks/{id}/test)',
    tags: ['webhooks'],
    responses: { 200: { description: 'A fixed sample body', schema: { type: 'object' } } },
  }),
  schemas: documented({
    summary: 'Payload schema of every webhook event type at every version',
    tags: ['webhooks'],
    responses: {
      200: { description: 'An OpenAPI document with a webhooks section', schema: { type: 'object' } },
    },
  }),
  create: keyed({
    summary: 'Subscribe a URL to events (the signing secret is shown once)',
    body: CreateWebhookRequest,
    responses: {
      201: { description: 'The subscription, with its secret', schema: CreatedWebhook },
      400: fail('INVALID_FIELD (names the field), INVALID_URL (refused by the SSRF guard)'),
      409: fail('SUBSCRIPTION_LIMIT: the key has its maximum of subscriptions'),
    },
  }),
  list: keyed({
    summary: "The key's subscriptions",
    responses: {
      200: { description: 'Subscriptions', schema: z.object({ webhooks: z.array(WebhookView) }) },
    },
  }),
  delete: keyed({
    summary: 'Delete a subscription',
    params: Id,
    responses: {
      200: { description: 'Deleted', schema: z.object({ id: z.string(), deleted: z.literal(true) }) },
      404: fail('NOT_FOUND: no such subscription for this key'),
    },
  }),
  test: keyed({
    summary: 'Send a signed sample delivery now and report what the endpoint answered',
    params: Id,
    responses: {
      200: { description: 'The attempt', schema: SendResultView },
      404: fail('NOT_FOUND'),
    },
  }),
  deliveries: keyed({
    summary: 'Delivery log: the latest deliveries, or every one after a sequence number',
    params: Id,
    query: z.object({
      limit: z.string().optional().describe('1–200, default 50'),
      after_seq: z.string().optional().describe('The last seq received: deliveries after it, in seq order'),
    }),
    responses: {
      200: {
        description: 'Deliveries with their attempts',
        schema: z.object({
          subscription: WebhookView,
          deliveries: z.array(DeliveryView),
          next_after_seq: z.number().int().optional(),
        }),
      },
      400: fail('INVALID_FIELD: after_seq'),
      404: fail('NOT_FOUND'),
    },
  }),
  rotate: keyed({
    summary: 'Rotate the signing secret; the previous one stays valid for an overlap',
    params: Id,
    body: RotateSecretRequest,
    responses: {
      200: { description: 'The new secret', schema: RotatedSecret },
      400: fail('INVALID_FIELD'),
      404: fail('NOT_FOUND'),
    },
  }),
  enable: keyed({
    summary: 'Re-enable a disabled subscription, optionally re-delivering what it missed since a time',
    params: Id,
    body: ReEnableWebhookRequest,
    responses: {
      200: { description: 'The subscription', schema: WebhookView },
      400: fail('INVALID_FIELD'),
      404: fail('NOT_FOUND'),
    },
  }),
  resend: keyed({
    summary: 'Send one delivery again now',
    params: z.object({ id: z.string(), deliveryId: z.string() }),
    responses: {
      200: { description: 'The attempt', schema: SendResultView },
      404: fail('NOT_FOUND'),
      409: fail('SUBSCRIPTION_DISABLED, DELIVERY_BUSY'),
    },
  }),
};

/**
 * /api/webhooks: create, list, delete, test, delivery log, re-enable (with recovery) and resend.
 * Every route needs a live key; another key's subscription answers 404 exactly like a missing one.
 */
export function webhookRoutes(deps: WebhookRoutesDeps): FastifyPluginAsync {
  const { store, runner, settings } = deps;

  async function keyOf(request: FastifyRequest): Promise<string> {
    let resolved: { keyId: string } | null;
    try {
      resolved = await deps.resolveKey(request.headers.authorization);
    } catch (err) {
      throw new HttpError(
        503,
        'KEY_UNVERIFIABLE',
        `the API key could not be verified right now; retry shortly (${(err as Error).message})`,
      );
    }
    if (!resolved) {
      throw new HttpError(401, 'UNAUTHORIZED', 'a live API key is required: Authorization: Bearer <API_KEY>');
    }
    return resolved.keyId;
  }

  function owned(keyId: string, id: string): SubscriptionRecord {
    const sub = findSubscription(runner.state.subscriptions, id);
    if (!sub || sub.keyId !== keyId) throw new HttpError(404, 'NOT_FOUND', `no webhook subscription ${id}`);
    return sub;
  }

  function send(reply: FastifyReply, error: unknown): FastifyReply {
    if (error instanceof HttpError) {
      return reply
        .code(error.status)
        .send({ code: error.code, message: error.message, ...(error.field ? { field: error.field } : {}) });
    }
    if (error instanceof SubscriptionNotFoundError)
      return reply.code(404).send({ code: 'NOT_FOUND', message: error.message });
    if (error instanceof SubscriptionLimitError) {
      return reply.code(409).send({ code: 'SUBSCRIPTION_LIMIT', message: error.message });
    }
    if (error instanceof WrongExpectedRevisionError) {
      return reply
        .code(409)
        .send({ code: 'CONFLICT', message: 'another change to these subscriptions won; retry' });
    }
    throw error;
  }

  /** Read-your-writes: the projection has folded the caller's change before the answer. */
  async function settled(position: number): Promise<void> {
    await runner.waitFor(position, 5_000);
  }

  return async (app) => {
    app.get(SAMPLE_VERIFY_PATH, { config: DOCS.sample }, async () => SAMPLE_VERIFY_BODY);

    // Public: every event type's payload schema at every version (an OpenAPI `webhooks` section).
    const schemas = webhookOpenApi();
    app.get('/api/webhooks/schemas', { config: DOCS.schemas }, async () => schemas);

    app.post('/api/webhooks', { config: DOCS.create }, async (request, reply) => {
      try {
        const keyId = await keyOf(request);
        const parsed = CreateWebhookRequest.safeParse(request.body ?? {});
        if (!parsed.success) throw fieldError(parsed.error);
        const version = parsed.data.event_version;
        if (version !== undefined && !EVENT_VERSIONS.includes(version)) {
          throw new HttpError(
            400,
            'INVALID_FIELD',
            `event_version: ${version} is not a payload version (known: ${EVENT_VERSIONS.join(', ')})`,
            'event_version',
          );
        }
        const check = await checkWebhookUrl(parsed.data.url, settings.urlPolicy);
        if (!check.ok) throw new HttpError(400, 'INVALID_URL', check.reason, 'url');
        const created = await createSubscription(store, {
          keyId,
          request: parsed.data,
          url: check.url.toString(),
          secrets: deps.secrets,
          maxPerKey: settings.maxPerKey,
        });
        await settled(created.position);
        const sub = owned(keyId, created.subscriptionId);
        return reply.code(201).send({ ...toView(sub), secret: created.secret });
      } catch (err) {
        return send(reply, err);
      }
    });

    app.get('/api/webhooks', { config: DOCS.list }, async (request, reply) => {
      try {
        const keyId = await keyOf(request);
        return { webhooks: subscriptionsOfKey(runner.state.subscriptions, keyId).map(toView) };
      } catch (err) {
        return send(reply, err);
      }
    });

    app.delete<{ Params: { id: string } }>(
      '/api/webhooks/:id',
      { config: DOCS.delete },
      async (request, reply) => {
        try {
          const keyId = await keyOf(request);
          owned(keyId, request.params.id);
          await settled(await deleteSubscription(store, keyId, request.params.id));
          return { id: request.params.id, deleted: true };
        } catch (err) {
          return send(reply, err);
        }
      },
    );

    app.post<{ Params: { id: string } }>(
      '/api/webhooks/:id/test',
      { config: DOCS.test },
      async (request, reply) => {
        try {
          const sub = owned(await keyOf(request), request.params.id);
          const envelope = sampleEnvelope(sub, settings.verifyBaseUrl);
          const secrets = deps.worker.openSecrets(sub, Date.now());
          const result = await sendSigned(deps.agent, {
            url: sub.url,
            secret: secrets.current,
            previousSecret: secrets.previous,
            eventVersion: sub.eventVersion ?? 1,
            event: envelope.event,
            deliveryId: envelope.delivery_id,
            body: JSON.stringify(envelope),
            timeoutMs: settings.timeoutMs,
          });
          return resultView(envelope.delivery_id, result);
        } catch (err) {
          return send(reply, err);
        }
      },
    );

    app.get<{ Params: { id: string }; Querystring: { limit?: string; after_seq?: string } }>(
      '/api/webhooks/:id/deliveries',
      { config: DOCS.deliveries },
      async (request, reply) => {
        try {
          const sub = owned(await keyOf(request), request.params.id);
          const limit = Math.min(200, Math.max(1, Number(request.query.limit ?? 50) || 50));
          const { log } = runner.state;
          if (request.query.after_seq !== undefined) {
            const afterSeq = Number(request.query.after_seq);
            if (!/^\d{1,15}$/.test(request.query.after_seq) || !Number.isSafeInteger(afterSeq)) {
              throw new HttpError(
                400,
                'INVALID_FIELD',
                'after_seq: a non-negative integer (the last seq you received)',
                'after_seq',
              );
            }
            // The sequence stream holds every delivery of the subscription, however old: the range
            // a receiver missed is read from the event log, in seq order.
            const sequenced = await store.readStream(sequenceStream(sub.id), {
              fromRevision: afterSeq,
              maxCount: limit,
            });
            const deliveries: DeliveryView[] = [];
            for (const event of sequenced) {
              const id = (event.data as { deliveryId: string }).deliveryId;
              const record = findDelivery(log, id) ?? (await readDeliveryRecord(store, id));
              if (record) deliveries.push(deliveryView({ ...record, seq: event.revision + 1 }));
            }
            const last = sequenced.at(-1);
            return {
              subscription: toView(sub),
              deliveries,
              next_after_seq: last ? last.revision + 1 : afterSeq,
            };
          }
          const ids = (log.bySub[sub.id] ?? []).slice(-limit).reverse();
          return {
            subscription: toView(sub),
            deliveries: ids.flatMap((id) => {
              const record = findDelivery(log, id);
              return record ? [deliveryView(record)] : [];
            }),
          };
        } catch (err) {
          return send(reply, err);
        }
      },
    );

    app.post<{ Params: { id: string } }>(
      '/api/webhooks/:id/rotate-secret',
      { config: DOCS.rotate },
      async (request, reply) => {
        try {
          const keyId = await keyOf(request);
          owned(keyId, request.params.id);
          const parsed = RotateSecretRequest.safeParse(request.body ?? {});
          if (!parsed.success) throw fieldError(parsed.error);
          const overlapMs =
            parsed.data.overlap_seconds !== undefined
              ? parsed.data.overlap_seconds * 1_000
              : settings.rotationOverlapMs;
          const rotated = await rotateSecret(store, {
            keyId,
            subscriptionId: request.params.id,
            secrets: deps.secrets,
            overlapMs,
          });
          await settled(rotated.position);
          return {
            id: request.params.id,
            secret: rotated.secret,
            previous_secret_valid_until: rotated.previousValidUntil,
          };
        } catch (err) {
          return send(reply, err);
        }
      },
    );

    app.post<{ Params: { id: string } }>(
      '/api/webhooks/:id/enable',
      { config: DOCS.enable },
      async (request, reply) => {
        try {
          const keyId = await keyOf(request);
          owned(keyId, request.params.id);
          const parsed = ReEnableWebhookRequest.safeParse(request.body ?? {});
          if (!parsed.success) throw fieldError(parsed.error);
          await settled(
            await reEnableSubscription(store, keyId, request.params.id, parsed.data.recover_since),
          );
          return toView(owned(keyId, request.params.id));
        } catch (err) {
          return send(reply, err);
        }
      },
    );

    app.post<{ Params: { id: string; deliveryId: string } }>(
      '/api/webhooks/:id/deliveries/:deliveryId/resend',
      { config: DOCS.resend },
      async (request, reply) => {
        try {
          const sub = owned(await keyOf(request), request.params.id);
          // Older deliveries have left the in-memory log, never the event log.
          const record =
            findDelivery(runner.state.log, request.params.deliveryId) ??
            (await readDeliveryRecord(store, request.params.deliveryId));
          if (!record || record.subscriptionId !== sub.id) {
            throw new HttpError(
              404,
              'NOT_FOUND',
              `no delivery ${request.params.deliveryId} for this subscription`,
            );
          }
          if (sub.status !== 'active') {
            throw new HttpError(409, 'SUBSCRIPTION_DISABLED', 're-enable the subscription before resending');
          }
          const job = await claimNextAttempt(deps.worker, record, sub, 'resend');
          if (!job)
            throw new HttpError(
              409,
              'DELIVERY_BUSY',
              'an attempt of this delivery is being recorded; retry shortly',
            );
          return resultView(record.id, await deps.worker.submit(job));
        } catch (err) {
          return send(reply, err);
        }
      },
    );
  };
}
