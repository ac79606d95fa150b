import type { FastifyPluginAsync, FastifyReply, FastifyRequest } from 'fastify';
import type { ZodTypeProvider } from 'fastify-type-provider-zod';
import type { Dispatcher } from 'undici';
import { z } from 'zod';
import type { EventStore } from '../../adapters/event-store/port.ts';
import type { KnownCoins } from '../../adapters/market/known-coins.ts';
import { type ErrorCode, ServiceError } from '../../contracts/errors.ts';
import { optionalBody, queryInt, queryOnce } from '../../contracts/http.ts';
import type { FeedKind } from '../../contracts/market.ts';
import { EVENT_VERSIONS, webhookOpenApi } from '../../contracts/webhook-schemas.ts';
import {
  CreatedWebhook,
  CreateWebhookRequest,
  DeleteWebhookRequest,
  DeliveryView,
  DisableWebhookRequest,
  ReEnableWebhookRequest,
  ResendDeliveryRequest,
  RotatedSecret,
  RotateSecretRequest,
  SendResultView,
  TestWebhookRequest,
  topN,
  UpdateWebhookRequest,
  WebhookSettingsCheck,
  WebhookView,
} from '../../contracts/webhooks.ts';
import type { ProjectionRunner } from '../../projections/runner.ts';
import { openToAnyOrigin } from '../api/cors.ts';
import type { FieldCodes } from '../api/errors.ts';
import { emptyBodyIsNoBody, noBodyOrObject } from '../api/json-body.ts';
import { declared, documented, type ResponseDoc, type RouteDoc, refusal } from '../api/openapi.ts';
import { callerHook, decorateCaller, keyRefusal, withAnswerService } from '../metering/caller.ts';
import { checkWebhookUrl } from '../shared/ssrf/url-policy.ts';
import { deliveriesAfter, deliveryToResend, latestDeliveries } from './delivery-log-query.ts';
import type { DeliveryWorker } from './delivery-worker.ts';
import type { DigestCoverage } from './digest-coverage.ts';
import { EndpointQueues } from './endpoint-queues.ts';
import { claimNextAttempt } from './next-attempt.ts';
import { SAMPLE_VERIFY_BODY, SAMPLE_VERIFY_PATH, sampleEnvelope } from './sample.ts';
import type { SecretBox } from './secret-box.ts';
import { type SendResult, sendSigned } from './sender.ts';
import type { WebhookSettings } from './settings.ts';
import {
  createSubscription,
  deleteSubscription,
  filtersOf,
  pauseSubscription,
  reEnableSubscription,
  rotateSecret,
  SubscriptionChangedError,
  updateSubscription,
} from './subscription-commands.ts';
import { settingsOf } from './subscription-decider.ts';
import { FILTER_FIELDS, type WireFilter } from './subscription-filters.ts';
import {
  EARLIER_FILTERS_KEPT,
  findSubscription,
  type SubscriptionRecord,
  subscriptionsOfKey,
  toView,
} from './subscription-fold.ts';
import { TEST_SENDS_PER_WINDOW, TestSendBudget, TestSendsInFlight } from './test-budget.ts';
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
  /** The feed this deployment's market content comes from; a test delivery is labelled with it. */
  feed: FeedKind;
  /** Refuses an `assets` coin the service does not know, as the tools do (unknown_coin); none: not checked. */
  coins?: Pick<KnownCoins, 'check'>;
  /** Refuses a digest venue or timeframe not served or off the schedule (digestCoverage); none: not checked. */
  digests?: Pick<DigestCoverage, 'check'>;
}

/** How far ahead of the service's clock a caller's `recover_since` may be (its clock's drift). */
const CLOCK_SKEW_MS = 5 * 60_000;

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

const DeliveryQuery = z.strictObject({
  limit: queryOnce(queryInt(1, 200)).default(50).describe('How many deliveries, 1–200'),
  after_seq: queryOnce(queryInt(0, Number.MAX_SAFE_INTEGER))
    .optional()
    .describe('The last seq received: deliveries after it, in seq order'),
});
/** Which subscriptions the list shows: by default the active ones (the contract's list), or else. */
const LIST_STATUSES = ['active', 'disabled', 'all'] as const;
const ListQuery = z.strictObject({
  status: queryOnce(z.enum(LIST_STATUSES))
    .default('active')
    .describe(
      'active (the default): the subscriptions that deliver; disabled: those disabled, with disabled_at and disabled_reason, to re-enable; all: both',
    ),
});
/** A query parameter a route does not know is refused, not ignored (as /api/verdicts answers it). */
const QUERY_CODES = { unknown: 'UNKNOWN_FILTER' } as const satisfies FieldCodes;
/** A declared refusal with the codes it answers, which the keyed 400 merges with its own. */
type Fail = ResponseDoc & { codes: readonly ErrorCode[]; note?: string };
const fail = (codes: readonly [ErrorCode, ...ErrorCode[]], note?: string): Fail => ({
  ...refusal(codes, note),
  codes,
  ...(note === undefined ? {} : { note }),
});
const Id = z.object({ id: z.string() });
/** Every keyed webhook route answers these besides its own. */
const KEYED = {
  401: fail(['UNAUTHORIZED'], 'A live API key is required'),
  503: fail(['KEY_UNVERIFIABLE'], 'The key could not be checked right now'),
};
/**
 * A keyed route's 400: its own codes, and those of its query (strict: UNKNOWN_FILTER for a
 * parameter it does not take, INVALID_PARAMETER for one given twice) and, on every method but GET,
 * of its body as read (any body is parsed: INVALID_JSON, JSON_TOO_DEEP).
 */
function keyed400(declared: Fail | undefined, method: 'GET' | 'other'): ResponseDoc {
  const body: ErrorCode[] = method === 'GET' ? [] : ['INVALID_JSON', 'JSON_TOO_DEEP'];
  const codes: ErrorCode[] = [...(declared?.codes ?? []), 'UNKNOWN_FILTER', 'INVALID_PARAMETER', ...body];
  const unknown = 'UNKNOWN_FILTER: a query parameter the route does not take';
  const note = declared?.note?.includes('UNKNOWN_FILTER')
    ? declared.note
    : [declared?.note, unknown].filter(Boolean).join('; ');
  return refusal([...new Set(codes)] as [ErrorCode, ...ErrorCode[]], note);
}

/** A keyed route takes no query parameter unless it declares some. */
const NO_QUERY = z.strictObject({});
/**
 * A keyed route's declaration: its query is strict (a parameter it does not know is refused with
 * UNKNOWN_FILTER, one given twice with INVALID_PARAMETER, never ignored), and it answers the keyed
 * refusals besides its own.
 */
const keyed = <
  B extends z.ZodType | undefined = undefined,
  P extends z.ZodObject | undefined = undefined,
  Q extends z.ZodObject = typeof NO_QUERY,
>(
  doc: Omit<RouteDoc, 'tags' | 'auth' | 'body' | 'params' | 'query' | 'responses'> & {
    body?: B;
    params?: P;
    query?: Q;
    responses: Record<number, ResponseDoc> & { 400?: Fail };
  },
  /** GET: no body is read, so none is refused. */
  method: 'GET' | 'other' = 'other',
) => ({
  ...declared({
    ...doc,
    query: doc.query ?? (NO_QUERY as unknown as Q),
    codes: QUERY_CODES,
    tags: ['webhooks'],
    auth: 'bearer',
    service: true,
    sends: ['Cache-Control'],
    responses: { ...doc.responses, 400: keyed400(doc.responses[400], method), ...KEYED },
  }),
  onRequest: neverStored,
});

/**
 * Every answer of a keyed route, refusals included, is sent `Cache-Control: no-store`: a create
 * and a rotation carry the signing secret, the list and the delivery log the receiver URLs (which
 * often hold a token of their own) and the receivers' answers. No cache, a browser's included,
 * keeps a copy, as none keeps a new API key (POST /api/keys) or an OAuth token.
 */
async function neverStored(_request: FastifyRequest, reply: FastifyReply) {
  // Set as the request arrives, so every answer carries it (refusals too) without a hook on the
  // send path, which the app's turn-end hook must end.
  reply.header('cache-control', 'no-store');
}

const DOCS = {
  sample: documented({
    summary: 'The verify target of sample deliveries (POST /api/webhooks/{id}/test)',
    tags: ['webhooks'],
    responses: { 200: { description: 'A fixed sample body', schema: { type: 'object' } } },
  }),
  // Public, yet as strict as the keyed routes: a parameter it does not take is refused, not ignored.
  schemas: declared({
    summary: 'Payload schema of every webhook event type at every version',
    tags: ['webhooks'],
    query: NO_QUERY,
    codes: QUERY_CODES,
    responses: {
      200: { description: 'An OpenAPI document with a webhooks section', schema: { type: 'object' } },
      400: refusal(['UNKNOWN_FILTER'], 'The route takes no query parameter'),
    },
  }),
  create: keyed({
    summary: 'Subscribe a URL to events (the signing secret is shown once)',
    body: CreateWebhookRequest,
    responses: {
      201: { description: 'The subscription, with its secret', schema: CreatedWebhook },
      400: fail(
        ['INVALID_FIELD', 'INVALID_URL'],
        `INVALID_FIELD names the field (a scan_digest venue or timeframe the engine does not record too; an event_version that is no payload version, ${EVENT_VERSIONS.join(' or ')}); INVALID_URL: refused by the SSRF guard`,
      ),
      404: fail(['unknown_coin'], 'A coin in `assets` that no venue the service reads lists'),
      422: fail(
        ['unsupported_exchange', 'unsupported_timeframe'],
        'A scan_digest venue or timeframe scan_trade_calls refuses (same words)',
      ),
      409: fail(
        ['SUBSCRIPTION_LIMIT', 'CONFLICT'],
        'The key has its maximum of subscriptions; or another change to them won the race (CONFLICT, retryable)',
      ),
    },
  }),
  list: keyed(
    {
      summary: "The key's active subscriptions (?status=disabled or all for the disabled ones)",
      query: ListQuery,
      responses: {
        200: { description: 'Subscriptions', schema: z.object({ webhooks: z.array(WebhookView) }) },
        400: fail(
          ['INVALID_FIELD'],
          'INVALID_FIELD: status not active, disabled or all; UNKNOWN_FILTER: another parameter; INVALID_PARAMETER: one given twice',
        ),
      },
    },
    'GET',
  ),
  delete: keyed({
    summary: 'Delete a subscription',
    params: Id,
    body: optionalBody(DeleteWebhookRequest),
    responses: {
      200: { description: 'Deleted', schema: z.object({ id: z.string(), deleted: z.literal(true) }) },
      400: fail(['INVALID_FIELD'], 'The route takes no body field'),
      404: fail(['NOT_FOUND'], 'No such subscription for this key'),
      409: fail(['CONFLICT'], 'Another change to the key’s subscriptions won the race (retryable)'),
    },
  }),
  test: keyed({
    summary: 'Send a signed sample delivery now and report what the endpoint answered',
    params: Id,
    body: optionalBody(TestWebhookRequest),
    responses: {
      200: { description: 'The attempt', schema: SendResultView },
      400: fail(['INVALID_FIELD'], 'The route takes no body field'),
      404: fail(['NOT_FOUND']),
      429: fail(
        ['RATE_LIMITED'],
        `RATE_LIMITED: the key's test sends are ${TEST_SENDS_PER_WINDOW} a minute per api process, one at a time per receiver origin (refused at once while one to that origin is still waiting for its receiver; nothing sent); Retry-After and retry_after_ms say when the next may go`,
      ),
    },
  }),
  deliveries: keyed(
    {
      summary: 'Delivery log: the latest deliveries, or every one after a sequence number',
      params: Id,
      query: DeliveryQuery,
      responses: {
        200: {
          description: 'Deliveries with their attempts',
          schema: z.object({
            subscription: WebhookView,
            deliveries: z.array(DeliveryView),
            next_after_seq: z
              .number()
              .int()
              .optional()
              .describe(
                'With after_seq: the after_seq of the next page (the last seq listed; with none listed, the given after_seq, or last_seq when that is past the end)',
              ),
            has_more: z
              .boolean()
              .optional()
              .describe(
                'With after_seq: whether deliveries after next_after_seq exist now; false is the end (ask again later with next_after_seq)',
              ),
            last_seq: z
              .number()
              .int()
              .optional()
              .describe("With after_seq: the subscription's highest seq now (0 before its first delivery)"),
          }),
        },
        400: fail(
          ['INVALID_FIELD'],
          'INVALID_FIELD: limit or after_seq; UNKNOWN_FILTER: another parameter; INVALID_PARAMETER: one given twice',
        ),
        404: fail(['NOT_FOUND']),
      },
    },
    'GET',
  ),
  rotate: keyed({
    summary: 'Rotate the signing secret; the previous one stays valid for an overlap',
    params: Id,
    body: optionalBody(RotateSecretRequest),
    responses: {
      200: { description: 'The new secret', schema: RotatedSecret },
      400: fail(['INVALID_FIELD']),
      404: fail(['NOT_FOUND']),
      409: fail(
        ['SECRET_ROTATION_CONFLICT', 'SECRET_ROTATION_RACED'],
        'Another rotation of this subscription was recorded while this one was made: nothing changed, and that request’s caller holds the newest secret. Rotate again only to get a secret of your own (it ends the secret before it at once). Or other changes to the key’s subscriptions won the race past its retries (SECRET_ROTATION_RACED, retryable): nothing changed, the current secret still signs',
      ),
    },
  }),
  enable: keyed({
    summary: 'Re-enable a disabled subscription, optionally re-delivering what it missed since a time',
    params: Id,
    body: optionalBody(ReEnableWebhookRequest),
    responses: {
      200: { description: 'The subscription', schema: WebhookView },
      400: fail(['INVALID_FIELD']),
      404: fail(['NOT_FOUND']),
      409: fail(['CONFLICT'], 'Another change to the key’s subscriptions won the race (retryable)'),
    },
  }),
  update: keyed({
    summary:
      'Change what a subscription takes or where it sends; its id, secret, seq numbering and deliveries stay',
    description: `Any create field but event_version (pinned at creation; the secret has rotate-secret): a field given replaces the one held, a filter given null is removed, the rest stays. What the subscription then holds passes the create's checks whole (a url HTTPS and public, a scan_digest's timeframe, exchange, top_n and cadence, filters only for the events they filter). An event recorded after the change is matched with the new filters and one recorded before it with the old ones, however far behind the dispatcher is (the filters of the latest ${EARLIER_FILTERS_KEPT} changes are kept); deliveries not yet sent, retries and resends go to the new url. A change to nothing records nothing and answers the subscription.`,
    params: Id,
    body: optionalBody(UpdateWebhookRequest),
    responses: {
      200: { description: 'The subscription as changed', schema: WebhookView },
      400: fail(
        ['INVALID_FIELD', 'INVALID_URL'],
        'INVALID_FIELD names the field (an empty body or one naming no field names `body`; an unknown field, event_version included, names it); INVALID_URL: refused by the SSRF guard',
      ),
      404: fail(
        ['NOT_FOUND', 'unknown_coin'],
        'NOT_FOUND: no such subscription for this key; unknown_coin: a coin in `assets` that no venue lists',
      ),
      422: fail(
        ['unsupported_exchange', 'unsupported_timeframe'],
        'A scan_digest venue or timeframe scan_trade_calls refuses (same words)',
      ),
      409: fail(['CONFLICT'], 'Another change to the key’s subscriptions won the race (retryable)'),
    },
  }),
  disable: keyed({
    summary: 'Pause a subscription (receiver maintenance); POST /api/webhooks/{id}/enable resumes it',
    description:
      'Records the disable the dispatcher records for a failing endpoint, with disabled_reason disabled_by_subscriber: nothing is matched for the subscription while it is paused, and an attempt whose turn comes during the pause is held, not sent (error "subscription disabled"); a retry due then stops and counts as failed. The key\'s other subscriptions that take subscription_disabled are told. Events recorded during the pause are not delivered unless the enable asks for them: POST /enable with {"recover_since": disabled_at} sends them (and the held ones); a plain enable sends only what was held. A subscription already disabled (by its subscriber or by the dispatcher) is answered as it is, and nothing is recorded.',
    params: Id,
    body: optionalBody(DisableWebhookRequest),
    responses: {
      200: { description: 'The subscription, disabled', schema: WebhookView },
      400: fail(['INVALID_FIELD'], 'The route takes no body field'),
      404: fail(['NOT_FOUND']),
      409: fail(['CONFLICT'], 'Another change to the key’s subscriptions won the race (retryable)'),
    },
  }),
  resend: keyed({
    summary: 'Send one delivery again now',
    params: z.object({ id: z.string(), deliveryId: z.string() }),
    body: optionalBody(ResendDeliveryRequest),
    responses: {
      200: { description: 'The attempt', schema: SendResultView },
      400: fail(['INVALID_FIELD'], 'The route takes no body field'),
      404: fail(['NOT_FOUND']),
      409: fail(['SUBSCRIPTION_DISABLED', 'DELIVERY_BUSY']),
    },
  }),
};

/** What the routes do, apart from how they are declared: each takes the caller's key id and typed input. */
function webhookActions(deps: WebhookRoutesDeps) {
  return {
    owned: (keyId: string, id: string) => owned(deps, keyId, id),
    settled: (position: number) => settled(deps, position),
    create: (keyId: string, request: CreateWebhookRequest) => create(deps, keyId, request),
    update: (keyId: string, id: string, patch: UpdateWebhookRequest) => update(deps, keyId, id, patch),
    pause: (keyId: string, id: string) => pause(deps, keyId, id),
    sendSample: (sub: SubscriptionRecord) => sendSample(deps, sub),
    resend: (sub: SubscriptionRecord, deliveryId: string) => resend(deps, sub, deliveryId),
  };
}

/**
 * The request-rate refusal's shape (retry_after_ms beside Retry-After), saying it is the test
 * route's own limit: the key's other calls are not limited by it.
 */
function rateLimited(waitMs: number, message: (seconds: number) => string): ServiceError {
  const seconds = Math.ceil(waitMs / 1_000);
  return new ServiceError('RATE_LIMITED', {}, undefined, {
    headers: { 'retry-after': String(seconds) },
    message: message(seconds),
    body: { retry_after_ms: waitMs },
  });
}

function owned(deps: WebhookRoutesDeps, keyId: string, id: string): SubscriptionRecord {
  const sub = findSubscription(deps.runner.state.subscriptions, id);
  if (!sub || sub.keyId !== keyId)
    throw new ServiceError('NOT_FOUND', { detail: `no webhook subscription ${id}` });
  return sub;
}

/** Read-your-writes: the projection has folded the caller's change before the answer. */
async function settled(deps: WebhookRoutesDeps, position: number): Promise<void> {
  await deps.runner.waitFor(position, 5_000);
}

async function create(deps: WebhookRoutesDeps, keyId: string, request: CreateWebhookRequest) {
  const version = request.event_version;
  if (version !== undefined && !EVENT_VERSIONS.includes(version)) {
    const detail = `event_version: ${version} is not a payload version (known: ${EVENT_VERSIONS.join(', ')})`;
    throw new ServiceError('INVALID_FIELD', { detail }, 'event_version');
  }
  const check = await checkWebhookUrl(request.url, deps.settings.urlPolicy);
  if (!check.ok) throw new ServiceError('INVALID_URL', { detail: check.reason }, 'url');
  // A misspelt coin would make a subscription that never fires: refused before anything is written.
  for (const asset of new Set(request.assets ?? [])) {
    if (topN(asset) === null) await deps.coins?.check(asset, undefined, 'assets');
  }
  // So would a digest of a venue or timeframe the scan refuses or the engine never records.
  if (request.events.includes('scan_digest')) {
    await deps.digests?.check(request.exchange!, request.timeframe!);
  }
  const created = await createSubscription(deps.store, {
    keyId,
    request,
    url: check.url.toString(),
    secrets: deps.secrets,
    maxPerKey: deps.settings.maxPerKey,
  });
  await settled(deps, created.position);
  return { ...toView(owned(deps, keyId, created.subscriptionId)), secret: created.secret };
}

/** The settings a subscription holds, in the create's words (the fields a PATCH replaces). */
const SETTINGS: readonly ('url' | 'events' | WireFilter)[] = [
  'url',
  'events',
  ...(Object.keys(FILTER_FIELDS) as WireFilter[]),
] satisfies readonly (keyof UpdateWebhookRequest & keyof WebhookView)[];

async function update(deps: WebhookRoutesDeps, keyId: string, id: string, patch: UpdateWebhookRequest) {
  try {
    return await updateOnce(deps, keyId, id, patch);
  } catch (err) {
    if (!(err instanceof SubscriptionChangedError)) throw err;
    // Read from a projection behind the log (another replica's change, a change racing this one):
    // merged again on the subscription as the log has it now; a second loss answers 409 CONFLICT.
    await settled(deps, await deps.store.headPosition());
    return updateOnce(deps, keyId, id, patch);
  }
}

async function updateOnce(deps: WebhookRoutesDeps, keyId: string, id: string, patch: UpdateWebhookRequest) {
  const sub = owned(deps, keyId, id);
  // Taken now, before the checks below wait: the projection's record changes in place as it folds,
  // and read after them it would take a change recorded meanwhile as the one merged from.
  const expected = settingsOf(sub);
  const view = toView(sub);
  const merged: Record<string, unknown> = {};
  for (const field of SETTINGS) {
    const value = Object.hasOwn(patch, field) ? patch[field] : view[field];
    if (value !== undefined && value !== null) merged[field] = value;
  }
  // The create's rules over what the subscription would hold (a ZodError names the field: 400).
  const next = WebhookSettingsCheck.parse(merged);
  // What the patch brings is checked as a create checks it; what it keeps was checked then.
  let url = sub.url;
  if (patch.url !== undefined) {
    const check = await checkWebhookUrl(patch.url, deps.settings.urlPolicy);
    if (!check.ok) throw new ServiceError('INVALID_URL', { detail: check.reason }, 'url');
    url = check.url.toString();
  }
  for (const asset of new Set(patch.assets ?? [])) {
    if (topN(asset) === null) await deps.coins?.check(asset, undefined, 'assets');
  }
  const digestTouched = ['events', 'exchange', 'timeframe'].some((f) => Object.hasOwn(patch, f));
  if (digestTouched && next.events.includes('scan_digest')) {
    await deps.digests?.check(next.exchange!, next.timeframe!);
  }
  const position = await updateSubscription(
    deps.store,
    keyId,
    {
      subscriptionId: id,
      url,
      ...filtersOf(next),
    },
    expected,
  );
  // Nothing written: the answer is the subscription as the log has it, whoever wrote last.
  await settled(deps, position ?? (await deps.store.headPosition()));
  return toView(owned(deps, keyId, id));
}

async function pause(deps: WebhookRoutesDeps, keyId: string, id: string) {
  const sub = owned(deps, keyId, id);
  const position = await pauseSubscription(deps.store, {
    keyId,
    subscriptionId: id,
    // What a disable records beside its reason (the notice's consecutive_failures), as a disable
    // for a 410 Gone records it: the failed deliveries in a row so far.
    consecutiveFailures: sub.failedDeliveries,
  });
  // Already disabled (by either): nothing written, the subscription answered as the log has it.
  await settled(deps, position ?? (await deps.store.headPosition()));
  return toView(owned(deps, keyId, id));
}

async function sendSample(deps: WebhookRoutesDeps, sub: SubscriptionRecord) {
  const envelope = sampleEnvelope(sub, deps.settings.verifyBaseUrl, deps.feed);
  const secrets = deps.worker.openSecrets(sub, Date.now());
  // In a slot of the key's endpoint, as resends are: the api role's pool is shared by every key.
  const result = await deps.worker.sendOutside(sub, () =>
    sendSigned(deps.agent, {
      url: sub.url,
      secret: secrets.current,
      previousSecret: secrets.previous,
      eventVersion: sub.eventVersion ?? 1,
      event: envelope.event,
      deliveryId: envelope.delivery_id,
      body: JSON.stringify(envelope),
      timeoutMs: deps.settings.timeoutMs,
    }),
  );
  return resultView(envelope.delivery_id, result);
}

async function resend(deps: WebhookRoutesDeps, sub: SubscriptionRecord, deliveryId: string) {
  const record = await deliveryToResend(deps, deliveryId);
  if (!record || record.subscriptionId !== sub.id) {
    throw new ServiceError('NOT_FOUND', { detail: `no delivery ${deliveryId} for this subscription` });
  }
  if (sub.status !== 'active') throw new ServiceError('SUBSCRIPTION_DISABLED');
  const job = await claimNextAttempt(deps.worker, record, sub, 'resend');
  if (!job) throw new ServiceError('DELIVERY_BUSY');
  return resultView(record.id, await deps.worker.submit(job));
}

/** A keyed answer with its caller's `_service` (nothing debited), as every answer of the routes has. */
async function served<T extends object>(request: FastifyRequest, body: T | Promise<T>) {
  return withAnswerService(request, await body);
}

/** The live key a keyed route was called with: its auth hook refused every caller without one. */
function keyOf(request: FastifyRequest): string {
  return request.caller!.keyId!;
}

/**
 * /api/webhooks: create, list, change (PATCH), delete, test, delivery log, pause (disable),
 * re-enable (with recovery) and resend.
 * Every route needs a live key (the caller hook, before the body is validated); another key's subscription answers
 * 404 exactly like a missing one. Refusals are thrown as catalog errors and answered by the app's
 * error handler; a command that loses a race past its retries answers 409 CONFLICT. Every answer of the
 * keyed routes, refusals included, carries the caller's `_service` (withAnswerService).
 */
export function webhookRoutes(deps: WebhookRoutesDeps): FastifyPluginAsync {
  const { store, runner, settings } = deps;
  const { owned, settled, create, update, pause, sendSample, resend } = webhookActions(deps);
  const testSends = new TestSendBudget();
  const testsInFlight = new TestSendsInFlight();
  return async (plain) => {
    const app = plain.withTypeProvider<ZodTypeProvider>();
    // Any page may read the public schemas and the sample, and, with a key, manage subscriptions.
    openToAnyOrigin(plain);
    plain.get(SAMPLE_VERIFY_PATH, { config: DOCS.sample }, async () => SAMPLE_VERIFY_BODY);
    // Public: every event type's payload schema at every version (an OpenAPI `webhooks` section).
    const schemas = webhookOpenApi();
    app.get('/api/webhooks/schemas', DOCS.schemas, async () => schemas);

    // Most of these routes take no body: one of no bytes is none, whatever its framing says.
    emptyBodyIsNoBody(plain);
    // Before the body is validated: a caller without a key learns nothing about the body it sent.
    // Every refusal is 401, but a key that cannot be checked right now (503, retryable).
    decorateCaller(plain);
    const authenticated = callerHook(() => ({}), {
      rejected: keyRefusal(() => new ServiceError('UNAUTHORIZED')),
      keyless: () => new ServiceError('UNAUTHORIZED'),
    });
    app.post('/api/webhooks', { ...DOCS.create, preValidation: authenticated }, async (request, reply) =>
      reply.code(201).send(await served(request, create(keyOf(request), request.body))),
    );
    app.get('/api/webhooks', { ...DOCS.list, preValidation: authenticated }, async (request) =>
      served(request, {
        webhooks: subscriptionsOfKey(runner.state.subscriptions, keyOf(request))
          .filter((sub) => request.query.status === 'all' || sub.status === request.query.status)
          .map(toView),
      }),
    );
    app.delete(
      '/api/webhooks/:id',
      { ...DOCS.delete, preValidation: [authenticated, noBodyOrObject] },
      async (request) => {
        const { params } = request;
        const apiKeyId = keyOf(request);
        owned(apiKeyId, params.id);
        await settled(await deleteSubscription(store, apiKeyId, params.id));
        return served(request, { id: params.id, deleted: true as const });
      },
    );
    app.patch(
      '/api/webhooks/:id',
      { ...DOCS.update, preValidation: [authenticated, noBodyOrObject] },
      async (request) => served(request, update(keyOf(request), request.params.id, request.body)),
    );
    app.post(
      '/api/webhooks/:id/disable',
      { ...DOCS.disable, preValidation: [authenticated, noBodyOrObject] },
      async (request) => served(request, pause(keyOf(request), request.params.id)),
    );
    app.post(
      '/api/webhooks/:id/test',
      { ...DOCS.test, preValidation: [authenticated, noBodyOrObject] },
      async (request) => {
        const apiKeyId = keyOf(request);
        const sub = owned(apiKeyId, request.params.id);
        const now = Date.now();
        // One test send of a key to one receiver origin waits or sends at a time: a second would
        // queue behind the key's own slot there (its endpoint: key and origin), holding its request,
        // however slow that receiver is; a send to another origin takes another slot and goes.
        // Refused before the budget is taken, so it costs none of it.
        const turn = testsInFlight.begin(EndpointQueues.keyOf(sub), now, settings.timeoutMs);
        if ('waitMs' in turn) {
          throw rateLimited(
            turn.waitMs,
            (seconds) =>
              `a test send of this key to this receiver origin is still waiting for its receiver (one at a time per origin and api process; the key's other calls are not limited); retry in ${seconds} s`,
          );
        }
        try {
          // Each test send is a signed POST to a host of the caller's choosing: a budget of its own.
          const waitMs = testSends.take(apiKeyId, now);
          if (waitMs !== null) {
            throw rateLimited(
              waitMs,
              (seconds) =>
                `test sends of this key are limited to ${testSends.limit} a minute per api process (the key's other calls are not); retry in ${seconds} s`,
            );
          }
          return served(request, await sendSample(sub));
        } finally {
          turn.release();
        }
      },
    );
    app.get(
      '/api/webhooks/:id/deliveries',
      { ...DOCS.deliveries, preValidation: authenticated },
      async (request) => {
        const { params, query } = request;
        const apiKeyId = keyOf(request);
        const sub = owned(apiKeyId, params.id);
        const page =
          query.after_seq === undefined
            ? { deliveries: await latestDeliveries(deps, sub.id, query.limit) }
            : await deliveriesAfter(deps, sub.id, query.after_seq, query.limit);
        return served(request, { subscription: toView(sub), ...page });
      },
    );
    app.post(
      '/api/webhooks/:id/rotate-secret',
      { ...DOCS.rotate, preValidation: [authenticated, noBodyOrObject] },
      async (request) => {
        const { params, body } = request;
        const apiKeyId = keyOf(request);
        owned(apiKeyId, params.id);
        // The secret current when this request came, as the log has it (a rotation another replica
        // recorded first included): a rotation recorded after that one is this request's rival,
        // and the later of the two answers 409 SECRET_ROTATION_CONFLICT, changing nothing.
        await settled(await store.headPosition());
        const expected = owned(apiKeyId, params.id).secret;
        const overlapSeconds = body.overlap_seconds;
        const rotated = await rotateSecret(store, {
          keyId: apiKeyId,
          subscriptionId: params.id,
          secrets: deps.secrets,
          overlapMs: overlapSeconds !== undefined ? overlapSeconds * 1_000 : settings.rotationOverlapMs,
          expected,
        });
        await settled(rotated.position);
        return served(request, {
          id: params.id,
          secret: rotated.secret,
          previous_secret_valid_until: rotated.previousValidUntil,
        });
      },
    );
    app.post(
      '/api/webhooks/:id/enable',
      { ...DOCS.enable, preValidation: [authenticated, noBodyOrObject] },
      async (request) => {
        const { params, body } = request;
        const apiKeyId = keyOf(request);
        const sub = owned(apiKeyId, params.id);
        // The instant given, in UTC as the log writes every time: one written with an offset
        // (`+02:00`, or `+00:00` as Python's isoformat() writes UTC) is the same instant.
        const since =
          body.recover_since === undefined
            ? undefined
            : new Date(Date.parse(body.recover_since)).toISOString();
        // Nothing was recorded after now: a future time would recover nothing, a typo as likely.
        // A client's clock may run a little ahead of ours: only a time past that is refused.
        if (since !== undefined && Date.parse(since) > Date.now() + CLOCK_SKEW_MS) {
          const detail = `recover_since: ${body.recover_since} is in the future; give a time at or before now`;
          throw new ServiceError('INVALID_FIELD', { detail }, 'recover_since');
        }
        // Nor was anything of the subscription's recorded before its creation: an earlier time
        // asks for everything it had, which is what recovering since its creation sends, and the
        // recovery reads the log from there rather than from the start of the log.
        const recoverSince =
          since !== undefined && Date.parse(since) < Date.parse(sub.createdAt) ? sub.createdAt : since;
        await settled(await reEnableSubscription(store, apiKeyId, params.id, recoverSince));
        return served(request, toView(owned(apiKeyId, params.id)));
      },
    );
    app.post(
      '/api/webhooks/:id/deliveries/:deliveryId/resend',
      { ...DOCS.resend, preValidation: [authenticated, noBodyOrObject] },
      async (request) =>
        served(request, resend(owned(keyOf(request), request.params.id), request.params.deliveryId)),
    );
  };
}
